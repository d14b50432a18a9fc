"""The dashboard as a lab engineer reads it, in headless Chromium (issue 33 items 7-10): numbers with SI
prefixes, one time window for all plots, gaps as gaps, the decimation envelope with its note; controls
enabled by the run's state; a reload mid-run rebuilds the run so far from the store; a finished run keeps a
page of its own (outcome, safe state, who, estimates with units, plots, downloads, config) linked from
"Last runs", also after the next run; a failed run's reason in words; no token in any URL of the page.
One server and one browser serve the module; the finished run's page is saved as a screenshot in the test's
folder (never into the clone, which may be read-only; `HIL_DOCS_SCREENSHOT=1` copies it to
docs/hil-serve-run.png when the docs' picture is to be renewed)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import httpx
import pytest

from daq.serve.series import buckets_of
from tests.chromium import headless_chromium, held_answers, hold_answers, needs_chromium, release_answers
from tests.chromium import shown_text as text_of
from tests.polling import poll_until
from tests.serve_fixtures import (
    ServedBeacon,
    click,
    served_with_a_failing_config,
)

pytest.importorskip("selenium.webdriver")
pytestmark = needs_chromium
DOCS_SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "hil-serve-run.png"
# 30 samples per 20 ms frame (1.5 kHz) of micrometre-sized values: decimated for display, shown in µm
RIG = ServedBeacon("beacon-pages", samples=30, channels=2, period=0.02, estimate_every=10, scale=1e-5)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    yield from served_with_a_failing_config(tmp_path_factory.mktemp("pages"), RIG, "beacon.toml")


@pytest.fixture(scope="module")
def page(srv):
    driver = headless_chromium()
    driver.get(f"{srv.url}/?token={srv.token}")  # the printed link: a cookie, then the clean URL
    poll_until(lambda: driver.execute_script("return window.hilStats.connected && window.hilStats.role"),
               timeout=20, period=0.1)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def http(srv):
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {srv.token}"}, timeout=30) as c:
        yield c


def stats(page) -> dict:
    return page.execute_script("return window.hilStats")


def test_signed_in_by_a_cookie_with_no_token_in_the_address_and_numbers_with_si_prefixes(srv, page):
    from selenium.webdriver.common.by import By

    assert page.current_url == f"{srv.url}/" and stats(page)["role"] == "operator"
    assert page.find_element(By.ID, "estimates").text == "no run in progress"  # not "none yet"
    assert page.execute_script("return document.cookie") == ""  # HttpOnly: no script reads the token
    shown = page.execute_script(
        "return [si(206959000, 'N/m'), si(1.2e-5, 'm'), si(0.25, '1'), si(2e-6, 'kg'), "
        "siTicks('m')(null, [-2e-5, 0, 2e-5]), fmtDuration(75)]")
    assert shown == ["206.96 MN/m", "12 µm", "0.25", "2 mg", ["-20 µm", "0 µm", "20 µm"], "1 min 15 s"]


def test_gaps_stay_gaps_and_one_zoom_sets_the_window_of_every_plot(page):
    gap_row = page.execute_script("""
        const g = new PlotGroup('probe'), box = document.createElement('div');
        document.body.appendChild(box);
        const a = new StreamPlot(g, box, 'a', ['x'], ['m'], 400);
        const b = new StreamPlot(g, box, 'b', ['y'], ['N'], 400);
        a.push([100, 100.01, 100.02, 100.03], [[1, 2, 3, 4]]);
        a.push([103, 103.01], [[5, 6]]);            // 3 s later: a new measurement window
        b.push([101, 101.5], [[7, 8]]);
        a.redraw(); b.redraw();
        window.probe = {g, box, a, b};
        return a.view()[1].indexOf(null);""")
    scales = ("const {a, b} = window.probe; "
              "return [a, b].flatMap((p) => [p.plot.scales.x.min, p.plot.scales.x.max]);")
    poll_until(lambda: page.execute_script(scales)[0] is not None, timeout=5, period=0.05)
    before = page.execute_script(scales)
    page.execute_script("window.probe.g.setZoom([1, 2]);")
    poll_until(lambda: page.execute_script(scales)[0] == 1, timeout=5, period=0.05)
    zoomed = page.execute_script(scales)
    page.execute_script("window.probe.g.clear(); window.probe.box.remove();")
    assert gap_row == 4  # a null between the windows: the line breaks there
    assert before == pytest.approx([0, 3.01, 0, 3.01])  # one window for both plots (s since the first sample)
    assert zoomed == pytest.approx([1, 2, 1, 2])


def frame_samples(http, session: str) -> dict[str, int]:
    """Samples stored so far per frame stream of a session."""
    streams = http.get(f"/api/sessions/{session}").json()["streams"]
    return {name: s["n_samples"] for name, s in streams.items() if s["type"] == "frame"}


def button(page, action):
    from selenium.webdriver.common.by import By
    return page.find_element(By.ID, f"btn-{action}")


@pytest.mark.slow(reason="a live run watched, paused, reloaded and stopped in Chromium (~30 s)")
def test_controls_follow_the_state_and_a_reload_mid_run_rebuilds_the_run_from_the_store(srv, page, http):
    from selenium.webdriver.common.by import By

    assert all(not button(page, a).is_enabled() for a in ("pause", "resume", "stop", "abort"))
    run = http.post("/api/runs", json={"config": "beacon.toml"}).json()
    poll_until(lambda: (http.get(f"/api/runs/{run['id']}").json().get("session") and
                        stats(page)["points"] > 2000), timeout=30, period=0.1)
    poll_until(lambda: button(page, "pause").is_enabled(), timeout=10, period=0.1)
    assert not button(page, "resume").is_enabled() and button(page, "stop").is_enabled()
    note = page.find_element(By.CSS_SELECTOR, "#plots .plot[data-decimated='1'] .note")
    assert "decimated for display" in note.text and "min–max" in note.text
    assert "µm" in page.find_element(By.ID, "plots").text  # the legend's values in micrometres
    button(page, "pause").click()
    poll_until(lambda: button(page, "resume").is_enabled() and not button(page, "pause").is_enabled(),
               timeout=10, period=0.1)
    button(page, "resume").click()
    poll_until(lambda: button(page, "pause").is_enabled(), timeout=10, period=0.1)
    session = http.get(f"/api/runs/{run['id']}").json()["session"]
    before = frame_samples(http, session)
    page.refresh()
    poll_until(lambda: stats(page)["rebuilt"] > 0 and not stats(page)["rebuilding"], timeout=20, period=0.1)
    after = frame_samples(http, session)
    # the run so far, not only what came since: every sample stored before the reload is in a bucket of the
    # rebuilt plots (the store sends whole buckets of buckets_of(n, 4000) samples; n grew meanwhile, so the
    # buckets are at most as large as they are for `after`)
    least = sum(before[s] / buckets_of(after[s], 4000) for s in before)
    assert stats(page)["rebuilt"] >= 0.95 * least and least > 1000
    progress = page.find_element(By.ID, "run-progress-text").text
    assert "since the start" in progress
    button(page, "stop").click()
    poll_until(lambda: http.get(f"/api/runs/{run['id']}").json()["status"] == "aborted",
               timeout=30, period=0.05)
    poll_until(lambda: not button(page, "abort").is_enabled(), timeout=10, period=0.1)
    srv.finished = run["id"]



@pytest.mark.slow(reason="the finished run's page in Chromium, then a failed run (~15 s)")
def test_a_finished_runs_page_keeps_its_results_and_a_failed_run_says_why(srv, page, http, tmp_path):
    from selenium.webdriver.common.by import By

    if not hasattr(srv, "finished"):  # run alone (or after the previous test failed): a run of its own
        run = http.post("/api/runs", json={"config": "beacon.toml"}).json()
        poll_until(lambda: http.get(f"/api/runs/{run['id']}").json()["status"] == "running",
                   timeout=30, period=0.05)
        poll_until(lambda: button(page, "stop").is_enabled(), timeout=10, period=0.1)
        button(page, "stop").click()
        poll_until(lambda: http.get(f"/api/runs/{run['id']}").json()["status"] == "aborted",
                   timeout=30, period=0.05)
        srv.finished = run["id"]
    link = f"#finished a[href='#/runs/{srv.finished}']"
    poll_until(lambda: click(page, link), timeout=10, period=0.2)
    poll_until(lambda: page.find_element(By.ID, "page-body").get_attribute("data-ready") == "1", timeout=20,
               period=0.1)
    body = page.find_element(By.ID, "page")
    assert "stopped by " in body.text and "safe state confirmed" in body.text  # an operator's stop, in words
    assert "started by " in body.text and "stop by token " in body.text  # who, and which command
    rows = page.find_elements(By.CSS_SELECTOR, "#page-estimates table.estimates tbody tr")
    assert len(rows) == 2 and " m" in rows[1].text  # offset [m] with its unit, std too
    axes = json.loads(page.find_element(By.CSS_SELECTOR, "#page-estimates canvas.ellipse")
                      .get_attribute("data-axes"))  # the ellipse on labelled axes with SI ticks
    assert axes["xLabel"] == "gain" and axes["yLabel"].endswith("y: offset [m]")
    assert len(axes["x"]) == 3 and all(re.fullmatch(r"-?[\d.]+ [nµmk]?m", t) for t in axes["y"]), axes
    assert "kept beacon" in page.find_element(By.ID, "page-estimates").text  # the verdict
    assert len(page.find_elements(By.CSS_SELECTOR, "#page-plots .plot")) == 1
    assert "beacon.x" in page.find_element(By.ID, "page-plots").text
    assert "hdf5" in body.text and '"kind"' in page.find_element(By.CSS_SELECTOR, "pre.config").text
    urls = page.execute_script("return [...document.querySelectorAll('[href],[src]')]"
                               ".map(e => e.href || e.src)")
    assert urls and not [u for u in urls if "token" in u]  # no token in any link of the page
    poll_until(lambda: page.find_elements(By.CSS_SELECTOR, "#page-analysis button"), timeout=10, period=0.2)
    page.set_window_size(1400, 2300)  # the whole page: outcome, estimates, plots, analysis, downloads
    screenshot = tmp_path / "hil-serve-run.png"
    page.save_screenshot(str(screenshot))
    page.set_window_size(1400, 1000)
    assert screenshot.stat().st_size > 20_000
    if os.environ.get("HIL_DOCS_SCREENSHOT") == "1":
        shutil.copyfile(screenshot, DOCS_SCREENSHOT)
    # the next run (refused: its device is unreachable) leaves this page as it is, and says why it failed
    failed = http.post("/api/runs", json={"config": "unreachable.toml"}).json()
    poll_until(lambda: http.get(f"/api/runs/{failed['id']}").json()["status"] == "failed",
               timeout=30, period=0.05)
    assert "stopped by " in page.find_element(By.ID, "page").text
    why = "lamp at 127.0.0.1:9 refused the connection"
    poll_until(lambda: why in page.find_element(By.ID, "finished").text, timeout=10, period=0.2)
    page.get(f"{srv.url}/#/runs/{failed['id']}")
    poll_until(lambda: page.find_element(By.ID, "page-body").get_attribute("data-ready") == "1", timeout=20,
               period=0.1)
    assert why in page.find_element(By.ID, "page-outcome").text
    # a page answered after the next page was asked for leaves the next one as it is: the finished run's
    # page, asked for first, is answered 1.5 s late (held back in the page), the failed run's at once
    hold_answers(page, f"path === {json.dumps(f'/api/runs/{srv.finished}')}", 1500)
    try:
        page.execute_script("location.hash = arguments[0]", f"#/runs/{srv.finished}")
        poll_until(lambda: text_of(page, "#page-title") == f"run {srv.finished}", timeout=10, period=0.05)
        page.execute_script("location.hash = arguments[0]", f"#/runs/{failed['id']}")
        poll_until(lambda: page.find_element(By.ID, "page-body").get_attribute("data-ready") == "1"
                   and why in text_of(page, "#page-outcome"), timeout=20, period=0.1)
        poll_until(lambda: held_answers(page)["done"], timeout=20, period=0.1)
        assert text_of(page, "#page-title").startswith(f"run {failed['id']}:"), text_of(page, "#page-title")
        assert why in text_of(page, "#page-outcome") and "stopped by " not in text_of(page, "#page")
    finally:
        release_answers(page)
