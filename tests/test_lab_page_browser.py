"""The lab's own page in headless Chromium, on a real `hil lab serve` with two real `hil serve --lab` rigs and
a pushed session: a person signs in with their key (never in a URL), reads both rigs with their states, a
lock with its note and links to the rigs' pages, finds the session by a search and opens its page (metadata,
streams plotted in their units); no link leads into Tiled's UI."""

from __future__ import annotations

import pytest

from daq.serve.rig_status import RigLab
from tests.chromium import headless_chromium, held_answers, hold_answers, needs_chromium, release_answers
from tests.polling import poll_until
from tests.serve_fixtures import ServerThread, bearer, click
from tests.test_lab import hil, make_session, shared_lab
from tests.test_lab_people import add_key

pytest.importorskip("selenium.webdriver")
pytestmark = needs_chromium


@pytest.fixture(scope="session")
def lab(request, tmp_path_factory):
    yield from shared_lab(request, tmp_path_factory)


@pytest.fixture
def browser():
    driver = headless_chromium()
    yield driver
    driver.quit()


def text_of(page, css: str) -> str:
    from selenium.webdriver.common.by import By

    return " ".join(e.text for e in page.find_elements(By.CSS_SELECTOR, css))


def test_the_lab_page_shows_both_rigs_their_lock_and_a_sessions_page(lab, browser, tmp_path):
    import httpx
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    keys = {name: add_key(lab, name, role, tmp_path)[0]
            for name, role in (("page-vi", "viewer"), ("rig-c", "operator"), ("rig-d", "operator"),
                               ("page-op", "operator"))}
    store = tmp_path / "pushed.sqlite"
    sid = make_session(store, 2.0, seed=11, name="press-c", by="page-op")
    assert hil("--store", str(store), "lab", "push", sid, "--to", lab.url, key=lab.key).exit_code == 0
    rigs = {}
    for name in ("rig-c", "rig-d"):
        (tmp_path / name / "configs").mkdir(parents=True)
        folder = tmp_path / name
        srv = ServerThread(folder / "configs", folder / "s.sqlite", folder / "tokens")
        srv.server.lab = RigLab(lab.url, name, keys[name], every_s=1.0)
        rigs[name] = srv.start()
    try:
        locked = httpx.post(f"{rigs['rig-d'].url}/api/lock", json={"note": "bleeding the cylinder"},
                            headers=bearer(keys["page-op"]))
        assert locked.status_code == 200
        browser.get(f"{lab.url}/lab/")
        poll_until(lambda: browser.find_element(By.ID, "sign-in").is_displayed(), timeout=30)
        browser.find_element(By.ID, "key").send_keys(keys["page-vi"])
        browser.find_element(By.CSS_SELECTOR, "#sign-in button").click()
        poll_until(lambda: "page-vi (viewer)" in text_of(browser, "#me"), timeout=30)
        assert keys["page-vi"] not in browser.current_url

        def rig_rows() -> dict[str, str]:
            try:
                return {row.get_attribute("data-rig"): row.text
                        for row in browser.find_elements(By.CSS_SELECTOR, "#rigs tbody tr[data-rig]")}
            except StaleElementReferenceException:  # the table is redrawn every 5 s: read it again
                return {}

        poll_until(lambda: {"rig-c", "rig-d"} <= set(rig_rows())
                   and all(" idle " in f" {rig_rows()[n]} " for n in ("rig-c", "rig-d")), timeout=30)
        # the lock reaches the lab with rig-d's next beat (every 1 s) and the page with its next redraw (5 s):
        # both idle may show before it does
        rows: dict[str, str] = {}

        def lock_shown() -> bool:
            rows.clear()
            rows.update(rig_rows())  # one reading of the table, asserted on below
            return "locked by page-op" in rows.get("rig-d", "")

        poll_until(lock_shown, timeout=30)
        assert "locked by page-op" in rows["rig-d"] and "bleeding the cylinder" in rows["rig-d"]
        assert "locked" not in rows["rig-c"]
        links = {a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "#rigs a")}
        assert {f"{rigs[n].url}/" for n in rigs} <= links  # each rig's own hil serve page
        # a search answered after the next search was asked for (its answer held back 1.5 s in the page)
        # leaves the next search's rows: before, the older answer replaced them
        hold_answers(browser, 'path.includes("q=no-such-rig")', 1500)
        try:
            browser.find_element(By.ID, "search").send_keys("no-such-rig")
            browser.find_element(By.CSS_SELECTOR, "#search-form button").click()
            browser.find_element(By.ID, "search").clear()
            browser.find_element(By.ID, "search").send_keys("press-c")
            browser.find_element(By.CSS_SELECTOR, "#search-form button").click()
            poll_until(lambda: sid in text_of(browser, "#sessions tbody"), timeout=30)
            poll_until(lambda: held_answers(browser)["done"], timeout=20, period=0.1)
            assert sid in text_of(browser, "#sessions tbody"), text_of(browser, "#sessions tbody")
        finally:
            release_answers(browser)
        assert "page-op" in text_of(browser, "#sessions tbody")
        poll_until(lambda: click(browser, f"#sessions a[href='/lab/sessions/{sid}']"), timeout=30)
        poll_until(lambda: browser.current_url.endswith(f"/lab/sessions/{sid}"), timeout=30)
        poll_until(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#streams .plot")) >= 4
                   or text_of(browser, "#problem"), timeout=60)
        assert not text_of(browser, "#problem"), text_of(browser, "#problem")
        assert browser.current_url == f"{lab.url}/lab/sessions/{sid}"
        meta = text_of(browser, "#meta")
        assert "press-c" in meta and "page-op" in meta and "complete" in meta
        units = {p.get_attribute("data-channel"): p.get_attribute("data-unit")
                 for p in browser.find_elements(By.CSS_SELECTOR, "#streams .plot")}
        assert units["press.force force"] == "N" and units["press.force pressure"] == "Pa"
        assert units["press.sensors D_vertical"] == "m"
        ticks = text_of(browser, "#streams .plot[data-channel='press.force force'] svg text")
        assert " N" in ticks and ticks.count(" s") >= 2  # the value axis in newtons, time in seconds
        hrefs = [a.get_attribute("href") or "" for a in browser.find_elements(By.TAG_NAME, "a")]
        assert not any("/ui/" in h for h in hrefs)
        assert any(h.endswith(f"/lab/api/sessions/{sid}/streams/press.force/csv") for h in hrefs)
    finally:
        for srv in rigs.values():
            srv.stop()


def test_the_serve_pages_lock_button_locks_with_a_note_and_unlocks(browser, tmp_path):
    import httpx
    from selenium.webdriver.common.by import By

    (tmp_path / "configs").mkdir()
    srv = ServerThread(tmp_path / "configs", tmp_path / "s.sqlite", tmp_path / "tokens").start()
    try:
        browser.get(f"{srv.url}/?token={srv.token}")  # the printed link: the cookie, then the clean URL
        button = "#rig-lock button"
        poll_until(lambda: browser.find_element(By.CSS_SELECTOR, button).is_enabled(), timeout=30)
        assert "rig not locked" in text_of(browser, "#rig-lock")
        browser.find_element(By.CSS_SELECTOR, "#rig-lock input").send_keys("in the cell")
        browser.find_element(By.CSS_SELECTOR, button).click()
        poll_until(lambda: "in the cell" in text_of(browser, "#rig-lock"), timeout=30)
        held = httpx.get(f"{srv.url}/api/lock").json()
        assert held["locked"] and held["note"] == "in the cell"
        assert f"locked by {held['by']}" in text_of(browser, "#rig-lock")
        assert browser.find_element(By.CSS_SELECTOR, button).text == "unlock"
        # a look at the lock asked before the unlock and answered after it (held back 1.5 s in the page) must
        # not show the rig locked again: before, it did until the next look, 5 s later
        hold_answers(browser, 'method === "GET" && path === "/api/lock"', 1500)
        browser.execute_script("refreshLock()")
        try:
            browser.find_element(By.CSS_SELECTOR, button).click()
            poll_until(lambda: "rig not locked" in text_of(browser, "#rig-lock"), timeout=30)
            poll_until(lambda: held_answers(browser)["done"], timeout=20, period=0.1)
            assert "rig not locked" in text_of(browser, "#rig-lock"), text_of(browser, "#rig-lock")
        finally:
            release_answers(browser)
        assert httpx.get(f"{srv.url}/api/lock").json()["locked"] is False
    finally:
        srv.stop()
