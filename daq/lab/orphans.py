"""Arrays a killed lab server left half made, set aside when it starts again.

Tiled makes a new array's folder on disk first and commits its node to the catalogue after. A lab server
killed between the two (power cut, SIGKILL, out of memory) leaves a folder that no node names; the rig's
forwarder, catching up once the lab is back, asks for the same array again and Tiled refuses to make it over
the folder ("An array exists in store", an HTTP 500 for ever). So before it serves, the lab server moves
every such folder to ``orphans/<time>/`` in its data folder: nothing is deleted, the rig sends the data
again, and the server says what it moved.

A folder is set aside only when the catalogue holds its parent as a container, no node has its name and no
asset of the catalogue is the folder, inside it or below it: a folder the catalogue knows nothing about
(another lab's files, a catalogue made anew) is left alone. Arrays in an object store (``--arrays s3://``)
are not swept.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sqlite3
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

from daq.lab.private import sqlite_path

ORPHANS_DIR = "orphans"

NODES = "SELECT id, key, parent, structure_family FROM nodes"
ASSETS = "SELECT data_uri FROM assets"


def set_aside(catalog_uri: str, arrays: Path, data_dir: Path) -> list[tuple[Path, Path]]:
    """Move the half-made arrays under ``arrays`` to ``data_dir/orphans/<time>/`` (same relative paths);
    (old path, new path) of each folder moved."""
    nodes, uris = _read_catalogue(catalog_uri)
    found = orphans(arrays, nodes, uris)
    moved = []
    dest_root = data_dir / ORPHANS_DIR / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for path in found:
        dest = dest_root / path.relative_to(arrays.resolve())
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(dest))
        moved.append((path, dest))
    return moved


def orphans(arrays: Path, nodes: list[tuple], asset_uris: list[str]) -> list[Path]:
    """The entries under ``arrays`` inside a catalogued container that no node and no asset accounts for.

    ``nodes``: rows (id, key, parent, structure_family) of the catalogue; ``asset_uris``: its assets'
    ``file://`` URIs."""
    arrays = arrays.resolve()
    by_id = {row[0]: row for row in nodes}

    def path_of(node_id: int) -> tuple[str, ...]:
        parts: list[str] = []
        row = by_id.get(node_id)
        while row is not None and row[2] is not None:
            parts.append(row[1])
            row = by_id.get(row[2])
        return tuple(reversed(parts))

    node_paths = {path_of(row[0]) for row in nodes}
    containers = {path_of(row[0]) for row in nodes if str(row[3]).endswith("container")}
    assets: set[Path] = set()
    for uri in asset_uris:
        parsed = urlparse(uri)
        if parsed.scheme == "file":
            assets.add(Path(unquote(parsed.path)).resolve())
    above_assets = {parent for a in assets for parent in a.parents}

    def accounted(path: Path) -> bool:
        return path in assets or path in above_assets or any(p in assets for p in path.parents)

    found = []
    for container in sorted(containers):
        folder = arrays.joinpath(*container)
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            if (*container, entry.name) in node_paths:  # a node of that name: its own, or a container's
                continue
            if not accounted(entry.resolve()):
                found.append(entry)
    return found


def _read_catalogue(uri: str) -> tuple[list[tuple], list[str]]:
    """The catalogue's nodes and asset URIs, read-only (a SQLite file or PostgreSQL)."""
    db_file = sqlite_path(uri)
    if db_file is not None:
        if not db_file.exists():
            return [], []
        db = sqlite3.connect(f"file:{db_file}?mode=ro", uri=True)
        try:
            return db.execute(NODES).fetchall(), [r[0] for r in db.execute(ASSETS)]
        finally:
            db.close()
    if uri.startswith("postgresql"):
        return asyncio.run(_read_postgresql(re.sub(r"^postgresql\+asyncpg://", "postgresql://", uri)))
    return [], []


async def _read_postgresql(dsn: str) -> tuple[list[tuple], list[str]]:
    import asyncpg  # type: ignore[import-untyped]  # lazy: only a PostgreSQL catalogue

    db = await asyncpg.connect(dsn)
    try:
        nodes = [tuple(r) for r in await db.fetch(NODES)]
        return nodes, [r[0] for r in await db.fetch(ASSETS)]
    finally:
        await db.close()
