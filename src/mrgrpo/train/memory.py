"""Returning freed memory to the operating system during a CPU training run (Linux, glibc).

glibc's ``malloc`` serves a large allocation with ``mmap`` (returned to the system when freed)
and a smaller one from its heap (kept for reuse). The boundary, the *mmap threshold*, starts
at 128 KiB and moves up to the size of each mmapped block freed, as far as 32 MiB. A training
step allocates and frees thousands of activation and gradient tensors of a few MiB: after the
first steps they all come from the heap, whose free space stays resident, so the process's RSS
ratchets up to the largest step it has seen, and up again after anything that allocates
differently (a checkpoint's serialization). Measured on the demo (SmolLM2-135M, 12 steps, one
thread, bfloat16): the trainer's high-water mark 4,362 MiB with glibc's default against
4,103 MiB with the threshold fixed at 256 KiB; the step after the first checkpoint rose 320 MiB
with the default and not at all with the fixed threshold; step times within the load's noise.

:func:`set_mmap_threshold` fixes the threshold (``mallopt(M_MMAP_THRESHOLD, ...)``, which also
turns off glibc's dynamic adjustment, as the ``MALLOC_MMAP_THRESHOLD_`` environment variable
does at start-up). It changes where tensors live, not what is computed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: ``mallopt`` parameter number of the mmap threshold (glibc's malloc.h).
M_MMAP_THRESHOLD = -3


def set_mmap_threshold(kib: int) -> bool:
    """Serve every allocation of at least ``kib`` KiB by ``mmap`` from now on, and return it to the
    system when freed. Returns ``False`` (and changes nothing) where the C library is not glibc
    (macOS, musl), ``True`` once set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only: musl has mallopt as a stub that does nothing
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, int(kib) * 1024) == 1
