"""Recurrent layers, one graph node per layer and direction: :func:`elman` (Elman, tanh
or ReLU), :func:`lstm` and :func:`gru`, with PyTorch's equations, gate order and
parameter layouts (``w_ih`` of shape ``(gates * H, I)``, ``w_hh`` of ``(gates * H,
H)``, biases ``(gates * H,)``; gates ``i, f, g, o`` for the LSTM, ``r, z, n`` for
the GRU).

Each op takes a whole sequence ``x`` of shape ``(T, B, I)`` (time first) and the
initial state(s) ``(B, H)``. The forward

1. projects the input of every time step at once: ``x @ w_ih.T + bias``, one
   ``(T * B, I) @ (I, gates * H)`` product (one BLAS call, not ``T``);
2. loops over time with raw array operations: one ``(B, H) @ (H, gates * H)``
   product and a few element-wise operations per step, keeping the gate
   activations the backward needs;

and the backward runs the recurrence backwards in one go (backpropagation through
time), collecting the gradient of each step's gate pre-activations, then gets the
gradients of ``x``, ``w_ih``, ``w_hh`` and the biases from them with one product
each over all the steps. ``reverse=True`` runs over time backwards (the second
direction of a bidirectional layer); the outputs stay in time order.

Every input is saved (``saves`` is all of them): the backward reads the gate values,
which every input went into, so an input changed in place after the forward makes
backward raise. The output is not read (the backward keeps its own per-step
arrays), so the output may be changed in place.

Everything is written against ``be.xp`` without in-place changes of values another
step reads, so a ``create_graph`` backward runs the op again on Tensors and its
rules record a graph (second derivatives); the many small nodes that makes are
slow, which only higher derivatives pay.

Outputs: :func:`elman` and :func:`gru` return the hidden state of every step, ``(T,
B, H)`` (the last state is row ``T - 1``, or row ``0`` with ``reverse``);
:func:`lstm` returns ``(T + 1, B, H)``: the hidden states, then the last cell state
as row ``T``, so one node carries all three results and the gradients reaching
``output``, ``h_n`` and ``c_n`` meet in one backward.
"""

from __future__ import annotations

from ._op import op


def _sigmoid(xp, a):
    """``1 / (1 + exp(-a))`` from ``exp(-|a|)``, which never overflows (no warning,
    and no inf whose derivative would be NaN in a second derivative)."""
    e = xp.exp(-xp.abs(a))
    r = 1.0 / (1.0 + e)
    return xp.where(a >= 0, r, e * r)


def _project(be, x, w_ih, bias):
    """``x @ w_ih.T + bias`` for every time step in one product: ``(T, B, gates * H)``."""
    xp = be.xp
    t, b, n = x.shape
    out = be.matmul(xp.reshape(x, (t * b, n)), w_ih.T)  # (MKL's where the cpu device has it: backends/_mkl.py)
    if bias is not None:
        out = be.add_bias(out, bias)  # the product is fresh (one pass where the backend has a kernel for it)
    return xp.reshape(out, (t, b, w_ih.shape[0]))


def _order(steps: int, reverse: bool) -> list:
    return list(range(steps - 1, -1, -1)) if reverse else list(range(steps))


def _in_time_order(values: list, reverse: bool) -> list:
    """Per-step values listed in processing order, put back in time order."""
    return values[::-1] if reverse else values


def _weight_grads(be, x, w_ih, d_in, d_rec, previous, needs, has_bias, reverse):
    """The gradients of ``x``, ``w_ih``, ``w_hh``, ``b_ih`` and ``b_hh`` from the
    per-step gradients of the input projections ``d_in`` and of the recurrent ones
    ``d_rec`` (lists in processing order; the same list for the Elman and LSTM
    cells) and the states each step read, ``previous``: one product each."""
    xp = be.xp
    t, b, n = x.shape
    width = w_ih.shape[0]
    need_x, need_w_ih, need_w_hh = needs[0], needs[1], needs[2]
    d_in_rows = xp.reshape(xp.stack(_in_time_order(d_in, reverse)), (t * b, width))
    d_rec_rows = d_in_rows if d_rec is d_in else xp.reshape(xp.stack(_in_time_order(d_rec, reverse)),
                                                             (t * b, width))
    gx = xp.reshape(d_in_rows @ w_ih, (t, b, n)) if need_x else None
    gw_ih = d_in_rows.T @ xp.reshape(x, (t * b, n)) if need_w_ih else None
    gw_hh = None
    if need_w_hh:
        prev_rows = xp.reshape(xp.stack(_in_time_order(previous, reverse)), (t * b, previous[0].shape[-1]))
        gw_hh = d_rec_rows.T @ prev_rows
    if not has_bias:
        return gx, gw_ih, gw_hh
    gb_ih = be.sum_rows(d_in_rows) if needs[3] else None
    gb_hh = None
    if needs[4]:
        gb_hh = be.sum_rows(d_rec_rows) if d_rec is not d_in or gb_ih is None else gb_ih * 1.0  # its own array
    return gx, gw_ih, gw_hh, gb_ih, gb_hh


@op("rnn", saves=None, saves_out=False, needs=True)
def elman(be, x, h0, w_ih, w_hh, b_ih=None, b_hh=None, *, nonlinearity="tanh", reverse=False, needs=None):
    """PyTorch's Elman RNN layer, one direction: ``h_t = act(x_t @ w_ih.T + b_ih + h_{t-1}
    @ w_hh.T + b_hh)``, ``act`` tanh or ReLU. Returns every ``h_t``, ``(T, B, H)``."""
    xp = be.xp
    steps = x.shape[0]
    has_bias = b_ih is not None
    xw = _project(be, x, w_ih, (b_ih + b_hh) if has_bias else None)
    w_hh_t = w_hh.T
    tanh = nonlinearity == "tanh"
    h, states = h0, []
    for t in _order(steps, reverse):
        pre = xw[t, ...] + h @ w_hh_t
        h = xp.tanh(pre) if tanh else xp.maximum(pre, 0.0)
        states.append(h)
    out = xp.stack(_in_time_order(states, reverse))
    needs = needs or (True,) * (6 if has_bias else 4)

    def backward(g):
        order = _order(steps, reverse)
        d_pre = [None] * steps
        dh = None
        for k in range(steps - 1, -1, -1):
            h = states[k]
            dh = g[order[k], ...] if dh is None else dh + g[order[k], ...]
            d = dh * (1.0 - h * h) if tanh else dh * xp.astype(h > 0, h.dtype)
            d_pre[k] = d
            if k or needs[1]:
                dh = d @ w_hh
        previous = [h0] + states[:-1]
        grads = _weight_grads(be, x, w_ih, d_pre, d_pre, previous, needs[:1] + needs[2:], has_bias, reverse)
        return (grads[0], dh if needs[1] else None, *grads[1:])

    return out, backward


@op("lstm", saves=None, saves_out=False, needs=True)
def lstm(be, x, h0, c0, w_ih, w_hh, b_ih=None, b_hh=None, *, reverse=False, needs=None):
    """PyTorch's LSTM layer, one direction (gates ``i, f, g, o``): ``c_t = f * c_{t-1} + i
    * g``, ``h_t = o * tanh(c_t)``. Returns ``(T + 1, B, H)``: every ``h_t``, then the
    last cell state."""
    xp = be.xp
    steps = x.shape[0]
    size = w_hh.shape[1]
    has_bias = b_ih is not None
    xw = _project(be, x, w_ih, (b_ih + b_hh) if has_bias else None)
    w_hh_t = w_hh.T
    h, c = h0, c0
    hs, cs, gates, tanh_cs = [], [], [], []
    for t in _order(steps, reverse):
        pre = xw[t, ...] + h @ w_hh_t
        act = _sigmoid(xp, pre)  # i, f, o (g's columns are computed, not used: one call, no copies)
        g = xp.tanh(pre[:, 2 * size:3 * size])
        c = act[:, size:2 * size] * c + act[:, :size] * g
        tc = xp.tanh(c)
        h = act[:, 3 * size:] * tc
        hs.append(h)
        cs.append(c)
        gates.append((act, g))
        tanh_cs.append(tc)
    out = xp.stack(_in_time_order(hs, reverse) + [c])
    needs = needs or (True,) * (7 if has_bias else 5)

    def backward(grad):
        order = _order(steps, reverse)
        d_pre = [None] * steps
        dh, dc = None, grad[steps, ...]
        for k in range(steps - 1, -1, -1):
            act, g = gates[k]
            i, f, o = act[:, :size], act[:, size:2 * size], act[:, 3 * size:]
            tc = tanh_cs[k]
            dh = grad[order[k], ...] if dh is None else dh + grad[order[k], ...]
            dc = dc + dh * o * (1.0 - tc * tc)
            c_prev = cs[k - 1] if k else c0
            d_pre[k] = xp.concat([(dc * g) * (i - i * i), (dc * c_prev) * (f - f * f), (dc * i) * (1.0 - g * g),
                                  (dh * tc) * (o - o * o)], axis=1)
            dc = dc * f
            if k or needs[1]:
                dh = d_pre[k] @ w_hh
        previous = [h0] + hs[:-1]
        grads = _weight_grads(be, x, w_ih, d_pre, d_pre, previous, needs[:1] + needs[3:], has_bias, reverse)
        return (grads[0], dh if needs[1] else None, dc if needs[2] else None, *grads[1:])

    return out, backward


@op("gru", saves=None, saves_out=False, needs=True)
def gru(be, x, h0, w_ih, w_hh, b_ih=None, b_hh=None, *, reverse=False, needs=None):
    """PyTorch's GRU layer, one direction (gates ``r, z, n``): ``n_t = tanh(x_t W_in + b_in
    + r * (h_{t-1} W_hn + b_hn))``, ``h_t = (1 - z) * n_t + z * h_{t-1}``. Returns every
    ``h_t``, ``(T, B, H)``."""
    xp = be.xp
    steps = x.shape[0]
    size = w_hh.shape[1]
    has_bias = b_ih is not None
    xw = _project(be, x, w_ih, b_ih)
    w_hh_t = w_hh.T
    h, states, saved = h0, [], []
    for t in _order(steps, reverse):
        gh = h @ w_hh_t
        if has_bias:
            gh = gh + b_hh
        xt = xw[t, ...]
        rz = _sigmoid(xp, xt[:, :2 * size] + gh[:, :2 * size])
        gh_n = gh[:, 2 * size:]
        n = xp.tanh(xt[:, 2 * size:] + rz[:, :size] * gh_n)
        h = n + rz[:, size:] * (h - n)
        states.append(h)
        saved.append((rz, n, gh_n))
    out = xp.stack(_in_time_order(states, reverse))
    needs = needs or (True,) * (6 if has_bias else 4)

    def backward(grad):
        order = _order(steps, reverse)
        d_in, d_rec = [None] * steps, [None] * steps
        dh = None
        for k in range(steps - 1, -1, -1):
            rz, n, gh_n = saved[k]
            r, z = rz[:, :size], rz[:, size:]
            h_prev = states[k - 1] if k else h0
            dh = grad[order[k], ...] if dh is None else dh + grad[order[k], ...]
            d_n = dh * (1.0 - z)
            d_n = d_n * (1.0 - n * n)
            d_rz = xp.concat([d_n * gh_n, dh * (h_prev - n)], axis=1)
            d_rz = d_rz * (rz - rz * rz)
            d_in[k] = xp.concat([d_rz, d_n], axis=1)
            d_rec[k] = xp.concat([d_rz, d_n * r], axis=1)
            if k or needs[1]:
                dh = dh * z + d_rec[k] @ w_hh
        previous = [h0] + states[:-1]
        grads = _weight_grads(be, x, w_ih, d_in, d_rec, previous, needs[:1] + needs[2:], has_bias, reverse)
        return (grads[0], dh if needs[1] else None, *grads[1:])

    return out, backward
