"""`hil serve` start-up (issue 33 item 6): a missing TLS file is named, a file that is not PEM says so, both
before any URL is announced; an occupied port is one line naming it, creates no token file, and the start
that succeeds later prints the URL with its token. `hil serve` as a real process on 127.0.0.1."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

HIL = [sys.executable, "-c", "from daq.cli.main import main; main()"]


def serve(tmp_path: Path, *args: str) -> subprocess.Popen:
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    return subprocess.Popen([*HIL, "--store", str(tmp_path / "s.sqlite"), "serve", "--configs", str(configs),
                             "--token-file", str(tmp_path / "tokens"), *args],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def failed_start(tmp_path: Path, *args: str) -> str:
    proc = serve(tmp_path, *args)
    out, err = proc.communicate(timeout=120)
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("Error: "), out + err
    assert "http" not in lines[0] and "token" not in lines[0].lower()  # no URL was announced
    return lines[0]


def test_tls_files_are_named_when_missing_or_not_pem(tmp_path):
    missing = tmp_path / "nowhere" / "cert.pem"
    key = tmp_path / "key.pem"
    key.write_text("not a key\n")
    line = failed_start(tmp_path, "--port", "0", "--certfile", str(missing), "--keyfile", str(key))
    assert str(missing) in line and "no such file" in line
    cert = tmp_path / "cert.pem"
    cert.write_text("hello\n")
    line = failed_start(tmp_path, "--port", "0", "--certfile", str(cert), "--keyfile", str(key))
    assert str(cert) in line and "not a PEM file" in line
    assert not (tmp_path / "tokens").exists()


def test_an_occupied_port_makes_no_token_file_and_the_later_start_prints_its_token(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        line = failed_start(tmp_path, "--port", str(port))
        assert f"127.0.0.1:{port}" in line and "in use" in line
        assert not (tmp_path / "tokens").exists()
    finally:
        taken.close()
    proc = serve(tmp_path, "--port", str(port))
    try:
        seen = []
        while True:
            line = proc.stderr.readline()
            assert line, "".join(seen)
            seen.append(line)
            m = re.search(rf"http://127\.0\.0\.1:{port}/\?token=(\S*)", line)
            if m:
                break
        token = m.group(1)
        assert len(token) >= 16 and token in (tmp_path / "tokens").read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        proc.stderr.close()
        proc.stdout.close()
