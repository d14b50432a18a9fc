"""Analyses of stored sessions for the dashboard: ``hil analyze SESSION --json --plots DIR`` run as a
subprocess (the CLI's own analysis and plots, at lower CPU priority, in a process of its own so a running
experiment keeps its timing), one at a time, into ``<store folder>/analyses/<session>/``: ``report.json``
(what ``--json`` prints), the PNG plots, ``error.txt`` when it failed. ``hil analyze`` keeps the analysis in
the store; with a ``[lab]`` table in the session's config it is then pushed to the lab in the background."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from pathlib import Path

from daq import json_codec
from daq.lab.replicate import push_after_run
from daq.serve.analysis_view import estimates_view
from daq.store.reader import SessionReader

NICE = 10


def _hil() -> list[str]:
    script = Path(sys.executable).parent / "hil"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from daq.cli.main import main; sys.exit(main())"]


class Analyses:
    def __init__(self, store_path: Path):
        self.store_path = Path(store_path)
        self.folder = self.store_path.parent / "analyses"
        self.running: dict[str, asyncio.Task] = {}

    def _dir(self, session_id: str) -> Path:
        return self.folder / session_id

    def state(self, session_id: str) -> dict:
        d = self._dir(session_id)
        if session_id in self.running:
            return {"state": "running"}
        if (d / "report.json").exists():
            plots = sorted(p.name for p in d.glob("*.png"))
            report = json_codec.loads((d / "report.json").read_text())
            return {"state": "done", "report": report, "plots": plots, **estimates_view(report)}
        if (d / "error.txt").exists():
            return {"state": "failed", "error": (d / "error.txt").read_text().strip()}
        return {"state": "none"}

    def plot(self, session_id: str, name: str) -> Path | None:
        d = self._dir(session_id)
        return d / name if name in {p.name for p in d.glob("*.png")} else None

    def start(self, session_id: str) -> bool:
        """Start analysing ``session_id`` (a full id); False when one is already running."""
        if self.running:
            return False
        self.running[session_id] = asyncio.get_running_loop().create_task(self._run(session_id))
        return True

    def _push(self, session_id: str) -> None:
        """With a ``[lab]`` table in the session's config: push it with its analysis in the background."""
        with SessionReader(self.store_path, recover=False) as reader:
            config = reader.get_session(session_id).config
        push_after_run(self.store_path, config)

    async def _run(self, session_id: str) -> None:
        d = self._dir(session_id)
        try:
            shutil.rmtree(d, ignore_errors=True)
            part = d.with_name(f".{d.name}.part")
            shutil.rmtree(part, ignore_errors=True)
            part.mkdir(parents=True)
            nice = ["nice", "-n", str(NICE)] if shutil.which("nice") else []
            proc = await asyncio.create_subprocess_exec(
                *nice, *_hil(), "--store", str(self.store_path), "analyze", session_id, "--json",
                "--plots", str(part), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await proc.communicate()
            if proc.returncode == 0:
                (part / "report.json").write_bytes(out)
            else:
                lines = [x for x in err.decode(errors="replace").splitlines() if x.startswith("Error:")]
                text = lines[-1] if lines else f"Error: hil analyze exited with {proc.returncode}"
                (part / "error.txt").write_text(text)
            os.replace(part, d)
            if proc.returncode == 0:  # the analysis is kept in the store: [lab] hands it to the lab
                await asyncio.to_thread(self._push, session_id)
        except Exception as exc:  # noqa: BLE001 - reported as the analysis' error
            with contextlib.suppress(OSError):
                d.mkdir(parents=True, exist_ok=True)
                (d / "error.txt").write_text(f"Error: {exc}")
        finally:
            self.running.pop(session_id, None)
