"""Headless Chromium for the browser tests: Debian's chromium and chromium-driver (the README's second command
installs them), one way to start it, and the skip mark for a machine without them."""

from __future__ import annotations

import shutil

import pytest

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                    reason="needs Debian's chromium and chromium-driver (apt-get install)")


def headless_chromium(width: int = 1400, height: int = 1000):
    """A headless Chromium driven by the installed chromedriver (selenium downloads nothing)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def shown_text(page, css: str) -> str:
    """What the element ``css`` shows, read in one step ('' when there is none): pages redraw their tables."""
    return page.execute_script(f"const e = document.querySelector({css!r}); return e ? e.innerText : ''")


def hold_answers(page, when: str, ms: int) -> None:
    """Hold back, by ``ms``, the answers to the page's own ``api(method, path, body)`` calls for which the JS
    expression ``when`` (over ``method`` and ``path``) is true: each request goes out at once, its answer
    arrives late - the race of a page that asked twice. ``held_answers`` counts them; ``release_answers``
    puts ``api`` back."""
    page.execute_script(f"""
      window.heldApi = {{real: api, asked: 0, done: 0}};
      api = (method, path, body) => !({when}) ? heldApi.real(method, path, body)
        : (heldApi.asked++, heldApi.real(method, path, body))
            .then((v) => new Promise((r) => setTimeout(() => r(v), {int(ms)})))
            .finally(() => setTimeout(() => {{ heldApi.done++; }}, 200));""")


def held_answers(page) -> dict:
    """{"asked": requests held back so far, "done": their answers given (and 0.2 s past)}."""
    return page.execute_script("return {asked: window.heldApi.asked, done: window.heldApi.done}")


def release_answers(page) -> None:
    page.execute_script("if (window.heldApi) api = window.heldApi.real")
