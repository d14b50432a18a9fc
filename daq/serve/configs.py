"""The rig configs a server may run: the ``*.toml`` files of its configs folder, each checked as
``hil check`` does (schema, then the rig's own rules), the result kept while the file is unchanged. A
template whose site values are not filled in is not runnable: its ``unsupplied`` lines are the ones
`hil check` prints, one per value."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from daq.config.load import SiteValuesMissing
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
    unsupplied: list[str] | None = None  # values the site must still supply: "[table].key: what to put"

    def to_dict(self) -> dict:
        d = {"name": self.name, "ok": self.ok, "kind": self.kind, "simulated": self.simulated}
        if self.error is not None:
            d["error"] = self.error
        if self.unsupplied is not None:
            d["unsupplied"] = self.unsupplied
        return d

    def refusal(self) -> dict:
        """Why a run of this config is refused (the reply of a run request)."""
        d: dict = {"error": self.error or "config refused"}
        if self.unsupplied is not None:
            d["unsupplied"] = self.unsupplied
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
        except SiteValuesMissing as exc:  # a template: not runnable until the site fills these in
            result = ConfigFile(name, path, False, error=exc.summary, unsupplied=exc.lines)
        except Exception as exc:  # noqa: BLE001 - every failure is the config's one-line error
            result = ConfigFile(name, path, False, error=one_line(exc))
        with self._lock:
            self._cache[name] = (stamp, result)
        return result

    def check_all(self) -> list[ConfigFile]:
        return [c for c in (self.check(n) for n in self.names()) if c is not None]
