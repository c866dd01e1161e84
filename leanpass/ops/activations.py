"""Activations of ``torch.nn.functional`` that the standard has no function for:
SiLU, softplus with PyTorch's ``beta`` and ``threshold``, ELU, Mish and hardtanh.

Each forward computes with ``xp`` and never overflows: an ``exp`` only ever sees a
non-positive argument, or one clipped below PyTorch's threshold, so inputs of
+-1e4 give no floating-point warning. Each backward is PyTorch's formula, its kinks
included (hardtanh passes 0 at its bounds, ELU takes its exponential branch at 0),
written with ``xp`` so that a ``create_graph`` backward, which runs the forward
again on Tensors, differentiates it once more. Constants are Python floats, so
float32 stays float32.
"""

from __future__ import annotations

import operator

from ._op import op


def _sigmoid_parts(xp, a):
    """``(e, sigmoid(a))`` with ``e = exp(-|a|)``, which never overflows. ``|a|`` is
    ``where(a >= 0, a, -a)``, whose derivative at 0 is 1 (``abs``'s is 0), so a
    second derivative through it is right at 0 too."""
    e = xp.exp(-xp.where(a >= 0, a, -a))
    r = 1.0 / (1.0 + e)
    return e, xp.where(a >= 0, r, e * r)


@op("silu", saves=(0,), saves_out=False)
def silu(be, a):
    """``a * sigmoid(a)``; gradient ``sigmoid(a) * (1 + a * (1 - sigmoid(a)))``
    (PyTorch's ``silu_backward``)."""
    xp = be.xp
    s = _sigmoid_parts(xp, a)[1]
    out = be.quietly(operator.mul, a, s)  # (-inf * 0: nan, as PyTorch, without a warning)

    def backward(g):
        return (g * (s * (1.0 + a * (1.0 - s))),)

    return out, backward


@op("softplus", saves=(0,), saves_out=False)
def softplus_threshold(be, a, beta=1.0, threshold=20.0):
    """PyTorch's ``softplus(a, beta, threshold)``: ``log1p(exp(beta * a)) / beta``,
    and ``a`` itself where ``beta * a > threshold``; the gradient is ``e / (e + 1)``
    with ``e = exp(beta * a)`` (1 above the threshold). ``exp`` sees the product only
    where it is at most the threshold."""
    xp = be.xp
    z = a * beta
    over = z > threshold
    e = xp.exp(xp.where(over, 0.0, z))
    out = xp.where(over, a, xp.log1p(e) / beta)

    def backward(g):
        return (xp.where(over, g, g * e / (e + 1.0)),)

    return out, backward


@op("elu", saves=(0,), saves_out=False)
def elu(be, a, alpha=1.0):
    """``a`` where ``a > 0``, else ``alpha * (exp(a) - 1)``; the gradient is
    ``alpha * exp(a)`` where ``a <= 0`` (at 0 too, as PyTorch), else 1 (at NaN too:
    PyTorch passes the gradient there)."""
    xp = be.xp
    positive = a > 0
    below = xp.where(positive, 0.0, a)  # exp never sees a positive value
    out = xp.where(positive, a, alpha * xp.expm1(below))

    def backward(g):
        return (xp.where(a <= 0, g * (alpha * xp.exp(below)), g),)

    return out, backward


@op("mish", saves=(0,), saves_out=False)
def mish(be, a):
    """``a * tanh(softplus(a))``, softplus as ``max(a, 0) + log1p(exp(-|a|))``; the
    gradient is ``t + a * sigmoid(a) * (1 - t**2)`` with ``t = tanh(softplus(a))``
    (PyTorch's ``mish_backward``)."""
    xp = be.xp
    e, s = _sigmoid_parts(xp, a)
    t = xp.tanh(xp.where(a >= 0, a, 0.0) + xp.log1p(e))
    out = be.quietly(operator.mul, a, t)  # (-inf * 0: nan, as PyTorch, without a warning)

    def backward(g):
        return (g * (t + a * s * (1.0 - t * t)),)

    return out, backward


@op("hardtanh", saves=(0,), saves_out=False)
def hardtanh(be, a, min_val=-1.0, max_val=1.0):
    """``a`` clipped to ``[min_val, max_val]``. The gradient passes strictly inside
    the bounds and is 0 at them and beyond, as PyTorch's ``hardtanh_backward``
    (``a <= min_val or a >= max_val``: 0); it passes at NaN."""
    xp = be.xp
    out = xp.clip(a, min_val, max_val)
    blocked = (a <= min_val) | (a >= max_val)

    def backward(g):
        return (xp.where(blocked, 0.0, g),)

    return out, backward
