"""`hil run`, `hil analyze` and `hil sim` as a user calls them (real rigs on loopback, real store files)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from daq.cli.main import main

PRESS_SIM = Path("configs/press-sim.toml").read_text()


def short_press_config(tmp_path: Path, n_series: int = 2, n_steps_up: int = 2) -> Path:
    """The shipped simulated press config with a short plan."""
    text = re.sub(r"(?m)^n_series = \d+", f"n_series = {n_series}", PRESS_SIM)
    text = re.sub(r"(?m)^n_steps_up = \d+", f"n_steps_up = {n_steps_up}", text)
    text = re.sub(r"(?m)^n_samples = \d+", "n_samples = 4", text)
    text = re.sub(r"(?m)^q_max = 20000.0(\s+# N, top)", r"q_max = 8000.0\1", text)
    path = tmp_path / "press-short.toml"
    path.write_text(text)
    return path


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_run_refuses_too_few_series_up_front_and_records_a_short_session(tmp_path):
    store = str(tmp_path / "s.sqlite")
    res = invoke("--store", store, "run", str(short_press_config(tmp_path, n_series=2)), "--no-progress")
    assert res.exit_code == 1  # the analysis needs 3 series: refused before any device is touched
    assert "[plan].n_series" in res.output and "at least 3" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1 and not Path(store).exists()
    cfg = short_press_config(tmp_path, n_series=3, n_steps_up=1)
    res = invoke("--store", store, "run", str(cfg), "--no-progress", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["run"]["status"] == "complete" and out["run"]["summary"]["setpoints"] == 3 * 3
    sid = out["run"]["session_id"]
    shown = json.loads(invoke("--store", store, "show", sid, "--json").output)
    assert shown["status"] == "complete" and shown["kind"] == "press"


@pytest.mark.parametrize("content, message", [
    ("[rig]\nkind = 'lathe'\n", "unknown rig kind"),
    ("[rig\nkind = 'press'\n", "invalid TOML"),
])
def test_run_with_a_malformed_config_is_one_clear_line(tmp_path, content, message):
    bad = tmp_path / "bad.toml"
    bad.write_text(content)
    res = invoke("--store", str(tmp_path / "s.sqlite"), "run", str(bad))
    assert res.exit_code == 1
    assert message in res.output and "Traceback" not in res.output
    assert not (tmp_path / "s.sqlite").exists()  # nothing was recorded


def test_run_with_a_missing_config_and_unknown_session(tmp_path):
    res = invoke("--store", str(tmp_path / "s.sqlite"), "run", str(tmp_path / "nope.toml"))
    assert res.exit_code == 1 and "file not found" in res.output
    invoke("--store", str(tmp_path / "s.sqlite"), "sessions")
    res = invoke("--store", str(tmp_path / "s.sqlite"), "analyze", "abc123")
    assert res.exit_code == 1 and "Traceback" not in res.output


def _started_from_a_background_shell() -> None:
    """What a non-interactive shell does to a job it starts with `&`: SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_sim_press_serves_until_ctrl_c_or_sigterm(tmp_path, stop_signal):
    """`hil sim press` prints each device (protocol, address, unit id, register map), the devices answer,
    Ctrl-C or SIGTERM ends it cleanly - also when it was started with SIGINT ignored (from a script's
    background job: before, Ctrl-C then never stopped it, and SIGTERM killed it without powering off)."""
    import asyncio

    from drivers.force_source import ForceSource

    hil = Path(sys.executable).parent / "hil"  # the installed console script
    proc = subprocess.Popen([str(hil), "sim", "press", "configs/press-sim.toml"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=_started_from_a_background_shell)
    try:
        endpoint = None
        deadline = time.monotonic() + 30
        lines = []
        while time.monotonic() < deadline and endpoint is None:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"device=force_source .*address=127\.0\.0\.1:(\d+)", line)
            if m:
                endpoint = int(m.group(1))
        assert endpoint, "".join(lines)
        cfg = dict(__import__("tomllib").loads(PRESS_SIM)["devices"]["force_source"], port=endpoint)

        async def talk() -> float:
            async with ForceSource(cfg) as source:
                return await source.read_pressure()

        assert asyncio.run(talk()) > 1e5  # supply pressure in Pa
        proc.send_signal(stop_signal)
        proc.wait(timeout=30)
        rest = proc.stdout.read()
        assert proc.returncode == 0 and rest.rstrip().endswith("stopped") and "Traceback" not in rest, rest
    finally:
        if proc.poll() is None:
            proc.kill()


def test_hil_run_drives_the_rig_with_one_blas_thread(tmp_path):
    """`hil run`'s process keeps BLAS on one thread, also in a library it loads later (scipy's): a
    multi-threaded OpenBLAS spins its idle threads after every small product, and with numpy 1.26 (the
    lowest declared) a simulated press run spent 10 of its 15 s in system time, its force polls falling to
    35 of 200 per second on a loaded 2-core PC (daq.cli.common.rig_process)."""
    code = ("import sys, threadpoolctl\n"
            "from daq.cli.main import main\n"
            "main.main(sys.argv[1:], standalone_mode=False)\n"
            "import scipy.linalg  # noqa: F401 - its own OpenBLAS, loaded after the run\n"
            "print('BLAS threads', sorted({i['num_threads'] for i in threadpoolctl.threadpool_info()\n"
            "                              if i['user_api'] == 'blas'}))\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}  # the product's own setting
    out = subprocess.run([sys.executable, "-c", code, "--store", str(tmp_path / "s.sqlite"), "run",
                          str(short_press_config(tmp_path, n_series=3)), "--no-progress", "--sim-speed", "5"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and " complete " in out.stdout, out.stdout + out.stderr
    assert "BLAS threads [1]" in out.stdout, out.stdout
