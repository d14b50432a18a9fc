"""Servo-drive driver over OPC UA (asyncua client): trajectory upload, run, trace read-back.

Configured by a ``[devices.<name>]`` table (see configs/crane-sim.toml): url, namespace,
limits, timeouts, node ids and optional security (Basic256Sha256 SignAndEncrypt with client
certificate, key, user/password, and the server's certificate pinned (``server_certificate``) or
trusted (``server_trust_dir``): a secure endpoint whose certificate is neither is refused, so an
impostor server never sees the password). Limits are checked before anything is sent; while
connected the driver writes a heartbeat counter that the drive's watchdog expects. Every error
is a :class:`drivers.errors.DeviceError` naming the device and url; ``connect_timeout`` bounds
the whole connect.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import msgspec
import numpy as np
from asyncua import Client, ua
from asyncua.crypto.security_policies import SecurityPolicyBasic256Sha256
from asyncua.crypto.truststore import TrustStore
from asyncua.crypto.validator import CertificateValidator, CertificateValidatorOptions

from drivers import errors
from drivers.backends import REAL, Backends
from drivers.cancellation import checked
from drivers.safe_state import SafeAction, SafeStep
from drivers.servo_settings import IDENTITY_KEYS, NODE_DEFAULTS, DriveSecurity, ServoDriveConfig
from drivers.settings import settings_from

__all__ = ["IDENTITY_KEYS", "NODE_DEFAULTS", "DriveSecurity", "ServoDrive", "ServoDriveConfig"]

log = logging.getLogger(__name__)



class DriveError(errors.DeviceError):
    """Base of the servo driver's errors (a DeviceError; ``url`` is the address)."""

    def __init__(self, device: str, url: str, message: str):
        super().__init__(device, url, message)

    @property
    def url(self) -> str:
        return self.address


class DriveConnectionError(DriveError, errors.DeviceConnectionError):
    """No connection, or the connection was lost during a request."""


class DriveUnreachable(DriveConnectionError, errors.DeviceUnreachable):
    """No connection to the drive within ``connect_timeout``."""


class LimitError(DriveError, errors.LimitError):
    """A trajectory violates the configured or the drive's limits; nothing was sent."""


class DriveRefused(DriveError, errors.DeviceRefused):
    """The drive answered a method call with a non-zero result code."""

    def __init__(self, device: str, url: str, message: str, code: int):
        super().__init__(device, url, message)
        self.code = code


class DriveFault(DriveError, errors.DeviceFault):
    """The drive reported a fault (e.g. speed limit, watchdog)."""

    def __init__(self, device: str, url: str, message: str, fault_code: int):
        super().__init__(device, url, message)
        self.fault_code = fault_code


class IdentityMismatch(DriveError, errors.DeviceRefused):
    """The drive that answered is not the one the config expects (``[devices.drive.expect]``)."""


class DriveTimeout(DriveError, errors.DeviceTimeout):
    """The drive did not reach the expected state in time."""


class DriveSafeStateError(DriveError, errors.SafeStateError):
    """Stop / disable failed or the drive still reports itself enabled; ``failures`` names each step."""

    def __init__(self, device: str, url: str, message: str, failures: Sequence[errors.StepFailure] = ()):
        super().__init__(device, url, message)
        self.failures = tuple(failures)


SESSION_TIMEOUT_MS = 600_000  # requested OPC UA session lifetime, kept alive by the client
DROP_TIMEOUT = 2.0  # s at most for closing a session politely before its socket is simply closed


def _cert_uri(cert_path: str | Path) -> str | None:
    """Application URI (URI SAN) of a DER/PEM certificate."""
    from cryptography import x509

    raw = Path(cert_path).read_bytes()
    pem = raw.startswith(b"-----")
    cert = x509.load_pem_x509_certificate(raw) if pem else x509.load_der_x509_certificate(raw)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    return uris[0] if uris else None


#: Node keys of :meth:`ServoDrive.subscribe_live` (default set).
LIVE_KEYS = ("actual_speed", "actual_torque", "torque_setpoint", "state", "enabled", "fault_code", "status")


class DriveTrace(TypedDict):
    """A run's trace as :meth:`ServoDrive.read_trace` returns it (SI units)."""

    dt: float
    t: np.ndarray
    torque_cmd: np.ndarray
    torque: np.ndarray
    speed: np.ndarray


class _LiveHandler:
    """asyncua data-change handler mapping node ids back to node keys."""

    def __init__(self, ids: dict[str, str], callback):
        self._ids = ids
        self._callback = callback

    def datachange_notification(self, node, val, data) -> None:
        key = self._ids.get(node.nodeid.to_string())
        if key is not None:
            try:
                self._callback(key, val)
            except Exception:  # a consumer error must not kill the subscription
                log.exception("live-value callback failed for %s", key)


class LiveSubscription:
    """Handle of :meth:`ServoDrive.subscribe_live`."""

    def __init__(self, sub):
        self._sub = sub

    async def close(self) -> None:
        """Delete the subscription; never raises (the session may already be gone)."""
        try:
            async with asyncio.timeout(2.0):
                await checked(self._sub.delete())
        except Exception as exc:  # noqa: BLE001 - best effort on the way out
            log.debug("live subscription delete failed: %r", exc)


class ServoDrive:
    """Async driver for one servo axis; use ``async with ServoDrive(cfg) as drive``."""

    def __init__(self, config: ServoDriveConfig | Mapping[str, Any], url: str | None = None,
                 backends: Backends | None = None):
        self.cfg = settings_from(config, ServoDriveConfig)
        if url is not None:
            self.cfg = msgspec.structs.replace(self.cfg, url=url)
        self.nodes = {**NODE_DEFAULTS, **self.cfg.nodes}
        # where the drive's requests go (session, reads, method calls, heartbeat): OPC UA by default
        self.calls = (backends or REAL).drive(self.cfg.name, self.cfg.url, self)
        self._client: Client | None = None
        self._ns: int | None = None
        self._hb_task: asyncio.Task | None = None
        self._hb_count = 0
        self._connected = False
        self._beats = True  # write the heartbeat while connected (off for a read-only look: `hil devices`)
        self.drive_limits: dict[str, float] = {}

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def url(self) -> str:
        return self.cfg.url

    @property
    def connected(self) -> bool:
        return self._connected

    def _err(self, cls: type[DriveError], message: str, *extra) -> DriveError:
        return cls(self.name, self.url, message, *extra)

    # ------------------------------------------------------------------ connection
    async def connect(self, heartbeat: bool = True) -> None:
        """Connect, retrying with backoff; gives up with DriveConnectionError after ``connect_timeout`` s
        (every attempt included). Starts the heartbeat unless ``heartbeat`` is False (a read-only look that
        writes nothing; the drive cannot be enabled without it)."""
        self._beats = heartbeat
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.connect_timeout
        delay = 0.1
        while True:
            remaining = deadline - loop.time()
            attempt = min(2.0 * self.cfg.timeout, max(remaining, 0.05))
            try:
                async with asyncio.timeout(attempt):
                    await self._connect_once()
                return
            except DriveError:
                await self._drop_client()
                raise
            except (TimeoutError, OSError, ConnectionError) as exc:
                await self._drop_client()
                why = f"no answer within {attempt:.3g} s" if isinstance(exc, TimeoutError) else repr(exc)
                if loop.time() + delay > deadline:
                    raise self._err(DriveUnreachable, f"cannot connect within "
                                    f"{self.cfg.connect_timeout:g} s (last attempt: {why})") from exc
                log.info("%s: connect failed (%s), retrying in %.1f s", self.name, why, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            except ua.UaError as exc:
                await self._drop_client()
                raise self._err(DriveConnectionError, f"connection refused: {_ua_text(exc)}") from exc
            except Exception as exc:  # e.g. a certificate that cannot be parsed
                await self._drop_client()
                raise self._err(DriveConnectionError, f"cannot connect: {exc!r}") from exc

    async def _connect_once(self) -> None:
        await self.calls.open()
        self._connected = True
        tl = await self._read("torque_limit")
        sl = await self._read("speed_limit")
        self.drive_limits = {"torque_limit": float(tl), "speed_limit": float(sl)}
        if self._beats:
            self._hb_task = asyncio.create_task(self._heartbeat(), name=f"{self.name}-heartbeat")

    async def open_session(self) -> None:
        """Open the OPC UA session (the real backend's open): client, security, namespace."""
        client = Client(self.cfg.url, timeout=self.cfg.timeout)
        # ask for what servers commonly grant (10 min; asyncua asks for 1 h and warns when cut down)
        client.session_timeout = SESSION_TIMEOUT_MS
        self._client = client
        sec = self.cfg.security
        if sec.mode != "none":
            await self._secure(client, sec)
        await checked(client.connect())
        self._ns = await checked(client.get_namespace_index(self.cfg.namespace))

    async def _secure(self, client: Client, sec: DriveSecurity) -> None:
        """Basic256Sha256 SignAndEncrypt with our certificate; the server's certificate pinned or trusted."""
        for key in ("certificate", "private_key", "server_certificate", "server_trust_dir"):
            path = getattr(sec, key)
            if path and not Path(path).exists():
                raise self._err(DriveConnectionError, f"security: {key} {path!r} not found")
        pinned = sec.server_certificate
        if not (pinned or sec.server_trust_dir) or not (sec.certificate and sec.private_key):
            raise self._err(DriveConnectionError, "security: the server certificate is neither pinned "
                            "(server_certificate) nor trusted (server_trust_dir), or our certificate or key "
                            "is missing; refusing to connect")
        uri = _cert_uri(sec.certificate)
        if uri:
            client.application_uri = uri  # must equal the URI in our certificate, or servers refuse us
        if sec.user:
            client.set_user(sec.user)
            password = sec.password
            if password is None and sec.password_env:
                password = os.environ.get(sec.password_env)
            if password is None:
                raise self._err(DriveConnectionError, "security: no password (password or password_env "
                                f"{sec.password_env!r} not set)")
            client.set_password(password)
        if pinned:
            await self._check_pin(Path(pinned))
        else:
            assert sec.server_trust_dir is not None
            store = TrustStore([Path(sec.server_trust_dir)], [])
            await store.load()
            options = CertificateValidatorOptions.TRUSTED_VALIDATION | CertificateValidatorOptions.PEER_SERVER
            client.certificate_validator = CertificateValidator(options, store)
        await client.set_security(
            SecurityPolicyBasic256Sha256, certificate=str(sec.certificate),
            private_key=str(sec.private_key), server_certificate=str(pinned) if pinned else None,
            mode=ua.MessageSecurityMode.SignAndEncrypt)

    async def _check_pin(self, pinned: Path) -> None:
        """Refuse at once if the endpoint's certificate is not the pinned one (asyncua would only notice
        by the server failing to decrypt: a silent timeout). The endpoint list is public information."""
        from cryptography import x509
        from cryptography.hazmat.primitives.serialization import Encoding

        raw = pinned.read_bytes()
        cert = x509.load_pem_x509_certificate(raw) if raw.startswith(b"-----") else \
            x509.load_der_x509_certificate(raw)
        want = cert.public_bytes(Encoding.DER)
        probe = Client(self.cfg.url, timeout=self.cfg.timeout)
        endpoints = await checked(probe.connect_and_get_server_endpoints())
        offered = [ep for ep in endpoints if ep.SecurityPolicyUri == SecurityPolicyBasic256Sha256.URI
                   and ep.SecurityMode == ua.MessageSecurityMode.SignAndEncrypt]
        if not offered:
            raise self._err(DriveConnectionError, "security: the server offers no Basic256Sha256 "
                            "SignAndEncrypt endpoint")
        got = offered[0].ServerCertificate or b""
        if not got.startswith(want):  # the field may hold a chain: our certificate first
            raise self._err(DriveConnectionError, "security: the server's certificate is not the pinned "
                            f"one ({pinned.name}); refusing an unverified server")

    async def _drop_client(self) -> None:
        self._connected = False
        if self._hb_task is not None:
            self._hb_task.cancel()
            await asyncio.gather(self._hb_task, return_exceptions=True)
            self._hb_task = None
        await self.calls.drop()

    async def drop_session(self) -> None:
        """Close the OPC UA session (the real backend's drop), politely if it answers in time."""
        client, self._client = self._client, None
        if client is not None:
            try:  # a session stuck behind a hung request answers no close either: do not wait long for it
                async with asyncio.timeout(min(DROP_TIMEOUT, self.cfg.timeout)):
                    await client.disconnect()
            except Exception:  # noqa: BLE001 - the transport may already be gone
                try:
                    client.disconnect_socket()
                except Exception:  # noqa: BLE001 - best effort on the way out
                    pass

    async def close(self) -> None:
        """Disconnect (without changing the drive state; call safe_state() first if needed)."""
        await self._drop_client()

    async def reconnect(self) -> None:
        await self._drop_client()
        await self.connect()

    async def __aenter__(self) -> ServoDrive:
        await self.connect()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _heartbeat(self) -> None:
        while True:
            self._hb_count = (self._hb_count + 1) % 2**32
            try:
                await self.calls.beat(self._hb_count)
            except Exception as exc:  # noqa: BLE001 - a failed heartbeat marks the link lost
                log.warning("%s: heartbeat failed: %r", self.name, exc)
                self._connected = False
                return
            await asyncio.sleep(self.cfg.heartbeat_interval)

    # ------------------------------------------------------------------ plumbing
    def _node(self, key: str) -> ua.NodeId:
        ident = self.nodes[key]
        if ident.startswith(("ns=", "i=", "s=", "g=", "b=")):
            return ua.NodeId.from_string(ident)
        # asyncua annotates its marker classes (ua.String, ua.Int16) where it takes a str and an int; _ns is
        # None only before the first connect, and _request refuses to send anything then
        return ua.NodeId(ident, self._ns)  # type: ignore[arg-type]

    async def _request(self, make, retry: bool = False):
        for attempt in (0, 1):
            if not self._connected:
                try:
                    await self.reconnect()
                except DriveError:
                    raise
            try:
                return await checked(make(self._client))
            except ua.UaStatusCodeError as exc:
                if not _is_connection_status(exc):
                    raise self._err(DriveError, f"request failed: {_ua_text(exc)}") from exc
                err: Exception = exc
            except TimeoutError as exc:  # no answer: the session may be stuck; the next request opens anew
                self._connected = False
                if not retry or attempt:
                    raise self._err(DriveTimeout, f"no answer within {self.cfg.timeout:g} s") from exc
                continue
            except (OSError, ConnectionError, ua.UaError) as exc:
                err = exc
            self._connected = False
            if not retry or attempt:
                raise self._err(DriveConnectionError, f"connection lost: {err!r}") from err
        raise AssertionError("unreachable")

    async def _read(self, key: str, retry: bool = True) -> Any:
        return (await self.calls.read((key,), retry))[0]

    async def read_nodes(self, keys: tuple[str, ...], retry: bool = True) -> list:
        """The values of the nodes ``keys`` on the session (the real backend's read)."""
        if len(keys) == 1:
            node = self._node(keys[0])
            return [await self._request(lambda c: c.get_node(node).read_value(), retry=retry)]
        ids = [self._node(k) for k in keys]

        async def read(c: Client):
            return await c.read_values([c.get_node(i) for i in ids])

        return list(await self._request(read, retry=retry))

    async def _method(self, key: str, *args: ua.Variant, retry: bool = False, value: Any = None,
                      limits: tuple[str, ...] = ()) -> list:
        """Call a method of the drive through its backend; ``value`` and ``limits`` (the checks it passed)
        are what a recording backend keeps of it. DriveRefused for a non-zero result code."""
        out = await self.calls.call(key, args, retry, value, limits)
        code, message = int(out[0]), str(out[1])
        if code != 0:
            raise DriveRefused(self.name, self.url, f"{self.nodes[key]} refused: {message} (code {code})",
                               code)
        return out

    async def write_heartbeat(self, count: int) -> None:
        """Write the heartbeat counter on the session (the real backend's beat)."""
        client = self._client
        if client is None:
            raise self._err(DriveConnectionError, "not connected")
        node = client.get_node(self._node("heartbeat"))
        await checked(node.write_value(ua.Variant(count, ua.VariantType.UInt32)))

    async def call_method(self, key: str, args: tuple[Any, ...], retry: bool = False) -> list:
        """One OPC UA method call (the real backend's call): its output arguments, the result code first."""
        obj, meth = self._node("object"), self._node(key)
        out = await self._request(lambda c: c.get_node(obj).call_method(meth, *args), retry=retry)
        return out if isinstance(out, list) else [out]

    # ------------------------------------------------------------------ drive API
    def check_trajectory(self, dt: float, torque: np.ndarray) -> np.ndarray:
        """Raise LimitError unless the trajectory respects every limit; returns it as float64."""
        u = np.asarray(torque, dtype=float).ravel()
        if not (isinstance(dt, int | float) and math.isfinite(dt) and dt > 0):
            raise self._err(LimitError, f"sample time {dt!r} must be a positive number")
        if u.size == 0:
            raise self._err(LimitError, "empty trajectory")
        if u.size > self.cfg.max_samples:
            raise self._err(LimitError, f"{u.size} samples exceed max_samples {self.cfg.max_samples}")
        if not np.all(np.isfinite(u)):
            raise self._err(LimitError, "trajectory contains non-finite values")
        limit = min(self.cfg.torque_limit, self.drive_limits.get("torque_limit", math.inf))
        peak = float(np.abs(u).max())
        if peak > limit:
            raise self._err(LimitError, f"peak torque {peak:.4g} N*m exceeds the limit {limit:.4g} N*m")
        return u

    async def load_trajectory(self, dt: float, torque: np.ndarray) -> str:
        """Check limits, then upload; returns the drive's message."""
        u = self.check_trajectory(dt, torque)
        limit = min(self.cfg.torque_limit, self.drive_limits.get("torque_limit", math.inf))
        summary = {"dt": float(dt), "n": int(u.size), "duration": float(u.size * dt),
                   "peak": float(np.abs(u).max()), "rms": float(np.sqrt(np.mean(u * u)))}
        checked = (f"peak |torque| <= {limit:.4g} N*m", f"samples <= {self.cfg.max_samples}",
                   "sample time > 0", "every sample finite")
        out = await self._method("load_trajectory", ua.Variant(float(dt), ua.VariantType.Double),
                                 ua.Variant(u.tolist(), ua.VariantType.Double), value=summary, limits=checked)
        self._expected_duration = u.size * float(dt)
        return str(out[1])

    async def enable(self) -> None:
        await self._method("enable")

    async def disable(self) -> None:
        await self._method("disable", retry=True)

    async def start(self) -> None:
        await self._method("start")

    async def stop(self) -> None:
        await self._method("stop", retry=True)

    async def clear_fault(self) -> None:
        await self._method("clear_fault", retry=True)

    async def status(self) -> dict:
        """State, enabled flag, fault code, status text and live values."""
        keys = ("state", "enabled", "fault_code", "status", "actual_speed", "actual_torque")
        values = await self.calls.read(keys, True)
        return dict(zip(keys, values, strict=True))

    async def wait_done(self, timeout: float | None = None, poll: float = 0.05) -> dict:
        """Wait until the trajectory is done; DriveFault on a fault, DriveError if stopped."""
        if timeout is None:
            timeout = getattr(self, "_expected_duration", 0.0) + self.cfg.run_timeout_margin
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            st = await self.status()
            if st["state"] == "Done":
                return st
            if st["state"] == "Fault" or st["fault_code"]:
                raise DriveFault(self.name, self.url, f"drive fault {st['fault_code']}: {st['status']}",
                                 int(st["fault_code"]))
            if st["state"] in ("Stopped", "Idle", "Loaded") or not st["enabled"]:
                raise self._err(DriveError, f"trajectory not running (state {st['state']}: {st['status']})")
            if loop.time() > deadline:
                raise self._err(DriveTimeout, f"not done after {timeout:.3g} s (state {st['state']})")
            await asyncio.sleep(poll)

    async def read_trace(self) -> DriveTrace:
        """The last run's trace: ``dt``, ``t``, ``torque_cmd``, ``torque`` (N*m), ``speed`` (rad/s)."""
        out = await self._method("read_trace", retry=True)
        dt = float(out[2])
        arrays = [np.asarray(x if x is not None else [], dtype=float) for x in out[3:6]]
        n = arrays[2].size
        return {"dt": dt, "t": np.arange(n) * dt, "torque_cmd": arrays[0], "torque": arrays[1],
                "speed": arrays[2]}

    @property
    def request_bound(self) -> float:
        """The longest one request (no retry) can take by this driver's own bounds (s): dropping a stuck
        session, a reconnect (``connect_timeout`` and its last try), then the request's ``timeout``."""
        timeout = self.cfg.timeout
        return min(DROP_TIMEOUT, timeout) + self.cfg.connect_timeout + 2.0 * timeout + timeout

    def safe_action(self) -> SafeAction:
        """Stop, disable, then ``enabled`` read back (must be false). Each step is one request without a
        retry (the guard retries the whole action) and gets :attr:`request_bound` plus a second; a stop
        that hangs costs its session (a stuck request may block it), so the disable goes out on a new one."""
        budget = self.request_bound + 1.0
        return SafeAction(self.name, self.url, (
            SafeStep("stop", budget, lambda: self._method("stop")),
            SafeStep("disable", budget, lambda: self._method("disable")),
            SafeStep("read-back", budget, self._enabled, check=_still_enabled, needs_link=True),
        ), linked=lambda: self._connected, error=DriveSafeStateError)

    async def safe_state(self) -> None:
        """Run :meth:`safe_action`: every step is tried; DriveSafeStateError names each step that failed."""
        await self.safe_action()()

    async def _enabled(self) -> bool:
        return bool(await self._read("enabled"))

    async def subscribe_live(self, callback, interval: float = 0.1,
                             keys: tuple[str, ...] = LIVE_KEYS) -> LiveSubscription:
        """Live values by OPC UA subscription, throttled: at most one value per node and ``interval`` s.

        The drive itself updates its live values at its ``live_rate``; the subscription publishes
        every ``interval`` s with a queue of one, so a slow consumer only ever sees the newest
        value. ``callback(key, value)`` runs in the event loop for every change (and once with the
        current values). The subscription belongs to the current session: after a reconnect,
        subscribe again. Close it with ``await sub.close()``.
        """
        if not interval > 0:
            raise ValueError("interval must be > 0")
        ids = {self._node(k).to_string(): k for k in keys}
        period_ms = 1000.0 * float(interval)

        async def make(c: Client) -> LiveSubscription:
            sub = await c.create_subscription(period_ms, _LiveHandler(ids, callback))
            await sub.subscribe_data_change(  # type: ignore[call-overload]  # asyncua wants ua.Double, takes floats
                [c.get_node(self._node(k)) for k in keys], queuesize=1, sampling_interval=period_ms)
            return LiveSubscription(sub)

        return await self._request(make)

    def identity_mismatch(self, identity: Mapping[str, Any]) -> str | None:
        """What of ``identity`` differs from ``[devices.drive.expect]``, in words (None: it matches)."""
        wrong = [f"{key} {str(identity.get(key))!r} where {want!r} is expected"
                 for key, want in self.cfg.expect.items() if str(identity.get(key)) != want]
        if not wrong:
            return None
        return ("the drive at this address is not the configured one: " + "; ".join(wrong)
                + " (wrong url, or [devices.drive.expect] not updated after a drive swap)")

    async def check_identity(self) -> dict:
        """Read the identity and refuse (IdentityMismatch) a drive other than the expected one; returns it."""
        identity = await self.device_identity()
        why = self.identity_mismatch(identity)
        if why:
            raise self._err(IdentityMismatch, why)
        return identity

    async def device_identity(self) -> dict:
        """Model, serial number, firmware, url and limits (for the session record)."""
        ident: dict[str, Any] = {"name": self.name, "url": self.url}
        for key in ("model", "serial_number", "firmware"):
            ident[key] = str(await self._read(key))
        ident.update(self.drive_limits)
        ident["security"] = self.cfg.security.mode
        return ident


def _ua_text(exc: Exception) -> str:
    """A readable text of an asyncua error (some have an empty str())."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _is_connection_status(exc: ua.UaStatusCodeError) -> bool:
    name = getattr(exc, "code_as_name", lambda: "")()
    return any(s in str(name) for s in ("Session", "SecureChannel", "Connection", "Timeout", "Shutdown",
                                          "CommunicationError"))


def _still_enabled(enabled: object) -> str | None:
    """The read-back's verdict: the drive must report itself disabled."""
    return "drive still enabled" if enabled else None
