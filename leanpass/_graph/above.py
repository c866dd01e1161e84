"""What the graph core is handed by the layers above it.

The graph core imports nothing above the op records (DESIGN.md's layers). Three
things it needs live higher up, and the modules that define them hand them over
when they are imported (``import leanpass`` imports them all):

- ``tensor``: the Tensor class (:mod:`leanpass.tensor`), for telling a gradient
  Tensor from an array;
- ``leaf``: ``leaf(array, backend) -> Tensor`` outside any graph
  (:mod:`leanpass._node`), for gradients handed to hooks and returned by
  ``autograd.grad``;
- ``graph``: the rules a ``create_graph`` backward computes gradients with
  (:mod:`leanpass.autograd`): ``grads(node, parents, grad, changed)``,
  ``xp(tensor)``, ``store(tensor, grad)``.
"""

from __future__ import annotations

__all__ = ["above"]


class _Above:
    __slots__ = ("tensor", "leaf", "graph")

    def __init__(self):
        self.tensor = self.leaf = self.graph = None


above = _Above()
