"""A session's analysis on `hil serve`'s page (issue 42): the estimates carry their units with SI prefixes
("c2 = 1099.97 +- 0.028" had none) - the real oscillator simulator run from the page's server, analysed by
`hil analyze` in a process of its own, read in headless Chromium; the plot files are the session's."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from daq.cli.main import main
from daq.rigs.config import load_config
from tests.chromium import headless_chromium, needs_chromium
from tests.polling import poll_until
from tests.serve_fixtures import ServerThread, bearer, click

sys.path.insert(0, str(Path(__file__).parent))
from test_rig_kit import _to_toml  # noqa: E402

pytest.importorskip("selenium.webdriver")
pytestmark = needs_chromium


def _oscillator(folder: Path) -> None:
    """configs/oscillator-sim.toml with a coarse design (the chain, not the optimum) written beside it."""
    cfg = load_config("configs/oscillator-sim.toml")
    cfg.pop("store", None)
    cfg["adjoint"].update(max_iter=40, rounds=2)
    cfg["simulator"]["speed"] = 10.0
    cfg["plan"].update(trajectory=str(folder / "design" / "trajectory.csv"), design_if_missing=False)
    path = folder / "configs" / "oscillator.toml"
    path.parent.mkdir()
    path.write_text(_to_toml(cfg))
    res = CliRunner().invoke(main, ["design", "adjoint", str(path)])
    assert res.exit_code == 0, res.output


@pytest.mark.slow(reason="an adjoint design, a simulated OPC UA run and its analysis in Chromium (~60 s)")
def test_the_analysis_shows_its_estimates_with_units_and_its_plots_are_the_sessions(tmp_path):
    _oscillator(tmp_path)
    served = ServerThread(tmp_path / "configs", tmp_path / "s.sqlite", tmp_path / "tokens").start()
    page = headless_chromium()
    try:
        with httpx.Client(base_url=served.url, headers=bearer(served.token), timeout=30) as http:
            run = http.post("/api/runs", json={"config": "oscillator.toml"}).json()
            ended = ("complete", "aborted", "failed")
            poll_until(lambda: http.get(f"/api/runs/{run['id']}").json()["status"] in ended, timeout=120,
                       period=0.5)
            done = http.get(f"/api/runs/{run['id']}").json()
            assert done["status"] == "complete", done
            session = done["session"]
        page.get(f"{served.url}/?token={served.token}")
        poll_until(lambda: page.execute_script("return window.hilStats.role"), timeout=20, period=0.1)
        page.get(f"{served.url}/#/sessions/{session}")
        poll_until(lambda: click(page, "#page-analysis button:enabled"), timeout=20, period=0.2)
        rows = "#page-analysis table.analysis-estimates tbody tr"
        poll_until(lambda: page.execute_script(f"return document.querySelectorAll({rows!r}).length"),
                   timeout=180, period=0.5)
        shown = page.execute_script(f"return [...document.querySelectorAll({rows!r})]"
                                    ".map((r) => r.innerText)")
        c2 = next(r for r in shown if r.startswith("c2"))
        # c2 about 1.1 kN/m, its interval in kN/m too
        assert re.fullmatch(r"c2\s+1\.\d+ kN/m\s+\[1\.\d+ kN/m, 1\.\d+ kN/m\]", c2), shown
        plots = page.execute_script("return [...document.querySelectorAll('#page-analysis img')]"
                                    ".map((i) => i.alt)")
        assert plots == [f"{session}-fit.png"]  # the session's own plot file
    finally:
        page.quit()
        served.stop()
