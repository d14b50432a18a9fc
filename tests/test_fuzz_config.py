"""Hypothesis fuzzing of rig configs: any edit of a shipped config either parses or is one ConfigError."""

from __future__ import annotations

import copy
import tomllib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daq.config.load import ConfigError, read_toml
from daq.rigs import parse_config
from tests.site_values import CONFIGS as FOLDER
from tests.site_values import crane_site_values, fill_site_values, press_site_values

#: the simulated rigs as shipped; the real rigs' templates filled in as a site would (on loopback)
CONFIGS = {
    **{name: read_toml(f"configs/{name}.toml") for name in ("press-sim", "crane-sim")},
    "press": tomllib.loads(fill_site_values((FOLDER / "press.toml").read_text(), press_site_values(15020))),
    "crane": tomllib.loads(fill_site_values((FOLDER / "crane.toml").read_text(),
                                            crane_site_values("opc.tcp://127.0.0.1:4840/hil/crane"))),
}


#: tables whose keys are names the user chooses (sensors, registers, users), not schema keys
FREE_NAMES = {"sensors", "registers", "users"}


def _paths(node, prefix=()):
    """Every (table path, key) of a config tree."""
    for key, value in node.items():
        yield (*prefix, key)
        if isinstance(value, dict):
            yield from _paths(value, (*prefix, key))


VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.lists(st.floats(allow_nan=True), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
)


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(CONFIGS)), pick=st.integers(0, 10_000), value=VALUES,
       action=st.sampled_from(["set", "delete", "add"]))
def test_any_single_edit_parses_or_is_one_config_error(name, pick, value, action):
    cfg = copy.deepcopy(CONFIGS[name])
    paths = list(_paths(cfg))
    *tables, key = paths[pick % len(paths)]
    node = cfg
    for t in tables:
        node = node[t]
    if action == "delete":
        node.pop(key)
    elif action == "add":
        node[key + "_x"] = value
    else:
        node[key] = value
    try:
        parse_config(cfg, f"{name}.toml")
    except ConfigError as exc:
        text = str(exc)
        assert text.startswith(f"{name}.toml: ") and "\n" not in text and len(text) < 2000
    if action == "add" and not FREE_NAMES & set(tables):  # an unknown key is never accepted silently
        assert not _accepted(cfg, name), f"unknown key {key}_x accepted"


def _accepted(cfg, name) -> bool:
    try:
        parse_config(cfg, f"{name}.toml")
    except ConfigError:
        return False
    return True
