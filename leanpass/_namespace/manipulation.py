"""Manipulation functions: shapes, axes, joining and splitting."""

from __future__ import annotations

import operator

from .. import ops
from .._checks import check_reshape, normalize_axis
from .._node import run1
from ._util import asarray_like

__all__ = ["reshape", "permute_dims"]


def reshape(x, /, shape, *, copy=None):
    """The same data in another ``shape`` (one entry may be -1)."""
    x = asarray_like(x, "reshape")
    try:
        shape = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise TypeError(f"reshape: shape must be a tuple of integers, got {shape!r}") from None
    check_reshape(x.shape, shape, "reshape")
    out = run1(ops.reshape, x, shape)
    return run1(ops.copy, out) if copy else out


def permute_dims(x, /, axes):
    """The axes of ``x`` in the order ``axes`` (a permutation of ``range(x.ndim)``)."""
    x = asarray_like(x, "permute_dims")
    axes = tuple(normalize_axis(a, x.ndim, "permute_dims") for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"permute_dims: axes {axes} are not a permutation of the axes of shape {x.shape}")
    return run1(ops.permute_dims, x, axes)
