"""``hil serve``: the lab service in the browser (daq/serve, docs/api.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from daq.cli.common import CliState, pass_state
from daq.config.load import store_path_for


@click.command()
@click.option("--configs", "configs_dir", default="configs", show_default=True, metavar="DIR",
              type=click.Path(file_okay=False), help="The rig configs the server may run (*.toml).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; beyond loopback needs --certfile/--keyfile.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port (0: any free port, printed).")
@click.option("--token-file", default=None, metavar="PATH",
              help="Bearer tokens, 'NAME TOKEN' per line, mode 0600; created with one token when missing "
                   "(default: $HIL_SERVE_TOKENS, else ~/.config/hil/serve-tokens).")
@click.option("--store", "store_option", default=None, metavar="PATH",
              help="Session store of every run (default: the global --store, $HIL_STORE, the user data "
                   "directory); the run queue lives next to it.")
@click.option("--certfile", default=None, metavar="PEM", help="TLS certificate (HTTPS and WSS).")
@click.option("--keyfile", default=None, metavar="PEM", help="TLS private key.")
@pass_state
def serve(state: CliState, configs_dir: str, host: str, port: int, token_file: str | None,
          store_option: str | None, certfile: str | None, keyfile: str | None) -> None:
    """Serve the dashboard and the HTTP API: queue runs of the configs in --configs, watch the running
    one live, pause/stop it, list and download sessions. Runs go through the same lifecycle as `hil run`,
    one at a time. SIGTERM/Ctrl-C aborts a running run through the safe state, then stops; queued runs
    stay queued for the next start."""
    from daq.serve.auth import default_token_file  # lazy: starlette, uvicorn and the run machinery
    from daq.serve.server import Server  # lazy: as above

    store_path = store_path_for(store_option or state.store_option, None)
    server = Server(Path(configs_dir), store_path, Path(token_file) if token_file else default_token_file(),
                    host=host, port=port, certfile=certfile, keyfile=keyfile,
                    say=lambda text: click.echo(text, err=True))
    asyncio.run(server.serve())
