"""Operations of the standard's set section. The ``unique_*`` forwards return tuples of
arrays and carry no gradient; :data:`gather_first` makes the unique values
differentiable by reading them at their first occurrences."""

from __future__ import annotations

from ._op import op


def _unique(name, fields):
    @op(name, differentiable=False)
    def unique(be, a):
        """The library's ``unique_*``: a tuple of arrays (NaNs are distinct values)."""
        result = getattr(be.xp, name)(a)
        return (result,) if fields == 1 else tuple(result), None

    return unique


unique_all = _unique("unique_all", 4)
unique_counts = _unique("unique_counts", 2)
unique_inverse = _unique("unique_inverse", 2)
unique_values = _unique("unique_values", 1)


@op("unique_values", saves=(), saves_out=False, complex="holomorphic")
def gather_first(be, a, first, inverse):
    """The elements of the flattened ``a`` at the int64 indices ``first`` of the first
    occurrences of its unique values (``inverse``: the inverse indices of ``unique_all``).
    Gradient: each value's ``g`` goes back to its first occurrence, the rest of ``a``
    gets 0 (no scatter needed: an element is a first occurrence iff
    ``first[inverse[i]] == i``)."""
    xp = be.xp
    shape = a.shape
    size = 1
    for n in shape:
        size *= n

    def backward(g):
        slots = xp.reshape(inverse, (size,))
        is_first = xp.take(first, slots, axis=0) == be.arange(size, first.dtype)
        return (xp.reshape(xp.where(is_first, xp.take(g, slots, axis=0), 0.0), shape),)

    return xp.take(xp.reshape(a, (size,)), first, axis=0), backward
