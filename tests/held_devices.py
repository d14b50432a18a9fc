"""The real press template pointed at loopback: every device of ``configs/press.toml`` is replaced by a TCP
server of this test on 127.0.0.1 that accepts and never answers (the serial sensors reach theirs as
``socket://`` ports, as through a serial-to-Ethernet gateway). The template's own addresses - a LAN host,
``/dev/ttyUSB*`` - are never opened: every address, port, unit id and serial URL is set here.

:class:`HeldDevices` can also let go of every connection at once when a given number of its servers hold
one: a client that reaches all of them concurrently sees each connection closed; one that tries them in
turn waits on the first until its own timeout."""

from __future__ import annotations

import socket
import threading
import tomllib
from pathlib import Path

from tests.site_values import fill_site_values, press_site_values
from tests.test_rig_kit import _to_toml

TEMPLATE = Path(__file__).resolve().parents[1] / "configs" / "press.toml"
SENSORS = ("D_vertical", "F_horizontal", "B0_vertical")


class HeldDevices:
    """One silent TCP server per name on 127.0.0.1 (port 0); ``release_at``: let go of every connection and
    stop listening once that many servers hold a connection (None: hold until :meth:`close`; 0: refuse
    every connection from the start - a port of this test that nothing listens on, as an absent device)."""

    def __init__(self, names: tuple[str, ...], release_at: int | None = None):
        self._lock = threading.Lock()
        self.release_at = release_at
        self.released = False
        self.held: dict[str, list[socket.socket]] = {n: [] for n in names}
        self.received: dict[str, bytes] = {n: b"" for n in names}
        self.listeners = {n: socket.socket() for n in names}
        for listener in self.listeners.values():
            listener.bind(("127.0.0.1", 0))  # bound, so the port stays this test's; refused until it listens
            if release_at != 0:
                listener.listen()
        self.ports = {n: s.getsockname()[1] for n, s in self.listeners.items()}
        self.threads = [threading.Thread(target=self._accept, args=(n,), daemon=True) for n in names
                        if release_at != 0]
        for t in self.threads:
            t.start()

    def _accept(self, name: str) -> None:
        listener = self.listeners[name]
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self.released:
                    conn.close()
                    continue
                self.held[name].append(conn)
                holding = sum(bool(c) for c in self.held.values())
                if self.release_at is not None and holding >= self.release_at:
                    self._release()

    def _release(self) -> None:
        self.released = True
        for name, conns in self.held.items():
            for c in conns:
                try:
                    self.received[name] += c.recv(65536, socket.MSG_DONTWAIT)
                except OSError:
                    pass
                c.close()
        for listener in self.listeners.values():
            try:
                listener.shutdown(socket.SHUT_RDWR)  # stop listening, wake the accept: reconnects refused
            except OSError:
                pass  # never listened
            listener.close()

    def close(self) -> None:
        with self._lock:
            if not self.released:
                self._release()
        for t in self.threads:
            t.join(5)


def press_template_on(devices: HeldDevices, path: Path, timeout: float, connect_timeout: float) -> Path:
    """``configs/press.toml`` with every device on ``devices`` and the given timeouts, written to ``path``."""
    urls = {name: f"socket://127.0.0.1:{devices.ports[name]}" for name in SENSORS}
    site = press_site_values(devices.ports["force_source"], urls)  # every "<site: ...>" value, on loopback
    cfg = tomllib.loads(fill_site_values(TEMPLATE.read_text(), site))
    src = cfg["devices"]["force_source"]
    src.update(protocol="modbus_tcp", host="127.0.0.1", port=devices.ports["force_source"], device_id=1,
               timeout=timeout, retries=0, connect_timeout=connect_timeout)
    for uid, name in enumerate(SENSORS, start=1):
        sensor = cfg["devices"]["sensors"][name]
        sensor.update(url=f"socket://127.0.0.1:{devices.ports[name]}", timeout=timeout,
                      connect_timeout=connect_timeout)
        sensor.pop("host", None)
        sensor.pop("port", None)
        if sensor["protocol"] == "modbus_rtu":
            sensor.update(device_id=uid, retries=0)
    path.write_text(_to_toml(cfg))
    return path
