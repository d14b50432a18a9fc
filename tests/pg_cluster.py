"""A throwaway PostgreSQL cluster for the lab tests: initdb and pg_ctl on a free loopback port, run as the
``postgres`` OS user, removed afterwards (the tests that need a PostgreSQL catalogue share it)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def throwaway_postgres() -> Iterator[str]:
    """The URI of a database ``lab`` in a new cluster (skips the test where PostgreSQL is not installed)."""
    if not (PG_BIN / "initdb").exists() or shutil.which("runuser") is None:
        pytest.skip(f"PostgreSQL server binaries not found in {PG_BIN} (apt-get install postgresql)")
    folder = Path(tempfile.mkdtemp(prefix="hil-pg-"))
    shutil.chown(folder, "postgres")
    port = free_port()

    def as_pg(*cmd: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *cmd], check=True, capture_output=True,
                       timeout=120)

    as_pg(str(PG_BIN / "initdb"), "-D", str(folder / "db"), "-A", "trust", "-U", "postgres")
    as_pg(str(PG_BIN / "pg_ctl"), "-D", str(folder / "db"), "-l", str(folder / "log"), "-w", "-o",
          f"-p {port} -k {folder} -c listen_addresses=127.0.0.1", "start")
    try:
        as_pg(str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "lab")
        yield f"postgresql://postgres@127.0.0.1:{port}/lab"
    finally:
        as_pg(str(PG_BIN / "pg_ctl"), "-D", str(folder / "db"), "-m", "fast", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)
