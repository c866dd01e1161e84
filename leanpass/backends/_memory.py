"""The ``cpu`` device's memory: freed arrays kept for the next step, not handed back
to the kernel and faulted in again.

A training step allocates the same large temporaries every step (activations and
their gradients: tens of megabytes). NumPy takes them from the C library's
``malloc``; glibc's gives each allocation above its *mmap threshold* (128 KiB at
start, raised as large blocks are freed, up to 32 MiB) pages of its own from the
kernel, and hands freed memory at the top of its heap back to the kernel once more
than its *trim threshold* (twice the mmap threshold) lies free there. Either way the
next step gets fresh pages, which the kernel zeroes one page fault at a time: W6
(a transformer block, float32, alone in its process: ``benchmarks/alone.py``) took
11,400 page faults and 24 to 27 ms of kernel time per step, 1.53x PyTorch's time.

:func:`keep_freed_memory` sets both thresholds once: the mmap threshold where glibc's
own rule stops raising it (32 MiB), and a trim threshold of four times that (its rule
keeps twice), through ``mallopt``, glibc's public interface for exactly this (``man 3
mallopt``; the same settings as the ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` environment variables, which only a process's start
reads). The step above then takes no page fault, and 0.98x PyTorch's time. The cost:
memory freed after a peak may stay with the process. The heap hands memory back only
from its top, where more than 128 MiB lie free, and blocks up to 32 MiB now come from
the heap from the start: a process's first peak may stay resident (twenty 16 MiB
arrays, each followed by a small one still alive, then freed: 368 MiB resident after,
against 48 MiB left alone; once glibc's own rule has raised its thresholds, as after
a few steps of training, it keeps the same). A training job uses it again at the
next step.

It does nothing where the C library is not glibc, where either environment variable
or a ``glibc.malloc.`` tunable (``GLIBC_TUNABLES``) is set (the user's own choice), or
with ``LEANPASS_KEEP_MEMORY=0``.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 32 << 20  # glibc's own upper bound for its moving mmap threshold, on 64-bit systems
TRIM_THRESHOLD = 4 * MMAP_THRESHOLD


@functools.cache
def keep_freed_memory() -> bool:
    """Tune glibc's ``malloc`` for NumPy's large temporaries (see the module's notes),
    once; whether it was done."""
    if os.environ.get("LEANPASS_KEEP_MEMORY", "1").strip() == "0":
        return False
    if any(name in os.environ for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        return False
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):  # glibc's own way to say the same
        return False
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
