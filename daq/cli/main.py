"""The ``hil`` command line, the top floor: the group, its global options and the one place where the
project's errors become exit codes and one-line messages.

The commands live in their own modules (sessions, bus, rig, design, keys, uff, watch), which import
nothing of this one: they get the resolved global options as :class:`daq.cli.common.CliState` from
click's context object and are registered here with ``main.add_command``. User mistakes (bad path,
unknown session, malformed config, unreachable device, ...) end with one ``Error: ...`` line on stderr
and exit code 1 (:func:`daq.cli.common.exit_code`), never a traceback.
"""

from __future__ import annotations

import logging
import sys

import click

from daq.bus.allocator import keep_freed_heap
from daq.cli import bus, design, devices, keys, lab, lab_keys, lab_verify, rig, serve, sessions, uff, watch
from daq.cli.common import LAB_KEY_HELP, CliState, OneLineError, exit_code, quiet_broken_pipe
from daq.config.load import ENV_STORE, default_store_path


class HilGroup(click.Group):
    """A click group that reports the project's errors as one line instead of a traceback, and ends
    quietly when the reader of stdout went away (a pipe into ``head``)."""

    def invoke(self, ctx: click.Context):
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's flush at exit
            return result
        except click.ClickException:
            raise
        except BrokenPipeError:
            raise quiet_broken_pipe() from None
        except Exception as exc:
            code = exit_code(exc)
            if code is None:
                raise  # a bug: keep the traceback
            if logging.getLogger().isEnabledFor(logging.INFO):  # -v: the traceback too
                logging.getLogger("hil").exception("details")
            raise OneLineError(exc, code) from None


@click.group(cls=HilGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    "store_option",
    metavar="PATH",
    default=None,
    help=f"Session store file, or a lab's URL (default: ${ENV_STORE}, the --config's [store].path, "
    f"or {default_store_path()}).",
)
@click.option("--config", "config_path", metavar="PATH", default=None, help="Rig config (TOML).")
@click.option("--key-file", "lab_key_file", metavar="PATH", default=None,
              help=f"For a --store URL: {LAB_KEY_HELP}")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.version_option(package_name="hil-lab", prog_name="hil")
@click.pass_context
def main(ctx: click.Context, store_option: str | None, config_path: str | None, lab_key_file: str | None,
         verbose: int) -> None:
    """Hardware-in-the-loop lab service: record, inspect, replay and export sessions."""
    logging.basicConfig(
        level=logging.WARNING - 10 * min(verbose, 2), format="%(levelname)s %(name)s: %(message)s"
    )
    if not verbose:  # pymodbus logs hex dumps of recent frames with every client error; ours say it in words
        logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
    keep_freed_heap()  # large bus messages reuse freed buffers, no page faults (daq/bus/allocator.py)
    ctx.obj = CliState(store_option, config_path, lab_key_file=lab_key_file)
    if config_path is not None:
        _ = ctx.obj.config  # fail early and clearly on a malformed config


#: The group under its role's name (``hil`` runs :func:`main`).
cli = main

for command in (
    sessions.sessions,
    sessions.show,
    sessions.export,
    bus.replay,
    bus.tap,
    bus.demo,
    rig.run,
    rig.analyze,
    rig.check,
    devices.devices,
    rig.rigs,
    rig.sim,
    rig.ctl,
    design.design,
    keys.keys,
    uff.import_group,
    watch.watch,
    serve.serve,
    lab.lab,
):
    main.add_command(command)
lab.lab.add_command(lab_keys.key)  # hil lab key ...: people and their keys
lab.lab.add_command(lab_verify.verify)


if __name__ == "__main__":  # python -m daq.cli.main ... runs the same command as `hil`
    main()
