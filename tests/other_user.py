"""A second OS user for tests, and a Python it can run wherever this checkout lives.

The checkout (and its venv) may sit in a folder only its owner can read (a clone under a 0700 home or
``mktemp -d``): a child started as another user could then neither load the venv nor import ``daq``.
:func:`as_user` runs the child from a copy made for it under /tmp - the project's packages, the installed
distributions they need (hard links where the file system allows, else copies) and the loopback guard -
with the base interpreter, which must itself be readable by that user (else the test is skipped)."""

from __future__ import annotations

import atexit
import functools
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("daq", "drivers", "identification", "simulators")


@pytest.fixture
def other_user():
    """A second OS user, made for this test and removed after it."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to make a second OS user")
    name = f"hilx{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)


def _needed(name: str, seen: set[str]) -> None:
    """``name`` and the distributions it requires (without extras), by their normalized names."""
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        return
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return  # a requirement whose marker leaves it out here
    seen.add(key)
    for req in dist.requires or ():
        if "extra ==" in req.replace(" ", "").replace("extra==", "extra =="):
            continue
        from packaging.requirements import Requirement

        parsed = Requirement(req)
        if parsed.marker is None or parsed.marker.evaluate({"extra": ""}):
            _needed(parsed.name, seen)


def _place(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)  # same file system: instant, and the file keeps its own (readable) mode
    except OSError:
        shutil.copy2(src, dst)


@functools.cache
def readable_runtime() -> Path:
    """A folder every user can read: ``src`` (this checkout's packages), ``site`` (the installed
    distributions they need), ``guard`` (tests/loopback_guard.py and its ``sitecustomize``)."""
    top = Path(tempfile.mkdtemp(prefix="hil-other-user-", dir="/tmp"))
    atexit.register(shutil.rmtree, top, True)
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, top / "src" / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    names: set[str] = set()
    _needed("hil-lab", names)
    for name in sorted(names - {"hil-lab"}):
        dist = metadata.distribution(name)
        base = Path(str(dist.locate_file("")))
        for rel in dist.files or ():
            if rel.parts and rel.parts[0] != ".." and "__pycache__" not in rel.parts:
                src = base / rel
                if src.is_file():
                    _place(src, top / "site" / rel)
    tests = Path(__file__).parent
    shutil.copytree(tests / "guard_site", top / "guard" / "guard_site",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(tests / "loopback_guard.py", top / "guard" / "loopback_guard.py")
    for path in [top, *top.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    return top


def as_user(user: pwd.struct_passwd, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``python args...`` as ``user`` (its own uid, gid and no extra groups) from
    :func:`readable_runtime`, with this venv's base interpreter (its ``bin/python`` may be unreadable)."""
    python = os.path.realpath(sys.executable)
    probe = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    if subprocess.run([*probe, python, "-c", "import encodings, json, sqlite3"], capture_output=True,
                      env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd="/tmp").returncode != 0:
        pytest.skip(f"the interpreter {python} cannot be run by another OS user on this machine")
    top = readable_runtime()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "HIL_KEYS": "/nonexistent",
           "PYTHONNOUSERSITE": "1",
           "PYTHONPATH": os.pathsep.join(str(top / d) for d in ("guard/guard_site", "src", "site"))}
    if os.environ.get("HIL_TEST_GUARD_LOG"):
        env["HIL_TEST_GUARD_LOG"] = os.environ["HIL_TEST_GUARD_LOG"]
    return subprocess.run([*probe, python, *args], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd="/tmp")
