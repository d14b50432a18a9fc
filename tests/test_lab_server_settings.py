"""The lab server runs without a FastAPI dependency override while it serves (daq/lab/server.py): with any
override set, FastAPI rebuilds every dependency of every request. Tiled's own override of ``get_settings``
is dropped only while it is redundant, and the settings every request gets are still the lab's. Tiled's reply
classes (``Resource[...]``, daq/lab/reply_models.py) outlive the garbage collector instead of being made again
for each request."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.test_lab import ROOT

SCRIPT = """
import asyncio, gc, json, sys, weakref
from pathlib import Path
from daq.lab import people_server
from daq.lab.server import ServeOptions, build_lab_app, make_private
from tiled.server import schemas
from tiled.server.settings import get_settings

opts = ServeOptions(data_dir=Path(sys.argv[1]))
make_private(opts, say=lambda text: None)
uri = people_server.auth_uri(opts.data_dir, None)
people_server.prepare(uri, opts.data_dir / "lab.key")
app = build_lab_app(opts, uri)
before = sorted(f.__name__ for f in app.dependency_overrides)

# the classes Tiled's construct_resource asks pydantic for per node: still there after a collection
links = [schemas.SelfLinkOnly, *schemas.resource_links_type_by_structure_family.values()]
asked = [weakref.ref(schemas.Resource[schemas.NodeAttributes, schemas.ContainerLinks, schemas.ContainerMeta])]
asked += [weakref.ref(schemas.Resource[schemas.NodeAttributes, kind, schemas.EmptyDict]) for kind in links]
gc.collect()
kept = [ref() is not None for ref in asked]

async def serve():
    async with app.router.lifespan_context(app):
        s = get_settings()
        return {"during": sorted(f.__name__ for f in app.dependency_overrides),
                "anonymous": s.allow_anonymous_access, "database": s.database_settings.uri}

seen = asyncio.run(serve())
seen.update(before=before, after=sorted(f.__name__ for f in app.dependency_overrides), uri=uri, kept=kept)
print(json.dumps(seen))
"""


def test_the_lab_serves_without_dependency_overrides_and_with_its_own_settings(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "lab")], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["before"] == seen["after"] == ["get_settings"]  # Tiled's own, back for its shutdown
    assert seen["during"] == []  # nothing left for FastAPI to rebuild per request
    # what Tiled's override applied is what requests see: the people's database, no anonymous access
    assert seen["database"] == seen["uri"] and seen["anonymous"] is False
    # every reply class a node's answer uses is made once for the server's life, not once per request
    assert len(seen["kept"]) == 9 and all(seen["kept"]), seen["kept"]
