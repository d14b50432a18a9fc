"""The tests' browser leaves no temporary file behind (the suite starts dozens of them)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.chromium import headless_chromium, needs_chromium


@needs_chromium
def test_a_browser_the_tests_start_leaves_no_temporary_folder_once_it_quits():
    driver = headless_chromium()
    try:
        driver.get("about:blank")
        profile = Path(driver.capabilities["chrome"]["userDataDir"])
        singleton = Path(os.readlink(profile / "SingletonSocket")).parent  # Chromium's own folder for it
        assert singleton.is_dir() and profile.is_dir()
    finally:
        driver.quit()
    assert not profile.exists(), f"the browser's profile {profile} outlived it"
    assert not singleton.exists(), f"the browser's folder {singleton} outlived it"
