"""Creation functions that take an array: the triangles."""

from __future__ import annotations

from ._op import op


@op("tril", saves=(), saves_out=False, complex="holomorphic")
def tril(be, a, k):
    xp = be.xp
    return xp.tril(a, k=k), lambda g: (xp.tril(g, k=k),)


@op("triu", saves=(), saves_out=False, complex="holomorphic")
def triu(be, a, k):
    xp = be.xp
    return xp.triu(a, k=k), lambda g: (xp.triu(g, k=k),)
