"""BLAS's ``axpy`` (``y += a * x`` in place) for the NumPy backend, taken from the
BLAS library NumPy itself has loaded.

NumPy has no in-place scaled add: ``y -= a * x`` makes a temporary the size of ``x``
and passes over memory twice, on one thread. One ``?axpy`` call reads ``x`` and
``y`` once and writes ``y``, and OpenBLAS spreads a large one over its threads (the
ones ``threadpoolctl`` limits, as for matrix products). On 200,704 float32 values
in the caches the update took 26 µs instead of 65 at one thread, 13 at two; where
both arrays must come from memory (a whole W1 training step, one thread) the two
cost about the same, and the gain is the temporary not made and the second core.

The library is found where the process's mapped files can be listed
(``/proc/self/maps``: Linux, on x86-64 and arm64), NumPy's own first (its wheels
bundle OpenBLAS in ``numpy.libs``; a NumPy built against the system's BLAS finds
that one), under the symbol names of NumPy's wheels (``scipy_cblas_saxpy64_``,
``cblas_saxpy64_``) or plain CBLAS (``cblas_saxpy``), and each routine must pass a
small exact check before it is used. Anywhere this fails (macOS, Windows, an
unknown BLAS), :func:`axpy` returns False and the caller runs its NumPy code. The
length is passed as a 64-bit integer, which a CBLAS of 32-bit integers reads
correctly below 2**31 on these two architectures (integer arguments travel in
64-bit registers); longer vectors are refused there.

Results can differ from NumPy's ``y -= a * x`` in the last bit: BLAS may round
``y + a * x`` once (a fused multiply-add), as PyTorch's ``add_(x, alpha=a)`` does.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading

import numpy as np

# Below this many elements, NumPy's two passes cost less than the foreign call.
MIN_SIZE = 32768

_kernels = None  # {dtype: (routine, largest length)}, found at the first call
_lock = threading.Lock()
# An alpha below this rounds to 0 in the dtype, and BLAS then returns without
# touching y, where y + 0 * inf must be NaN: such updates go to NumPy.
_ZERO_BELOW = {np.dtype(np.float32): float(np.finfo(np.float32).smallest_subnormal) / 2,
               np.dtype(np.float64): 0.0}


def _loaded_blas_files() -> list[str]:
    """Paths of the mapped libraries whose names say BLAS (not cuBLAS), NumPy's own first."""
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        name = os.path.basename(path).lower()
        if path.startswith("/") and "blas" in name and "cublas" not in name and ".so" in name and path not in found:
            found.append(path)
    package = os.path.dirname(os.path.abspath(np.__file__))
    own = (package + os.sep, package + ".libs" + os.sep)  # numpy/.libs, numpy.libs beside it (the wheels)
    return sorted(found, key=lambda p: not p.startswith(own))


def _bind(library, name: str, ctype):
    routine = getattr(library, name)  # AttributeError where the library lacks it
    routine.argtypes = [ctypes.c_int64, ctype, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
    routine.restype = None
    return routine


def _passes(routine, dtype) -> bool:
    """Whether ``routine`` computes ``y += a * x`` on a small case whose result is exact."""
    x = np.arange(1, 8, dtype=dtype)
    y = np.full(7, 0.5, dtype=dtype)
    before = y.copy()
    routine(5, -2.0, x.ctypes.data, 1, y.ctypes.data, 1)  # only the first 5 of 7
    expected = before.copy()
    expected[:5] -= 2.0 * x[:5]
    return bool(np.array_equal(y, expected))


def _find() -> dict:
    kernels = {}
    if platform.machine().lower() not in ("x86_64", "amd64", "aarch64", "arm64") or sys.maxsize < 2**63 - 1:
        return kernels  # the integer arguments' width is only known to be harmless on these
    for path in _loaded_blas_files():
        try:  # the library already in the process, not a second copy
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except (OSError, AttributeError):
            continue
        for prefix, suffix, largest in (("scipy_cblas_", "64_", 2**63 - 1), ("cblas_", "64_", 2**63 - 1),
                                        ("cblas_", "", 2**31 - 1)):
            try:
                routines = {np.dtype(np.float32): _bind(library, f"{prefix}saxpy{suffix}", ctypes.c_float),
                            np.dtype(np.float64): _bind(library, f"{prefix}daxpy{suffix}", ctypes.c_double)}
            except AttributeError:
                continue
            for dtype, routine in routines.items():
                if _passes(routine, dtype):
                    kernels[dtype] = (routine, largest)
            if kernels:
                return kernels
    return kernels


def kernels() -> dict:
    """``{dtype: (routine, largest length)}`` of the routines found (empty where none)."""
    global _kernels
    if _kernels is None:
        with _lock:
            if _kernels is None:
                try:
                    _kernels = _find()
                except Exception:  # noqa: BLE001 -- anything unexpected: NumPy's code, as without BLAS
                    _kernels = {}
    return _kernels


def axpy(a: float, x, y) -> bool:
    """``y += a * x`` in place with BLAS, and True, where that pays and is safe: ``a`` a
    Python float that is not 0 in the arrays' dtype, NumPy float32 or float64 arrays
    of one dtype and shape, both C-contiguous and aligned, ``y`` writable, not
    overlapping, at least :data:`MIN_SIZE` elements. Otherwise nothing is done and it
    returns False."""
    found = (_kernels if _kernels is not None else kernels()).get(y.dtype)
    if (found is None or type(a) is not float or abs(a) <= _ZERO_BELOW[y.dtype] or y.size < MIN_SIZE
            or x.dtype != y.dtype or x.shape != y.shape):
        return False
    routine, largest = found
    fx, fy = x.flags, y.flags
    if (y.size > largest or not (fx.c_contiguous and fy.c_contiguous and fx.aligned and fy.aligned and fy.writeable)
            or np.may_share_memory(x, y)):
        return False
    routine(y.size, a, x.ctypes.data, 1, y.ctypes.data, 1)
    return True
