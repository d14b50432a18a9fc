"""configs/lab/lab-postgres-s3.yml served as shipped: Tiled's own `tiled serve config` with the catalogue in a
throwaway PostgreSQL cluster and the arrays in a bucket of an S3-compatible object store (moto's server on
127.0.0.1, a real HTTP S3 endpoint); `hil lab push` writes a session into it."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from daq.lab import layout
from daq.lab.marks import replicas
from daq.store.reader import SessionReader
from tests.pg_cluster import throwaway_postgres
from tests.polling import poll_until
from tests.test_lab import ROOT, hil, make_session

BUCKET = "hil-lab"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "hil-test", "AWS_SECRET_ACCESS_KEY": "hil-test-secret"}
REGION = "us-east-1"  # what obstore takes where AWS_REGION is unset (the Tiled server runs without it)


@pytest.fixture
def s3_endpoint():
    """moto's S3 server on a free loopback port with one empty bucket: ``(endpoint URL, boto3 client)``."""
    boto3 = pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()  # returns once the socket listens
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                          aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
        s3.create_bucket(Bucket=BUCKET)
        yield endpoint, s3
    finally:
        server.stop()


def serve_config(config: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    """`tiled serve config FILE --port 0` as a lab runs it; its URL from uvicorn's start line."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # only the test's S3 settings
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tiled", "serve", "config", str(config),
                                 "--host", "127.0.0.1", "--port", "0"],
                                stdout=out, stderr=subprocess.STDOUT, env={**base, **env})
    started = re.compile(r"Uvicorn running on (http://127\.0\.0\.1:\d+)")

    def url() -> re.Match | None:
        return started.search(re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace")))  # no colours

    try:
        poll_until(lambda: proc.poll() is not None or url() is not None, timeout=240, period=0.1)
    except AssertionError:
        proc.kill()
        raise
    found = url()
    if found is None:
        proc.kill()
        raise AssertionError(f"tiled serve config did not start (exit {proc.poll()}):\n{log.read_text()}")
    return proc, found.group(1)


def bucket_arrays(s3) -> dict[str, set[str]]:
    """The Zarr arrays in the bucket: ``{array prefix: chunk keys under it}`` (metadata keys left out)."""
    arrays: dict[str, set[str]] = defaultdict(set)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for obj in page.get("Contents", []):
            key = obj["Key"]
            if key.endswith("/zarr.json"):
                arrays[key.removesuffix("/zarr.json")]  # noqa: B018 - an array, maybe with no chunk yet
            elif "/c/" in key:
                prefix, _, _ = key.partition("/c/")
                arrays[prefix].add(key)
            else:
                raise AssertionError(f"unexpected object in the bucket: {key}")
    return arrays


def bucket_store(endpoint: str):
    """The bucket as a read-only Zarr store, straight over S3 (obstore, as Tiled uses)."""
    from obstore.store import S3Store
    from zarr.storage import ObjectStore

    s3 = S3Store(BUCKET, endpoint=endpoint, region=REGION, client_options={"allow_http": True},
                 access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                 secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    return ObjectStore(s3, read_only=True)


def chunk_keys(prefix: str, chunks: tuple[tuple[int, ...], ...]) -> set[str]:
    """Zarr v3 chunk keys ('c/i/j') of every block of an array with Tiled's ``chunks``."""
    return {f"{prefix}/c/" + "/".join(map(str, idx)) for idx in np.ndindex(*(len(dim) for dim in chunks))}


SHIPPED = ROOT / "configs" / "lab" / "lab-postgres-s3.yml"


@pytest.mark.slow(reason="initdb, a PostgreSQL server, an S3 server and a Tiled server")
def test_the_shipped_s3_config_keeps_pushed_arrays_in_the_bucket(s3_endpoint, tmp_path):
    import zarr
    from tiled.client import from_uri

    endpoint, s3 = s3_endpoint
    store = tmp_path / "hil.sqlite"
    sid = make_session(store, seconds=14.0, rate=10_000.0)  # press.force: 140,000 rows
    with SessionReader(store) as local:
        streams = {name: local.read_stream(sid, name) for name in ("press.force", "press.sensors")}
        blocks = {name: math.ceil(140_000 / layout.chunk_rows(si))
                  for name, si in local.get_session(sid).streams.items() if name in streams}
    (tmp_path / "tables").mkdir()
    auth_db = f"sqlite+aiosqlite:///{tmp_path / 'auth.db'}"  # people and keys, as `hil lab serve` has them
    made = hil("lab", "key", "init", "--auth-db", auth_db, "--key-file", str(tmp_path / "admin.key"))
    assert made.exit_code == 0 and made.output.strip() == f"admin key written to {tmp_path / 'admin.key'}"
    admin = (tmp_path / "admin.key").read_text().strip()
    again = hil("lab", "key", "init", "--auth-db", auth_db, "--key-file", str(tmp_path / "other.key"))
    assert again.exit_code == 0 and not (tmp_path / "other.key").exists()  # one first admin only
    with throwaway_postgres() as catalog:
        env = {"HIL_LAB_AUTH_DB": auth_db,
               "HIL_LAB_CATALOG": catalog.replace("postgresql:", "postgresql+asyncpg:"),
               "HIL_LAB_S3": f"{endpoint}/{BUCKET}", "HIL_LAB_FOLDER": str(tmp_path / "tables"),
               "AWS_ALLOW_HTTP": "true", **CREDENTIALS}
        proc, url = serve_config(SHIPPED, env, tmp_path / "tiled.log")
        try:
            added = hil("lab", "key", "add", "otto", "--role", "operator", "--to", url, "--key-file",
                        str(tmp_path / "otto.key"), key=admin)
            assert added.exit_code == 0, added.output
            key = (tmp_path / "otto.key").read_text().strip()
            res = hil("--store", str(store), "lab", "push", sid, "--to", url, key=key)
            assert res.exit_code == 0 and res.output.startswith(f"{sid}: pushed and verified"), res.output
            assert replicas(store) == {sid: [url]}  # (c) verified against the server, marked in the store

            lab = from_uri(url, api_key=key)[sid]
            assert lab.metadata["pushed_by"]["name"] == "otto"  # a person's key, not a shared one
            assert from_uri(url, api_key=admin)[sid].metadata["pushed_by"]["role"] == "operator"
            arrays = bucket_arrays(s3)
            for name, mine in streams.items():  # (b) Tiled's plain client reads what the rig recorded
                assert np.array_equal(lab[name]["data"].read(), mine.data)
                assert np.array_equal(lab[name]["t"].read(), mine.t)
                for part in ("t", "data"):  # (a) every block of every array is in the bucket
                    prefix = f"{sid}/{name}/{part}"
                    assert arrays[prefix] == chunk_keys(prefix, lab[name][part].structure().chunks), prefix
            assert len(arrays) == 4
            for name, n in blocks.items():  # t and data in the blocks the layout gives
                assert [len(arrays[f"{sid}/{name}/{part}"]) for part in ("t", "data")] == [n, n]
            force = streams["press.force"].data  # the bytes in the bucket are the samples: zarr, no Tiled
            raw = zarr.open_array(bucket_store(endpoint), path=f"{sid}/press.force/data", mode="r")
            assert np.array_equal(raw[: len(force)], force)
            assert list((tmp_path / "tables").rglob("*.parquet"))  # the tables went to the folder
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
