"""Graph nodes: one :class:`Node` per recorded operation, apart from the tensors.

A Tensor holds its data, gradient, ``requires_grad``, version counter and a reference
to the node that made its current value (``t._node``; None for a leaf and for a result
outside any graph), as PyTorch's ``grad_fn`` and Chainer's ``VariableNode``. The node
holds the op record, the backward function with the values it saved (``_backward``:
see below), how to run the operation again on Tensors (its replay, for
``create_graph``), its creation number on the graph's clock, and its parents: one edge
per tensor input, the input's node as it was when the node was made, or the input
Tensor itself where it had none (a leaf, or a value outside the graph).

An in-place change recorded in the graph gives the tensor a new node, whose parent is
the node it had; the nodes made before the change keep pointing at the old one, so
each node reaches the values it saw without walking any history.

An op's forward gives its backward as a function of the gradient. The hot ops give a
rule bound to what it saved, ``types.MethodType(rule, saved)`` (``g -> rule(saved,
g)``), rather than a closure: one object, made and called at C speed, where a closure
is a function, a cell tuple and a cell per value, each tracked by the garbage collector
until the graph is freed (W2, a chain of tiny operations: about 4.5 tracked objects per
operation became 2.75, and the collector's share of the time went from about 6% to
within the noise).

A node also keeps its output's array (``_data``; the tensor's own, so it costs no
memory while the tensor lives) and backend: the engine reads the shape and dtype a
gradient must have from it, and a ``create_graph`` backward wraps it as a Tensor
(:func:`leanpass._node.as_graph_tensor`) to run a rule on.
"""

from __future__ import annotations

__all__ = ["Node", "edge", "COMPLEX", "note_complex"]

# [whether a complex value ever entered a graph]: until one has, the engine skips its
# complex rules (a check per node). Set where a complex tensor comes to require grad
# (a leaf) and where an operation on real tensors that require grad gives a complex
# result (a complex operand, a cast, a transform); results of complex inputs need no
# notice, as their inputs had it.
COMPLEX = [False]


def note_complex() -> None:
    COMPLEX[0] = True


class Node:
    """One recorded operation (see the module's doc). Its attribute names are the
    tensor's where the engine reads either (``_data``, ``_backend``, ``_vc``, ``_rg``):
    a parent edge is a Node or a Tensor."""

    # _hooks (set only when a hook is registered: read with getattr): the gradient hooks
    # registered on the tensor while this node made its value, as PyTorch's
    __slots__ = ("_op", "_prev", "_backward", "_replay", "_seq", "_data", "_backend", "_vc", "_tensor",
                 "_hooks", "__weakref__")

    _rg = True  # a node exists only for a result that requires grad

    @property
    def op(self):
        """The operation's record (an ``Op``, a ``str`` of its name)."""
        return self._op

    @property
    def inputs(self) -> tuple:
        """The parent edges, one per tensor input: the node that made the input's value,
        or the input Tensor itself (a leaf, or a value outside the graph). After a
        backward call released this part of the graph: what it kept (the leaves it
        wrote into, the tensors that retain their gradients)."""
        return tuple(self._prev)

    @property
    def device(self) -> str:
        """The device of the node's output."""
        return self._backend.device

    def name(self) -> str:
        """The operation's name (PyTorch's ``grad_fn.name()``)."""
        return str(self._op)

    def __str__(self) -> str:
        return str(self._op)

    def __repr__(self) -> str:
        return f"<node {self._op!s}: output of shape {tuple(self._data.shape)}>"


def edge(t):
    """The parent edge a node made now records for the tensor ``t``: its node, or ``t``."""
    node = t._node
    return t if node is None else node
