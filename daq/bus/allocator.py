"""Keep freed message buffers for reuse instead of handing them back to the OS at once (glibc).

A bus message of 80 kB is a fresh ``malloc`` in ZeroMQ's I/O thread. With glibc's defaults a burst of them,
freed once decoded, leaves more than 128 kB free at the top of that thread's heap, which glibc then gives
back to the OS; the next burst faults the same pages in again, about 20 per message - most of what a
large-frame receiver loses against another (benchmarks/README.md, issue 44). ``keep_freed_heap`` raises the
trim threshold to 64 MiB and fixes the mmap threshold at 32 MiB for the whole process: up to 64 MiB of freed
heap per arena stays mapped for the next messages. Called once by the ``hil`` command; a process started with
its own allocator settings in the environment keeps them.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  #: mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 64 << 20  #: bytes of free heap top kept before any is returned to the OS
MMAP_THRESHOLD = 32 << 20  #: allocations from this size on get their own mapping (freed at once)


def keep_freed_heap() -> bool:
    """Apply the thresholds above; False where there is no glibc ``mallopt`` or the environment chose its
    own (``GLIBC_TUNABLES`` with malloc settings, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``)."""
    if not sys.platform.startswith("linux"):
        return False
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", "") or any(
            name in os.environ for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # glibc's; musl has none
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
