"""``hil lab key add|list|revoke``: the lab's people, each with a key of their own and a role
(:mod:`daq.lab.people`). Run with an admin's key; a new key goes only into a 0600 file, never to the
terminal."""

from __future__ import annotations

import os
from pathlib import Path

import click

from daq.cli.common import CliState, echo_json, pass_state
from daq.cli.lab import lab_target
from daq.lab import people
from daq.lab.people_server import auth_uri, prepare
from daq.lab.settings import LabError

ADMIN_KEY_HELP = "File holding an admin's key (default: $HIL_LAB_KEY, else [lab].key_file)."


@click.group("key")
def key() -> None:
    """People of the lab: a key per person with a role (viewer reads; operator pushes; admin deletes and
    manages keys)."""


def url_option(f):
    return click.option("--to", "url", default=None, metavar="URL",
                        help="The lab (default: [lab].url of --config).")(f)


def admin_option(f):
    return click.option("--admin-key-file", default=None, metavar="PATH", help=ADMIN_KEY_HELP)(f)


@key.command("add")
@click.argument("name")
@click.option("--role", type=click.Choice(people.ROLES), required=True,
              help="viewer: reads; operator: + pushes and writes metadata; admin: + deletes, manages keys.")
@url_option
@click.option("--key-file", "out", required=True, metavar="OUT",
              help="Where the person's key is written (a new file, mode 0600).")
@admin_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (without the key).")
@pass_state
def add(state: CliState, name: str, role: str, url: str | None, out: str, admin_key_file: str | None,
        as_json: bool) -> None:
    """Give NAME a key of their own with ROLE; the key goes to OUT only."""
    people.check_name(name)
    url, admin_key = lab_target(state, url, admin_key_file)
    path = Path(out)
    try:  # the file first: a key the lab made must have somewhere to go
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise LabError(f"{out} exists: give a new file for {name}'s key") from None
    except OSError as exc:
        raise LabError(f"cannot write {out}: {exc.strerror or exc}") from None
    try:
        secret, person = people.add_person(url, admin_key, name, role)
        with os.fdopen(fd, "w") as f:
            fd = -1
            f.write(secret + "\n")
    except BaseException:
        if fd >= 0:
            os.close(fd)
        path.unlink(missing_ok=True)
        raise
    if as_json:
        echo_json({**person.as_dict(), "key_file": str(path)})
    else:
        click.echo(f"{name} ({role}): key {person.key_id} written to {out}")


@key.command("list")
@url_option
@admin_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_state
def list_keys(state: CliState, url: str | None, admin_key_file: str | None, as_json: bool) -> None:
    """The lab's keys: who holds each, its role and when it was last used."""
    url, admin_key = lab_target(state, url, admin_key_file)
    found = people.list_people(url, admin_key)
    if as_json:
        echo_json([p.as_dict() for p in found])
        return
    click.echo(f"{'NAME':<20} {'ROLE':<9} {'KEY':<9} LAST USED")
    for p in found:
        click.echo(f"{p.name:<20} {p.role:<9} {p.key_id:<9} {p.last_used or '-'}")


@key.command("revoke")
@click.argument("who", metavar="NAME|KEYID")
@url_option
@admin_option
@pass_state
def revoke(state: CliState, who: str, url: str | None, admin_key_file: str | None) -> None:
    """Revoke a person's keys (by name) or one key (by the id `hil lab key list` shows)."""
    url, admin_key = lab_target(state, url, admin_key_file)
    for p in people.revoke(url, admin_key, who):
        click.echo(f"revoked {p.name}'s key {p.key_id} ({p.role})")


@key.command("init")
@click.option("--auth-db", "auth_db", required=True, metavar="URI",
              help="Tiled's authentication database: sqlite:////path/auth.db or postgresql://...")
@click.option("--key-file", "out", required=True, metavar="OUT",
              help="Where the first admin's key is written (mode 0600) when the database holds none.")
def init(auth_db: str, out: str) -> None:
    """Make a lab's authentication database (if new) and its first admin's key (if it holds none), for a
    lab served by `tiled serve config configs/lab/...` (`hil lab serve` does this itself)."""
    sqlite = next((p for p in ("sqlite:///", "sqlite+aiosqlite:///") if auth_db.startswith(p)), None)
    if sqlite is None and not auth_db.startswith(("postgresql://", "postgresql+asyncpg://")):
        raise LabError(f"--auth-db takes sqlite:////path/auth.db or postgresql://..., not {auth_db!r}")
    if sqlite is not None:
        path = Path(auth_db[len(sqlite):])
        if not path.exists():  # made with mode 0600 before SQLite opens it (it keeps the file's mode)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    made = prepare(auth_uri(Path("."), auth_db.replace("sqlite+aiosqlite:", "sqlite:", 1)), Path(out))
    click.echo(f"admin key written to {out}" if made
               else f"the lab has an admin's key already; {out} untouched")
