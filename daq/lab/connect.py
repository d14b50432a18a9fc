"""Opening the lab with Tiled's client: a quick probe first, so a lab that is down or a wrong key is one
clear line at once instead of the client's minute of retries."""

from __future__ import annotations

import math
import os

from daq.lab.names import check_lab_url
from daq.lab.scopes import refusal
from daq.lab.settings import LabError, LabUnreachable
from daq.lab.trust import default_trust

#: s the probe waits for the lab's answer (a busy lab with many pushers answers in seconds); a lab reached
#: over a slow link, or a test that stalls its lab on purpose, sets ``$HIL_LAB_TIMEOUT`` (seconds).
PROBE_TIMEOUT = 20.0
ENV_TIMEOUT = "HIL_LAB_TIMEOUT"


def probe_timeout() -> float:
    """``$HIL_LAB_TIMEOUT`` when set (seconds, > 0 and at most an hour), else PROBE_TIMEOUT."""
    text = os.environ.get(ENV_TIMEOUT)
    if text is None or not text.strip():
        return PROBE_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 3600:
        raise LabError(f"${ENV_TIMEOUT} must be the seconds to wait for the lab (0 < s <= 3600), "
                       f"got {text!r}")
    return value


#: What to install for the lab (the README's install has no Tiled): in a clone, and from a package index.
INSTALL_LAB = "pip install -e '.[lab]' in the hil-lab clone (or pip install 'hil-lab[lab]')"
NOT_INSTALLED = f"the lab needs Tiled, which is not installed: {INSTALL_LAB}"


def tiled_missing(part: str) -> bool:
    """True when ``tiled`` or its ``tiled.<part>`` (client, server) cannot be imported here."""
    import importlib.util

    try:
        return importlib.util.find_spec("tiled") is None or importlib.util.find_spec(f"tiled.{part}") is None
    except (ImportError, ValueError):  # a broken or blocked install counts as missing
        return True


def require_tiled_client() -> None:
    """One line naming the install command when Tiled's client is missing (the README's install has none)."""
    if tiled_missing("client"):
        raise LabError(NOT_INSTALLED)


def probe(url: str, key: str, timeout: float | None = None) -> None:
    """Raise LabUnreachable when nothing answers at ``url`` within ``timeout`` (default: probe_timeout()),
    LabError when it refuses ``key``."""
    url = check_lab_url(url)  # no query, fragment or credentials: nothing of a key in any message
    timeout = probe_timeout() if timeout is None else timeout
    try:
        import httpx  # lazy: only commands that talk to a lab need it (it comes with tiled's client)
    except ImportError:
        raise LabError(NOT_INSTALLED) from None

    try:
        resp = httpx.get(url.rstrip("/") + "/api/v1/metadata/", headers={"Authorization": f"Apikey {key}"},
                         timeout=timeout, verify=default_trust())
    except httpx.HTTPError as exc:
        raise LabUnreachable(f"lab {url} unreachable ({type(exc).__name__}: {exc}); "
                             "will retry later") from None
    if resp.status_code in (401, 403):
        raise LabError(f"lab {url} refused the key (HTTP {resp.status_code}): "
                       "check --key-file / $HIL_LAB_KEY")
    if resp.status_code >= 400:
        raise LabError(f"lab {url} answered HTTP {resp.status_code} to a probe; is it a Tiled server?")
    if not _is_tiled_root(resp):
        raise LabError(f"lab {url} answered, but not as a Tiled server does: check the URL (hil lab serve "
                       "prints it)")


def _is_tiled_root(resp) -> bool:
    """True when a probe's answer is Tiled's metadata of the root node (JSON with ``data.id``)."""
    try:
        body = resp.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("data"), dict) and "id" in body["data"]


def open_lab(url: str, key: str, structure_clients: str | dict = "numpy"):
    """The Tiled client's root container of the lab at ``url`` (probed first); ``structure_clients`` as
    Tiled's ``from_uri`` takes it (a push gives its own light classes: daq.lab.client)."""
    require_tiled_client()  # first: a missing install is said before anything is asked of the lab
    probe(url, key)
    from tiled.client import from_uri  # lazy: only commands that talk to a lab load tiled's client

    try:
        return from_uri(check_lab_url(url), api_key=key, structure_clients=structure_clients,
                        verify=default_trust())
    except Exception as exc:  # noqa: BLE001 - whatever the client raises becomes one line
        raise from_client_error(url, exc) from None


def from_client_error(url: str, exc: BaseException) -> LabError:
    """A Tiled client or HTTP failure as one of our errors (one line)."""
    import httpx  # lazy: as above

    text = " ".join(str(exc).split())[:300]
    if isinstance(exc, httpx.TransportError):
        return LabUnreachable(f"lab {url} stopped answering ({type(exc).__name__}: {text}); will retry later")
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status == 401 and (refused := refusal(url, response_detail(exc))) is not None:
        return refused  # a key without the scope for this: one line saying whose key would do
    if status in (401, 403):
        return LabError(f"lab {url} refused the key (HTTP {status})")
    return LabError(f"lab {url}: {text}")


def response_detail(exc: BaseException) -> str:
    """Tiled's ``detail`` of an error answer ('' when it has none)."""
    try:
        return str(exc.response.json().get("detail", ""))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - no response, not JSON: no detail
        return ""
