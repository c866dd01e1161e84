"""Operations of neural networks that the standard does not have: activations,
softmax along an axis, the fused linear layer and cross-entropy."""

from __future__ import annotations

import math

from ._op import op

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_K = 0.044715


@op("relu", saves=(0,), saves_out=False)
def relu(be, a):
    xp = be.xp
    fused = be.fused.relu_backward  # one GPU kernel instead of three, where offered

    def backward(g):
        if fused is not None:
            return (fused(g, a),)
        # a float mask, not xp.where: branch-free, ~7x faster on NumPy for mixed signs
        return (g * xp.astype(a > 0, g.dtype),)

    return xp.maximum(a, 0.0), backward


@op("leaky_relu", saves=(), saves_out=False)
def leaky_relu(be, a, negative_slope):
    xp = be.xp
    positive = a > 0

    def backward(g):
        return (xp.where(positive, g, g * negative_slope),)

    return xp.where(positive, a, a * negative_slope), backward


@op("sigmoid", saves=(), saves_out=True)
def sigmoid(be, a):
    """``1 / (1 + exp(-a))`` from ``e = exp(-|a|)``, which never overflows; unlike
    ``0.5 * tanh(0.5 a) + 0.5`` it keeps full relative precision for a << 0."""
    xp = be.xp
    e = xp.exp(-xp.abs(a))
    r = 1.0 / (1.0 + e)
    out = xp.where(a >= 0, r, e * r)
    fused = be.fused.sigmoid_backward

    def backward(g):
        if fused is not None:
            return (fused(g, out),)
        g_out = g * out
        return (g_out - g_out * out,)  # g * out * (1 - out) without a scalar operand

    return out, backward


@op("softplus", saves=(0,), saves_out=False)
def softplus(be, a):
    """``log(1 + exp(a))`` as ``max(a, 0) + log1p(exp(-|a|))``: never overflows; its
    gradient is the sigmoid, exact at 0 too. ``|a|`` is taken as ``where(a >= 0, a, -a)``,
    whose derivative at 0 is 1 (not ``abs``'s 0), so the second derivative, through this
    same rule, is the sigmoid's at 0 too."""
    xp = be.xp
    e = xp.exp(-xp.where(a >= 0, a, -a))
    out = xp.maximum(a, 0.0) + xp.log1p(e)

    def backward(g):
        r = 1.0 / (1.0 + e)
        return (g * xp.where(a >= 0, r, e * r),)

    return out, backward


@op("gelu", saves=(0,), saves_out=False)
def gelu(be, a):
    """GELU, tanh approximation (the array API has no erf)."""
    t = be.xp.tanh(_SQRT_2_OVER_PI * (a + _GELU_K * a * a * a))
    out = 0.5 * a * (1.0 + t)

    def backward(g):
        inner_grad = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_K * a * a)
        return (g * (0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * inner_grad),)

    return out, backward


@op("softmax", saves=(), saves_out=True)
def softmax(be, a, axis):
    xp = be.xp
    e = xp.exp(a - xp.max(a, axis=axis, keepdims=True))
    out = e / xp.sum(e, axis=axis, keepdims=True)

    def backward(g):
        return (out * (g - xp.sum(g * out, axis=axis, keepdims=True)),)

    return out, backward


@op("log_softmax", saves=(), saves_out=True)
def log_softmax(be, a, axis):
    xp = be.xp
    z = a - xp.max(a, axis=axis, keepdims=True)
    out = z - xp.log(xp.sum(xp.exp(z), axis=axis, keepdims=True))

    def backward(g):
        return (g - xp.exp(out) * xp.sum(g, axis=axis, keepdims=True),)

    return out, backward


@op("cross_entropy", saves=(1,), saves_out=False, needs=True)
def cross_entropy(be, logits, probs, axis, needs=(True, False)):
    """Mean over the other axes of ``-sum(probs * log_softmax(logits), axis)``, in one
    node: its backward is ``(softmax * sum(probs) - probs) / count``. A probability
    of 0 adds nothing, even where the logit is -inf (``0 * log 0`` counts as 0)."""
    xp = be.xp
    z = logits - xp.max(logits, axis=axis, keepdims=True)
    e = xp.exp(z)
    total = xp.sum(e, axis=axis, keepdims=True)
    log_probs = z - xp.log(total)
    count = math.prod(n for i, n in enumerate(logits.shape) if i != axis)
    out = -xp.sum(probs * xp.where(probs == 0, 0.0, log_probs)) / count
    need_probs = needs[1]

    def backward(g):
        scale = g / count
        softmax = e / total * xp.sum(probs, axis=axis, keepdims=True)
        grad_logits = (softmax - probs) * scale
        return grad_logits, (-(log_probs * scale) if need_probs else None)

    return out, backward


@op("cross_entropy", saves=(1,), saves_out=False)
def cross_entropy_index(be, logits, index, axis, bad=None):
    """Mean of ``-log_softmax(logits)`` at the class ``index`` along ``axis`` (an
    integer array of the logits' shape without ``axis``), in one node. The forward
    picks one value per row with a flat ``take``; the backward is
    ``(softmax - one_hot) / count``, the one-hot rows made there, by comparison.

    The indices must lie in ``[0, classes)``. Where checking them would make the
    device wait, ``bad`` is a 0-d bool array that says whether any was invalid
    (and has been clipped), and then makes the loss NaN.
    """
    xp = be.xp
    classes = logits.shape[axis]
    last = axis == logits.ndim - 1
    z = logits - xp.max(logits, axis=axis, keepdims=True)
    e = xp.exp(z)
    total = xp.sum(e, axis=axis, keepdims=True)
    count = math.prod(index.shape)
    rows = z if last else xp.moveaxis(z, axis, -1)  # the class axis last, each row contiguous
    flat = xp.reshape(index, (-1,)) + be.arange(count, index.dtype) * classes
    picked = xp.take(xp.reshape(rows, (-1,)), flat)
    out = (xp.sum(xp.log(total)) - xp.sum(picked)) / (count or math.nan)  # NaN for no rows, as PyTorch
    if bad is not None:
        out = xp.where(bad, xp.asarray(math.nan, dtype=out.dtype, device=be.xp_device), out)

    def backward(g):
        scale = g / (count or math.nan)
        grad = e * (scale / total)
        column = list(index.shape)
        column.insert(axis, 1)
        shape = [1] * logits.ndim
        shape[axis] = classes
        hot = xp.reshape(index, tuple(column)) == xp.reshape(be.arange(classes, index.dtype), tuple(shape))
        grad -= xp.astype(hot, grad.dtype) * scale
        return grad, None

    return out, backward


@op("linear", saves=(0, 1), saves_out=False, needs=True)
def linear(be, x, w, b=None, needs=(True, True, True)):
    """``x @ w + b`` in one node (a layer's forward): ``x`` of shape ``(..., in)``,
    ``w`` of ``(in, out)``, ``b`` of ``(out,)`` or absent. The leading axes of ``x``
    are one axis of rows for every product (one 2-D BLAS call each: a product
    broadcast over a stack is many times slower); the bias is added in place to the
    fresh product, and the gradients of ``w`` and ``b`` sum over all the rows."""
    xp = be.xp
    flat = x.ndim != 2
    rows = xp.reshape(x, (-1, x.shape[-1])) if flat else x
    out = rows @ w
    if b is not None:
        if b.dtype == out.dtype:
            out += b
        else:
            out = out + b
    if flat:
        out = xp.reshape(out, x.shape[:-1] + (w.shape[1],))
    need_x, need_w = needs[0], needs[1]
    need_b = b is not None and needs[2]

    def backward(g):
        grows = xp.reshape(g, (-1, g.shape[-1])) if flat else g
        gx = None
        if need_x:
            gx = grows @ w.T
            if flat:
                gx = xp.reshape(gx, x.shape)
        gw = rows.T @ grows if need_w else None
        if b is None:
            return gx, gw
        return gx, gw, (xp.sum(grows, axis=0) if need_b else None)

    return out, backward


@op("linear_relu", saves=(0, 1), saves_out=True, needs=True)
def linear_relu(be, x, w, b=None, needs=(True, True, True)):
    """``relu(x @ w + b)`` in one node: :func:`linear`, then ReLU on its output,
    whose positive entries are where the gradient passes (0 at 0, as PyTorch)."""
    out, linear_backward = linear.fn(be, x, w, b, needs=needs)
    out = be.xp.maximum(out, 0.0)
    fused = be.fused.relu_backward  # g * (out > 0) in one GPU kernel, where offered

    def backward(g):
        g = fused(g, out) if fused is not None else g * be.xp.astype(out > 0, g.dtype)
        return linear_backward(g)

    return out, backward
