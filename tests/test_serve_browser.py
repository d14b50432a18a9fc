"""The dashboard in a real browser: headless Chromium (Debian's chromium + chromium-driver) driven by
selenium opens `hil serve`'s page during a run, sees the live plot's point count grow, the estimate table
fill and the setpoint-correction error plot (the press's events, which this beacon publishes by the same
contract) get points with units, and stops the run with its button; the run ends aborted with the safe state
recorded; then the recorded session replays on the same page. Screenshots go to the test's tmp folder."""

from __future__ import annotations

import httpx
import pytest

from daq.rigs import register, unregister
from tests.chromium import headless_chromium, needs_chromium
from tests.polling import poll_until
from tests.serve_fixtures import ServedBeacon, ServerThread, beacon_config, click

pytest.importorskip("selenium.webdriver")
pytestmark = needs_chromium


@pytest.fixture
def browser():
    driver = headless_chromium()
    yield driver
    driver.quit()


def test_dashboard_plots_live_fills_estimates_and_stops_the_run_safely(tmp_path, browser):
    from selenium.webdriver.common.by import By

    rig = register(ServedBeacon("beacon-browser", samples=20, channels=2, period=0.02, estimate_every=10,
                                corrections=True))
    configs = tmp_path / "configs"
    configs.mkdir()
    beacon_config(configs, "beacon.toml", rig.kind)
    srv = ServerThread(configs, tmp_path / "s.sqlite", tmp_path / "tokens").start()
    try:
        browser.get(f"{srv.url}/?token={srv.token}")
        stats = lambda: browser.execute_script("return window.hilStats")  # noqa: E731
        poll_until(lambda: stats()["connected"] and browser.find_elements(By.CSS_SELECTOR, "[data-run]"),
                   timeout=20, period=0.1)
        assert "token=" not in browser.current_url  # the token left the address bar (kept in the page)
        poll_until(lambda: click(browser, "[data-run='beacon.toml']"), timeout=10, period=0.1)
        poll_until(lambda: stats()["points"] > 0 and stats()["redraws"] > 0, timeout=20, period=0.1)
        first = stats()["points"]
        poll_until(lambda: stats()["points"] > first + 200, timeout=20, period=0.1)  # the plot grows
        rows = "#estimates table.estimates tbody tr"
        poll_until(lambda: len(browser.find_elements(By.CSS_SELECTOR, rows)) == 2,
                   timeout=20, period=0.1)
        poll_until(lambda: "kept beacon" in browser.find_element(By.ID, "estimates").text, timeout=10)
        legend = browser.find_element(By.ID, "plots").text
        assert "x0 [m]" in legend and "x1 [m]" in legend  # every stream with its units
        assert "force [N]" in legend
        correction = browser.find_element(By.ID, "correction")
        poll_until(lambda: int(correction.get_attribute("data-points")) >= 5, timeout=10, period=0.1)
        assert correction.is_displayed() and "error [N]" in correction.text  # the error per step, in N
        browser.save_screenshot(str(tmp_path / "dashboard-running.png"))
        poll_until(lambda: browser.find_element(By.ID, "btn-stop").is_displayed(), timeout=10)
        browser.find_element(By.ID, "btn-stop").click()
        outcome = browser.find_element(By.ID, "outcome")
        poll_until(lambda: outcome.is_displayed() and "safe state confirmed" in outcome.text, timeout=20,
                   period=0.1)
        assert outcome.text.startswith("stopped by ")  # an operator's stop in words (issue 42)
        browser.save_screenshot(str(tmp_path / "dashboard-stopped.png"))
        with httpx.Client(base_url=srv.url) as http:
            poll_until(lambda: http.get("/api/runs").json()["finished"], timeout=20, period=0.05)
            done = http.get("/api/runs").json()["finished"][0]
        assert done["status"] == "aborted" and done["safe"] is True
        assert stats()["missed"] == 0 and stats()["dropped"] == 0
        assert (tmp_path / "dashboard-running.png").stat().st_size > 10_000
        # the recorded session replays on the same page: its streams and setpoint errors again
        replay = f"[data-replay='{done['session']}']"
        before = stats()
        poll_until(lambda: click(browser, replay), timeout=20, period=0.2)
        poll_until(lambda: (stats()["replay"] or {}).get("session") == done["session"]
                   and stats()["points"] > before["points"] + 100
                   and stats()["corrections"] > before["corrections"] + 2, timeout=20, period=0.1)
        assert "x0 [m]" in browser.find_element(By.ID, "plots").text and correction.is_displayed()
        assert done["session"] in browser.find_element(By.ID, "replay-box").text
        browser.save_screenshot(str(tmp_path / "dashboard-replay.png"))
        from selenium.common.exceptions import (
            ElementClickInterceptedException,
            ElementNotInteractableException,
        )

        stop = browser.find_element(By.ID, "btn-replay-stop")
        try:  # the replay of a 20-sample session may end on its own first: the page then hides its button
            stop.click()
        except (ElementNotInteractableException, ElementClickInterceptedException):  # hidden before, or while
            # the click was on its way (CI: "not clickable at point (40, 10)" on the button, hidden="")
            box = browser.find_element(By.ID, "replay-box").text
            assert not stop.is_displayed() and "replaying" not in box, box
        poll_until(lambda: stats()["replay"] is None, timeout=20, period=0.1)
    finally:
        srv.stop()
        unregister(rig.kind)
