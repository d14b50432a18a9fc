"""``hil serve``: the lab service in the browser (daq/serve, docs/api.md); ``hil serve token
add|list|revoke``: the named tokens of its token file, one per engineer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from daq.cli.common import CliState, echo_json, rig_process
from daq.config.load import store_path_for
from daq.lab.names import check_lab_url
from daq.lab.settings import LabError, read_key

TOKEN_FILE_HELP = ("Bearer tokens, 'NAME TOKEN' per line, mode 0600 (default: $HIL_SERVE_TOKENS, else "
                   "~/.config/hil/serve-tokens).")


def _token_file(ctx: click.Context | None, given: str | None) -> Path:
    """``--token-file`` of the subcommand, else of ``hil serve``, else the default."""
    from daq.serve.auth import default_token_file  # lazy: starlette is not needed to manage tokens

    given = given or (ctx.parent.params.get("token_file") if ctx and ctx.parent else None)
    return Path(given).expanduser() if given else default_token_file()


@click.group(invoke_without_command=True)
@click.option("--configs", "configs_dir", default="configs", show_default=True, metavar="DIR",
              type=click.Path(file_okay=False), help="The rig configs the server may run (*.toml).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; beyond loopback needs --certfile/--keyfile.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port (0: any free port, printed).")
@click.option("--token-file", default=None, metavar="PATH",
              help=TOKEN_FILE_HELP + " Created with one token when missing.")
@click.option("--store", "store_option", default=None, metavar="PATH",
              help="Session store of every run (default: the global --store, $HIL_STORE, the user data "
                   "directory); the run queue lives next to it.")
@click.option("--certfile", default=None, metavar="PEM", help="TLS certificate (HTTPS and WSS).")
@click.option("--keyfile", default=None, metavar="PEM", help="TLS private key.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="A host name browsers may use to reach the server besides loopback and the bound "
                   "address (repeatable; other Host headers are refused: DNS rebinding).")
@click.option("--header-timeout", type=click.FloatRange(0, min_open=True), default=10.0, show_default=True,
              metavar="SECONDS", help="Time a client has to send a request's line and headers (from the "
                                      "connection, or the next request's first byte); then 408 and closed.")
@click.option("--keep-alive", type=click.IntRange(1), default=5, show_default=True, metavar="SECONDS",
              help="Time an idle kept-alive connection stays open.")
@click.option("--max-connections", type=click.IntRange(0), default=0, metavar="N",
              help="Connections open at once (HTTP and WebSocket); one more is answered 503 and closed "
                   "(default 0: 100, or a quarter of the open-file limit when that is lower).")
@click.option("--lab", "lab_url", default=None, metavar="URL",
              help="The lab (hil lab serve): people's lab keys are taken as tokens, and the rig's state is "
                   "kept there (with --rig; default: [lab].url of --config when it names a rig).")
@click.option("--rig", "rig_name", default=None, metavar="NAME", help="This rig's name in the lab "
              "(default: [lab].rig of --config).")
@click.option("--lab-key-file", default=None, metavar="PATH",
              help="The rig's own lab key (an operator's), alone on its line, mode 0600; else [lab].key_file "
                   "of --config, $HIL_LAB_KEY_FILE or $HIL_LAB_KEY.")
@click.option("--lab-cache", type=click.FloatRange(0, 3600), default=60.0, show_default=True,
              metavar="SECONDS", help="How long the lab's answer about a person's key is kept: a revoked "
                                      "key stops working within this time.")
@click.pass_context
def serve(ctx: click.Context, configs_dir: str, host: str, port: int, token_file: str | None,
          store_option: str | None, certfile: str | None, keyfile: str | None,
          allow_hosts: tuple[str, ...], header_timeout: float, keep_alive: int, max_connections: int,
          lab_url: str | None, rig_name: str | None, lab_key_file: str | None, lab_cache: float) -> None:
    """Serve the dashboard and the HTTP API: queue runs of the configs in --configs, watch the running
    one (or a replayed session) live, pause/stop it, list and download sessions. Runs go through the same
    lifecycle as `hil run`, one at a time. SIGTERM/Ctrl-C aborts a running run through the safe state, then
    stops; queued runs stay queued for the next start. `hil serve token ...` manages the tokens."""
    if ctx.invoked_subcommand is not None:
        return
    from daq.serve.connections import ConnectionLimits  # lazy: uvicorn
    from daq.serve.server import Server  # lazy: starlette, uvicorn and the run machinery

    state = ctx.find_object(CliState)
    assert state is not None  # hil's group made it
    store_path = store_path_for(store_option or state.store_option, None)
    server = Server(Path(configs_dir), store_path, _token_file(ctx, token_file), host=host, port=port,
                    certfile=certfile, keyfile=keyfile, say=lambda text: click.echo(text, err=True),
                    allowed_hosts=allow_hosts,
                    limits=ConnectionLimits(header_timeout, keep_alive, max_connections),
                    lab=_rig_lab(state, lab_url, rig_name, lab_key_file, lab_cache))
    rig_process()
    asyncio.run(server.serve())


def _rig_lab(state: CliState, url: str | None, rig: str | None, key_file: str | None, cache_s: float):
    """The lab this rig joins (``--lab``/``--rig``/``--lab-key-file``, else the --config's [lab] table when
    it names a rig), or None: a rig on its own, with its tokens only."""
    from daq.lab.rigs import check_rig_name  # lazy: only a rig with a lab needs the lab's checks
    from daq.serve.rig_status import RigLab  # lazy: as above

    table = getattr(state.config, "lab", None) if state.config_path else None
    if url is None and (table is None or not (rig or table.rig)):
        if rig is not None:
            raise LabError("--rig names this rig in a lab: give --lab URL too")
        return None
    url = url or (table.url if table is not None else "")
    rig = rig or (table.rig if table is not None else None)
    if not rig:
        raise LabError("--lab needs --rig NAME (or [lab].rig in --config): the rig's name in the lab")
    key = read_key(key_file or (table.key_file if table is not None else None))
    return RigLab(check_lab_url(url), check_rig_name(rig), key, cache_s=cache_s)


@serve.group()
def token() -> None:
    """The named tokens of `hil serve`'s token file: one per engineer, each recorded as who started a run.
    A running server reads the file again when it changes: a revoked token stops working at once."""


@token.command("add")
@click.argument("name")
@click.option("--token-file", default=None, metavar="PATH", help=TOKEN_FILE_HELP)
@click.option("--viewer", is_flag=True, help="A read-only token: it may watch and download, not change.")
@click.option("--admin", is_flag=True, help="An admin's token: an operator's that may also break another's "
                                            "lock of the rig.")
@click.pass_context
def token_add(ctx: click.Context, name: str, token_file: str | None, viewer: bool, admin: bool) -> None:
    """Add a fresh token for NAME and print it once (stdout); the file is created when missing."""
    from daq.serve.auth import add_token  # lazy: as above

    path = _token_file(ctx.parent, token_file)
    if viewer and admin:
        raise click.UsageError("--viewer or --admin, not both")
    secret = add_token(path, name, viewer=viewer, admin=admin)
    click.echo(f"added token {name!r} to {path}; give it to {name} (it is not shown again):", err=True)
    click.echo(secret)
    click.echo("open the dashboard once as http://HOST:PORT/?token=TOKEN (hil serve's address)", err=True)


@token.command("list")
@click.option("--token-file", default=None, metavar="PATH", help=TOKEN_FILE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_context
def token_list(ctx: click.Context, token_file: str | None, as_json: bool) -> None:
    """The names of the tokens (never the tokens themselves)."""
    from daq.serve.auth import token_names  # lazy: as above

    path = _token_file(ctx.parent, token_file)
    names = token_names(path)
    if as_json:
        echo_json({"token_file": str(path), "names": names})
        return
    for name in names:
        click.echo(name)


@token.command("revoke")
@click.argument("name")
@click.option("--token-file", default=None, metavar="PATH", help=TOKEN_FILE_HELP)
@click.pass_context
def token_revoke(ctx: click.Context, name: str, token_file: str | None) -> None:
    """Remove NAME's token; a running server refuses it from its next request on."""
    from daq.serve.auth import revoke_token  # lazy: as above

    path = _token_file(ctx.parent, token_file)
    revoke_token(path, name)
    click.echo(f"revoked token {name!r} in {path}", err=True)

