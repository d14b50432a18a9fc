"""``hil lab verify``: is the lab's copy of each session what was pushed? One line per session, exit 1
when any changed or was lost (daq/lab/verify.py)."""

from __future__ import annotations

import sys

import click

from daq.cli.common import CliState, pass_state
from daq.cli.lab import KEY_FILE_HELP, lab_target
from daq.lab.client import push_structure_clients
from daq.lab.connect import from_client_error, open_lab
from daq.lab.search import Filters, run_search
from daq.lab.settings import LabError
from daq.lab.verify import verify_sessions


@click.command("verify")
@click.argument("sessions", nargs=-1)
@click.option("--all", "verify_all", is_flag=True, help="Every session the lab holds verified.")
@click.option("--to", "url", default=None, metavar="URL", help="The lab (default: [lab].url of --config).")
@click.option("--key-file", default=None, metavar="PATH", help=KEY_FILE_HELP)
@pass_state
def verify(state: CliState, sessions: tuple[str, ...], verify_all: bool, url: str | None,
           key_file: str | None) -> None:
    """Check the lab's copies block by block against the digests their push recorded (the server confirms
    each block by its hash: nothing is downloaded but the small tables); exit 1 if any changed or was lost."""
    if bool(sessions) == verify_all:
        raise click.UsageError("give SESSION ... or --all")
    url, key = lab_target(state, url, key_file)
    root = open_lab(url, key, push_structure_clients())
    try:
        names = list(sessions) or sorted(run_search(root, Filters()).keys())
        bad = verify_sessions(root, names, click.echo)
    except LabError:
        raise
    except Exception as exc:  # noqa: BLE001 - the client's errors as one line
        raise from_client_error(url, exc) from None
    if not names:
        click.echo("no sessions in the lab")
    if bad:
        sys.exit(1)
