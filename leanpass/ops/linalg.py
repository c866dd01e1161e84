"""Linear algebra in the main namespace: ``matmul`` and friends."""

from __future__ import annotations

from ._op import op


def _transpose(xp, m):
    return m.T if m.ndim == 2 else xp.matrix_transpose(m)


@op("@", saves=(0, 1), saves_out=False, needs=True)
def matmul(be, a, b, needs=(True, True)):
    """``xp.matmul`` with 1-D and batched N-D operands; the engine sums batch broadcasts."""
    xp = be.xp
    out = a @ b  # the operator: standard, and without the namespace's wrapper
    a_vec = a.ndim == 1
    b_vec = b.ndim == 1
    need_a, need_b = needs

    def backward(g):
        A = xp.reshape(a, (1, a.shape[0])) if a_vec else a
        B = xp.reshape(b, (b.shape[0], 1)) if b_vec else b
        if a_vec:
            g = xp.expand_dims(g, axis=-2 if g.ndim else 0)
        if b_vec:
            g = xp.expand_dims(g, axis=-1)
        ga = g @ _transpose(xp, B) if need_a else None
        gb = _transpose(xp, A) @ g if need_b else None
        if a_vec and ga is not None:
            ga = ga[..., 0, :]
        if b_vec and gb is not None:
            gb = gb[..., 0]
        return ga, gb

    return out, backward
