"""Every safe action fits the guard: the guard's time comes from the actions' declared budgets, and no step's
budget is shorter than what its driver itself may take for that step (so nothing outside the driver cuts a
step that the driver would still finish or fail by itself).

Checked for each driver with a safe action, with its default settings and with the settings of every shipped
config (configs/*.toml); and over the source: every driver class with a ``safe_state`` offers the typed
``safe_action`` (drivers/safe_state.py) and reports failure by raising, never by a return value.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from daq.run.safety import SafeStateGuard
from drivers.force_source import ForceSource
from drivers.modal_frontend import ModalFrontEnd
from drivers.safe_state import SafeAction
from drivers.servo_drive import ServoDrive
from tests.site_values import crane_site_values, fill_site_values, press_site_values, site_keys

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.toml"))
FS_REGISTERS = tomllib.loads((ROOT / "configs" / "press-sim.toml").read_text())["devices"]["force_source"][
    "registers"]


def _force_source(table: dict) -> tuple[SafeAction, list[float]]:
    """The action and, per step, the longest its requests may take by the transport's own bounds."""
    fs = ForceSource(table)
    one = fs.transport.request_bound
    return fs.safe_action(), [one, one, 2 * one]  # setpoint write, enable write, status (two reads)


def _drive(table: dict) -> tuple[SafeAction, list[float]]:
    drive = ServoDrive(table)
    return drive.safe_action(), [drive.request_bound] * 3  # stop, disable, read-back: one request each


def _frontend(table: dict) -> tuple[SafeAction, list[float]]:
    fe = ModalFrontEnd(table)
    return fe.safe_action(), [2 * fe.timeout] * 2  # a fresh stream (timeout), then the answer (timeout)


#: [devices] key -> how its driver's safe action and the driver's own step bounds are made
DRIVERS: dict[str, Callable[[dict], tuple[SafeAction, list[float]]]] = {
    "force_source": _force_source, "drive": _drive, "frontend": _frontend}
DEFAULTS: dict[str, dict[str, Any]] = {
    "force_source": {"f_max": 20000.0, "registers": FS_REGISTERS},
    "drive": {"url": "opc.tcp://127.0.0.1:4840/hil/crane"},
    "frontend": {"port": 5025},
}


def _shipped() -> list[tuple[str, str, dict]]:
    found = []
    for path in CONFIGS:
        text = path.read_text()
        if site_keys(text):  # a real rig's template: with its site values filled in as a site would
            site = {"press.toml": lambda: press_site_values(502),
                    "crane.toml": lambda: crane_site_values("opc.tcp://127.0.0.1:4840/hil/crane")}[path.name]()
            text = fill_site_values(text, site)
        devices = tomllib.loads(text).get("devices", {})
        found += [(path.name, key, devices[key]) for key in DRIVERS if key in devices]
    return found


SHIPPED = _shipped()


def test_every_safe_driver_kind_appears_in_a_shipped_config():
    assert {key for _, key, _ in SHIPPED} == set(DRIVERS)


@pytest.mark.parametrize(("where", "key", "table"),
                         [("defaults", key, table) for key, table in DEFAULTS.items()] + SHIPPED,
                         ids=lambda v: v if isinstance(v, str) else "")
def test_the_safe_action_fits_the_guard(where, key, table):
    action, bounds = DRIVERS[key](table)
    assert len(action.steps) == len(bounds)
    for step, bound in zip(action.steps, bounds, strict=True):
        assert step.budget >= bound, f"{where}: {key} step {step.name!r} is cut before its driver gives up"
    assert action.budget == pytest.approx(sum(step.budget for step in action.steps))
    guard = SafeStateGuard([(key, action)])
    assert guard.attempt_time(action) > action.budget  # the guard never cuts an attempt the steps may use
    assert guard.budget >= guard.attempts * action.budget


@pytest.mark.parametrize("key", list(DRIVERS))
def test_the_guard_has_no_constant_a_slow_link_could_exceed(key):
    """Ten times slower link settings: the steps' budgets grow and the guard's time grows with them."""
    slow = {k: v * 10 for k, v in {"timeout": 5.0, "connect_timeout": 30.0}.items()}
    if key == "frontend":
        slow = {"timeout": 50.0}
    base, _ = DRIVERS[key](DEFAULTS[key])
    action, bounds = DRIVERS[key]({**DEFAULTS[key], **slow})
    assert action.budget > 5 * base.budget
    assert all(s.budget >= b for s, b in zip(action.steps, bounds, strict=True))
    assert SafeStateGuard([(key, action)]).attempt_time(action) > action.budget


def _classes_with_safe_state() -> list[tuple[str, ast.ClassDef]]:
    found = []
    for path in sorted((ROOT / "drivers").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(f, ast.AsyncFunctionDef) and f.name == "safe_state" for f in node.body):
                found.append((path.name, node))
    return found


def test_every_driver_with_a_safe_state_offers_the_typed_action_and_raises_on_failure():
    classes = _classes_with_safe_state()
    assert {name for name, _ in classes} == {"force_source.py", "servo_drive.py", "modal_frontend.py"}
    for name, cls in classes:
        funcs = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
        assert "safe_action" in funcs, f"{name}: {cls.name} has safe_state but no safe_action"
        assert ast.unparse(funcs["safe_action"].returns) == "SafeAction", name
        returns = funcs["safe_state"].returns
        assert returns is not None and ast.unparse(returns) == "None", (
            f"{name}: {cls.name}.safe_state must return None and raise on failure (no True/False)")
