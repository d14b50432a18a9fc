"""The rig configs a server may run: the ``*.toml`` files of its configs folder, each checked as
``hil check`` does (schema, then the rig's own rules), the result kept while the file is unchanged."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from daq.errors import one_line
from daq.rigs import check_rules
from daq.rigs.config import load


@dataclass
class ConfigFile:
    name: str
    path: Path
    ok: bool
    kind: str | None = None
    simulated: bool | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        d = {"name": self.name, "ok": self.ok, "kind": self.kind, "simulated": self.simulated}
        if self.error is not None:
            d["error"] = self.error
        return d


class ConfigFolder:
    """The configs of ``folder`` (names are file names: nothing outside the folder can be asked for)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._cache: dict[str, tuple[tuple, ConfigFile]] = {}
        self._lock = threading.Lock()

    def checked(self) -> list[str]:
        """The names whose check is cached (checked since their file last changed, or before that)."""
        with self._lock:
            return sorted(self._cache)

    def names(self) -> list[str]:
        return sorted(p.name for p in self.folder.glob("*.toml") if p.is_file())

    def check(self, name: str) -> ConfigFile | None:
        """The checked config ``name`` (a file name of the folder), None when there is no such file."""
        if name not in self.names():
            return None
        path = self.folder / name
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            hit = self._cache.get(name)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        try:
            rig, cfg = load(path)
            check_rules(rig, cfg, path)
            result = ConfigFile(name, path, True, rig.kind, bool(cfg.rig.simulated))
        except Exception as exc:  # noqa: BLE001 - every failure is the config's one-line error
            result = ConfigFile(name, path, False, error=one_line(exc))
        with self._lock:
            self._cache[name] = (stamp, result)
        return result

    def check_all(self) -> list[ConfigFile]:
        return [c for c in (self.check(n) for n in self.names()) if c is not None]
