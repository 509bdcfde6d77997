"""Freed memory goes back to the system when a run fixes glibc's mmap threshold
(``malloc_mmap_threshold_kib``, :mod:`mrgrpo.train.memory`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mrgrpo.train.config import ConfigError, validate_config
from mrgrpo.train.defaults import DEFAULT_CONFIG, TINY_CONFIG

# Frees one 8 MiB tensor (glibc then moves its threshold to 8 MiB), then allocates 100 tensors
# of 2 MiB and one of 1 MiB after them, and frees the 100: with glibc's default they came from
# the heap, below the 1 MiB one, and stay resident; with the threshold fixed below 2 MiB each
# was mmapped and is unmapped when freed.
PROBE = """
import sys, torch
from mrgrpo.train.memory import set_mmap_threshold
def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
if sys.argv[1] == "fixed":
    assert set_mmap_threshold(256)
del_me = torch.ones(2**21); del del_me           # 8 MiB
before = rss_mib()
live = [torch.ones(2**19) for _ in range(100)]   # 100 x 2 MiB
after_them = torch.ones(2**18)                   # 1 MiB, on the heap above them
del live
print(round(rss_mib() - before))
"""


def retained_mib(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc (Linux)")
def test_with_the_threshold_fixed_freed_tensors_leave_the_resident_set():
    default, fixed = retained_mib("default"), retained_mib("fixed")
    assert default >= 150, f"glibc's default kept {default} MiB of 200 freed (the probe no longer shows the ratchet)"
    assert fixed <= 20, f"{fixed} MiB of 200 freed stayed resident with the threshold fixed"


def test_the_demo_sets_it_and_the_option_is_validated():
    assert validate_config(DEFAULT_CONFIG).malloc_mmap_threshold_kib == 256
    assert validate_config(TINY_CONFIG).malloc_mmap_threshold_kib is None
    for bad in (0, 2, 10**6, "lots"):
        with pytest.raises(ConfigError, match="malloc_mmap_threshold_kib"):
            validate_config({**TINY_CONFIG, "malloc_mmap_threshold_kib": bad})
