"""Modbus TCP / RTU transport for the drivers: connect with backoff, small timeouts, typed errors.

pymodbus does not retry a failed first connect and its own background reconnect races with ours, so
its automatic reconnect is switched off (``reconnect_delay=0``) and this class reconnects on demand,
with exponential backoff bounded by ``connect_timeout``.

Every reply is checked against its request (device id, function code, register count / echoed address
and value) before a value goes out. On TCP the transaction id ties a reply to its request. RTU has none,
and pymodbus 3.16 takes the first frame with the right device id as the answer - so after a timeout the
late reply (a FIFO slave answers the original *and* the retry) would answer the next request, and every
later reading would be one request behind. On RTU this class therefore:

- retries itself (pymodbus ``retries=0``): a retry goes out only on a quiet line, never while the reply
  to the timed-out attempt may still arrive;
- counts the replies it is owed (one per timed-out or cancelled request) and, before the next request,
  waits up to ``drain_time`` for them, discarding each as it arrives (seen through pymodbus' ``trace_pdu``
  hook while no request is in flight); replies still missing after ``drain_time`` are taken as lost;
- waits the RTU inter-frame silence (3.5 characters, >= 1.75 ms; or ``silence``) after the last byte in;
- discards a reply that does not match its request and waits for a proper one on a drained line.
The remaining assumption is the Modbus one: a slave answers within ``timeout + drain_time`` or not at all.

Every request is bounded by a guard of our own (``timeout`` x attempts + 0.5 s), also when pymodbus' own
timeout does not fire. It is a per-connection watchdog, not a timeout context per request: a request only
notes its task and deadline; one timer per connection, re-armed at most once per guard interval, cancels
the request's task when it is overdue, and the request turns that cancellation into a DeviceTimeout. At
thousands of polls a second that is one timer every ~1.5 s instead of one timer (and its cancel) per poll.

The read path is flat on purpose (issue 23: our driver polls at >= 0.95x the plain pymodbus client):
``read`` takes the lock, calls the pymodbus client directly, checks the reply with plain comparisons and
decodes with precompiled structs; every message is formatted only when something is wrong.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta
from pymodbus import FramerType
from pymodbus.client import AsyncModbusSerialClient, AsyncModbusTcpClient
from pymodbus.exceptions import ConnectionException, ModbusException, ModbusIOException
from pymodbus.pdu import ModbusPDU

from drivers.cancellation import checked
from drivers.errors import (
    BadResponse,
    DeviceConnectionError,
    DeviceError,
    DeviceRefused,
    DeviceTimeout,
    DeviceUnreachable,
)
from drivers.registers import RegisterSpec
from drivers.serial_urls import install as install_serial_urls
from drivers.settings import Baud, InvalidSetting, NonEmpty, Port, Settings, Timeout, UnitId, settings_from

install_serial_urls()  # socket:// ports close without blocking the event loop

log = logging.getLogger(__name__)

MODBUS_EXCEPTIONS = {
    1: "illegal function",
    2: "illegal data address",
    3: "illegal data value",
    4: "device failure",
    6: "device busy",
    11: "gateway target did not respond",
}
#: The bounds of the fast plausibility check for a register without a ``range``: every finite float passes,
#: NaN and +-inf fail (both comparisons are False for NaN), so one chained comparison is the finite check too.
_ANY_FINITE = (-sys.float_info.max, sys.float_info.max)


#: the identification objects of function 43 / MEI 14 by name (0x80: the serial number, by our convention -
#: a private object, where many makers put it; see docs/dry-run.md)
IDENTITY_OBJECTS = {0x00: "vendor_name", 0x01: "product_code", 0x02: "revision", 0x03: "vendor_url",
                    0x04: "product_name", 0x05: "model_name", 0x06: "user_application_name",
                    0x80: "serial_number"}


class ModbusSettings(Settings, kw_only=True):
    """How to reach one Modbus device (the link part of its ``[devices.*]`` table).

    ``protocol`` "modbus_tcp" (``host``/``port``) or "modbus_rtu" (``url``: "/dev/ttyUSB0" or a
    "socket://host:port" gateway; ``baudrate``); ``device_id`` the unit id; ``timeout`` s per attempt,
    ``retries`` extra attempts; ``connect_timeout`` s spent reconnecting before giving up, with backoff from
    ``backoff_initial`` doubling to ``backoff_max``; RTU ``drain_time`` s a late reply is awaited after a
    timeout (default 2 x timeout); RTU ``silence`` s of quiet line before a request (default: 3.5 characters
    at ``baudrate``, >= 1.75 ms; 0 only with no serial line behind the link, as a simulator on loopback)."""

    protocol: Literal["modbus_tcp", "modbus_rtu"] = "modbus_tcp"
    host: NonEmpty = "127.0.0.1"
    port: Port = 502
    url: NonEmpty | None = None
    baudrate: Baud | None = None             # None: 19200 (Modbus RTU), 9600 (an ASCII serial line)
    device_id: UnitId = 1
    timeout: Annotated[float, Meta(gt=0, le=60.0)] = 0.5
    retries: Annotated[int, Meta(ge=0, le=10)] = 1
    connect_timeout: Timeout = 3.0
    backoff_initial: Annotated[float, Meta(gt=0, le=10.0)] = 0.05
    backoff_max: Annotated[float, Meta(gt=0, le=60.0)] = 1.0
    drain_time: Annotated[float, Meta(ge=0, le=60.0)] | None = None
    silence: Annotated[float, Meta(ge=0, le=1.0)] | None = None  # s; None: the RTU rule at the baudrate
    model: str = "unknown"
    expect: dict[str, str] = msgspec.field(default_factory=dict)  # identity (FC43) it must answer with

    def check(self) -> None:
        if self.protocol == "modbus_rtu" and not self.url:
            raise InvalidSetting("url", "required for protocol 'modbus_rtu' (the serial line, e.g. "
                                        "/dev/ttyUSB0)")
        if self.silence is not None and self.protocol != "modbus_rtu":  # a serial line's rest between frames
            raise InvalidSetting("silence", "only for protocol 'modbus_rtu'")
        for key in self.expect:
            if key not in IDENTITY_OBJECTS.values():
                raise InvalidSetting(f"expect.{key}", "not a device identification object (known: "
                                                      f"{', '.join(IDENTITY_OBJECTS.values())})")

    @property
    def address(self) -> str:
        """Where the device is, as every message names it."""
        if self.protocol == "modbus_rtu":
            return f"modbus-rtu:{self.url}/{self.device_id}"
        return f"modbus-tcp://{self.host}:{self.port}/{self.device_id}"


class _Read:
    """One mapped value's read, made once per RegisterSpec: the request, its reply check and its decode."""

    __slots__ = ("spec", "what", "fc", "address", "count", "input", "decode", "lo", "hi", "call", "check")

    def __init__(self, spec: RegisterSpec, device_id: int) -> None:
        self.spec = spec
        self.what = f"read {spec.table}[{spec.address}:{spec.address + spec.count}]"
        self.fc = 4 if spec.table == "input" else 3
        self.address, self.count, self.input = spec.address, spec.count, spec.table == "input"
        self.decode = spec.decoder()
        self.lo, self.hi = spec.range or _ANY_FINITE
        # the general path's (what, fc, call, check), used on RTU and whenever the client is not connected
        address, count = spec.address, spec.count
        if self.input:
            self.call = lambda c: c.read_input_registers(address, count=count, device_id=device_id)
        else:
            self.call = lambda c: c.read_holding_registers(address, count=count, device_id=device_id)
        self.check = _count_check(count)


class ModbusTransport:
    """One Modbus device (TCP or RTU over a serial line / ``socket://`` gateway).

    Config keys (the device's ``[devices.*]`` table): ``protocol`` ("modbus_tcp" | "modbus_rtu"),
    ``host``/``port`` (TCP) or ``url`` (RTU, e.g. "/dev/ttyUSB0" or "socket://10.0.0.5:4001"),
    ``baudrate``, ``device_id``, ``timeout`` (s per attempt), ``retries``, ``connect_timeout`` (s, total
    time spent reconnecting before giving up), ``backoff_initial`` / ``backoff_max`` (s), and for RTU
    ``drain_time`` (s a late reply is waited for after a timeout before the line is used again; default
    2 x timeout).
    """

    def __init__(self, name: str, settings: ModbusSettings | Mapping[str, Any]) -> None:
        if isinstance(settings, Mapping):  # a device's whole table: the link keys are this class's part
            settings = {k: v for k, v in settings.items() if k in ModbusSettings.__struct_fields__}
        cfg = settings_from(settings, ModbusSettings)
        self.name = name
        self.settings = cfg
        self.protocol = cfg.protocol
        self.device_id = cfg.device_id
        self.timeout = cfg.timeout
        self.retries = cfg.retries
        self.connect_timeout = cfg.connect_timeout
        self.backoff_initial = cfg.backoff_initial
        self.backoff_max = cfg.backoff_max
        self.drain_time = 2.0 * self.timeout if cfg.drain_time is None else cfg.drain_time
        self.address = cfg.address
        if self.protocol == "modbus_tcp":
            self.host, self.port = cfg.host, cfg.port
        else:
            assert cfg.url is not None  # ModbusSettings.check
            self.url = cfg.url
        self.baudrate = cfg.baudrate or 19200
        self._client: AsyncModbusTcpClient | AsyncModbusSerialClient | None = None
        self._lock = asyncio.Lock()
        self._rtu = self.protocol == "modbus_rtu"
        # id(spec) -> its _Read, made once (no per-poll closures, lookups or message formatting)
        self._reads: dict[int, _Read] = {}
        # the request guard: one watchdog timer per connection (see the module docstring)
        self.guard = self.timeout * (1 if self._rtu else self.retries + 1) + 0.5  # s, one request at most
        self._guard_task: asyncio.Task | None = None  # the task awaiting the request in flight
        self._guard_deadline = 0.0  # loop time by which that request must have ended
        self._guard_fired: asyncio.Task | None = None  # the task the watchdog cancelled (not yet settled)
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_loop: asyncio.AbstractEventLoop | None = None
        # RTU line state (kept across reconnects: it belongs to the line, not to the client object)
        rule = max(3.5 * 11.0 / self.baudrate, 1.75e-3)  # s: 3.5 characters of 11 bits, at least 1.75 ms
        self.silence = (rule if cfg.silence is None else cfg.silence) if self._rtu else 0.0
        self._in_flight = False
        self._owed = 0  # replies to timed-out requests that may still arrive
        self._owed_since = 0.0  # loop time of the last timeout
        self._last_rx = -math.inf  # loop time of the last received bytes
        self._drained = asyncio.Event()
        self.n_late = 0  # late replies seen and discarded
        self.n_mismatched = 0  # replies refused because they did not match their request
        self.n_guard_expired = 0  # requests ended by our guard (pymodbus' own timeout did not end them)

    @property
    def rtu(self) -> bool:
        return self._rtu

    def _new_client(self) -> AsyncModbusTcpClient | AsyncModbusSerialClient:
        if self.protocol == "modbus_tcp":
            return AsyncModbusTcpClient(self.host, port=self.port, timeout=self.timeout, retries=self.retries,
                                        reconnect_delay=0, name=self.name)
        return AsyncModbusSerialClient(self.url, framer=FramerType.RTU, baudrate=self.baudrate,
                                       timeout=self.timeout, retries=0, reconnect_delay=0, name=self.name,
                                       trace_packet=self._on_packet, trace_pdu=self._on_pdu)

    # -- RTU line bookkeeping (pymodbus trace hooks; they run in the event loop) ----------------------
    def _on_packet(self, sending: bool, data: bytes) -> bytes:
        if not sending and data:
            self._last_rx = asyncio.get_running_loop().time()
        return data

    def _on_pdu(self, sending: bool, pdu: ModbusPDU) -> ModbusPDU:
        if not sending and not self._in_flight:
            self.n_late += 1
            self._owed = max(0, self._owed - 1)
            if self._owed == 0:
                self._drained.set()
            log.info("%s (%s): discarded a late reply (function %d) to a timed-out request",
                     self.name, self.address, pdu.function_code)
        return pdu

    async def _quiet_line(self) -> None:
        """RTU: wait for the owed late replies (up to ``drain_time``) and the inter-frame silence."""
        loop = asyncio.get_running_loop()
        if self._owed:
            remaining = self._owed_since + self.drain_time - loop.time()
            if remaining > 0:
                self._drained.clear()
                try:
                    async with asyncio.timeout(remaining):
                        await self._drained.wait()
                except TimeoutError:
                    pass
            if self._owed:
                log.info("%s (%s): %d late repl%s not seen within %g s; taken as lost", self.name,
                         self.address, self._owed, "y" if self._owed == 1 else "ies", self.drain_time)
                self._owed = 0
        while (gap := self._last_rx + self.silence - loop.time()) > 0:
            await asyncio.sleep(gap)

    def _owe_reply(self) -> None:
        self._owed += 1
        self._owed_since = asyncio.get_running_loop().time()

    # -- the request guard --------------------------------------------------------------------------------
    @property
    def request_in_flight(self) -> bool:
        """True while a request is on the wire (sent, its reply or its end not yet seen)."""
        return self._guard_task is not None

    def _arm(self, task: asyncio.Task) -> int:
        """Note that ``task`` is about to await a request; return its cancellation count (for
        :meth:`_settle`). Starts the watchdog only when none is pending on this loop."""
        loop = asyncio.get_running_loop()
        self._guard_task = task
        self._guard_deadline = deadline = loop.time() + self.guard
        if self._watchdog is None or self._watchdog_loop is not loop:
            self._watchdog = loop.call_at(deadline, self._on_watchdog)
            self._watchdog_loop = loop
        return task.cancelling()

    def _on_watchdog(self) -> None:
        """Cancel the request in flight if it is overdue, else wait for its deadline; idle: stop."""
        self._watchdog = None
        task = self._guard_task
        if task is None:
            return  # no request in flight: the next one starts the watchdog again
        loop = self._watchdog_loop
        assert loop is not None
        if loop.time() < self._guard_deadline:
            self._watchdog = loop.call_at(self._guard_deadline, self._on_watchdog)
            return
        self._guard_fired = task
        self.n_guard_expired += 1
        task.cancel("request guard expired")

    def _settle(self, task: asyncio.Task, before: int, cancelled: bool) -> bool:
        """After a guarded await: take back the watchdog's cancellation of ``task`` if it made one. True when
        the await ended by the watchdog alone (the request timed out); False when it returned, or when the
        task was also cancelled by someone else (that cancellation goes on)."""
        self._guard_task = None
        if self._guard_fired is not task:
            return False
        self._guard_fired = None
        return task.uncancel() <= before and cancelled

    @property
    def request_bound(self) -> float:
        """The longest one request can take by this transport's own bounds (s): a reconnect (its
        ``connect_timeout`` and the last try), then every attempt up to the guard - on RTU each after the
        wait for a late reply. A safe step of one request gets this budget, so it is never cut before the
        transport has given up by itself."""
        reconnect = self.connect_timeout + max(self.timeout, 0.1)
        if self._rtu:
            return reconnect + (self.retries + 1) * (self.drain_time + self.silence + self.guard)
        return reconnect + self.guard

    # -- connection -----------------------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.connected

    async def connect(self) -> None:
        """Connect, retrying with exponential backoff until ``connect_timeout`` has passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        delay = self.backoff_initial
        while True:
            if self._client is not None:
                self._client.close()
            self._client = self._new_client()
            try:
                async with asyncio.timeout(max(self.timeout, 0.1)):
                    ok = await checked(self._client.connect())
            except (TimeoutError, OSError, ModbusException):
                ok = False
            if ok and self._client.connected:
                return
            if loop.time() + delay > deadline:
                self._client.close()
                self._client = None
                raise DeviceUnreachable(
                    self.name, self.address, f"cannot connect within {self.connect_timeout:g} s"
                )
            await asyncio.sleep(delay)
            delay = min(2.0 * delay, self.backoff_max)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._watchdog is not None and self._guard_task is None:  # a request in flight keeps its guard
            self._watchdog.cancel()
            self._watchdog = None

    # -- requests -------------------------------------------------------------------------------------
    async def _execute(self, what: str, fc: int, call, check):
        """Run one request: reconnect if needed, check the reply against the request, map failures to
        typed errors. ``check(reply) -> str | None`` names what does not match (None: it matches)."""
        async with self._lock:
            return await self._execute_locked(what, fc, call, check)

    async def _execute_locked(self, what: str, fc: int, call, check):
        """:meth:`_execute` with the lock already held (RTU retries here; TCP: pymodbus retries)."""
        attempts = self.retries + 1 if self._rtu else 1
        failure: DeviceError | None = None
        for _ in range(attempts):
            rr, failure = await self._attempt(what, fc, call, check)
            if failure is None:
                return rr
        assert failure is not None
        if attempts > 1:
            failure = type(failure)(self.name, self.address, f"{failure.message} ({attempts} attempts)")
        raise failure

    async def _attempt(self, what: str, fc: int, call, check):
        """One request on the wire: ``(reply, None)``, or ``(None, error)`` for a failure worth a retry."""
        client = self._client
        if client is None or not client.connected:
            await self.connect()
            client = self._client
        assert client is not None
        rtu = self._rtu
        if rtu:
            await self._quiet_line()
        task = asyncio.current_task()
        assert task is not None
        self._in_flight = True
        before = self._arm(task)
        try:
            rr = await call(client)
        except asyncio.CancelledError:
            self._in_flight = False
            if not self._settle(task, before, True):
                if rtu:
                    self._owe_reply()  # the request went out; its reply may still come
                raise
            return None, self._no_answer(client, what, None)
        except Exception as exc:  # noqa: BLE001 - any transport failure is a lost answer
            self._in_flight = False
            self._settle(task, before, False)
            return None, self._failure(client, what, exc)
        self._in_flight = False
        self._settle(task, before, False)
        if task.cancelling() > before:
            raise asyncio.CancelledError("cancellation swallowed by a protocol library; re-raised")
        if rr.function_code == fc and rr.dev_id == self.device_id and check(rr) is None:
            return rr, None
        return self._judge(rr, what, fc, check)

    def _failure(self, client, what: str, exc: Exception) -> DeviceError:
        """The typed error of a request that raised ``exc``: returned when a retry may help, else raised."""
        if isinstance(exc, TimeoutError | ModbusIOException):
            return self._no_answer(client, what, exc)
        if isinstance(exc, ConnectionException | OSError):
            self.close()
            raise DeviceConnectionError(self.name, self.address,
                                        f"{what}: {exc or type(exc).__name__}") from exc
        if isinstance(exc, ModbusException):
            raise BadResponse(self.name, self.address, f"{what}: {exc or type(exc).__name__}") from exc
        raise exc

    def _no_answer(self, client, what: str, exc: Exception | None) -> DeviceError:
        """A request that got no answer in time (pymodbus' timeout, or our guard): DeviceTimeout to return,
        or DeviceConnectionError raised when the connection went with it."""
        if not client.connected:
            self.close()
            raise DeviceConnectionError(self.name, self.address, f"{what}: connection lost") from exc
        if self._rtu:
            self._owe_reply()
        tries = "" if self._rtu or not self.retries else f" ({self.retries + 1} attempts)"
        return DeviceTimeout(self.name, self.address, f"{what}: no answer within {self.timeout:g} s{tries}")

    def _judge(self, rr, what: str, fc: int, check):
        """A reply that is not a plain match: ``(None, BadResponse)`` when it does not answer the request
        (retried), DeviceRefused raised for a Modbus exception reply, ``(rr, None)`` otherwise."""
        problem = _mismatch(rr, self.device_id, fc, check)
        if problem:
            self.n_mismatched += 1
            log.warning("%s (%s): %s: discarded a reply that does not answer it (%s)", self.name,
                        self.address, what, problem)
            if self._rtu:
                self._owe_reply()  # our own reply may still be on its way
            return None, BadResponse(self.name, self.address, f"{what}: reply does not match the request "
                                     f"({problem})")
        if rr.isError():
            code = int(getattr(rr, "exception_code", 0) or 0)
            text = MODBUS_EXCEPTIONS.get(code, "exception")
            raise DeviceRefused(self.name, self.address, f"{what}: Modbus exception {code} ({text})", code)
        return rr, None

    async def read_device_information(self, read_code: int, object_id: int) -> Any:
        """One Read Device Identification request (function 43, MEI type 14); the reply as pymodbus gives it
        (``information``: object id -> bytes, ``more_follows``, ``next_object_id``). DeviceRefused when the
        device answers with a Modbus exception (it does not offer it)."""
        device_id = self.device_id

        def call(c):
            return c.read_device_information(read_code=read_code, object_id=object_id, device_id=device_id)

        return await self._execute(f"read device identification from object {object_id:#04x}", 0x2B, call,
                                   lambda rr: None)

    async def read_registers(self, table: str, address: int, count: int) -> list[int]:
        """Raw registers from the holding or input table."""
        fc = 4 if table == "input" else 3
        what = f"read {table}[{address}:{address + count}]"
        device_id = self.device_id

        def call(c):
            if fc == 4:
                return c.read_input_registers(address, count=count, device_id=device_id)
            return c.read_holding_registers(address, count=count, device_id=device_id)

        rr = await self._execute(what, fc, call, _count_check(count))
        return list(rr.registers)

    async def read(self, spec: RegisterSpec, finite: bool = True) -> float:
        """Read one mapped value in SI units. NaN/inf (when ``finite``) and values outside the register's
        plausibility ``range`` are a BadResponse naming the register and the value.

        The poll's hot path: on a connected TCP client it is this coroutine and pymodbus' own, nothing
        between (see the module docstring); RTU and reconnects take the general path of the writes."""
        plan = self._reads.get(id(spec))
        if plan is None or plan.spec is not spec:
            plan = self._plan(spec)
        lock = self._lock
        await lock.acquire()
        try:
            client = self._client
            if self._rtu or client is None or not client.connected:
                rr = await self._execute_locked(plan.what, plan.fc, plan.call, plan.check)
            else:
                task = asyncio.current_task()
                assert task is not None
                before = self._arm(task)
                try:
                    if plan.input:
                        rr = await client.read_input_registers(plan.address, count=plan.count,
                                                               device_id=self.device_id)
                    else:
                        rr = await client.read_holding_registers(plan.address, count=plan.count,
                                                                 device_id=self.device_id)
                except asyncio.CancelledError:
                    if not self._settle(task, before, True):
                        raise
                    raise self._no_answer(client, plan.what, None) from None
                except Exception as exc:
                    self._settle(task, before, False)
                    raise self._failure(client, plan.what, exc) from exc
                self._settle(task, before, False)
                if task.cancelling() > before:
                    raise asyncio.CancelledError("cancellation swallowed by a protocol library; re-raised")
                if not (rr.function_code == plan.fc and rr.dev_id == self.device_id
                        and len(rr.registers) == plan.count):
                    rr, failure = self._judge(rr, plan.what, plan.fc, plan.check)
                    if failure is not None:
                        raise failure
        finally:
            lock.release()
        value = plan.decode(rr.registers)
        if plan.lo <= value <= plan.hi:  # finite and within the register's range, in one comparison
            return value
        return self._implausible(spec, value, finite)

    def _plan(self, spec: RegisterSpec) -> _Read:
        if len(self._reads) >= 1024:
            self._reads.clear()
        plan = self._reads[id(spec)] = _Read(spec, self.device_id)
        return plan

    def _implausible(self, spec: RegisterSpec, value: float, finite: bool) -> float:
        return checked_value(self.name, self.address, spec, value, finite)

    async def write(self, spec: RegisterSpec, value: float, limits: Sequence[str] = ()) -> None:
        """Write one mapped value (SI units) to a holding register. ``limits`` names the checks the driver
        made before it (a recording backend keeps them; the wire has no use for them)."""
        regs = words_to_write(self.name, spec, value)
        what = f"write {spec.name}={value!r} @ holding[{spec.address}]"
        fc = 6 if len(regs) == 1 else 16
        device_id = self.device_id

        def call(c):
            if len(regs) == 1:
                return c.write_register(spec.address, regs[0], device_id=device_id)
            return c.write_registers(spec.address, regs, device_id=device_id)

        def check(rr) -> str | None:
            address = getattr(rr, "address", None)
            if address != spec.address:
                return f"echoed address {address} instead of {spec.address}"
            if fc == 6 and list(getattr(rr, "registers", None) or []) != regs:
                return f"echoed value {getattr(rr, 'registers', None)} instead of {regs}"
            if fc == 16 and getattr(rr, "count", None) != len(regs):
                return f"echoed count {getattr(rr, 'count', None)} instead of {len(regs)}"
            return None

        await self._execute(what, fc, call, check)


def checked_value(device: str, address: str, spec: RegisterSpec, value: float, finite: bool = True) -> float:
    """A read value decoded from ``spec``'s registers, checked: BadResponse for NaN/inf (when ``finite``) and
    for a value outside the register's plausibility ``range``; the same for every backend."""
    if not math.isfinite(value):
        if finite:
            raise BadResponse(device, address,
                              f"implausible {spec.name} @ {spec.table}[{spec.address}] = {value}")
        return value
    if not spec.plausible(value):
        lo, hi = spec.range or (-math.inf, math.inf)
        raise BadResponse(device, address,
                          f"implausible {spec.name} @ {spec.table}[{spec.address}] = {value:.6g} "
                          f"{spec.unit} (plausible {lo:g}..{hi:g} {spec.unit})")
    return value


def words_to_write(device: str, spec: RegisterSpec, value: float) -> list[int]:
    """The registers a write of ``value`` (SI) to ``spec`` sends: scale, type and word order applied by the
    register's own codec. ValueError for a register that cannot be written or a value it cannot hold - the
    same for every backend, so a dry run refuses what the wire would."""
    if spec.table != "holding":
        raise ValueError(f"{device}: {spec.name} is in the {spec.table} table and cannot be written")
    return spec.encode(value)


def _count_check(count: int) -> Callable[[Any], str | None]:
    """The reply check of a register read: the reply carries ``count`` registers."""

    def check(rr) -> str | None:
        n = len(getattr(rr, "registers", None) or [])
        return None if n == count else f"{n} registers instead of {count}"

    return check


def _mismatch(rr, device_id: int, fc: int, check) -> str | None:
    """What in reply ``rr`` does not answer a request with function ``fc`` to ``device_id`` (None: all)."""
    dev = getattr(rr, "dev_id", device_id)
    if dev != device_id:
        return f"device id {dev} instead of {device_id}"
    got = int(getattr(rr, "function_code", -1))
    if rr.isError():
        return None if got == fc | 0x80 else f"exception for function {got & 0x7F} instead of {fc}"
    if got != fc:
        return f"function {got} instead of {fc}"
    return check(rr)
