"""The pieces of a trace's record that the tracer writes and the plan replays: a
complex backward rule's convention, an operation's parameters filled in at each
replay, the exceptions a replay falls back on, where outputs go."""

from __future__ import annotations

import collections

from .._checks import broadcast_shapes
from .._fusion import VAL
from .._graph.engine import _is_complex, complex_rule
from .._node import _cast_back
from ..tensor import Tensor

# ---- the record ----------------------------------------------------------------------------------


_CAST_FIRST = "cast first"  # a schedule entry's gradients: cast to the inputs' dtypes before anything else


class _Complex:
    """A schedule entry's ``exact`` where a complex value meets the node (its value or
    an input's): the rule runs by PyTorch's convention for complex gradients, as the
    engine runs it (:func:`~leanpass._graph.engine.complex_rule`); ``exact`` is what the
    entry's would be otherwise. (Fused runs are of real dtypes: none of theirs.)"""

    __slots__ = ("op", "dtypes", "inputs_complex", "exact")

    def __init__(self, node, exact):
        self.op, self.exact = node._op, exact
        self.dtypes = tuple(p._data.dtype for p in node._prev)
        self.inputs_complex = any(map(_is_complex, self.dtypes))

    def grads(self, xp, backward, g) -> list:
        if self.exact is _CAST_FIRST:  # a rule of mixed dtypes: cast as eagerly (a real input's real part, copied)
            backward = _cast_back(backward, xp, self.dtypes)
        if self.inputs_complex or _is_complex(g):  # (the engine's test: a real node may get a complex gradient)
            return complex_rule(xp, self.op, backward, g, self.dtypes)
        return backward(g)


class _Stale(Exception):
    """A replay met something the trace did not see (a shape): the call runs eagerly."""


class _Retry(Exception):
    """A replay raised before it changed any state: this call runs eagerly (a ``try``
    in the function may catch the error, which the replay cannot follow), later ones
    replay again."""


class _Branch(_Retry):
    """A check that decides a path (a target equal to ``ignore_index``, a mask found
    causal) failed before the replay changed any state: eager code takes another path
    here, which another trace of the same key may hold."""


def _has_array(backend, value) -> bool:
    """Whether ``value`` is, or holds (in tuples, lists, dicts), an array of ``backend``."""
    if isinstance(value, (tuple, list)):  # a list the op fills (ops.norm.Statistics) holds no input
        return not getattr(value, "filled_by_the_op", False) and any(_has_array(backend, v) for v in value)
    if isinstance(value, dict):
        return any(_has_array(backend, v) for v in value.values())
    return backend.is_array(value) and getattr(value, "shape", None) is not None


class _Recipe:
    """Parameters of an operation among which are arrays of the call (an index tensor's
    array): ``fill(get)`` gives them with the replay's arrays in those places."""

    __slots__ = ("params", "arrays", "kind")

    def __init__(self, params, arrays):
        self.params, self.arrays, self.kind = params, arrays, type(params)

    def fill(self, get):
        params = dict(self.params) if self.kind is dict else list(self.params)
        for position, src in self.arrays:
            params[position] = get(src)
        return params if self.kind is dict else tuple(params)


def _keeps(label, t, o) -> bool:
    """Whether ``t (op) o`` has ``t``'s dtype and shape (``o``: a Tensor)."""
    if o._data.dtype != t._data.dtype:
        return False
    try:
        return tuple(broadcast_shapes(label, t.shape, o.shape)) == tuple(t.shape)
    except ValueError:
        return False


def _state_items(state) -> tuple:
    """An optimizer's ``state`` as one tuple: each parameter's key, its dict and the
    dict's keys and values (the objects themselves: a Tensor replaced is a change)."""
    items = []
    for key, entries in dict.items(state):
        items += (key, entries)
        if isinstance(entries, dict):
            for pair in dict.items(entries):
                items += pair
    return tuple(items)


def _output_slots(spec) -> list:
    """The slots a result ``spec`` (:meth:`Tracer._outputs`) reads."""
    if spec is None:
        return []
    kind = spec[0]
    if kind == "T":  # (and the slot of its .grad, where it keeps its gradient)
        return ([spec[1][1]] if spec[1][0] == VAL else []) + ([spec[4]] if len(spec) == 5 else [])
    if kind == "host":
        return [spec[1]]
    if kind in (list, dict, collections.OrderedDict) or (isinstance(kind, type) and issubclass(kind, tuple)):
        items = spec[1].values() if isinstance(spec[1], dict) else spec[1]  # (a named tuple's, an OrderedDict's too)
        return [s for item in items for s in _output_slots(item)]
    return []


def _share_memory(a: Tensor, b: Tensor) -> bool:
    """Whether ``a`` and ``b`` are one tensor or may share memory (by their arrays' bounds)."""
    return a is b or (a._backend is b._backend and a._backend.shares_memory(a._data, b._data))
