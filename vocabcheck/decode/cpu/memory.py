"""Where the CPU decoder's large buffers come from: glibc's heap, not a fresh mapping per step.

A verification pass returns logits for every slot it carries: 16 rows × 5 slots × 152,064 rows of the demo's head are
49 MB of float32 per step. glibc's ``malloc`` serves a block that large with a fresh ``mmap`` (its threshold adapts only
up to 32 MB) and returns it to the kernel when freed, so every wide step faults in and zeroes 12,000 new pages. In a
throwaway timing (three pairs of processes), the demo head's product and argmax at 80 rows took 70–88 ms per call that
way and 53–62 ms with the blocks kept in the heap (at 1 and 16 rows, under the adaptive threshold, no difference).
In the decoder it is what wide steps cost at batch 16: ``benchmarks/freed_memory.py`` runs processes with and without
it side by side (reports/freed-memory.md).

So the first CPU batch in a process raises glibc's mmap and trim thresholds to ``LIMIT`` (``mallopt``, what the
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` environment variables do at start-up): blocks up to that size
come from the heap, and freed memory up to that size stays with the process for the next step instead of going back
to the kernel. It is process-wide, as any allocator setting is; the cost is that the process's resident memory does
not shrink after its largest step. ``VOCABCHECK_KEEP_FREED_MEMORY=0`` leaves the allocator alone. Elsewhere (macOS,
Windows, musl) nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys

LIMIT = 1 << 30  # bytes: blocks up to this size come from the heap and stay there when freed
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
OPT_OUT = "VOCABCHECK_KEEP_FREED_MEMORY"


@functools.cache
def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds to ``LIMIT``, once per process; whether they were raised."""
    if os.environ.get(OPT_OUT, "").strip() == "0":
        return False
    mallopt = glibc_mallopt()
    return mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, LIMIT)) and bool(mallopt(M_TRIM_THRESHOLD, LIMIT))


def glibc_mallopt():
    """glibc's ``mallopt`` where this process runs on glibc (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # glibc only: musl has mallopt as a stub that does nothing
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt
