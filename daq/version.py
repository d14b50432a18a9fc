"""Software version recorded with every session (package version plus git commit when known)."""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path


@functools.cache
def software_version() -> str:
    """``"hil-lab 0.1.0"`` plus ``"+g<commit>[-dirty]"`` when running from a git checkout."""
    try:
        version = metadata.version("hil-lab")
    except metadata.PackageNotFoundError:
        version = "unknown"
    text = f"hil-lab {version}"
    repo = Path(__file__).resolve().parent.parent
    if (repo / ".git").exists():
        try:
            out = subprocess.run(
                ["git", "-C", str(repo), "describe", "--always", "--dirty"],
                capture_output=True,
                text=True,
                timeout=2,
            )
            if out.returncode == 0 and out.stdout.strip():
                text += f"+g{out.stdout.strip()}"
        except (OSError, subprocess.SubprocessError):
            pass
    return text
