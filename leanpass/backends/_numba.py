"""Row and patch kernels for NumPy arrays, compiled by Numba: the optional ``fuse``
extra (``pip install "leanpass[fuse]"``).

NumPy spends a pass over memory per operation, and twice that where a per-row value
is broadcast along rows shorter than its buffer (``x * scale[:, None]`` with rows of
a thousand elements costs two plain multiplies). Normalisation layers are made of
such operations: GroupNorm's forward and backward are about twenty passes over the
activations in NumPy, against eight in PyTorch's kernels; BatchNorm's are alike.
Each kernel here is one pass of a loop that LLVM vectorises.

A transposed convolution's patches are the other case: gathering them from an
``(N, C, H, W)`` gradient, or adding them back into an output, is a strided copy per
kernel offset whose innermost runs are one or two values in NumPy (or a transposed
copy first, itself slow through NumPy's strided loops). The two patch kernels move
each sample's values through a small pixel-major buffer that stays in the cache.

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

    @jit
    def patches2d(g, start, s0, s1, p0, p1, d0, d1, out):
        n_, c_, h_, w_ = g.shape
        b_, j_, _, k0_, k1_, _ = out.shape
        lo = max(0, start * s0 - p0)
        hi = min(h_, (start + b_ - 1) * s0 - p0 + (k0_ - 1) * d0 + 1)
        here = np.empty((max(hi - lo, 0), w_, c_), g.dtype)  # one sample's rows, pixel-major
        for n in range(n_):
            for c in range(c_):
                for y in range(lo, hi):
                    for x in range(w_):
                        here[y - lo, x, c] = g[n, c, y, x]
            for b in range(b_):
                for j in range(j_):
                    for k0 in range(k0_):
                        y = (start + b) * s0 - p0 + k0 * d0
                        for k1 in range(k1_):
                            x = j * s1 - p1 + k1 * d1
                            if 0 <= y < h_ and 0 <= x < w_:
                                for c in range(c_):
                                    out[b, j, n, k0, k1, c] = here[y - lo, x, c]
                            else:
                                for c in range(c_):
                                    out[b, j, n, k0, k1, c] = 0

    @jit
    def scatter_add2d(cols, start, s0, s1, p0, p1, d0, d1, out):
        b_, j_, n_, k0_, k1_, c_ = cols.shape
        h_, w_ = out.shape[:2]
        for b in range(b_):
            for j in range(j_):
                for k0 in range(k0_):
                    y = (start + b) * s0 - p0 + k0 * d0
                    if y < 0 or y >= h_:
                        continue
                    for k1 in range(k1_):
                        x = j * s1 - p1 + k1 * d1
                        if x < 0 or x >= w_:
                            continue
                        for n in range(n_):
                            for c in range(c_):
                                out[y, x, n, c] += cols[b, j, n, k0, k1, c]

    return affine, affine2, centered_squares, centered_dot, patches2d, scatter_add2d


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


def patches2d(g, start, shape, stride, padding, dilation):
    """The patches of ``g`` (``(N, C, H, W)``, any strides) for the output rows
    ``start, start + 1, ...`` of a convolution, pixel-major: ``out[b, j, n, k0, k1, c]
    = g[n, c, (start + b) * s0 - p0 + k0 * d0, j * s1 - p1 + k1 * d1]``, 0 outside
    ``g``; ``shape`` is ``(rows, width, k0, k1)``."""
    rows, width, k0, k1 = shape
    out = np.empty((rows, width, g.shape[0], k0, k1, g.shape[1]), g.dtype)
    _compiled()[4](g, start, *stride, *padding, *dilation, out)
    return out


def scatter_add2d(cols, start, stride, padding, dilation, out):
    """The adjoint of :func:`patches2d`, into ``out`` in place: ``out[y, x, n, c] +=
    cols[b, j, n, k0, k1, c]`` for ``y = (start + b) * s0 - p0 + k0 * d0`` and ``x = j *
    s1 - p1 + k1 * d1`` inside ``out`` (``(H, W, N, C)``, C-contiguous)."""
    _compiled()[5](cols, start, *stride, *padding, *dilation, out)


def kernels() -> dict:
    """The kernels as :class:`~leanpass.backends._base.FusedKernels` fields (offer
    them only where :func:`enabled`)."""
    return {"affine_rows": affine_rows, "affine2_rows": affine2_rows, "centered_squares": centered_squares,
            "centered_dot": centered_dot, "patches2d": patches2d, "scatter_add2d": scatter_add2d,
            "row_dtypes": _FLOATS}
