"""Every operation: its forward and its backward rule, side by side.

An operation is a function ``op(backend, *arrays, *params) -> (out, backward)``.
The forward computes with the backend's array namespace ``xp`` on raw arrays;
``backward(grad_out)`` returns one gradient per array input, with the shape of
the output's broadcast (the engine sums it back to the input's shape).
Backward functions capture the arrays they need, never a Tensor, so a graph has
no reference cycles and is freed as soon as the user drops it.

Only the array API standard is used here: what it lacks (scatter-add, host
transfer, silencing floating-point warnings) is a method of the backend.
Constants stay Python floats so that float32 stays float32.
"""

from __future__ import annotations

import math

from .backends import transfer

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_K = 0.044715


def _kept_shape(shape, axes):
    """``shape`` with the reduced ``axes`` kept as 1 (the ``keepdims=True`` shape)."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


# ---- binary: tensor (op) tensor ------------------------------------------------


def _pass_both(g):
    return g, g


def add(be, a, b):
    return a + b, _pass_both


def _sub_backward(g):
    return g, -g


def sub(be, a, b):
    return a - b, _sub_backward


def mul(be, a, b):
    def backward(g):
        return g * b, g * a

    return a * b, backward


def div(be, a, b):
    def backward(g):
        return g / b, -(g * a) / (b * b)

    return a / b, backward


def pow(be, a, b):
    """``a ** b``; as in PyTorch, the gradient is 0 (not nan) for ``b == 0`` (base)
    and for ``a == 0, b >= 0`` (exponent)."""
    xp = be.xp
    with be.quiet():
        out = a**b

    def backward(g):
        with be.quiet():
            ga = xp.where(b == 0, 0.0, g * b * a ** (b - 1.0))
            gb = xp.where((a == 0) & (b >= 0), 0.0, g * out * xp.log(a))
        return ga, gb

    return out, backward


def _transpose(xp, m):
    return m.T if m.ndim == 2 else xp.matrix_transpose(m)


def matmul(be, a, b, need_a=True, need_b=True):
    """``xp.matmul`` with 1-D and batched N-D operands; the engine sums batch broadcasts."""
    xp = be.xp
    out = a @ b  # the operator: standard, and without the namespace's wrapper
    a_vec = a.ndim == 1
    b_vec = b.ndim == 1

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


def linear(be, x, w, b=None, need_x=True, need_w=True, need_b=True):
    """``x @ w + b`` in one node (a layer's forward): ``x`` of shape ``(..., in)``,
    ``w`` of ``(in, out)``, ``b`` of ``(out,)`` or absent. The bias is added in
    place to the fresh product, and the gradients of ``w`` and ``b`` sum over all
    leading axes of ``x`` in one product and one sum."""
    xp = be.xp
    out = x @ w
    if b is not None:
        if b.dtype == out.dtype:
            out += b
        else:
            out = out + b

    def backward(g):
        gx = g @ w.T if need_x else None
        rows = g if g.ndim == 2 else xp.reshape(g, (-1, g.shape[-1]))
        gw = (x if x.ndim == 2 else xp.reshape(x, (-1, x.shape[-1]))).T @ rows if need_w else None
        if b is None:
            return gx, gw
        return gx, gw, (xp.sum(rows, axis=0) if need_b else None)

    return out, backward


# ---- binary: tensor (op) Python number -----------------------------------------


def _pass(g):
    return (g,)


def add_scalar(be, a, s):
    return a + s, _pass


def _neg_backward(g):
    return (-g,)


def rsub_scalar(be, a, s):
    """``s - a``."""
    return s - a, _neg_backward


def sub_scalar(be, a, s):
    return a - s, _pass


def mul_scalar(be, a, s):
    def backward(g):
        return (g * s,)

    return a * s, backward


def div_scalar(be, a, s):
    def backward(g):
        return (g / s,)

    return a / s, backward


def rdiv_scalar(be, a, s):
    """``s / a``."""
    out = s / a

    def backward(g):
        return (-(g * out) / a,)

    return out, backward


def pow_scalar(be, a, p):
    """``a ** p`` for a real Python number ``p``; ``** 2`` gives exactly ``2 * a``."""
    if p == 2:

        def backward(g):
            return (g * (2.0 * a),)

        return a * a, backward
    if p == 0:
        xp = be.xp

        def backward(g):
            return (xp.zeros_like(g),)

        return xp.ones_like(a), backward
    with be.quiet():
        out = a**p

    def backward(g):
        with be.quiet():
            return (g * (p * a ** (p - 1)),)

    return out, backward


def rpow_scalar(be, a, s):
    """``s ** a`` for a Python number ``s``; for ``s == 0`` the gradient is 0 where
    ``a >= 0`` (PyTorch's convention)."""
    xp = be.xp
    with be.quiet():
        out = s**a
    log_s = math.log(s) if s > 0 else (-math.inf if s == 0 else math.nan)

    def backward(g):
        if s == 0:
            with be.quiet():
                return (xp.where(a >= 0, 0.0, g * out * log_s),)
        return (g * out * log_s,)

    return out, backward


# ---- element-wise ----------------------------------------------------------------


def neg(be, a):
    return -a, _neg_backward


def relu(be, a):
    xp = be.xp
    fused = be.fused.get("relu_backward")  # one GPU kernel instead of three, where offered

    def backward(g):
        if fused is not None:
            return (fused(g, a),)
        # a float mask, not xp.where: branch-free, ~7x faster on NumPy for mixed signs
        return (g * xp.astype(a > 0, g.dtype),)

    return xp.maximum(a, 0.0), backward


def leaky_relu(be, a, negative_slope):
    xp = be.xp
    positive = a > 0

    def backward(g):
        return (xp.where(positive, g, g * negative_slope),)

    return xp.where(positive, a, a * negative_slope), backward


def exp(be, a):
    out = be.xp.exp(a)

    def backward(g):
        return (g * out,)

    return out, backward


def log(be, a):
    """Natural log; log(0) is -inf and log(x < 0) is nan, without warnings."""
    with be.quiet():
        out = be.xp.log(a)

    def backward(g):
        with be.quiet():
            return (g / a,)

    return out, backward


def sigmoid(be, a):
    """``1 / (1 + exp(-a))`` from ``e = exp(-|a|)``, which never overflows; unlike
    ``0.5 * tanh(0.5 a) + 0.5`` it keeps full relative precision for a << 0."""
    xp = be.xp
    e = xp.exp(-xp.abs(a))
    r = 1.0 / (1.0 + e)
    out = xp.where(a >= 0, r, e * r)
    fused = be.fused.get("sigmoid_backward")

    def backward(g):
        if fused is not None:
            return (fused(g, out),)
        g_out = g * out
        return (g_out - g_out * out,)  # g * out * (1 - out) without a scalar operand

    return out, backward


def softplus(be, a):
    """``log(1 + exp(a))`` as ``max(a, 0) + log1p(exp(-|a|))``: never overflows; its
    gradient is the sigmoid, exact at 0 too."""
    xp = be.xp
    e = xp.exp(-xp.abs(a))
    out = xp.maximum(a, 0.0) + xp.log1p(e)

    def backward(g):
        r = 1.0 / (1.0 + e)
        return (g * xp.where(a >= 0, r, e * r),)

    return out, backward


def tanh(be, a):
    out = be.xp.tanh(a)
    fused = be.fused.get("tanh_backward")

    def backward(g):
        if fused is not None:
            return (fused(g, out),)
        return (g - g * out * out,)  # g * (1 - out**2), without a scalar operand (slow in NumPy)

    return out, backward


def gelu(be, a):
    """GELU, tanh approximation (the array API has no erf)."""
    t = be.xp.tanh(_SQRT_2_OVER_PI * (a + _GELU_K * a * a * a))
    out = 0.5 * a * (1.0 + t)

    def backward(g):
        inner_grad = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_K * a * a)
        return (g * (0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * inner_grad),)

    return out, backward


def abs(be, a):
    xp = be.xp

    def backward(g):
        return (g * xp.sign(a),)

    return xp.abs(a), backward


def sqrt(be, a):
    with be.quiet():
        out = be.xp.sqrt(a)

    def backward(g):
        with be.quiet():
            return (g / (2.0 * out),)

    return out, backward


def clip(be, a, low, high):
    """Clamp to ``[low, high]`` (either may be None); the gradient passes inside the range."""
    xp = be.xp
    inside = None
    if low is not None:
        inside = a >= low
    if high is not None:
        inside = a <= high if inside is None else inside & (a <= high)

    def backward(g):
        return (g * xp.astype(inside, g.dtype),)

    # maximum, then minimum: the same on every device, also for low > high (all high, as PyTorch)
    out = a if low is None else xp.maximum(a, low)
    return (out if high is None else xp.minimum(out, high)), backward


# ---- reductions --------------------------------------------------------------------


def sum(be, a, axes, keepdims):
    xp = be.xp
    shape = a.shape

    def backward(g):
        if not keepdims:
            g = xp.reshape(g, _kept_shape(shape, axes))
        return (xp.broadcast_to(g, shape),)

    return xp.sum(a, axis=axes, keepdims=keepdims), backward


def mean(be, a, axes, keepdims):
    xp = be.xp
    shape = a.shape
    count = math.prod(shape[i] for i in axes)

    def backward(g):
        if not keepdims:
            g = xp.reshape(g, _kept_shape(shape, axes))
        return (xp.broadcast_to(g / count, shape),)

    return xp.mean(a, axis=axes, keepdims=keepdims), backward


def max(be, a, axes, keepdims):
    """Maximum; the gradient is shared equally between tied maxima."""
    xp = be.xp
    kept = xp.max(a, axis=axes, keepdims=True)
    out = kept if keepdims else xp.reshape(kept, tuple(n for i, n in enumerate(a.shape) if i not in axes))

    def backward(g):
        if not keepdims:
            g = xp.reshape(g, kept.shape)
        winners = xp.astype(a == kept, a.dtype)
        return (winners * (g / xp.sum(winners, axis=axes, keepdims=True)),)

    return out, backward


# ---- along an axis -------------------------------------------------------------------


def softmax(be, a, axis):
    xp = be.xp
    e = xp.exp(a - xp.max(a, axis=axis, keepdims=True))
    out = e / xp.sum(e, axis=axis, keepdims=True)

    def backward(g):
        return (out * (g - xp.sum(g * out, axis=axis, keepdims=True)),)

    return out, backward


def log_softmax(be, a, axis):
    xp = be.xp
    z = a - xp.max(a, axis=axis, keepdims=True)
    out = z - xp.log(xp.sum(xp.exp(z), axis=axis, keepdims=True))

    def backward(g):
        return (g - xp.exp(out) * xp.sum(g, axis=axis, keepdims=True),)

    return out, backward


def cross_entropy(be, logits, probs, axis, need_probs=False, one_hot=False):
    """Mean over the other axes of ``-sum(probs * log_softmax(logits), axis)``, in one
    node: its backward is ``(softmax * sum(probs) - probs) / count`` (the sum is 1
    for ``one_hot`` targets and is then not computed)."""
    xp = be.xp
    z = logits - xp.max(logits, axis=axis, keepdims=True)
    e = xp.exp(z)
    total = xp.sum(e, axis=axis, keepdims=True)
    log_probs = z - xp.log(total)
    count = math.prod(n for i, n in enumerate(logits.shape) if i != axis)
    out = -xp.sum(probs * log_probs) / count

    def backward(g):
        scale = g / count
        softmax = e / total
        if not one_hot:
            softmax = softmax * xp.sum(probs, axis=axis, keepdims=True)
        grad_logits = (softmax - probs) * scale
        return grad_logits, (-(log_probs * scale) if need_probs else None)

    return out, backward


# ---- shape ---------------------------------------------------------------------------


def reshape(be, a, shape):
    xp = be.xp
    old = a.shape

    def backward(g):
        return (xp.reshape(g, old),)

    return xp.reshape(a, shape), backward


def transpose(be, a, axes):
    xp = be.xp
    inverse = tuple(sorted(range(len(axes)), key=axes.__getitem__))

    def backward(g):
        return (xp.permute_dims(g, inverse),)

    return xp.permute_dims(a, axes), backward


def index_basic(be, a, key, set_key, set_shape):
    """``a[key]`` with integers, slices, ``None`` and ``...`` (a view or copy).

    ``set_key`` is ``key`` without its ``None`` entries and ``set_shape`` the
    shape of ``a[set_key]`` (``None`` when ``key`` has no ``None``): the backward
    writes the gradient there.
    """
    xp = be.xp
    shape, dtype = a.shape, a.dtype
    out = a[key]
    if set_shape is None:
        set_shape = out.shape

    def backward(g):
        buf = be.zeros(shape, dtype)
        buf[set_key] = xp.reshape(g, set_shape)
        return (buf,)

    return out, backward


def index_mask(be, a, mask):
    """``a[mask]`` for a boolean mask over the leading axes."""
    shape, dtype = a.shape, a.dtype

    def backward(g):
        buf = be.zeros(shape, dtype)
        buf[mask] = g
        return (buf,)

    return a[mask], backward


def take(be, a, index, axis):
    """``a`` at the (non-negative, in-range) 1-D integer ``index`` along ``axis``;
    repeated indices accumulate their gradients (a scatter-add)."""
    shape, dtype = a.shape, a.dtype

    def backward(g):
        return (be.index_add(be.zeros(shape, dtype), index, g, axis),)

    return be.xp.take(a, index, axis=axis), backward


# ---- device and dtype ---------------------------------------------------------------


def to(be, a, dst):
    """Move to backend ``dst``; the gradient moves back."""

    def backward(g):
        return (transfer(g, dst, be),)

    return transfer(a, be, dst), backward


def astype(be, a, dtype):
    xp = be.xp
    src = a.dtype

    def backward(g):
        return (xp.astype(g, src),)

    return xp.astype(a, dtype), backward
