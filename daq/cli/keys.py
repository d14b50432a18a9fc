"""``hil keys``: make, show and authorize the CURVE keys of the command channel and the data bus."""

from __future__ import annotations

from typing import Any

import click

from daq import json_codec
from daq.bus.keys import (
    AUTHORIZED,
    CLIENT,
    ENV_KEYS,
    SERVER,
    authorize,
    create_keys,
    load_keys,
)

_DIR_HELP = f"Keys folder (default: ${ENV_KEYS} or ~/.config/hil/keys)."


@click.group()
def keys() -> None:
    """CURVE keys: needed to bind the command channel or the data bus beyond loopback."""


@keys.command("init")
@click.option("--dir", "directory", default=None, metavar="PATH", help=_DIR_HELP)
@click.option("--force", is_flag=True, help="Replace existing keys (locks out clients holding the old ones).")
def init(directory: str | None, force: bool) -> None:
    """Make a server and a client key pair (folder 0700, files 0600) and authorize the client."""
    k = create_keys(directory, force=force)
    click.echo(f"keys written to {k.directory}")
    click.echo(f"  {SERVER}.key_secret  the service's key pair (stays on this machine)")
    click.echo(f"  {SERVER}.key         its public key: give it to every client")
    click.echo(f"  {CLIENT}.key_secret  a client key pair (for hil ctl / hil tap)")
    click.echo(f"  {AUTHORIZED}/        public keys of the clients the service accepts")


@keys.command("show")
@click.option("--dir", "directory", default=None, metavar="PATH", help=_DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def show(directory: str | None, as_json: bool) -> None:
    """Print the folder, the public keys and the authorized clients (never a secret key)."""
    k = load_keys(directory)
    info: dict[str, Any] = {
        "directory": str(k.directory),
        "server_public": k.server_public.decode(),
        "server_secret": k.server_secret is not None,
        "client_public": k.client_public.decode() if k.client_public else None,
        "authorized": sorted(key.decode() for key in k.authorized()),
    }
    if as_json:
        click.echo(json_codec.dumps(info, indent=2))
        return
    click.echo(f"keys folder   {info['directory']}")
    secret = "present" if info["server_secret"] else "absent"
    click.echo(f"server key    {info['server_public']} (secret {secret})")
    click.echo(f"client key    {info['client_public'] or '-'}")
    click.echo(f"authorized    {len(info['authorized'])} client key(s)")
    for key in info["authorized"]:
        click.echo(f"  {key}")


@keys.command("authorize")
@click.argument("public_key_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--dir", "directory", default=None, metavar="PATH", help=_DIR_HELP)
def authorize_cmd(public_key_file: str, directory: str | None) -> None:
    """Accept the client whose public key file is given (takes effect when a server starts)."""
    dest = authorize(public_key_file, directory)
    click.echo(f"authorized {dest}")

