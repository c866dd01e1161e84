"""The ``cpu`` device keeps freed memory for the next step (leanpass/backends/_memory.py):
a step's large temporaries come back from the C library's heap, not as fresh pages the
kernel faults in (counted here, never timed)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from leanpass.backends import _memory

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# Five rounds of what a step does: 40 MB of temporaries made, then all freed; the page
# faults of the last four rounds (the first one's are every allocator's).
_STEPS = """
import resource, sys
import numpy as np
import leanpass as lp
lp.zeros(1)  # the cpu device in use: its backend is loaded
faults = []
for _ in range(5):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    temporaries = [np.ones(1 << 20) for _ in range(5)]  # 5 x 8 MB
    del temporaries
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
from leanpass.backends._memory import keep_freed_memory
print(keep_freed_memory(), sum(faults[1:]))
"""


def _run(**env):
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("LEANPASS_KEEP_MEMORY", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                                "GLIBC_TUNABLES")}
    done = subprocess.run([sys.executable, "-c", _STEPS], env={**environment, **env}, capture_output=True,
                          text=True, timeout=120, check=True)
    tuned, faults = done.stdout.split()
    return tuned == "True", int(faults)


@pytest.mark.skipif(not GLIBC, reason="the tuning is glibc's malloc's (this machine's C library is another)")
def test_a_steps_temporaries_are_reused_not_faulted_in_again():
    tuned, faults = _run()
    untuned, faults_untuned = _run(LEANPASS_KEEP_MEMORY="0")
    assert tuned and not untuned
    array = (8 << 20) // 4096  # the pages of one temporary, in 4 KiB pages
    if faults_untuned < array:  # huge pages, or glibc keeping the memory by itself: nothing to show
        pytest.skip(f"glibc left alone took {faults_untuned} page faults in four rounds: nothing to compare")
    assert faults * 20 < faults_untuned


@pytest.mark.skipif(not GLIBC, reason="the tuning is glibc's malloc's")
@pytest.mark.parametrize("setting", [{"MALLOC_TRIM_THRESHOLD_": "1048576"},
                                     {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"}])
def test_the_users_own_malloc_settings_are_kept(setting):
    tuned, _ = _run(**setting)
    assert not tuned


def test_it_is_done_once_and_says_whether():
    first = _memory.keep_freed_memory()
    assert _memory.keep_freed_memory() is first
    assert first == (GLIBC and os.environ.get("LEANPASS_KEEP_MEMORY", "1").strip() != "0"
                     and "MALLOC_MMAP_THRESHOLD_" not in os.environ and "MALLOC_TRIM_THRESHOLD_" not in os.environ
                     and "glibc.malloc." not in os.environ.get("GLIBC_TUNABLES", ""))
