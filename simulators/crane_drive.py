"""Simulated OPC UA servo drive for the crane axis.

The drive logic (:class:`CraneDrive`) is a small state machine; every OPC UA server that
exposes it (a plain and/or a secure endpoint, see :func:`build_server`) is a "face" carrying
the same nodes with stable string NodeIds ``ns=<idx>;s=Axis1.<Name>`` in the namespace
``urn:hil-lab:crane-drive``.

Variables: Enabled, Mode, State (Idle/Loaded/Running/Done/Stopped/Fault), Status (text),
FaultCode, TorqueSetpoint, ActualSpeed, ActualTorque, TorqueLimit, SpeedLimit, CycleTime,
MaxSamples, Progress, Heartbeat (written by the client), Model, SerialNumber, Firmware.

Methods (all return ``Int32 code, String message`` first; code 0 = accepted, see
:class:`Result`): LoadTrajectory(Double sample_time, Double[] torque), Start, Stop, Enable,
Disable, ClearFault, ReadTrace -> (code, message, Double sample_time, Double[] torque_cmd,
Double[] torque, Double[] speed).

Units: the analog variables carry the standard ``EngineeringUnits`` property (EUInformation, UNECE codes)
and, where the drive has a range, ``EURange``, so any OPC UA client sees N*m, rad/s, s.

Access: with security on (``security = "secure"`` or ``"both"``), only the secure endpoint (Basic256Sha256
SignAndEncrypt, trusted client certificate, user/password) may move the axis: LoadTrajectory, Enable,
Start and ClearFault on the anonymous plain endpoint answer NOT_AUTHORIZED, its Heartbeat is read-only and
the watchdog counts only heartbeats written through the secure endpoint. Stop, Disable, ReadTrace and
reading stay open everywhere (anyone may stop the axis, as anyone may press an emergency stop).

Plants: ``plant`` (``[simulator] plant``) chooses what the drive moves - ``"crane"`` (default: the axis of
:mod:`simulators.physics.crane`, input torque N*m, trace output motor speed rad/s), ``"oscillator"`` (force N
on m1, output x2 m) or ``"pendulum"`` (force N on the cart, output pendulum angle rad). The node and
argument names stay those of the crane drive (TorqueSetpoint carries the force, ActualSpeed the measured
output, ReadTrace's ``speed`` array the output); their ``EngineeringUnits`` follow the plant. For the
oscillator and the pendulum, SpeedLimit (m/s) watches the speed of the driven body (m1, the cart).

Running: the physics is simulated at the drive cycle (``cycle_time``) in an executor, then
played out on the run's clock (:class:`drivers.clock.Clock`: ``[simulator] speed`` times faster than real
time); live values update at ``live_rate`` (real Hz: what a client polls).
Safety: limits are checked on upload; speed above ``speed_limit`` faults and disables; while
enabled, a client must keep changing ``Heartbeat`` - no change for ``watchdog_timeout`` s
(client crashed, network or session lost) faults and disables the drive. A heartbeat is used
instead of session-close hooks because it also catches a hung client whose TCP session is alive.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math

import numpy as np
from asyncua import Server, ua
from asyncua.crypto.permission_rules import User, UserRole
from asyncua.crypto.truststore import TrustStore
from asyncua.crypto.validator import CertificateValidator, CertificateValidatorOptions
from asyncua.server.user_managers import UserManager

from drivers.clock import WALL, Clock
from simulators.certs import SERVER_URI, Pki
from simulators.device_watchdog import DeviceWatchdog
from simulators.drive_faults import MethodHangs
from simulators.opcua_space import QuickStartServer
from simulators.plants import PLANTS, Plant, get_plant
from simulators.settings import DriveSettings

__all__ = ["PLANTS", "CraneDrive", "Plant", "build_server", "get_plant", "server_url"]

log = logging.getLogger(__name__)

NAMESPACE = "urn:hil-lab:crane-drive"


class Result(enum.IntEnum):
    OK = 0
    BUSY = 1
    BAD_SAMPLE_TIME = 2
    TOO_LONG = 3
    TORQUE_LIMIT = 4
    BAD_DATA = 5
    NOT_ENABLED = 6
    NO_TRAJECTORY = 7
    FAULT_ACTIVE = 8
    NO_TRACE = 9
    NOT_AUTHORIZED = 10


class Fault(enum.IntEnum):
    NONE = 0
    SPEED_LIMIT = 1
    WATCHDOG = 2
    SIMULATION = 3


_VARS: dict[str, tuple[object, ua.VariantType]] = {
    "Enabled": (False, ua.VariantType.Boolean),
    "Mode": ("torque_trajectory", ua.VariantType.String),
    "State": ("Idle", ua.VariantType.String),
    "Status": ("ready", ua.VariantType.String),
    "FaultCode": (0, ua.VariantType.Int32),
    "TorqueSetpoint": (0.0, ua.VariantType.Double),
    "ActualSpeed": (0.0, ua.VariantType.Double),
    "ActualTorque": (0.0, ua.VariantType.Double),
    "TorqueLimit": (0.0, ua.VariantType.Double),
    "SpeedLimit": (0.0, ua.VariantType.Double),
    "CycleTime": (0.0, ua.VariantType.Double),
    "MaxSamples": (0, ua.VariantType.Int32),
    "Progress": (0.0, ua.VariantType.Double),
    "Heartbeat": (0, ua.VariantType.UInt32),
    "Model": ("HIL-SIM servo drive", ua.VariantType.String),
    "SerialNumber": ("SIM-0001", ua.VariantType.String),
    "Firmware": ("sim-1.0", ua.VariantType.String),
}


def units_of(plant: Plant) -> dict[str, tuple[str, str, str]]:
    """UNECE common codes (OPC UA units namespace) and display names of the analog variables."""
    return {"TorqueSetpoint": plant.input_unit, "ActualTorque": plant.input_unit,
            "TorqueLimit": plant.input_unit, "ActualSpeed": plant.output_unit,
            "SpeedLimit": plant.speed_unit, "CycleTime": ("SEC", "s", "second"),
            "Progress": ("C62", "1", "one (fraction of the trajectory played)")}


#: Units of the crane drive's analog variables (the default plant).
_UNITS = units_of(PLANTS["crane"])
UNECE_URI = "http://www.opcfoundation.org/UA/units/un/cefact"
#: Methods that move the axis or re-arm it: only on a control face (see the module docstring).
CONTROL_METHODS = ("LoadTrajectory", "Start", "Enable", "ClearFault")


def eu_information(code: str, symbol: str, description: str) -> ua.EUInformation:
    """EUInformation of a UNECE common code (UnitId = the code's ASCII bytes as one integer)."""
    eu = ua.EUInformation()
    eu.NamespaceUri = UNECE_URI
    eu.UnitId = int.from_bytes(code.encode("ascii"), "big")
    eu.DisplayName = ua.LocalizedText(symbol)
    eu.Description = ua.LocalizedText(description)
    return eu


def _arg(name: str, vtype: int, array: bool = False) -> ua.Argument:
    a = ua.Argument()
    a.Name = name
    a.DataType = ua.NodeId(vtype)  # type: ignore[arg-type]  # asyncua's stub wants ua.Int32; takes an int
    a.ValueRank = 1 if array else -1
    a.ArrayDimensions = [0] if array else []
    a.Description = ua.LocalizedText(name)
    return a


_CODE = [_arg("code", ua.ObjectIds.Int32), _arg("message", ua.ObjectIds.String)]
_DOUBLES = ua.ObjectIds.Double


def _reply(code: Result, message: str) -> list[ua.Variant]:
    return [ua.Variant(int(code), ua.VariantType.Int32), ua.Variant(message, ua.VariantType.String)]


def _doubles(x: np.ndarray) -> ua.Variant:
    return ua.Variant(np.asarray(x, dtype=float).tolist(), ua.VariantType.Double)


class CraneDrive:
    """Drive state machine over a plant's physics (default the crane axis); exposed by OPC UA servers."""

    def __init__(self, truth, settings: DriveSettings, plant: str = "crane", clock: Clock = WALL):
        self.truth = truth
        self.s = settings
        self.clock = clock  # the run's clock: a trajectory plays out in its seconds
        self.plant = get_plant(plant)
        if not isinstance(truth, self.plant.truth):
            raise TypeError(f"{plant} drive needs a {self.plant.truth.__name__}, got {type(truth).__name__}")
        self._faces: list[tuple[Server, int]] = []
        self._control_faces: set[int] = set()  # id() of the servers allowed to move the axis
        self._values = {k: v for k, (v, _) in _VARS.items()}
        self._values.update(Mode=self.plant.mode, TorqueLimit=float(settings.torque_limit),
                            SpeedLimit=float(settings.speed_limit),
                            CycleTime=float(settings.cycle_time), MaxSamples=int(settings.max_samples),
                            SerialNumber=f"SIM-{settings.name}")
        self._lock = asyncio.Lock()
        self._trajectory: tuple[float, np.ndarray] | None = None
        self._trace: dict[str, np.ndarray] | None = None
        self._run_task: asyncio.Task | None = None
        self._watch_task: asyncio.Task | None = None
        self._last_beat: dict[int, int] = {}
        self.watchdog = DeviceWatchdog(self.s.watchdog_timeout)  # fed by a changed heartbeat, and enable
        self._runs = 0
        self.faults = MethodHangs(lambda text: _reply(Result.BUSY, text))  # call counts, injected hangs

    # ------------------------------------------------------------------ faces
    def nodeid(self, idx: int, name: str) -> ua.NodeId:
        ident = f"{self.s.axis}.{name}" if name else self.s.axis
        return ua.NodeId(ident, idx)  # type: ignore[arg-type]  # asyncua's stub wants ua.String, ua.Int16; takes str, int

    def _ranges(self) -> dict[str, tuple[float, float]]:
        tl, sl = float(self.s.torque_limit), float(self.s.speed_limit)
        return {"TorqueSetpoint": (-tl, tl), "ActualTorque": (-tl, tl), "ActualSpeed": (-sl, sl),
                "Progress": (0.0, 1.0)}

    async def attach(self, server: Server, control: bool = True) -> int:
        """Create the axis object, variables and methods in ``server``; returns the namespace index.
        ``control``: this face may move the axis and feed the watchdog (else read, stop and disable only)."""
        idx = await server.register_namespace(self.s.namespace)
        obj = await server.nodes.objects.add_object(self.nodeid(idx, ""), ua.QualifiedName(self.s.axis, idx))
        ranges = self._ranges()
        units = units_of(self.plant)
        for name, (_, vtype) in _VARS.items():
            var = await obj.add_variable(self.nodeid(idx, name), ua.QualifiedName(name, idx),
                                         ua.Variant(self._values[name], vtype))
            if name == "Heartbeat" and control:
                await var.set_writable()
            if name in units:
                await var.add_property(self.nodeid(idx, f"{name}.EngineeringUnits"),
                                       ua.QualifiedName("EngineeringUnits", 0), eu_information(*units[name]),
                                       datatype=ua.ObjectIds.EUInformation)
            if name in ranges:
                lo, hi = ranges[name]
                await var.add_property(self.nodeid(idx, f"{name}.EURange"), ua.QualifiedName("EURange", 0),
                                       ua.Range(Low=lo, High=hi), datatype=ua.ObjectIds.Range)
        methods = {
            "LoadTrajectory": (self._m_load, [_arg("sample_time", _DOUBLES), _arg("torque", _DOUBLES, True)],
                               _CODE),
            "Start": (self._m_start, [], _CODE),
            "Stop": (self._m_stop, [], _CODE),
            "Enable": (self._m_enable, [], _CODE),
            "Disable": (self._m_disable, [], _CODE),
            "ClearFault": (self._m_clear, [], _CODE),
            "ReadTrace": (self._m_trace, [], _CODE + [
                _arg("sample_time", _DOUBLES), _arg("torque_cmd", _DOUBLES, True),
                _arg("torque", _DOUBLES, True), _arg("speed", _DOUBLES, True)]),
        }
        for name, (func, ins, outs) in methods.items():
            if name in CONTROL_METHODS and not control:
                func = _not_authorized(name)
            func = self.faults.wrap(name, func)
            await obj.add_method(self.nodeid(idx, name), ua.QualifiedName(name, idx), func, ins, outs)
        self._faces.append((server, idx))
        if control:
            self._control_faces.add(id(server))
        return idx

    @property
    def n_calls(self) -> int:
        """Method calls that act on the drive (all but ReadTrace), for the dry-run tests."""
        return sum(n for name, n in self.faults.calls.items() if name != "ReadTrace")

    def start(self) -> None:
        """Start the watchdog (call once the faces are serving)."""
        if self._watch_task is None:
            self._watch_task = asyncio.create_task(self._watchdog(), name="crane-drive-watchdog")

    async def close(self) -> None:
        """Stop any motion and the watchdog; the drive ends disabled."""
        await self._halt("drive shut down")
        await self._set(Enabled=False)
        if self._watch_task is not None:
            self._watch_task.cancel()
            await asyncio.gather(self._watch_task, return_exceptions=True)
            self._watch_task = None
        self._faces.clear()

    async def _set(self, **values) -> None:
        self._values.update(values)
        for server, idx in list(self._faces):
            for name, value in values.items():
                vtype = _VARS[name][1]
                await server.write_attribute_value(self.nodeid(idx, name),
                                                   ua.DataValue(ua.Variant(value, vtype)))

    @property
    def state(self) -> str:
        return str(self._values["State"])

    @property
    def enabled(self) -> bool:
        return bool(self._values["Enabled"])

    # ------------------------------------------------------------------ methods
    async def _m_load(self, parent, sample_time: ua.Variant, torque: ua.Variant) -> list[ua.Variant]:
        async with self._lock:
            code, msg = self._check_trajectory(sample_time.Value, torque.Value)
            if code is Result.OK:
                self._trajectory = (float(sample_time.Value), np.asarray(torque.Value, dtype=float))
                self._trace = None
                await self._set(State="Loaded", Status=msg, Progress=0.0)
            else:
                await self._set(Status=f"refused: {msg}")
            return _reply(code, msg)

    def _check_trajectory(self, sample_time, torque) -> tuple[Result, str]:
        s = self.s
        if self.state == "Running":
            return Result.BUSY, "a trajectory is running"
        try:
            st = float(sample_time)
        except (TypeError, ValueError):
            return Result.BAD_SAMPLE_TIME, "sample_time is not a number"
        ratio = st / s.cycle_time if math.isfinite(st) else float("nan")
        if not (st > 0 and st <= s.max_sample_time and abs(ratio - round(ratio)) < 1e-6 * max(1.0, ratio)
                and round(ratio) >= 1):
            return (Result.BAD_SAMPLE_TIME,
                    f"sample_time {sample_time!r} s must be a multiple of the cycle time {s.cycle_time} s "
                    f"and at most {s.max_sample_time} s")
        if torque is None or len(torque) == 0:
            return Result.BAD_DATA, "empty trajectory"
        if len(torque) > s.max_samples:
            return Result.TOO_LONG, f"{len(torque)} samples exceed the maximum of {s.max_samples}"
        u = np.asarray(torque, dtype=float)
        if not np.all(np.isfinite(u)):
            return Result.BAD_DATA, "trajectory contains non-finite values"
        peak = float(np.abs(u).max())
        if peak > s.torque_limit:
            what, unit = ("torque", "N*m") if self.plant.output == "speed" else ("force", "N")
            return (Result.TORQUE_LIMIT,
                    f"peak {what} {peak:.4g} {unit} exceeds the limit {s.torque_limit:.4g} {unit}")
        return Result.OK, f"loaded {u.size} samples at {st:g} s ({u.size * st:.4g} s)"

    async def _m_enable(self, parent) -> list[ua.Variant]:
        async with self._lock:
            if self._values["FaultCode"] != Fault.NONE:
                code = self._values["FaultCode"]
                return _reply(Result.FAULT_ACTIVE, f"fault {code} active: clear it first")
            self.watchdog.fed(asyncio.get_running_loop().time())
            await self._set(Enabled=True, Status="enabled")
            return _reply(Result.OK, "enabled")

    async def _m_disable(self, parent) -> list[ua.Variant]:
        async with self._lock:
            await self._halt("disabled while running")
            await self._set(Enabled=False, Status="disabled")
            return _reply(Result.OK, "disabled")

    async def _m_start(self, parent) -> list[ua.Variant]:
        async with self._lock:
            if self._values["FaultCode"] != Fault.NONE:
                return _reply(Result.FAULT_ACTIVE, "fault active")
            if not self.enabled:
                return _reply(Result.NOT_ENABLED, "drive not enabled")
            if self.state == "Running":
                return _reply(Result.BUSY, "already running")
            if self._trajectory is None:
                return _reply(Result.NO_TRAJECTORY, "no trajectory loaded")
            self._trace = None
            await self._set(State="Running", Status="running", Progress=0.0)
            self._run_task = asyncio.create_task(self._run(*self._trajectory), name="crane-drive-run")
            return _reply(Result.OK, "started")

    async def _m_stop(self, parent) -> list[ua.Variant]:
        async with self._lock:
            stopped = await self._halt("stopped by client")
            return _reply(Result.OK, "stopped" if stopped else "not running")

    async def _m_clear(self, parent) -> list[ua.Variant]:
        async with self._lock:
            await self._set(FaultCode=int(Fault.NONE), Status="fault cleared",
                            State="Loaded" if self._trajectory is not None else "Idle")
            return _reply(Result.OK, "fault cleared")

    async def _m_trace(self, parent) -> list[ua.Variant]:
        empty = np.zeros(0)
        if self.state == "Running":
            return _reply(Result.BUSY, "trajectory still running") + [
                ua.Variant(0.0, ua.VariantType.Double)] + [_doubles(empty)] * 3
        if self._trace is None:
            return _reply(Result.NO_TRACE, "no trace recorded") + [
                ua.Variant(0.0, ua.VariantType.Double)] + [_doubles(empty)] * 3
        tr = self._trace
        return _reply(Result.OK, f"{tr['speed'].size} samples") + [
            ua.Variant(float(self.s.cycle_time), ua.VariantType.Double),
            _doubles(tr["torque_cmd"]), _doubles(tr["torque"]), _doubles(tr["speed"])]

    # ------------------------------------------------------------------ motion
    async def _halt(self, reason: str) -> bool:
        """Cancel a running trajectory (trace kept up to the stop); True if one was running."""
        task = self._run_task
        if task is None or task.done():
            return False
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await self._set(State="Stopped", Status=reason, TorqueSetpoint=0.0, ActualTorque=0.0)
        return True

    async def _run(self, sample_time: float, torque: np.ndarray) -> None:
        s = self.s
        loop = asyncio.get_running_loop()
        ratio = int(round(sample_time / s.cycle_time))
        cmd = np.repeat(torque, ratio)
        rng = np.random.default_rng([s.seed, self._runs])
        self._runs += 1
        k = 0
        sim: dict | None = None
        try:
            sim = await loop.run_in_executor(None, self.plant.simulate, self.truth, cmd, s.cycle_time, rng)
            trace = self.plant.trace(sim, cmd.size)
            limit_speed = np.asarray(sim[self.plant.limit_key])
            over = np.flatnonzero(np.abs(limit_speed) > s.speed_limit)
            n_end = int(over[0]) + 1 if over.size else cmd.size
            with self.clock.waiting():  # the trajectory plays out on the run's clock, at its speed
                t0 = self.clock.monotonic()
                while True:
                    k = min(int((self.clock.monotonic() - t0) / s.cycle_time), n_end)
                    if k >= n_end:
                        break
                    await self._set(TorqueSetpoint=float(cmd[k]), ActualTorque=float(trace["torque"][k]),
                                    ActualSpeed=float(trace["speed"][k]), Progress=k / cmd.size)
                    await asyncio.sleep(1.0 / s.live_rate)
            k = n_end
            self._keep_trace(trace, k)
            last = float(trace["speed"][k - 1])
            if over.size:
                unit = self.plant.speed_unit[1]
                await self._fault(Fault.SPEED_LIMIT,
                                  f"speed {limit_speed[over[0]]:.4g} {unit} exceeds limit "
                                  f"{s.speed_limit} {unit} at t={over[0] * s.cycle_time:.4f} s")
                return
            await self._set(State="Done", Status="trajectory done", TorqueSetpoint=0.0, ActualTorque=0.0,
                            ActualSpeed=last, Progress=1.0)
        except asyncio.CancelledError:
            if sim is not None:
                self._keep_trace(self.plant.trace(sim, cmd.size), k)
            raise
        except Exception as exc:  # any simulation error: fault and disable
            log.exception("crane drive run failed")
            await self._fault(Fault.SIMULATION, f"simulation error: {exc}")

    def _keep_trace(self, trace: dict, k: int) -> None:
        self._trace = {key: np.asarray(trace[key][:k]) for key in ("torque_cmd", "torque", "speed")}

    async def _fault(self, code: Fault, message: str) -> None:
        log.warning("crane drive fault %s: %s", code.name, message)
        await self._set(FaultCode=int(code), Status=f"fault: {message}", State="Fault", Enabled=False,
                        TorqueSetpoint=0.0, ActualTorque=0.0)

    async def _watchdog(self) -> None:
        loop = asyncio.get_running_loop()
        period = min(0.05, self.s.watchdog_timeout / 4)
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for server, idx in list(self._faces):
                if id(server) not in self._control_faces:
                    continue  # a heartbeat only counts where it needs a secure, authenticated session
                beat = server.read_attribute_value(self.nodeid(idx, "Heartbeat")).Value
                assert beat is not None  # the variable is created with a value and only ever written one
                if self._last_beat.get(id(server)) != beat.Value:
                    self._last_beat[id(server)] = beat.Value
                    self.watchdog.fed(now)
            if self.watchdog.expired(now) and self.enabled:
                async with self._lock:
                    if self.enabled:
                        await self._halt("watchdog")
                        await self._fault(Fault.WATCHDOG,
                                          f"no client heartbeat for {self.s.watchdog_timeout} s")


def _not_authorized(name: str):
    """Method handler of a read-only face: refuse, whatever the arguments."""

    async def refuse(parent, *args) -> list[ua.Variant]:
        log.info("crane drive: %s refused on the anonymous endpoint", name)
        return _reply(Result.NOT_AUTHORIZED, f"{name} refused: control needs the secure endpoint "
                      "(signed and encrypted, user and password)")

    return refuse


class PasswordUsers(UserManager):
    """User manager accepting only the configured user/password pairs."""

    def __init__(self, users: dict[str, str]):
        self._users = dict(users)

    def get_user(self, iserver, username=None, password=None, certificate=None):
        if username is not None and username in self._users and self._users[username] == password:
            return User(role=UserRole.User, name=username)
        return None


async def build_server(drive: CraneDrive, host: str, port: int, *, pki: Pki | None = None,
                       users: dict[str, str] | None = None, control: bool = True) -> Server:
    """A started OPC UA server exposing ``drive``: plain (anonymous) or, with ``pki``, secure only.

    Secure: Basic256Sha256 SignAndEncrypt, client certificates checked against
    ``pki.trusted_dir``, user/password from ``users`` required (anonymous refused); the server's
    ApplicationUri is the one in its certificate. ``control=False`` serves a read-only face (see
    :meth:`CraneDrive.attach`).
    """
    # the standard address space copied on touch from this process's one (simulators/opcua_space.py)
    user_manager = PasswordUsers(users or {}) if pki is not None else None
    server = Server(iserver=QuickStartServer(user_manager=user_manager))
    await server.init()
    await server.set_application_uri(pki.server.app_uri if pki is not None else f"{SERVER_URI}:plain")
    server.set_endpoint(f"opc.tcp://{host}:{port}/hil/crane")
    server.set_server_name(f"{drive.s.name} ({'secure' if pki is not None else 'plain'})")
    if pki is not None:
        server.set_security_policy([ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt])
        server.set_identity_tokens([ua.UserNameIdentityToken])
        await server.load_certificate(str(pki.server.cert))
        await server.load_private_key(str(pki.server.key))
        store = TrustStore([pki.trusted_dir], [])
        await store.load()
        server.set_certificate_validator(
            CertificateValidator(CertificateValidatorOptions.TRUSTED_VALIDATION
                                 | CertificateValidatorOptions.PEER_CLIENT, store))
    else:
        server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
        server.set_identity_tokens([ua.AnonymousIdentityToken])
    await drive.attach(server, control=control)
    await server.start()
    return server


def server_url(server: Server, host: str) -> str:
    """The endpoint URL with the bound port (port 0 resolved)."""
    assert server.bserver is not None  # a started server (build_server) has one
    return f"opc.tcp://{host}:{server.bserver.port}/hil/crane"
