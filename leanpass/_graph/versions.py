"""Version counters: how many times a tensor's array was changed in place, and when.

A tensor whose array is changed in place gets a :class:`Version` (shared with the
tensors that view the same memory) holding how many changes it has had and when,
on the same clock as the nodes' creation numbers (:data:`.modes.sequence`): a node
can tell whether a value it saved changed after it was made.
"""

from __future__ import annotations

import weakref
from collections import deque

from .modes import sequence

__all__ = ["Version", "version_of", "increment_version", "increment_versions", "latest_change"]

# [the creation number of the latest in-place change of any array]: a node made after it
# saw no input change since, and the engine checks nothing more (a list: read per node)
latest_change = [-1]


class Version:
    """The version counter of an array: ``count`` in-place changes so far, the last
    at ``last`` on the creation clock (``-1``: never), and the recent change times."""

    __slots__ = ("count", "changed", "last", "times", "views")

    def __init__(self):
        self.count = 0
        self.changed = -1  # when the array last changed in place
        self.last = -1  # when anything last happened: a change, or views made anew after one
        self.times = deque(maxlen=64)  # enough to name the version a node saw; the rest is history
        self.views = []  # weak references to the tensors that view this memory

    def remade(self) -> None:
        """The views of this memory were made anew (see ``leanpass._node``)."""
        self.last = next(sequence)

    def add_view(self, tensor) -> None:
        views = self.views
        views.append(weakref.ref(tensor))
        if len(views) > 32 and len(views) & (len(views) - 1) == 0:  # now and then: drop the dead
            views[:] = [r for r in views if r() is not None]

    def live_views(self) -> list:
        return [v for v in (r() for r in self.views) if v is not None]

    def bump(self) -> None:
        self.count += 1
        self.changed = self.last = latest_change[0] = now = next(sequence)
        self.times.append(now)

    def at(self, seq: int) -> str:
        """The version the array had when the node numbered ``seq`` was made."""
        later = sum(1 for t in self.times if t > seq)
        if later == len(self.times) and len(self.times) >= 32:
            return f"at most {self.count - later}"
        return str(self.count - later)


def version_of(tensor) -> Version:
    """The tensor's version counter, made on first need."""
    vc = tensor._vc
    if vc is None:
        node = tensor._node
        if node is None:
            vc = tensor._vc = Version()
        else:  # the node of its current value counts with it; it may have a counter already
            vc = node._vc  # (one made for a create_graph backward's stand-in of this value)
            if vc is None:
                vc = node._vc = Version()
            tensor._vc = vc
    return vc


def increment_version(tensor) -> None:
    """Record that ``tensor``'s array was changed in place (as
    ``torch.autograd.graph.increment_version``): a backward that needs the old
    values then raises instead of computing a wrong gradient. In-place operators,
    ``t[i] = v``, optimizer steps and ``load_state_dict`` call it; code that writes
    into ``tensor.data`` itself can too."""
    version_of(tensor).bump()


def increment_versions(tensors) -> None:
    """:func:`increment_version` of each tensor (an optimizer's step): the same,
    written out (no call per tensor)."""
    for t in tensors:
        vc = t._vc
        if vc is None:
            vc = version_of(t)
        vc.count += 1
        vc.changed = vc.last = latest_change[0] = now = next(sequence)
        vc.times.append(now)
