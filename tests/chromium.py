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
