"""Operations of neural networks that the standard does not have: activations,
softmax along an axis, the fused linear layer, layer normalisation and cross-entropy."""

from __future__ import annotations

import math

from ._op import Op, op

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_K = 0.044715


@op("relu", saves=(0,), saves_out=False)
def relu(be, a):
    """``maximum(a, 0)``; the gradient passes where ``a`` is not ``<= 0``: not at 0, and
    at NaN (PyTorch's ``threshold_backward``), through ``be.relu_mask`` (one fused
    kernel on CUDA)."""

    def backward(g):
        return (be.relu_mask(g, a),)

    return be.xp.maximum(a, 0.0), backward


@op("leaky_relu", saves=(), saves_out=False)
def leaky_relu(be, a, negative_slope):
    xp = be.xp
    positive = a > 0

    def backward(g):
        return (xp.where(positive, g, g * negative_slope),)

    return xp.where(positive, a, a * negative_slope), backward


def _sigmoid_rule(xp, inputs, out, g):
    g_out = g * out
    return (g_out - g_out * out,)  # g * out * (1 - out) without a scalar operand


@op("sigmoid", saves=(), saves_out=True, rule=_sigmoid_rule)
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
        return _sigmoid_rule(xp, (), out, g)

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
    """GELU, tanh approximation (the array API has no erf):
    ``0.5 a (1 + tanh(c (a + k a^3)))``, with ``c = sqrt(2 / pi)`` and ``k = 0.044715``.
    Each full-size temporary is fresh and changed in place (never the output of
    ``tanh``, which its own backward reads when this rule is replayed on Tensors)."""
    xp = be.xp
    fused = be.fused
    made = None if fused.gelu_tanh is None else fused.gelu_tanh(a, _SQRT_2_OVER_PI, _GELU_K)  # (None: declined)
    # a^3 overflows to inf for huge a (tanh is 1), -inf * 0 is nan
    t, out = be.quietly(_gelu_tanh, xp, a) if made is None else made

    def backward(g):
        if fused.gelu_tanh_backward is not None:  # the operations below in one pass
            grad = fused.gelu_tanh_backward(g, a, t, _SQRT_2_OVER_PI, _GELU_K)
            if grad is not None:
                return (grad,)
        # d/da = 0.5 (1 + t) - u (1 + 3 k a^2) a, with u = 0.5 c (t^2 - 1): exactly 0 where tanh
        # saturates. Each a is multiplied in after u, so no power of a is ever formed alone
        # (a^2 overflows for |a| > 1e154, and inf * 0 would be NaN); where t^2 < 1, a is moderate
        u = t * t
        u -= 1.0
        u *= 0.5 * _SQRT_2_OVER_PI
        slope = a * (3.0 * _GELU_K)
        slope *= u
        slope *= a
        slope += u  # u (1 + 3 k a^2); u is not changed after the product that reads it
        slope *= a
        grad = t + 1.0
        grad *= 0.5
        grad -= slope
        grad *= g
        return (grad,)

    return out, backward


def _gelu_tanh(xp, a):
    """:func:`gelu`'s ``tanh(c (a + k a^3))`` and output."""
    inner = a * a
    inner *= _SQRT_2_OVER_PI * _GELU_K
    inner += _SQRT_2_OVER_PI
    inner *= a  # c (a + k a^3)
    t = xp.tanh(inner)
    out = t + 1.0
    out *= 0.5
    out *= a  # a last: 0.5 (1 + t) <= 1, so gelu(a) never overflows (a (1 + t) is inf for a > max / 2)
    return t, out


_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = math.sqrt(0.5) * (2.0 / math.sqrt(math.pi)) * 0.5  # PyTorch's kBeta, to its last bit


@op("gelu", saves=(0,), saves_out=False)
def gelu_erf(be, a):
    """GELU, the exact form (PyTorch's ``approximate="none"``): ``a * cdf`` with the
    standard normal distribution function ``cdf = 0.5 (1 + erf(a / sqrt 2))`` (PyTorch's
    expression, so the values agree with its to the last bits); the gradient is
    ``cdf + a * pdf``, ``pdf = exp(-a^2 / 2) / sqrt(2 pi)``. The erf comes from the
    backend's special functions (``be.special``; NotImplementedError where there are none).
    Large ``|a|`` never overflows: ``a^2`` may be inf inside ``exp`` (pdf 0), never ``a`` times it."""
    xp = be.xp
    cdf = be.special.erf(a * _SQRT_HALF)
    cdf = (cdf + 1.0) * 0.5
    out = be.quietly(_times, a, cdf)  # -inf * 0: nan (as PyTorch's), without a warning

    def backward(g):
        pdf = _INV_SQRT_2PI * xp.exp(-0.5 * (a * a))
        return (g * (cdf + a * pdf),)

    return out, backward


def _times(a, b):
    return a * b


def _top(xp, a, axis):
    """The largest value along ``axis`` (kept), subtracted before ``exp``; 0 along an
    empty axis, which has no values to shift (and no maximum)."""
    return xp.max(a, axis=axis, keepdims=True) if a.shape[axis] else 0.0


def _softmax_rule(xp, inputs, out, g, axis):
    grad = g - xp.sum(g * out, axis=axis, keepdims=True)
    return (grad * out,)


@op("softmax", saves=(), saves_out=True, rule=_softmax_rule)
def softmax(be, a, axis):
    xp = be.xp
    out = be.quietly(_softmax, xp, a, axis)  # inf - inf where a row holds inf: nan, without a warning

    def backward(g):  # _softmax_rule, written into its own temporary
        grad = g - xp.sum(g * out, axis=axis, keepdims=True)
        grad *= out
        return (grad,)

    return out, backward


def _softmax(xp, a, axis):
    e = xp.exp(a - _top(xp, a, axis))
    return e / xp.sum(e, axis=axis, keepdims=True)


def _log_softmax_rule(xp, inputs, out, g, axis):
    return (g - xp.exp(out) * xp.sum(g, axis=axis, keepdims=True),)


@op("log_softmax", saves=(), saves_out=True, rule=_log_softmax_rule)
def log_softmax(be, a, axis):
    xp = be.xp
    out = be.quietly(_log_softmax, xp, a, axis)  # inf - inf where a row holds inf: nan, without a warning

    def backward(g):
        return _log_softmax_rule(xp, (), out, g, axis)

    return out, backward


def _log_softmax(xp, a, axis):
    z = a - _top(xp, a, axis)
    return z - xp.log(xp.sum(xp.exp(z), axis=axis, keepdims=True)) if a.shape[axis] else z


@op("cross_entropy", saves=(1,), saves_out=False, needs=True)
def cross_entropy(be, logits, probs, axis, needs=(True, False)):
    """Mean over the other axes of ``-sum(probs * log_softmax(logits), axis)``, in one
    node: its backward is ``(softmax * sum(probs) - probs) / count``. A probability
    of 0 adds nothing, even where the logit is -inf (``0 * log 0`` counts as 0)."""
    xp = be.xp
    z = logits - _top(xp, logits, axis)
    e = xp.exp(z)
    total = xp.sum(e, axis=axis, keepdims=True)
    count = math.prod(n for i, n in enumerate(logits.shape) if i != axis)
    if not logits.shape[axis]:  # no classes: NaN, as PyTorch (and no log of 0)
        log_probs = z
        out = xp.sum(probs) * math.nan
    else:
        log_probs = z - xp.log(total)
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
    picks one value per row (``be.take_rows``); the backward is ``(softmax -
    one_hot) / count``, the one subtracted in place where the library allows it
    (``be.sub_at_rows``).

    The indices must lie in ``[0, classes)``. Where checking them would make the
    device wait, ``bad`` is a 0-d bool array that says whether any was invalid
    (and has been clipped), and then makes the loss NaN.
    """
    xp = be.xp
    classes = logits.shape[axis]
    last = axis == logits.ndim - 1
    count = math.prod(index.shape)
    if last and logits.ndim == 2 and bad is None and be.fused.cross_entropy_rows is not None:
        found = be.fused.cross_entropy_rows(logits, index)  # three passes (the class axis last, in rows)
        if found is not None:
            return _cross_entropy_rows(be, *found, index, count)
    z = logits - xp.max(logits, axis=axis, keepdims=True)
    e = xp.exp(z)
    total = xp.sum(e, axis=axis, keepdims=True)
    flat = index if index.ndim == 1 else xp.reshape(index, (count,))
    rows = z if last else xp.moveaxis(z, axis, -1)  # the class axis last
    picked = be.take_rows(rows if rows.ndim == 2 else xp.reshape(rows, (count, classes)), flat)
    # mean of log(total) - picked; NaN for no rows, as PyTorch
    out = xp.sum(xp.log(xp.reshape(total, (count,))) - picked) * (1.0 / count if count else math.nan)
    if bad is not None:
        out = xp.where(bad, xp.asarray(math.nan, dtype=out.dtype, device=be.xp_device), out)

    def backward(g):
        scale = g / (count or math.nan)
        grad = e * (scale / total)  # softmax / count, a fresh array
        if last and grad.ndim == 2:
            return be.sub_at_rows(grad, flat, scale), None
        rows = grad if last else xp.moveaxis(grad, axis, -1)
        shape = rows.shape
        rows = be.sub_at_rows(xp.reshape(rows, (count, classes)), flat, scale)
        rows = xp.reshape(rows, shape)
        return (rows if last else xp.moveaxis(rows, -1, axis)), None

    return out, backward


def _cross_entropy_rows(be, out, softmax, index, count):
    """:func:`cross_entropy_index` from the backend's ``cross_entropy_rows`` (the loss and
    the rows' softmax): the loss, and the backward, ``(softmax - one_hot) * g / count``."""

    def backward(g):
        scale = g / count
        return be.sub_at_rows(softmax * scale, index, scale), None

    return out, backward


@op("linear", saves=(0, 1), saves_out=False, needs=True, complex="holomorphic")
def linear(be, x, w, b=None, needs=(True, True, True), relu=False):
    """``x @ w.T + b`` in one node (a layer's forward): ``x`` of shape ``(..., in)``,
    ``w`` of ``(out, in)`` (PyTorch's layout), ``b`` of ``(out,)`` or absent. The
    leading axes of ``x`` are one axis of rows for every product (one 2-D BLAS call
    each: a product broadcast over a stack is many times slower); ``w.T`` is a view,
    which BLAS reads transposed (no copy). The bias is added in place to the fresh
    product, and the gradients of ``w`` (``g.T @ x``, fresh and ``(out, in)``) and
    ``b`` sum over all the rows. ``relu``: ReLU on the output too (in the bias's pass
    where the backend's ``bias_rows`` kernel takes the arrays), and the backward then
    passes the gradient where the output is positive (:func:`linear_relu`)."""
    xp = be.xp
    flat = x.ndim != 2
    rows = xp.reshape(x, (math.prod(x.shape[:-1]), x.shape[-1])) if flat else x  # not -1: x may be empty
    out = be.matmul(rows, w.T)  # (MKL's where the cpu device has it: backends/_mkl.py)
    if b is not None:
        out = be.add_bias(out, b, relu)
    elif relu:
        out = be.relu_fresh(out)
    if flat:
        out = xp.reshape(out, x.shape[:-1] + (w.shape[0],))
    need_x, need_w = needs[0], needs[1]
    need_b = b is not None and needs[2]
    positive = out if relu else None  # (the backward holds the output only where it reads it)

    def backward(g):
        if relu:
            g = be.relu_mask(g, positive)
        grows = xp.reshape(g, rows.shape[:1] + g.shape[-1:]) if flat else g
        gx = None
        if need_x:
            gx = be.matmul(grows, w)
            if flat:
                gx = xp.reshape(gx, x.shape)
        gw = be.matmul(grows.T, rows) if need_w else None
        if b is None:
            return gx, gw
        return gx, gw, (be.sum_rows(grows) if need_b else None)

    return out, backward


@op("linear_relu", saves=(0, 1), saves_out=True, needs=True)
def linear_relu(be, x, w, b=None, needs=(True, True, True)):
    """``relu(x @ w.T + b)`` in one node: :func:`linear`, then ReLU on its output,
    whose positive entries are where the gradient passes (0 at 0, as PyTorch)."""
    return linear.fn(be, x, w, b, needs=needs, relu=True)


def _mlp(be, x, *params, needs):
    """``relu(... relu(x @ w0.T + b0) ...) @ w_last.T + b_last`` in one node: ``params``
    are the weights (``(out, in)`` each, PyTorch's layout), then as many biases; ReLU between the
    layers, none after the last. The forward keeps each layer's input (the ReLU
    outputs: where they are positive, the gradient passes); the backward runs the
    layers in reverse, as :func:`linear_relu` does one, and stops at the first
    layer below which nothing needs a gradient. The layers are written out here
    rather than chained through ``linear_relu.fn``: one closure for the node
    instead of one per layer, measured about 1% of a W1 step."""
    xp = be.xp
    depth = len(params) // 2
    weights, biases = params[:depth], params[depth:]
    flat = x.ndim != 2
    h = xp.reshape(x, (math.prod(x.shape[:-1]), x.shape[-1])) if flat else x  # not -1: x may be empty
    inputs = []
    for i in range(depth):
        inputs.append(h)
        out = be.matmul(h, weights[i].T)  # a transposed view: BLAS reads it as it is
        h = be.add_bias(out, biases[i], relu=i < depth - 1)  # out is this node's own
    out = xp.reshape(h, x.shape[:-1] + (h.shape[-1],)) if flat else h
    # below layer i, does anything need a gradient? (x, or a weight or bias of a layer < i)
    below = [bool(needs[0])]
    for i in range(depth):
        below.append(below[-1] or bool(needs[1 + i]) or bool(needs[1 + depth + i]))

    def backward(g):
        grads = [None] * (1 + 2 * depth)
        g = xp.reshape(g, (inputs[0].shape[0], g.shape[-1])) if flat else g
        for i in range(depth - 1, -1, -1):
            if needs[1 + i]:
                grads[1 + i] = be.matmul(g.T, inputs[i])  # (out, in), fresh
            if needs[1 + depth + i]:
                grads[1 + depth + i] = be.sum_rows(g)
            if not below[i]:
                break
            g = be.matmul(g, weights[i])
            if i:
                g = be.relu_mask(g, inputs[i])
            elif flat:
                g = xp.reshape(g, x.shape)
        if needs[0]:
            grads[0] = g
        return tuple(grads)

    return out, backward


@op("multi_head_self_attention", saves=(0,), saves_out=False, needs=True)
def self_attention(be, qkv, mask=None, heads=1, scale=1.0, causal=False, needs=(True, True)):
    """Multi-head self-attention's core on the packed projections ``qkv`` of shape ``(N,
    L, 3E)`` (each position's query, key and value side by side, ``heads`` heads of ``E
    / heads`` features each: PyTorch's ``in_proj`` order), in one node: the heads'
    :func:`attention` (``mask`` as there, broadcasting to ``(N, heads, L, L)``), their
    outputs side by side, ``(N, L, E)``. The heads are views of ``qkv``, and the
    backward writes the packed gradient in one pass, where splitting ``qkv`` into three
    views made one zero array of the packed size per part, summed them and copied the
    sum (that path alone, written out in NumPy for W6's block, float32: 3.9 ms against
    0.33)."""
    xp = be.xp
    n, length, packed = qkv.shape
    width = packed // 3
    d = width // heads
    parts = xp.reshape(qkv, (n, length, 3, heads, d))
    q, k, v = (xp.permute_dims(parts[:, :, i, ...], (0, 2, 1, 3)) for i in range(3))
    need_mask = mask is not None and mask.dtype != xp.bool and needs[1]
    out, backward_heads = attention.fn(be, q, k, v, mask, scale, causal, needs=(needs[0],) * 3 + (need_mask,))
    out = xp.reshape(xp.permute_dims(out, (0, 2, 1, 3)), (n, length, width))

    def backward(g):
        grads = backward_heads(xp.permute_dims(xp.reshape(g, (n, length, heads, d)), (0, 2, 1, 3)))
        gqkv = None
        if needs[0]:
            gqkv = xp.reshape(be.stack([xp.permute_dims(gp, (0, 2, 1, 3)) for gp in grads[:3]], axis=2),
                              (n, length, packed))
        return (gqkv,) if mask is None else (gqkv, grads[3])

    return out, backward


_MLP_OPS: dict = {}


def mlp(depth: int) -> Op:
    """The one-node MLP of ``depth`` layers (see :func:`_mlp`): inputs ``x``, the
    weights, the biases; its backward reads ``x`` and the weights."""
    found = _MLP_OPS.get(depth)
    if found is None:
        found = _MLP_OPS[depth] = Op("mlp", _mlp, saves=range(depth + 1), saves_out=False, needs=True)
    return found


@op("layer_norm", saves=(1,), saves_out=False, needs=True)
def layer_norm(be, x, weight=None, bias=None, count=1, eps=1e-5, needs=(True, True, True)):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` in one node, the mean and the
    biased variance over the last ``count`` axes of ``x``; ``weight`` and ``bias`` (if
    given: ``bias`` only with ``weight``) have the shape of those axes.

    With ``xhat`` the normalised input, ``gw = g * weight``, ``n`` values per row and
    the means ``m_g = mean(gw)``, ``m_gx = mean(gw * xhat)`` over a row, the gradients
    are ``x: (gw - m_g - xhat * m_gx) / std``, ``weight: sum(g * xhat)`` and ``bias:
    sum(g)``, these two over the leading axes."""
    xp = be.xp
    axes = tuple(range(x.ndim - count, x.ndim))
    lead = tuple(range(x.ndim - count))
    fused = be.fused.layer_norm_rows if count == 1 else None
    made = None if fused is None else fused(x, weight, bias, eps)  # one pass per row where the backend can
    if made is not None:
        xhat, out, row_inv_std = made  # (one float64 per row: the generic backward reshapes it if it must)
        inv_std = None
    else:
        xhat, out, inv_std = be.quietly(_normalised, be, x, weight, bias, axes, eps)  # (eps 0, variance 0: NaN)
    need_x = needs[0]
    need_w = weight is not None and needs[1]
    need_b = bias is not None and needs[2]

    def lead_sum(t):  # a new array, also without leading axes (the op's gradients are fresh)
        return xp.sum(t, axis=lead) if lead else be.copy(t)

    def backward(g):
        nonlocal inv_std
        if made is not None:
            found = be.fused.layer_norm_rows_backward(g, xhat, row_inv_std, weight)
            if found is not None:
                return tuple(grad if need else None for grad, need, given in
                             zip(found, (need_x, need_w, need_b), (True, weight is not None, bias is not None))
                             if given)
            if inv_std is None:  # declined (another dtype of g): the generic rule, on the kernel's values
                inv_std = xp.reshape(xp.astype(row_inv_std, xhat.dtype), x.shape[:-1] + (1,))
        grads = [None]
        if need_x:
            gw = g if weight is None else g * weight
            shift = xhat * xp.mean(gw * xhat, axis=axes, keepdims=True)
            shift += xp.mean(gw, axis=axes, keepdims=True)
            gx = gw - shift
            gx *= inv_std
            grads[0] = gx
        if weight is not None:
            grads.append(lead_sum(g * xhat) if need_w else None)
        if bias is not None:
            grads.append(lead_sum(g) if need_b else None)
        return tuple(grads)

    return out, backward


def _normalised(be, x, weight, bias, axes, eps):
    """:func:`layer_norm`'s forward with ``xp``: ``(xhat, out, inv_std)``."""
    xp = be.xp
    # shifted by each row's first value first (the variance does not change): a constant
    # row is then exactly 0, where the rounding of its mean would leave +-1 ulp that a
    # small eps scales up to +-1 (PyTorch's Welford mean is exact there)
    shifted = x - x[(...,) + (slice(0, 1),) * len(axes)]
    centered = shifted - xp.mean(shifted, axis=axes, keepdims=True)
    inv_std = 1.0 / xp.sqrt(xp.mean(centered * centered, axis=axes, keepdims=True) + eps)
    xhat = centered * inv_std
    if weight is None:
        return xhat, be.copy(xhat), inv_std  # backward reads xhat: a change of the output in place must not reach it
    out = xhat * weight
    if bias is not None:
        if bias.dtype == out.dtype:
            out += bias
        else:
            out = out + bias
    return xhat, out, inv_std


def _masked_softmax(xp, scores, allowed, masked):
    """Attention's weights: the softmax of ``scores`` along the last axis, where the bool
    ``allowed`` (or None) says the query may look; ``masked``: a mask was given (then a
    row that may look nowhere, its scores all -inf, gets weights 0, as PyTorch's)."""
    if allowed is not None:
        scores = xp.where(allowed, scores, -math.inf)
    top = _top(xp, scores, -1)  # no keys: 0, and the weights are empty
    if masked and scores.shape[-1]:
        top = xp.where(top == -math.inf, 0.0, top)
    e = xp.exp(scores - top)
    total = xp.sum(e, axis=-1, keepdims=True)
    if masked:
        total = xp.where(total == 0.0, 1.0, total)
    return e / total


@op("scaled_dot_product_attention", saves=(0, 1, 2), saves_out=False, needs=True)
def attention(be, q, k, v, mask=None, scale=1.0, causal=False, needs=(True, True, True, True)):
    """``softmax(q @ k^T * scale + mask) @ v`` in one node: ``mask`` (optional) is bool,
    True where a query may look (the scores elsewhere are -inf), or float, added to
    the scores; a query that may look nowhere gets weights 0 (PyTorch's safe softmax).
    ``causal`` (without a mask): query ``i`` may look at keys ``j <= i`` only (see
    :func:`_causal_attention`). With ``w`` the weights and ``gw = g @ v^T``, the scores'
    gradient is ``gs = w * (gw - sum(gw * w))`` (along the keys), and then ``q: gs @ k *
    scale``, ``k: gs^T @ q * scale``, ``v: w^T @ g``, a float mask: ``gs``."""
    xp = be.xp
    given = mask is not None  # (a mask input: its gradient comes back too)
    if causal and given:
        raise ValueError("attention: give a mask or causal=True, not both")
    if causal:
        if q.shape[-2] and k.shape[-2]:
            return _causal_attention(be, q, k, v, scale, needs)
        mask = _causal_mask(be, 0, q.shape[-2], k.shape[-2])  # no queries or no keys: nothing to skip
    fused = be.fused
    scores = be.matmul(q, xp.matrix_transpose(k))
    allowed = None  # a bool mask: True where a query may look
    if mask is not None:
        scores = be.scale_fresh(scores, scale)  # the product's own array (a view of it in replays)
        if mask.dtype == xp.bool:
            allowed = mask
        elif mask.shape == scores.shape and mask.dtype == scores.dtype:
            scores += mask
        else:
            scores = scores + mask
    safe = mask is not None  # (a row that may look nowhere: weights 0)
    weights = None
    if fused.softmax_rows is not None:  # (None: declined; the scale in its pass where nothing is added first)
        weights = fused.softmax_rows(scores, allowed, safe, 1.0 if mask is not None else scale)
    if weights is None:
        if mask is None:
            scores = be.scale_fresh(scores, scale)
        weights = _masked_softmax(xp, scores, allowed, safe)
    out = be.matmul(weights, v)
    need_q, need_k, need_v = needs[:3]
    need_mask = mask is not None and mask.dtype != xp.bool and needs[3]

    def backward(g):
        gs = None
        if need_q or need_k or need_mask:
            gw = be.matmul(g, xp.matrix_transpose(v))  # a fresh array
            gs = None if fused.softmax_rows_backward is None else fused.softmax_rows_backward(gw, weights)
            if gs is None:
                gs = gw - xp.sum(gw * weights, axis=-1, keepdims=True)
                gs *= weights
        gq = gk = None
        if need_q:
            gq = be.matmul(gs, k)
            gq = be.scale_fresh(gq, scale)
        if need_k:
            gk = be.matmul(xp.matrix_transpose(gs), q)
            gk = be.scale_fresh(gk, scale)
        gv = be.matmul(xp.matrix_transpose(weights), g) if need_v else None
        return (gq, gk, gv, gs if need_mask else None) if given else (gq, gk, gv)

    return out, backward


def _causal_blocks(length: int, source: int, rows: int) -> list:
    """A causal attention's blocks of queries, ``(start, stop, keys)`` each: rows
    ``[start, stop)`` of ``rows`` at most (the backend's ``causal_rows``), which may look
    at the first ``keys`` keys only (row ``i`` at keys ``j <= i``, PyTorch's top-left
    ``is_causal``). The products skip the keys after each block's last row: about a
    quarter of the scores in blocks of 32 at W6's sequence of 128, nearly half for long
    ones."""
    return [(start, min(start + rows, length), min(start + rows, length, source))
            for start in range(0, length, max(1, rows))]


def _causal_attention(be, q, k, v, scale, needs):
    """:func:`attention` with ``causal``, a block of queries at a time: each block's
    scores only against the keys it may look at (:func:`_causal_blocks`), its softmax
    bounded per row (where the backend has a kernel for it; else a mask of the block),
    the blocks' outputs joined. The backward runs the same blocks; a key's gradient is
    the sum over the blocks that looked at it."""
    xp, fused = be.xp, be.fused
    length, source = q.shape[-2], k.shape[-2]
    blocks = _causal_blocks(length, source, be.causal_rows)
    kt = xp.matrix_transpose(k)
    if len(blocks) > 1:
        kt = be.c_order(kt)  # once, not a copy of each block's keys
    outs, weights = [], []
    for start, stop, keys in blocks:
        scores = be.matmul(q[..., start:stop, :], kt[..., :keys])
        w = None if fused.softmax_rows is None else fused.softmax_rows(scores, None, True, scale, start)
        if w is None:
            w = _masked_softmax(xp, be.scale_fresh(scores, scale), _causal_mask(be, start, stop, keys), True)
        weights.append(w)
        outs.append(be.matmul(w, v[..., :keys, :]))
    out = outs[0] if len(outs) == 1 else xp.concat(outs, axis=-2)
    need_q, need_k, need_v = needs[:3]

    def backward(g):
        gq, gk, gv = [], None, None
        vt = xp.matrix_transpose(v)
        if len(blocks) > 1 and (need_q or need_k):
            vt = be.c_order(vt)
        for (start, stop, keys), w in zip(reversed(blocks), reversed(weights)):  # the most keys first
            rows = g[..., start:stop, :]
            if need_q or need_k:
                gw = be.matmul(rows, vt[..., :keys])  # a fresh array
                gs = None if fused.softmax_rows_backward is None else fused.softmax_rows_backward(gw, w, scale, start)
                if gs is None:
                    gs = (gw - xp.sum(gw * w, axis=-1, keepdims=True)) * w
                    gs = be.scale_fresh(xp.where(_causal_mask(be, start, stop, keys), gs, 0.0), scale)
                if need_q:
                    gq.append(be.matmul(gs, k[..., :keys, :]))
                if need_k:
                    gk = _add_leading(be, gk, be.matmul(xp.matrix_transpose(gs), q[..., start:stop, :]))
            if need_v:
                gv = _add_leading(be, gv, be.matmul(xp.matrix_transpose(w), rows))
        if need_q:
            gq = gq[0] if len(gq) == 1 else xp.concat(gq[::-1], axis=-2)
        return (gq if need_q else None, _padded(be, gk, source), _padded(be, gv, source))

    return out, backward


def _causal_mask(be, start, stop, keys):
    """The bool mask of a causal attention's block: row ``i`` (from ``start``) may look at keys ``j <= i``."""
    xp = be.xp
    index = be.arange(max(stop, keys), xp.int64)
    return index[None, :keys] <= index[start:stop, None]


def _add_leading(be, total, part):
    """``part`` added to the leading rows (the last-but-one axis) of ``total``, which has
    as many or more (None: ``part`` itself); ``total`` is the caller's own."""
    if total is None:
        return part
    return be.add_leading(total, part)


def _padded(be, grad, source):
    """A key's or a value's gradient with zero rows for the keys no query looked at."""
    if grad is None or grad.shape[-2] == source:
        return grad
    zeros = be.zeros(grad.shape[:-2] + (source - grad.shape[-2], grad.shape[-1]), grad.dtype)
    return be.xp.concat([grad, zeros], axis=-2)
