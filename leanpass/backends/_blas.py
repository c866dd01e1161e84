"""BLAS's ``axpy`` (``y += a * x`` in place) for the NumPy backend, through SciPy's
BLAS wrappers (``scipy.linalg.blas``): a supported interface, no foreign symbols.

NumPy has no in-place scaled add: ``y -= a * x`` makes a temporary the size of ``x``
and passes over memory twice, on one thread. One ``?axpy`` call reads ``x`` and
``y`` once and writes ``y``, and SciPy's OpenBLAS spreads a large one over its
threads (the ones ``threadpoolctl`` limits, as for matrix products). Where both
arrays must come from memory (a whole W1 training step, one thread) the two cost
about the same; the gain is the temporary not made (peak memory) and the second
core.

Without SciPy (it is imported the first time a large update asks for it),
:func:`axpy` returns False and the caller runs its NumPy code. SciPy's wrappers take
32-bit lengths: longer vectors go to NumPy too.

Results can differ from NumPy's ``y -= a * x`` in the last bit: BLAS may round
``y + a * x`` once (a fused multiply-add), as PyTorch's ``add_(x, alpha=a)`` does.
"""

from __future__ import annotations

import threading

import numpy as np

# Below this many elements, NumPy's two passes cost less than the wrapper's call.
MIN_SIZE = 32768
LARGEST = 2**31 - 1  # SciPy's BLAS wrappers take the length as a 32-bit integer

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_routines = None  # {dtype: scipy's ?axpy}, made at the first call; empty without SciPy
_lock = threading.Lock()
# An alpha below this rounds to 0 in the dtype, and BLAS then returns without
# touching y, where y + 0 * inf must be NaN: such updates go to NumPy.
_ZERO_BELOW = {np.dtype(np.float32): float(np.finfo(np.float32).smallest_subnormal) / 2,
               np.dtype(np.float64): 0.0}


def routines() -> dict:
    """``{dtype: SciPy's ?axpy}`` for float32 and float64 (empty without SciPy)."""
    global _routines
    if _routines is None:
        with _lock:
            if _routines is None:
                try:
                    from scipy.linalg.blas import get_blas_funcs
                except ImportError:
                    _routines = {}
                else:
                    _routines = {dtype: get_blas_funcs("axpy", dtype=dtype) for dtype in _FLOATS}
    return _routines


def axpy(a: float, x, y) -> bool:
    """``y += a * x`` in place with BLAS, and True, where that pays and is safe: ``a`` a
    Python float that is not 0 in the arrays' dtype, NumPy float32 or float64 arrays
    of one dtype and shape, both C-contiguous and aligned in native byte order, ``y``
    writable, not overlapping, between :data:`MIN_SIZE` and :data:`LARGEST` elements.
    Otherwise nothing is done and it returns False."""
    if (type(a) is not float or y.size < MIN_SIZE or x.dtype != y.dtype or x.shape != y.shape
            or y.dtype not in _ZERO_BELOW or abs(a) <= _ZERO_BELOW[y.dtype]):
        return False
    routine = (_routines if _routines is not None else routines()).get(y.dtype)
    fx, fy = x.flags, y.flags
    if (routine is None or y.size > LARGEST
            or not (fx.c_contiguous and fy.c_contiguous and fx.aligned and fy.aligned and fy.writeable)
            or not (x.dtype.isnative and y.dtype.isnative) or np.may_share_memory(x, y)):
        return False
    flat = y.reshape(-1)  # a view: y is C-contiguous
    out = routine(x.reshape(-1), flat, a=a)
    if out is not flat:  # the wrapper worked on a copy (it should not, for such arrays): write it back
        flat[...] = out
    return True
