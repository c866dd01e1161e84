"""The standard's set functions: ``unique_all``, ``unique_counts``, ``unique_inverse``
and ``unique_values``, on the flattened input.

Values are unique by equality: each NaN is a value of its own (count 1) and
``-0.0`` equals ``0.0``. Values come out sorted (NaNs last). The results are
named tuples with the standard's field names.

Gradients: the ``values`` of a tensor that requires grad are differentiable, each
value taking its gradient from (and giving it back to) the **first occurrence** of
that value in the flattened input; the other occurrences get 0. (PyTorch's
``torch.unique`` is not differentiable at all; this is the rule of ``x.flat[indices]``
with the ``indices`` of :func:`unique_all`.) Indices, inverse indices and counts are
int64 and never require grad.
"""

from __future__ import annotations

from typing import NamedTuple

from .. import ops
from .._graph.modes import is_grad_enabled
from .._node import _guarded, leaf, run1
from ..tensor import Tensor
from ._records import recorded
from ._util import asarray_like

__all__ = ["unique_all", "unique_counts", "unique_inverse", "unique_values"]


class UniqueAllResult(NamedTuple):
    """``unique_all``'s result: ``values``, ``indices`` (of the first occurrences),
    ``inverse_indices`` (of ``x``'s shape: ``values[inverse_indices]`` rebuilds ``x``)
    and ``counts``."""

    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


class UniqueCountsResult(NamedTuple):
    """``unique_counts``'s result: ``values`` and their ``counts``."""

    values: Tensor
    counts: Tensor


class UniqueInverseResult(NamedTuple):
    """``unique_inverse``'s result: ``values`` and ``inverse_indices`` (of ``x``'s shape)."""

    values: Tensor
    inverse_indices: Tensor


def _unique(x, op, keep):
    """``op``'s arrays as tensors; when ``x`` requires grad, ``unique_all`` runs instead,
    its ``values`` made differentiable and ``keep`` (positions in ``unique_all``'s
    tuple) picked from it."""
    name = op
    x = asarray_like(x, name)
    backend = x._backend
    grad = x._rg and is_grad_enabled()
    arrays = _guarded((ops.unique_all if grad else op).fn, backend, x._data)[0]
    outs = [leaf(a, backend, op) for a in arrays]
    if grad:
        outs[0] = run1(ops.gather_first, x, arrays[1], arrays[2])
        outs = [outs[i] for i in keep]
    return outs


@recorded(ops.unique_all, "set", dtype="own")
def unique_all(x, /):
    """The unique values of ``x`` (flattened), the index of the first occurrence of each,
    the inverse indices (of ``x``'s shape) and the counts, as a named tuple
    ``(values, indices, inverse_indices, counts)``. See the module's notes on NaNs and
    on gradients (to the first occurrence)."""
    return UniqueAllResult(*_unique(x, ops.unique_all, (0, 1, 2, 3)))


@recorded(ops.unique_counts, "set", dtype="own")
def unique_counts(x, /):
    """The unique values of ``x`` (flattened) and how often each occurs, as a named tuple
    ``(values, counts)``; each NaN counts once."""
    return UniqueCountsResult(*_unique(x, ops.unique_counts, (0, 3)))


@recorded(ops.unique_inverse, "set", dtype="own")
def unique_inverse(x, /):
    """The unique values of ``x`` (flattened) and the indices into them that rebuild ``x``
    (of ``x``'s shape), as a named tuple ``(values, inverse_indices)``."""
    return UniqueInverseResult(*_unique(x, ops.unique_inverse, (0, 2)))


@recorded(ops.unique_values, "set")
def unique_values(x, /):
    """The unique values of ``x`` (flattened), sorted, as a 1-D tensor of ``x``'s dtype;
    differentiable, with the gradient going to each value's first occurrence."""
    return _unique(x, ops.unique_values, (0,))[0]


# Tensor methods for these functions: {method name: function}. (None: PyTorch's
# t.unique() returns values only and NumPy has no method; lp.unique_values is there.)
METHODS: dict = {}
