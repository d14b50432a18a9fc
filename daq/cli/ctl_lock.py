"""``hil ctl lock --note ... | unlock``: a rig's lock, asked of its ``hil serve`` over HTTP (``/api/lock``).

The other ``hil ctl`` actions talk to a running ``hil run`` over the bus; a lock belongs to the rig's
server, so these two go to ``--serve URL`` (default ``$HIL_SERVE_URL``, else ``http://127.0.0.1:8765``)
with a token: ``$HIL_SERVE_TOKEN``, else ``--token-file`` (a file holding the token, or a ``hil serve``
token file: the line named after this OS user, else its first), else ``$HIL_LAB_KEY`` (a person's lab key,
for a rig served with ``--lab``), else the server's default token file.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path

import click

from daq.cli.common import echo_json

ENV_URL = "HIL_SERVE_URL"
ENV_TOKEN = "HIL_SERVE_TOKEN"
DEFAULT_URL = "http://127.0.0.1:8765"


def _token_from_file(path: Path) -> str:
    try:
        lines = [ln.split("#", 1)[0].split() for ln in path.read_text().splitlines()]
    except OSError as exc:
        raise click.ClickException(f"token file {path}: {exc.strerror or exc}") from None
    lines = [ln for ln in lines if ln]
    if not lines:
        raise click.ClickException(f"token file {path} holds no token")
    if len(lines[0]) == 1:  # the token alone
        return lines[0][0]
    try:
        me = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name here: the first line
        me = ""
    return next((ln[1] for ln in lines if ln[0] == me), lines[0][1])


def find_token(token_file: str | None) -> str:
    if os.environ.get(ENV_TOKEN, "").strip():
        return os.environ[ENV_TOKEN].strip()
    if token_file:
        return _token_from_file(Path(token_file).expanduser())
    if os.environ.get("HIL_LAB_KEY", "").strip():
        return os.environ["HIL_LAB_KEY"].strip()
    from daq.serve.auth import default_token_file  # lazy: as the server finds its own file

    return _token_from_file(default_token_file())


def lock_command(action: str, note: str | None, url: str | None, token_file: str | None,
                 as_json: bool) -> None:
    """Lock or unlock the rig served at ``url``; one line saying who holds it now."""
    import httpx  # lazy: only these two actions speak HTTP

    url = (url or os.environ.get(ENV_URL) or DEFAULT_URL).rstrip("/")
    headers = {"Authorization": f"Bearer {find_token(token_file)}"}
    try:
        if action == "lock":
            resp = httpx.post(f"{url}/api/lock", json={"note": note or ""}, headers=headers, timeout=10)
        else:
            resp = httpx.delete(f"{url}/api/lock", headers=headers, timeout=10)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"hil serve at {url} unreachable ({type(exc).__name__})") from None
    try:
        body = resp.json()
    except ValueError:
        raise click.ClickException(f"{url} answered HTTP {resp.status_code}, not as hil serve does") from None
    if resp.status_code >= 400:
        raise click.ClickException(str(body.get("error", f"HTTP {resp.status_code}")))
    if as_json:
        echo_json(body)
    elif body.get("locked"):
        note = f": {body['note']}" if body["note"] else ""
        click.echo(f"locked by {body['by']} since {body['at_iso']}{note}")
    else:
        released = body.get("released")
        broke = f" (broke {released['by']}'s lock)" if body.get("broken") and released else ""
        click.echo(f"unlocked{broke}")
