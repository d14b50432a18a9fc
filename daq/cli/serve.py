"""``hil serve``: the lab service in the browser (daq/serve, docs/api.md); ``hil serve token
add|list|revoke``: the named tokens of its token file, one per engineer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from daq.cli.common import CliState, echo_json
from daq.config.load import store_path_for

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
@click.pass_context
def serve(ctx: click.Context, configs_dir: str, host: str, port: int, token_file: str | None,
          store_option: str | None, certfile: str | None, keyfile: str | None,
          allow_hosts: tuple[str, ...], header_timeout: float, keep_alive: int, max_connections: int) -> None:
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
                    limits=ConnectionLimits(header_timeout, keep_alive, max_connections))
    asyncio.run(server.serve())


@serve.group()
def token() -> None:
    """The named tokens of `hil serve`'s token file: one per engineer, each recorded as who started a run.
    A running server reads the file again when it changes: a revoked token stops working at once."""


@token.command("add")
@click.argument("name")
@click.option("--token-file", default=None, metavar="PATH", help=TOKEN_FILE_HELP)
@click.option("--viewer", is_flag=True, help="A read-only token: it may watch and download, not change.")
@click.pass_context
def token_add(ctx: click.Context, name: str, token_file: str | None, viewer: bool) -> None:
    """Add a fresh token for NAME and print it once (stdout); the file is created when missing."""
    from daq.serve.auth import add_token  # lazy: as above

    path = _token_file(ctx.parent, token_file)
    secret = add_token(path, name, viewer=viewer)
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

