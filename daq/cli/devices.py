"""``hil devices CONFIG``: connect, identify and read every device of a config; nothing is written."""

from __future__ import annotations

import asyncio
import math
import sys

import click

from daq.cli.common import echo_json
from daq.rigs import check_rules
from daq.rigs.config import load

_PREFIXES = ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "u"), (1e-9, "n"))
_SI = {"m", "N", "Pa", "s", "N*m", "rad/s", "V", "A"}


def si(value: float | None, unit: str) -> str:
    """``0.0000152 m`` -> ``15.2 um``: SI prefixes for the units people read at a glance."""
    unit = "" if unit == "1" else unit  # a count or a status word
    if value is None or not math.isfinite(value):
        return f"{value} {unit}".strip()
    if unit not in _SI or value == 0:
        return f"{value:.4g} {unit}".strip()
    for factor, prefix in _PREFIXES:
        if abs(value) >= factor * 0.9995:
            return f"{value / factor:.4g} {prefix}{unit}"
    return f"{value / 1e-9:.4g} n{unit}"


@click.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--reads", type=click.IntRange(1, 10000), default=10, show_default=True,
              help="Reads of every channel (median, spread and latency come from them).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per config on stdout.")
def devices(config_path: str, reads: int, as_json: bool) -> None:
    """Connect to every device of CONFIG, read its identity and every channel N times, and say whether the
    values are plausible against the config's ranges and limits (and what is likely wrong if not).

    Nothing is ever written or enabled. A simulated config starts its simulated rig first, as `hil run`
    does. Exit code 0 only when every device answered plausibly."""

    rig, cfg = load(config_path)  # a config refused here has loaded neither the drivers nor the probes
    check_rules(rig, cfg, config_path)
    from daq.commission.probe import probe_config  # lazy: the drivers and the rig kinds
    reports = asyncio.run(probe_config(rig, cfg, reads))
    ok = all(r.ok for r in reports)
    if as_json:
        echo_json({"config": config_path, "kind": rig.kind, "reads": reads, "ok": ok,
                   "devices": [r.to_dict() for r in reports]})
    else:
        for rep in reports:
            _print_device(rep)
    if not ok:
        sys.exit(1)


def _print_device(rep) -> None:
    if rep.error and not rep.channels and not rep.identity:
        click.echo(rep.error)  # unreachable: one line naming the device and its address
        return
    shown = ("model", "model_name", "serial_number", "firmware", "revision", "id", "idn", "state")
    who = ", ".join(f"{k} {v}" for k, v in rep.identity.items() if k in shown)
    who = rep.identity.get("identity", who)  # a Modbus device without identification says so
    click.echo(f"{rep.name}  {rep.address}  {'ok' if rep.ok else 'CHECK'}" + (f"  [{who}]" if who else ""))
    if rep.error:
        click.echo(f"  ! {rep.error}")
    for ch in rep.channels:
        d = ch.to_dict()
        lat = (f"latency {1e3 * d['latency_median_s']:.1f}/{1e3 * d['latency_max_s']:.1f} ms"
               if d["latency_median_s"] is not None else "")
        spread = f"spread {si(d['spread'], ch.unit)}" if d["spread"] is not None else ""
        verdict = "ok" if ch.problem is None else f"! {ch.problem}"
        click.echo(f"  {ch.name:<14}{si(d['value'], ch.unit):>14}  {spread:<22}{lat:<26}{verdict}")
