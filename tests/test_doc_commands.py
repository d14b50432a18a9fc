"""Every `hil ...` command line in docs/*.md and README.md names commands and options the CLI has.

Each line is resolved against the real click command tree as `hil` would parse it - global options, command,
subcommand, options and arguments - without running anything. Synopsis notation is read as such:
``[--plots DIR]`` is the option written out, ``a|b`` (``a\\|b`` in a table) is each alternative, ``...`` and
an upper-case placeholder (``SESSION``, ``N``) stand for what the reader puts there. In a code block a command
must be whole (its required arguments given); in running text a command may be named alone (`hil run`).
"""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import click
import pytest

from daq.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
SHELL_STOPS = {"|", "||", "&&", ";", "&", "2>&1"}
PLACEHOLDER = re.compile(r"^<.*>$|^[A-Z][A-Z0-9_]*(\.\.\.)?$")


def command_lines(text: str) -> list[tuple[int, str, bool]]:
    """(line number, command, in a code block) of every `hil ...` in ``text``."""
    found = []
    in_block = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
        elif in_block:
            if m := re.match(r"\s*(?:\$\s+)?(hil(?:\s.*)?)$", line):
                found.append((n, m.group(1).split(" #")[0].strip(), True))
        else:
            found += [(n, m.group(1), False) for m in re.finditer(r"`(hil(?:\s[^`]*)?)`", line)]
    return found


def variants(command: str) -> list[list[str]]:
    """The argument lists a synopsis stands for (``hil`` itself dropped)."""
    text = command.replace("\\|", "|").replace("[", " ").replace("]", " ")
    text = re.split(r"\s\|\s", text)[0]  # `a | b`: a shell pipe or alternatives of the whole rest: the first
    words = ["X" if w == "..." else w for w in shlex.split(text)[1:]]  # `...`: whatever the reader puts
    for i, w in enumerate(words):
        if w in SHELL_STOPS or w.startswith(">"):
            words = words[:i]
            break
    choices = [w.split("|") if "|" in w and not w.startswith("-") else [w] for w in words]
    return [list(c) for c in itertools.product(*choices)]


def problem(args: list[str], whole: bool) -> str | None:
    """Why ``hil ARGS`` does not parse (None: it does)."""
    cmd: click.Command = cli
    parent = None
    path = ["hil"]
    try:
        while True:
            ctx = cmd.make_context(" ".join(path), list(args), parent=parent)
            if not isinstance(cmd, click.Group):
                return None
            protected = getattr(ctx, "_protected_args", None)  # click >= 8.2; `protected_args` before
            rest = [*(ctx.protected_args if protected is None else protected), *ctx.args]
            if not rest or PLACEHOLDER.match(rest[0]):
                return None
            name, sub, args = cmd.resolve_command(ctx, rest)
            assert name is not None and sub is not None
            parent, cmd = ctx, sub
            path.append(name)
    except (click.exceptions.NoArgsIsHelpError, click.exceptions.Exit):
        return None  # a group named on its own; --help or --version
    except click.MissingParameter as exc:
        return exc.format_message() if whole else None
    except click.BadParameter as exc:
        # a placeholder or a file of the reader's where a value belongs; a wrong choice is an error
        if isinstance(getattr(exc.param, "type", None), click.Choice):
            value = re.match(r"'(.*?)' is not", exc.message)
            return None if value and PLACEHOLDER.match(value.group(1)) else exc.format_message()
        return None
    except click.UsageError as exc:
        return f"{type(exc).__name__}: {exc.format_message()}"


def all_problems(path: Path) -> list[str]:
    out = []
    for n, command, whole in command_lines(path.read_text()):
        for args in variants(command):
            if (why := problem(args, whole)) is not None:
                out.append(f"{path.name}:{n}: `{command}`: {why}")
                break
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_command_line_of_the_docs_parses(doc):
    assert all_problems(doc) == []


def test_a_wrong_command_line_is_caught(tmp_path):
    """The check itself: each kind of mistake is found, synopsis notation and prose are not mistakes."""
    doc = tmp_path / "doc.md"
    doc.write_text("\n".join([
        "```",
        "hil lab push --pending --config configs/press.toml   # --config is hil's, before the command",
        "hil run                                                # a whole command lacks its CONFIG",
        "hil sessions --json | head",
        "```",
        "`hil runn x.toml`, `hil export S --format xlsx`, `hil check a.toml b.toml`, `hil ctl stop --nope`.",
        "Fine: `hil run`, `hil keys`, `hil COMMAND --help`, `hil export SESSION --format uff [--binary]`,",
        "`hil keys init\\|show`, `hil replay SESSION [--speed X | --burst]`, `hil --store URL ...`.",
    ]))
    found = all_problems(doc)
    assert [f.split(": `")[1].split("`")[0] for f in found] == [
        "hil lab push --pending --config configs/press.toml", "hil run", "hil runn x.toml",
        "hil export S --format xlsx", "hil check a.toml b.toml", "hil ctl stop --nope"]
