"""Headless Chromium for the browser tests: Debian's chromium and chromium-driver (the README's second command
installs them), one way to start it, and the skip mark for a machine without them."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                    reason="needs Debian's chromium and chromium-driver (apt-get install)")


def headless_chromium(width: int = 1400, height: int = 1000):
    """A headless Chromium driven by the installed chromedriver (selenium downloads nothing).

    Its temporary files go in a folder of its own, removed when the driver quits: Chromium keeps its
    singleton socket in a ``$TMPDIR/org.chromium.Chromium.*`` folder that it leaves behind even after a
    clean quit (one per browser the suite started piled up in /tmp)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    class Browser(webdriver.Chrome):
        """A Chrome driver whose quit also removes the browser's temporary folder."""

        def __init__(self, folder: str, **kwargs) -> None:
            self.temporary_folder = folder
            super().__init__(**kwargs)

        def quit(self) -> None:
            try:
                super().quit()
            finally:
                shutil.rmtree(self.temporary_folder, ignore_errors=True)

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"):
        opts.add_argument(arg)
    folder = tempfile.mkdtemp(prefix="hil-chromium-")
    service = Service(CHROMEDRIVER, env={**os.environ, "TMPDIR": folder})  # chromedriver's env is Chromium's
    try:
        return Browser(folder, service=service, options=opts)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


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
