"""``hil lab serve`` and ``hil lab push``: the lab's Tiled server, and replicating sessions to it."""

from __future__ import annotations

from pathlib import Path

import click

from daq.cli.common import LAB_KEY_HELP, CliState, echo_json, pass_state
from daq.lab.replicate import push_sessions
from daq.lab.server import ServeOptions
from daq.lab.server import serve as run_server
from daq.lab.settings import LabError, LabTable, default_lab_dir, read_key
from daq.store.reader import SessionReader

KEY_FILE_HELP = LAB_KEY_HELP


@click.group("lab")
def lab() -> None:
    """The lab: a Tiled catalogue that sessions of many rigs are replicated to and read from."""


@lab.command("serve")
@click.option("--data", "data_dir", default=None, metavar="DIR",
              help="Data folder: the SQLite catalogue, the arrays and the key "
              f"(default {default_lab_dir()}).")
@click.option("--catalog", default=None, metavar="URI",
              help="Catalogue database instead of SQLite in DIR: postgresql://user@host:5432/lab or "
              "sqlite:////path/catalog.db.")
@click.option("--arrays", default=None, metavar="LOCATION",
              help="Where arrays are written (a folder; default DIR/data).")
@click.option("--key-file", default=None, metavar="PATH",
              help="The admin's key file (made with mode 0600 when the lab has no admin key; default "
              "DIR/lab.key).")
@click.option("--auth-db", default=None, metavar="URI",
              help="Tiled's authentication database (people, keys) instead of SQLite DIR/auth.db.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; beyond loopback needs --certfile/--keyfile.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Port (0: a free one).")
@click.option("--certfile", default=None, metavar="PEM", help="TLS certificate.")
@click.option("--keyfile", default=None, metavar="PEM", help="TLS private key.")
def serve(data_dir, catalog, arrays, key_file, auth_db, host, port, certfile, keyfile) -> None:
    """Serve the lab's Tiled catalogue until Ctrl-C; prints where the admin's key is and the URL."""
    opts = ServeOptions(data_dir=Path(data_dir) if data_dir else default_lab_dir(), catalog=catalog,
                        key_file=Path(key_file) if key_file else None, host=host, port=port,
                        certfile=certfile, keyfile=keyfile, arrays=arrays, auth_db=auth_db)
    run_server(opts, say=lambda text: click.echo(text))


def lab_table(state: CliState) -> LabTable | None:
    cfg = state.config
    if cfg is None:
        return None
    table = cfg.get("lab") if isinstance(cfg, dict) else getattr(cfg, "lab", None)
    if table is None or isinstance(table, LabTable):
        return table
    import msgspec  # lazy: only a raw [lab] table needs converting

    return msgspec.convert(table, LabTable)


def lab_target(state: CliState, url: str | None, key_file: str | None) -> tuple[str, str]:
    """(URL, key) from the options, else the --config's [lab] table, else $HIL_LAB_KEY for the key."""
    table = lab_table(state)
    url = url or (table.url if table else None)
    if not url:
        raise LabError("no lab: give --to URL or a --config with a [lab] table")
    return url.rstrip("/"), read_key(key_file or (table.key_file if table else None))


@lab.command("push")
@click.argument("sessions", nargs=-1)
@click.option("--all", "push_all", is_flag=True, help="Every finished session of the store.")
@click.option("--pending", is_flag=True, help="Every finished session the lab does not hold verified yet.")
@click.option("--to", "url", default=None, metavar="URL", help="The lab (default: [lab].url of --config).")
@click.option("--key-file", default=None, metavar="PATH", help=KEY_FILE_HELP)
@click.option("--wait-for-push", "lock_wait", default=0.0, type=click.FloatRange(0.0, 3600.0), metavar="S",
              help="Wait up to S s for another push of a session from this store (a live forwarder) to end "
                   "instead of leaving the session to it (default 0).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_state
def push(state: CliState, sessions: tuple[str, ...], push_all: bool, pending: bool, url: str | None,
         key_file: str | None, lock_wait: float, as_json: bool) -> None:
    """Replicate sessions to the lab: idempotent, resumable, verified before they are marked replicated."""
    if bool(sessions) + push_all + pending != 1:
        raise click.UsageError("give SESSION ..., --all or --pending")
    url, key = lab_target(state, url, key_file)
    names: list[str] | None
    if push_all:
        with SessionReader(state.store_path, recover=False) as store:
            names = [i.id for i in store.list_sessions()]
    else:
        names = list(sessions) if sessions else None
    results = push_sessions(state.store_path, url, key, names,
                            say=(lambda _t: None) if as_json else click.echo, lock_wait=lock_wait)
    if as_json:
        echo_json([{"session": r.session_id, "state": r.state, "bytes": r.bytes_sent, "note": r.note}
                   for r in results])
    elif not results:
        click.echo("nothing to push")
    if any(r.state == "refused" for r in results):  # said in its line; the exit code tells a script
        raise SystemExit(1)
