"""Moving between devices and data types."""

from __future__ import annotations

from ..backends import transfer
from ._op import op


@op("to", saves=(), saves_out=False, complex="holomorphic")
def to(be, a, dst):
    """Move to backend ``dst``; the gradient moves back."""

    def backward(g):
        return (transfer(g, dst, be),)

    return transfer(a, be, dst), backward


def gradient_as(xp, grad, dtype):
    """``grad`` in ``dtype`` (an input's): the real part of a complex gradient for a real
    input, PyTorch's rule (a cast alone would warn, or be refused, and mean the same).
    Read by name, so it serves arrays and (``create_graph``) Tensors alike."""
    if "complex" in str(grad.dtype) and "complex" not in str(dtype):
        grad = xp.real(grad)
    return xp.astype(grad, dtype)


@op("astype", saves=(), saves_out=False, complex="own")
def astype(be, a, dtype):
    """A cast between dtypes that carry gradients (real and complex floating point); the
    gradient is cast back, its real part for a real input (PyTorch's)."""
    xp = be.xp
    src = a.dtype

    def backward(g):
        return (gradient_as(xp, g, src),)

    return be.quietly(xp.astype, a, dtype), backward  # 1e300 to float32: inf, without a warning


@op("astype", saves=(), saves_out=False, differentiable=False)
def astype_nograd(be, a, dtype):
    """A cast to a dtype that carries no gradient (integers, bool, complex)."""
    return be.quietly(be.xp.astype, a, dtype), None  # nan or inf to an integer: no warning (as PyTorch)


@op("copy", saves=(), saves_out=False, fresh=False, complex="holomorphic")
def copy(be, a):
    """A copy of ``a`` (its own memory); the gradient passes through."""
    return be.copy(a), _pass


def _pass(g):
    return (g,)
