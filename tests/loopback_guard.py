"""The suite's fence: a test process may talk only to this machine and open only serial devices it made.

:func:`install` wraps the few calls through which Python code reaches a network or a serial line -
``socket.socket.connect``/``connect_ex``/``bind``/``sendto``/``sendmsg``, ``socket.getaddrinfo`` (the
name lookup of ``asyncio``'s ``create_connection`` and of ``socket.create_connection``) and ``os.open``
of a terminal device (pyserial opens ports with it) - so that an address other than loopback
(127.0.0.0/8, ::1, ``localhost``), this host's own interface addresses, or a unix socket, and a
``/dev/tty*``/``/dev/pts/*`` path the process did not create with ``os.openpty``, is refused with
:class:`OffLoopbackError` *and* recorded: code under test that swallows the error still leaves the
record, and tests/conftest.py fails the test that made it.

It guards the process it is installed in. Child Python processes get it through tests/guard_site/
(``sitecustomize``, put on ``PYTHONPATH`` by tests/conftest.py): they refuse the same and append what
they refused to the file named by ``$HIL_TEST_GUARD_LOG``, which the parent reads after each test.
Not covered: sockets opened by C libraries without Python's ``socket`` module (libzmq, libpq, the
browser), children started with an environment that drops ``PYTHONPATH``, and ``open()`` of a device.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

LOG_ENV = "HIL_TEST_GUARD_LOG"
LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
TTY_PREFIXES = ("/dev/tty", "/dev/pts/", "/dev/serial/", "/dev/cu.", "/dev/rfcomm")

_lock = threading.Lock()
_violations: list[str] = []
_created_ttys: set[str] = set()
_own: set[ipaddress.IPv4Address | ipaddress.IPv6Address] | None = None
_installed = False


class OffLoopbackError(PermissionError):
    """A test tried to reach beyond this machine or to open a serial device it did not create."""


def own_addresses() -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """This host's own IPv4 interface addresses (Linux ``SIOCGIFADDR``; empty elsewhere): traffic to them
    never leaves the machine. No packet is sent to find them."""
    global _own
    if _own is None:
        found: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
        try:
            names = [name for _, name in socket.if_nameindex()]
            with _ORIGINAL["socket"](socket.AF_INET, socket.SOCK_DGRAM) as s:
                for name in names:
                    try:
                        req = struct.pack("256s", name.encode()[:15])
                        found.add(ipaddress.ip_address(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24]))
                    except OSError:
                        continue  # an interface without an IPv4 address
        except (OSError, AttributeError):
            pass
        _own = found
    return _own


def host_allowed(host: Any) -> bool:
    """True for a loopback or own address literal, a local name, or the empty host of a unix socket."""
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not isinstance(host, str):
        return False
    if host.lower() in LOCAL_NAMES or host.lower().endswith(".localhost") or host == socket.gethostname():
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip in own_addresses()


def _address_allowed(family: int, address: Any) -> bool:
    if family not in (socket.AF_INET, socket.AF_INET6):
        return True  # unix sockets, netlink: local by nature
    return isinstance(address, tuple) and bool(address) and host_allowed(address[0])


def violations() -> list[str]:
    """What this process refused since the last :func:`clear`."""
    with _lock:
        return list(_violations)


def clear() -> None:
    with _lock:
        _violations.clear()


def _refuse(what: str) -> OffLoopbackError:
    message = (f"loopback guard: {what} (pid {os.getpid()}); tests may reach only 127.0.0.0/8, ::1, "
               "localhost, this host's own addresses, unix sockets and serial devices they created")
    with _lock:
        _violations.append(message)
    log = os.environ.get(LOG_ENV)
    if log:
        try:
            with _ORIGINAL["builtin_open"](log, "a") as f:
                f.write(message.replace("\n", " ") + "\n")
        except OSError:
            pass  # a child running as another user may not write the parent's log; it still refuses
    return OffLoopbackError(message)


def _checked_address(name: str, address_at: int) -> Callable[..., Any]:
    original = getattr(socket.socket, name)

    def guarded(self: socket.socket, *args: Any) -> Any:
        address = args[address_at] if len(args) > address_at else None
        if address is not None and not _address_allowed(self.family, address):
            raise _refuse(f"{name} to {address!r}")
        return original(self, *args)

    guarded.__name__ = name
    guarded.__doc__ = original.__doc__
    return guarded


def _guarded_sendto(self: socket.socket, data: Any, *args: Any) -> Any:
    address = args[-1] if args else None
    if not _address_allowed(self.family, address):
        raise _refuse(f"sendto {address!r}")
    return _ORIGINAL["sendto"](self, data, *args)


def _guarded_bind(self: socket.socket, address: Any) -> Any:
    if self.family in (socket.AF_INET, socket.AF_INET6):
        host = address[0] if isinstance(address, tuple) and address else None
        if host in ("", "0.0.0.0", "::", None) or not host_allowed(host):
            raise _refuse(f"bind to {address!r} (all interfaces or another host's address)")
    return _ORIGINAL["bind"](self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host is not None and host not in ("", b"") and not host_allowed(host):
        try:
            ipaddress.ip_address(host.decode() if isinstance(host, bytes) else host)
        except (ValueError, AttributeError, UnicodeDecodeError):
            raise _refuse(f"name lookup of {host!r}") from None
    return _ORIGINAL["getaddrinfo"](host, *args, **kwargs)  # a literal: the connect is checked


def _guarded_open(path: Any, flags: int, mode: int = 0o777, *args: Any, **kwargs: Any) -> int:
    try:
        text = os.fsdecode(path) if not isinstance(path, int) else ""
    except TypeError:
        text = ""
    if text.startswith(TTY_PREFIXES) and os.path.realpath(text) not in _created_ttys:
        raise _refuse(f"open of the serial device {text}")
    return _ORIGINAL["os_open"](path, flags, mode, *args, **kwargs)


def _guarded_openpty() -> tuple[int, int]:
    master, slave = _ORIGINAL["openpty"]()
    with _lock:
        _created_ttys.add(os.path.realpath(os.ttyname(slave)))
    return master, slave


_ORIGINAL: dict[str, Any] = {
    "socket": socket.socket, "builtin_open": open, "sendto": socket.socket.sendto, "bind": socket.socket.bind,
    "getaddrinfo": socket.getaddrinfo, "os_open": os.open, "openpty": os.openpty,
}


def install() -> None:
    """Wrap the calls (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    socket.socket.connect = _checked_address("connect", 0)  # type: ignore[method-assign]
    socket.socket.connect_ex = _checked_address("connect_ex", 0)  # type: ignore[method-assign]
    socket.socket.sendmsg = _checked_address("sendmsg", 3)  # type: ignore[method-assign]
    socket.socket.sendto = _guarded_sendto  # type: ignore[method-assign]
    socket.socket.bind = _guarded_bind  # type: ignore[method-assign]
    socket.getaddrinfo = _guarded_getaddrinfo
    os.open = _guarded_open
    os.openpty = _guarded_openpty
