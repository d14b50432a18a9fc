"""A served `hil serve` for tests: the real server (uvicorn on 127.0.0.1, port 0) in a thread of its own,
and beacon rig kinds (tests/beacon_rig.py) that run through the real lifecycle with a stand-in simulator."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from daq.bus.frames import Frame
from daq.serve.server import Server
from tests.beacon_rig import BeaconRig
from tests.polling import poll_until

if TYPE_CHECKING:
    from daq.serve.connections import ConnectionLimits


class _NoDevices:
    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


def bearer(token: str) -> dict:
    """The header that authenticates a request with ``token``."""
    return {"Authorization": f"Bearer {token}"}


def finish_one_run(served, config: str = "short.toml") -> str:
    """Queue ``config`` on ``served`` and wait until it completed; its session id is kept on ``served``
    (``session``), the run's id returned."""
    import httpx  # noqa: PLC0415 - only the fixtures that run the server over HTTP need it

    with httpx.Client(base_url=served.url, headers=bearer(served.token), timeout=30) as http:
        run_id = http.post("/api/runs", json={"config": config}).json()["id"]
        poll_until(lambda: http.get(f"/api/runs/{run_id}").json()["status"] == "complete",
                   timeout=30, period=0.05)
        served.session = http.get(f"/api/runs/{run_id}").json()["session"]
    return run_id


class ServedBeacon(BeaconRig):
    """The beacon with a 'simulator' (nothing to start), so a config file with simulated = true runs it as
    `hil run` would; ``[plan] frames = N`` ends the plan after N frames (0: until stopped)."""

    def __init__(self, kind: str, samples: int = 10, channels: int = 1, period: float = 0.02,
                 note_bytes: int = 0, estimate_every: int = 0, corrections: bool = False,
                 scale: float = 1.0) -> None:
        super().__init__(samples, channels, period)
        self.scale = scale  # of the samples (1e-5: micrometres, as a displacement sensor's)
        self.kind = kind
        self.corrections = corrections  # the press's contract: a force stream [N] and setpoint_reached events
        self.estimate_every = estimate_every  # > 0: an online `estimate` event every this many frames
        self.note_bytes = note_bytes  # > 0: an event of about this size after every frame (heavy traffic)

    def simulator(self, raw):
        return _NoDevices()

    async def open_devices(self, cfg, tables, backends=None):
        if cfg.plan.get("unreachable"):
            raise ConnectionRefusedError("lamp at 127.0.0.1:9 refused the connection")
        return self.lamp

    def simulated_devices(self, sim, raw) -> dict:
        return {}

    async def plan(self, ctx) -> None:
        frames = int(ctx.config.plan.get("frames", 0))
        k = 0
        names = [f"x{i}" for i in range(self.channels)]
        while frames <= 0 or k < frames:
            await ctx.checkpoint(f"before frame {k + 1}")
            data = self.scale * np.random.default_rng(k).standard_normal((self.samples, self.channels))
            await ctx.publish(Frame("beacon.x", ctx.next_seq("beacon.x"), time.time(), 0.002, names,
                                    ["m"] * self.channels, data))
            if self.note_bytes:
                await ctx.event("beacon.log", "note", frame=k, text="n" * self.note_bytes)
            if self.corrections:
                q_d, residual = 1000.0 * (k % 5), 20.0 * float(data[0, 0])
                await ctx.publish(Frame("beacon.force", ctx.next_seq("beacon.force"), time.time(), 0.002,
                                        ["force_cmd", "force"], ["N", "N"],
                                        np.array([[q_d, q_d + residual]] * self.samples)))
                await ctx.event("beacon.plan", "setpoint_reached", series=0, index=k, q_desired=q_d,
                                q_actual=q_d + residual, residual=residual, iterations=1, command=q_d)
            k += 1
            if self.estimate_every and k % self.estimate_every == 0:
                await ctx.event("beacon.online", "estimate", **_estimate(k // self.estimate_every))
            ctx.advance(1, f"frame {k}")
            await asyncio.sleep(self.period)
        await ctx.event("beacon.plan", "plan_end", frames=k)


def _estimate(n: int) -> dict:
    """An estimate event body of the online contract (docs/contracts.md) whose interval closes in."""
    std = [0.2 / np.sqrt(n), 0.05 / np.sqrt(n)]
    cov = [[std[0] ** 2, 0.5 * std[0] * std[1]], [0.5 * std[0] * std[1], std[1] ** 2]]
    values = [1.0 + std[0] / 3, 0.25 - std[1] / 4]
    return {"model": "beacon", "parameters": ["gain", "offset"], "units": ["1", "m"], "values": values,
            "std": std, "rel_std": [s / abs(v) for s, v in zip(std, values, strict=True)], "covariance": cov,
            "ellipse_semi_axes": [2.45 * x for x in std], "used": n, "elapsed_s": 0.001,
            "verdict": {"rejected": ["drift"], "kept": ["beacon"]}}


def beacon_config(folder: Path, name: str, kind: str, frames: int = 0, unreachable: bool = False) -> Path:
    path = folder / name
    path.write_text(f'[rig]\nkind = "{kind}"\nname = "{name}"\nsimulated = true\n\n'
                    f'[plan]\nframes = {frames}\nunreachable = {str(unreachable).lower()}\n')
    return path


class ServerThread:
    """`Server.serve()` in a thread with its own event loop; ``url``, ``token`` once started."""

    def __init__(self, configs: Path, store: Path, token_file: Path, host: str = "127.0.0.1",
                 certfile: str | None = None, keyfile: str | None = None,
                 allowed_hosts: tuple[str, ...] = (), limits: ConnectionLimits | None = None):
        self.said: list[str] = []
        given = {} if limits is None else {"limits": limits}  # (a server of older code takes no limits)
        self.server = Server(configs, store, token_file, host=host, port=0, certfile=certfile,
                             keyfile=keyfile, say=self.said.append, allowed_hosts=allowed_hosts, **given)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._go()), daemon=True)

    async def _go(self) -> None:
        self.loop = asyncio.get_running_loop()
        try:
            await self.server.serve(install_signals=False)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def start(self) -> ServerThread:
        self.thread.start()
        poll_until(lambda: self.error is not None or self.server.started.is_set(), timeout=20)
        assert self.error is None, self.error
        return self

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.server.host == "127.0.0.1" else self.server.host
        return f"{self.server.scheme}://{host}:{self.server.port}"

    @property
    def token(self) -> str:
        line = [x for x in self.server.token_file.read_text().splitlines() if x and not x.startswith("#")][0]
        return line.split()[1]

    def stop(self, timeout: float = 60) -> None:
        if self.thread.is_alive() and self.loop is not None:
            fut = asyncio.run_coroutine_threadsafe(self.server.shutdown("test"), self.loop)
            fut.result(timeout)
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the server did not stop"


def self_signed(folder: Path, host: str) -> tuple[str, str]:
    """A self-signed certificate for ``host`` and its key (PEM files), for a TLS server in a test."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    certfile, keyfile = folder / "cert.pem", folder / "key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    keyfile.chmod(0o600)
    return str(certfile), str(keyfile)


def tls13_get(port: int, certfile: str, path: str,
              headers: str = "") -> tuple[bytes, str | None, bool | None]:
    """One HTTP/1.1 GET over TLS 1.3 to 127.0.0.1, read to its end: the answer, the TLS version, and whether
    the session holds a ticket from the server (None: no session). A ticket comes before the answer, so
    once the answer is read a server that sends tickets has sent one. ``headers``: extra header lines."""
    import socket
    import ssl

    trust = ssl.create_default_context(cafile=certfile)
    trust.minimum_version = ssl.TLSVersion.TLSv1_3  # tickets after the handshake are TLS 1.3's
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw, \
            trust.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}"
                    "Connection: close\r\n\r\n".encode())
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
        return answer, tls.version(), None if tls.session is None else tls.session.has_ticket


def click(page, css: str) -> bool:
    """Click the element ``css`` if it is there; False when it is not yet, or was redrawn between finding
    and clicking (the page rebuilds its tables - last runs, configs, sessions - on every update: a stale
    element), to be tried again: ``poll_until(lambda: click(page, css), ...)``."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    found = page.find_elements(By.CSS_SELECTOR, css)
    if not found:
        return False
    try:
        found[0].click()
    except StaleElementReferenceException:
        return False
    return True


def served_with_a_failing_config(folder: Path, rig, name: str):
    """A `hil serve` of ``rig`` (registered for the module) with two configs in ``folder``: ``name`` and
    ``unreachable.toml``, whose device does not answer; yields the running server, then stops it."""
    from daq.rigs import register, unregister

    register(rig)
    configs = folder / "configs"
    configs.mkdir()
    beacon_config(configs, name, rig.kind)
    beacon_config(configs, "unreachable.toml", rig.kind, unreachable=True)
    served = ServerThread(configs, folder / "s.sqlite", folder / "tokens").start()
    try:
        yield served
    finally:
        served.stop()
        unregister(rig.kind)


#: s a WebSocket's opening handshake may take: websockets' 10 s default ran out once in CI on a loaded
#: 2-core machine (the server's thread shares the GIL with the test); a refusal still comes at once
WS_OPEN_TIMEOUT = 120.0


def ws_connect(url: str, **kwargs):
    """websockets' sync ``connect`` with an opening handshake that survives a loaded machine."""
    from websockets.sync.client import connect

    return connect(url, open_timeout=WS_OPEN_TIMEOUT, **kwargs)
