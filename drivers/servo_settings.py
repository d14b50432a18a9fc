"""The servo drive's settings table (``[devices.drive]``): types, defaults, ranges and the security rules,
written once; the driver (:mod:`drivers.servo_drive`) and the rig schemas use this struct as it is."""

from __future__ import annotations

import difflib
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from drivers.settings import Interval, InvalidSetting, PathStr, Settings, Timeout

NODE_DEFAULTS = {
    "object": "Axis1", "enabled": "Axis1.Enabled", "mode": "Axis1.Mode", "state": "Axis1.State",
    "status": "Axis1.Status", "fault_code": "Axis1.FaultCode", "torque_setpoint": "Axis1.TorqueSetpoint",
    "actual_speed": "Axis1.ActualSpeed", "actual_torque": "Axis1.ActualTorque",
    "torque_limit": "Axis1.TorqueLimit", "speed_limit": "Axis1.SpeedLimit", "heartbeat": "Axis1.Heartbeat",
    "model": "Axis1.Model", "serial_number": "Axis1.SerialNumber", "firmware": "Axis1.Firmware",
    "load_trajectory": "Axis1.LoadTrajectory", "start": "Axis1.Start", "stop": "Axis1.Stop",
    "read_trace": "Axis1.ReadTrace", "clear_fault": "Axis1.ClearFault", "enable": "Axis1.Enable",
    "disable": "Axis1.Disable",
}


class DriveSecurity(Settings, kw_only=True):
    """``[devices.drive.security]``: Basic256Sha256 SignAndEncrypt with our certificate and key, the
    server's certificate pinned (``server_certificate``) or trusted (``server_trust_dir``), and an optional
    user whose password is given or read from the variable ``password_env``. The client's application URI
    is the one in ``certificate`` (servers refuse a client whose URI differs from its certificate)."""

    mode: Literal["none", "Basic256Sha256_SignAndEncrypt"] = "none"
    certificate: PathStr | None = None
    private_key: PathStr | None = None
    server_certificate: PathStr | None = None
    server_trust_dir: PathStr | None = None
    user: str | None = None
    password: str | None = None
    password_env: str | None = None

    def check(self) -> None:
        if self.mode != "none":
            for key in ("certificate", "private_key"):
                if not getattr(self, key):
                    raise InvalidSetting(key, f"required with mode = {self.mode!r}")
            if not (self.server_certificate or self.server_trust_dir):
                raise InvalidSetting("server_certificate",
                                     "a secure endpoint needs the server's certificate pinned "
                                     "(server_certificate) or trusted (server_trust_dir); an unverified "
                                     "server would be sent the password")
        if self.user and self.password is None and not self.password_env:
            raise InvalidSetting("user", f"{self.user!r} needs a password: set password_env (the variable "
                                         "that holds it) or password")


class ServoDriveConfig(Settings, kw_only=True):
    """``[devices.drive]``: for the oscillator and the pendulum ``torque_limit`` is the force limit in N."""

    url: str
    name: str = "crane-drive"
    namespace: str = "urn:hil-lab:crane-drive"
    torque_limit: Annotated[float, Meta(gt=0, le=1e5)] = 20.0   # N*m (N), checked before upload
    speed_limit: Annotated[float, Meta(gt=0, le=1e4)] = 150.0   # rad/s (m/s)
    max_samples: Annotated[int, Meta(ge=2, le=10**8)] = 100_000
    timeout: Annotated[float, Meta(gt=0, le=60.0)] = 4.0        # s per OPC UA request
    connect_timeout: Timeout = 10.0
    heartbeat_interval: Interval = 0.2
    run_timeout_margin: Annotated[float, Meta(ge=0, le=600.0)] = 5.0  # s beyond a trajectory's duration
    security: DriveSecurity = msgspec.field(default_factory=DriveSecurity)
    nodes: dict[str, Annotated[str, Meta(min_length=1)]] = msgspec.field(default_factory=dict)
    expect: dict[str, str] = msgspec.field(default_factory=dict)   # identity the drive must answer with

    def check(self) -> None:
        if not self.url.startswith("opc.tcp://"):
            raise InvalidSetting("url", f"must start with opc.tcp://, got {self.url!r}")
        for name in self.nodes:
            if name not in NODE_DEFAULTS:
                raise InvalidSetting(f"nodes.{name}", "unknown node" + _suggest(name, list(NODE_DEFAULTS)))
        for key in self.expect:
            if key not in IDENTITY_KEYS:
                raise InvalidSetting(f"expect.{key}", f"not an identity the drive reports (known: "
                                                      f"{', '.join(IDENTITY_KEYS)})")
        if self.heartbeat_interval >= self.timeout:
            raise InvalidSetting("heartbeat_interval", f"{self.heartbeat_interval} s is not below timeout "
                                                       f"({self.timeout} s): the drive's watchdog would trip")


#: what the drive says about itself (nodes read by :meth:`ServoDrive.device_identity`)
IDENTITY_KEYS = ("model", "serial_number", "firmware")


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(sorted(choices))})"
