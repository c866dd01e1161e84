"""Linear algebra in the main namespace: ``matmul``, ``matrix_transpose``,
``tensordot``, ``vecdot``."""

from __future__ import annotations

from ._util import asarray_like
from .manipulation import permute_dims
from .operators import matmul

__all__ = ["matmul", "matrix_transpose"]


def matrix_transpose(x, /):
    """A stack of matrices with each one transposed (the last two axes swapped)."""
    x = asarray_like(x, "matrix_transpose")
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose: x must have at least 2 dimensions, got shape {x.shape}")
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return permute_dims(x, tuple(perm))
