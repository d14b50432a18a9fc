"""The workers' zygote (tests/zygote.py) ends by itself when its worker closes it: a worker that waited for
it at exit ran past xdist's 10 s, was killed, and the rest of its exit handlers never ran (the process
pools' socket folders, /tmp/pymp-*, stayed behind after every full run)."""

from __future__ import annotations

import os

from tests.polling import poll_until
from tests.test_lab import ROOT
from tests.zygote import Zygote


def test_a_closed_zygote_ends_by_itself_and_its_reader_with_it():
    zygote = Zygote()
    child = zygote.start(["--version"], dict(os.environ), ROOT, None)
    assert child.wait(60) == 0 and b"version" in child.stdout.read()
    zygote.close()
    # not killed after close's 30 s wait: the zygote read the end of its socket and returned
    assert zygote.proc.returncode == 0, zygote.proc.returncode
    poll_until(lambda: zygote.gone, timeout=10)  # the worker's reader thread saw the end too
