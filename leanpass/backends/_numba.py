"""Row kernels for NumPy arrays, compiled by Numba: the optional ``fuse`` extra
(``pip install "leanpass[fuse]"``).

NumPy spends a pass over memory per operation, and twice that where a per-row value
is broadcast along rows shorter than its buffer (``x * scale[:, None]`` with rows of
a thousand elements costs two plain multiplies). Normalisation layers are made of
such operations: GroupNorm's forward and backward are about twenty passes over the
activations in NumPy, against eight in PyTorch's kernels; BatchNorm's are alike.
Each kernel here is one pass of a loop that LLVM vectorises.

Numba is imported, and a kernel compiled (once per dtype, then cached on disk),
the first time a kernel runs, never at ``import leanpass``. The ``cpu`` backend
offers them where :func:`enabled`; where Numba is not installed, or
``LEANPASS_FUSE=0`` is set, operations run their generic ``xp`` code, which
computes the same values.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import numpy as np

__all__ = ["kernels", "enabled"]

_FLOATS = (np.dtype("float32"), np.dtype("float64"))


def enabled() -> bool:
    """Whether the kernels are on: Numba importable and ``LEANPASS_FUSE`` not ``0``."""
    return os.environ.get("LEANPASS_FUSE", "1") != "0" and importlib.util.find_spec("numba") is not None


@functools.cache
def _compiled():
    """The jitted loops (imports Numba: the first call only)."""
    import numba

    jit = functools.partial(numba.njit, cache=True, nogil=True)

    @jit
    def affine(x, scale, shift, out):
        for r in range(x.shape[0]):
            a, b = scale[r], shift[r]
            for k in range(x.shape[1]):
                out[r, k] = x[r, k] * a + b

    @jit
    def affine2(g, a, x, c, d, out):
        for r in range(x.shape[0]):
            ar, cr, dr = a[r], c[r], d[r]
            for k in range(x.shape[1]):
                out[r, k] = g[r, k] * ar + (x[r, k] * cr + dr)

    # the sum may be reordered (LLVM then vectorises it), as NumPy's pairwise sums and
    # BLAS dot products reorder theirs; in float64 whatever the data's dtype
    @numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
    def centered_squares(x, mean, out):
        for r in range(x.shape[0]):
            m = np.float64(mean[r])
            total = 0.0
            for k in range(x.shape[1]):
                d = np.float64(x[r, k]) - m
                total += d * d
            out[r] = total

    @numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
    def centered_dot(g, x, mean, out):
        for r in range(x.shape[0]):
            m = np.float64(mean[r])
            total = 0.0
            for k in range(x.shape[1]):
                total += np.float64(g[r, k]) * (np.float64(x[r, k]) - m)
            out[r] = total

    return affine, affine2, centered_squares, centered_dot


def _rows(x):
    return np.ascontiguousarray(x)


def affine_rows(x, scale, shift):
    """``x * scale[:, None] + shift[:, None]`` for ``x`` of shape ``(R, K)``, one pass."""
    out = np.empty(x.shape, x.dtype)
    _compiled()[0](_rows(x), _rows(scale), _rows(shift), out)
    return out


def affine2_rows(g, a, x, c, d):
    """``g * a[:, None] + (x * c[:, None] + d[:, None])`` for ``g`` and ``x`` of shape
    ``(R, K)``, one pass."""
    out = np.empty(x.shape, x.dtype)
    _compiled()[1](_rows(g), _rows(a), _rows(x), _rows(c), _rows(d), out)
    return out


def centered_squares(x, mean):
    """``sum((x - mean[:, None]) ** 2, axis=1)`` for ``x`` of shape ``(R, K)``, summed
    in float64, returned in ``x``'s dtype: one pass, no centred copy."""
    out = np.empty(x.shape[0], np.float64)
    _compiled()[2](_rows(x), _rows(mean), out)
    return out.astype(x.dtype, copy=False)


def centered_dot(g, x, mean):
    """``sum(g * (x - mean[:, None]), axis=1)`` for ``g`` and ``x`` of shape ``(R, K)``,
    summed in float64, returned in ``x``'s dtype: one pass, no centred copy."""
    out = np.empty(x.shape[0], np.float64)
    _compiled()[3](_rows(g), _rows(x), _rows(mean), out)
    return out.astype(x.dtype, copy=False)


def kernels() -> dict:
    """The kernels as :class:`~leanpass.backends._base.FusedKernels` fields (offer
    them only where :func:`enabled`)."""
    return {"affine_rows": affine_rows, "affine2_rows": affine2_rows, "centered_squares": centered_squares,
            "centered_dot": centered_dot, "row_dtypes": _FLOATS}
