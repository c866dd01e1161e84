"""Row and patch kernels for NumPy arrays, compiled by Numba: the optional ``fuse``
extra (``pip install "leanpass[fuse]"``).

NumPy spends a pass over memory per operation, and twice that where a per-row value
is broadcast along rows shorter than its buffer (``x * scale[:, None]`` with rows of
a thousand elements costs two plain multiplies). Normalisation layers are made of
such operations: GroupNorm's forward and backward are about twenty passes over the
activations in NumPy, against eight in PyTorch's kernels; BatchNorm's are alike.
Each kernel here is one pass of a loop that LLVM vectorises.

A transposed convolution's patches are the other case: gathering them from an
``(N, C, H, W)`` gradient, or adding them back into an output, is a strided copy per
kernel offset whose innermost runs are one or two values in NumPy (or a transposed
copy first, itself slow through NumPy's strided loops). The two patch kernels move
each sample's values through a small pixel-major buffer that stays in the cache. A
convolution's own patches (channel-major) are gathered and added back a row of an
image plane at a time, the plane in the cache, instead of one pass over all planes
per kernel offset.

Numba is imported, and a kernel compiled (once per dtype, then cached on disk),
the first time a kernel runs, never at ``import leanpass``. The ``cpu`` backend
offers them where :func:`enabled`; where Numba is not installed, or
``LEANPASS_FUSE=0`` is set, operations run their generic ``xp`` code, which
computes the same values.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import sys

import numpy as np

from ._base import INFIX
from ._layout import flat_where_strided

__all__ = ["kernels", "enabled"]

_FLOATS = (np.dtype("float32"), np.dtype("float64"))


def enabled() -> bool:
    """Whether the kernels are on: Numba importable and ``LEANPASS_FUSE`` not ``0``."""
    return os.environ.get("LEANPASS_FUSE", "1") != "0" and importlib.util.find_spec("numba") is not None


@functools.cache
def _compiled():
    """The jitted loops (imports Numba: the first call only)."""
    import numba

    # NumPy's error model: a division by zero gives inf or NaN, as NumPy's (the generic
    # path's) does, where Python's raises ZeroDivisionError (Adam with eps=0 at a zero
    # gradient) and its check in each iteration keeps LLVM from vectorising the loop:
    # Adam's update of 262,144 float32 values took 0.94 ms, now 0.12, the same values
    jit = functools.partial(numba.njit, cache=True, nogil=True, error_model="numpy")
    reassoc = functools.partial(jit, fastmath={"reassoc"})  # (sums that LLVM may reorder: see centered_squares)

    @jit
    def affine(x, scale, shift, out):
        for r in range(x.shape[0]):
            a, b = scale[r], shift[r]
            for k in range(x.shape[1]):
                out[r, k] = x[r, k] * a + b

    @jit
    def affine2(g, a, x, c, d, out):
        for r in range(x.shape[0]):
            ar, cr, dr = a[r], c[r], d[r]
            for k in range(x.shape[1]):
                out[r, k] = g[r, k] * ar + (x[r, k] * cr + dr)

    # BatchNorm then ReLU in one node (a Sequential's pair): the affine map and NumPy's
    # maximum(v, 0) (``v if v > 0 or v != v else 0``: NaN kept, -0 made 0) in one pass; in the
    # backward, the gradient through the ReLU (g where the output is not <= 0, as
    # relu_backward) formed where it is read, by the two sums and by the input's gradient.
    # ``zero`` comes in the arrays' dtype (a literal 0 would make the select float64)
    @jit
    def affine_relu(x, scale, shift, zero, out):
        for r in range(x.shape[0]):
            a, b = scale[r], shift[r]
            for k in range(x.shape[1]):
                v = x[r, k] * a + b
                out[r, k] = v if v > 0 or v != v else zero

    @reassoc
    def masked_sums(g, y, x, mean, zero, sums, dots):
        for r in range(x.shape[0]):
            m = np.float64(mean[r])
            s = 0.0
            d = 0.0
            for k in range(x.shape[1]):
                gk = np.float64(g[r, k] if not y[r, k] <= 0 else zero)
                s += gk
                d += gk * (np.float64(x[r, k]) - m)
            sums[r] = s
            dots[r] = d

    @jit
    def affine2_masked(g, y, a, x, c, d, zero, out):
        for r in range(x.shape[0]):
            ar, cr, dr = a[r], c[r], d[r]
            for k in range(x.shape[1]):
                gk = g[r, k] if not y[r, k] <= 0 else zero
                out[r, k] = gk * ar + (x[r, k] * cr + dr)

    # the sum may be reordered (LLVM then vectorises it), as NumPy's pairwise sums and
    # BLAS dot products reorder theirs; in float64 whatever the data's dtype
    @reassoc
    def centered_squares(x, mean, out):
        for r in range(x.shape[0]):
            m = np.float64(mean[r])
            total = 0.0
            for k in range(x.shape[1]):
                d = np.float64(x[r, k]) - m
                total += d * d
            out[r] = total

    @reassoc
    def centered_dot(g, x, mean, out):
        for r in range(x.shape[0]):
            m = np.float64(mean[r])
            total = 0.0
            for k in range(x.shape[1]):
                total += np.float64(g[r, k]) * (np.float64(x[r, k]) - m)
            out[r] = total

    @jit
    def patches2d(g, start, s0, s1, p0, p1, d0, d1, out):
        n_, c_, h_, w_ = g.shape
        b_, j_, _, k0_, k1_, _ = out.shape
        lo = max(0, start * s0 - p0)
        hi = min(h_, (start + b_ - 1) * s0 - p0 + (k0_ - 1) * d0 + 1)
        here = np.empty((max(hi - lo, 0), w_, c_), g.dtype)  # one sample's rows, pixel-major
        for n in range(n_):
            for c in range(c_):
                for y in range(lo, hi):
                    for x in range(w_):
                        here[y - lo, x, c] = g[n, c, y, x]
            for b in range(b_):
                for j in range(j_):
                    for k0 in range(k0_):
                        y = (start + b) * s0 - p0 + k0 * d0
                        for k1 in range(k1_):
                            x = j * s1 - p1 + k1 * d1
                            if 0 <= y < h_ and 0 <= x < w_:
                                for c in range(c_):
                                    out[b, j, n, k0, k1, c] = here[y - lo, x, c]
                            else:
                                for c in range(c_):
                                    out[b, j, n, k0, k1, c] = 0

    @jit
    def scatter_add2d(cols, start, s0, s1, p0, p1, d0, d1, out):
        b_, j_, n_, k0_, k1_, c_ = cols.shape
        h_, w_ = out.shape[:2]
        for b in range(b_):
            for j in range(j_):
                for k0 in range(k0_):
                    y = (start + b) * s0 - p0 + k0 * d0
                    if y < 0 or y >= h_:
                        continue
                    for k1 in range(k1_):
                        x = j * s1 - p1 + k1 * d1
                        if x < 0 or x >= w_:
                            continue
                        for n in range(n_):
                            for c in range(c_):
                                out[y, x, n, c] += cols[b, j, n, k0, k1, c]

    # optimizer updates, in place, in the generic path's operations and order
    @jit
    def sgd(grad, lr, wd, decay, param):
        if decay:  # (the test outside the loops: the plain one vectorises, a sixth faster)
            for k in range(param.shape[0]):
                param[k] = param[k] + -lr * (grad[k] + wd * param[k])
        else:
            for k in range(param.shape[0]):
                param[k] = param[k] + -lr * grad[k]

    @jit
    def sgd_momentum(grad, lr, momentum, wd, nesterov, first, param, buf):
        for k in range(param.shape[0]):
            g = grad[k] + wd * param[k] if wd != 0 else grad[k]
            b = g if first else buf[k] * momentum + g
            buf[k] = b
            param[k] = param[k] + -lr * (g + momentum * b if nesterov else b)

    @jit
    def adam(grad, step_size, one_minus_b1, b2, one_minus_b2, eps, bc2_sqrt, wd, decay, param, m, v):
        for k in range(param.shape[0]):
            g = grad[k] + wd * param[k] if wd != 0 else grad[k]
            p = param[k] * decay if decay != 1 else param[k]
            mk = m[k] + one_minus_b1 * (g - m[k])
            vk = v[k] * b2 + (one_minus_b2 * g) * g
            m[k], v[k] = mk, vk
            param[k] = p + -step_size * (mk / (np.sqrt(vk) / bc2_sqrt + eps))

    # a convolution's patches, channel-major ((A, B, K0 * K1, O0, O1) from (A, B, H, W)),
    # and their adjoint: one row of an image plane at a time, the plane zero-padded in a
    # scratch buffer that stays in the cache where there is padding (no padded copy of the
    # whole input, nor a padded gradient left strided: W5c's second layer 3.3 -> 2.7 ms from
    # a cold cache); without padding, the input's planes themselves (a copy into the
    # scratch cost 0.73 -> 1.0 ms for a 3 x 3 kernel's patches of (64, 32, 14, 14)).
    # The indices are unsigned (no wrap-around test for negative ones), so that a
    # stride-1 row is one vectorised copy or add. Two loops of one shape, not one with a
    # flag: the adjoint's adds vectorise less well behind the branch (1.2 ms against 0.9
    # on W5c's patches)
    @jit
    def im2col2d(x, lo0, lo1, k0_, k1_, s0, s1, d0, d1, padded, planes, out):
        # planes: a (1, 1, *padded size) scratch where there is padding, else x itself
        a_, b_, _, o0, o1 = out.shape
        h, w = x.shape[2], x.shape[3]
        for a in range(a_):
            for b in range(b_):
                if padded:
                    plane = planes[0, 0]
                    plane[lo0:lo0 + h, lo1:lo1 + w] = x[a, b]
                else:
                    plane = planes[a, b]
                for k0 in range(k0_):
                    for k1 in range(k1_):
                        dst = out[a, b, k0 * k1_ + k1]
                        off = numba.uint64(k1 * d1)
                        for i in range(o0):
                            src = plane[numba.uint64(i * s0 + k0 * d0)]
                            row = dst[i]
                            if s1 == 1:
                                for j in range(o1):
                                    row[j] = src[numba.uint64(j) + off]
                            else:
                                for j in range(o1):
                                    row[j] = src[numba.uint64(j * s1) + off]

    @jit
    def col2im2d(cols, lo0, lo1, k0_, k1_, s0, s1, d0, d1, padded, planes, out):
        # planes: a (1, 1, *padded size) scratch where there is padding, else out itself (zeros)
        a_, b_, _, o0, o1 = cols.shape
        h, w = out.shape[2], out.shape[3]
        for a in range(a_):
            for b in range(b_):
                if padded:
                    plane = planes[0, 0]
                    plane[:, :] = 0
                else:
                    plane = planes[a, b]
                for k0 in range(k0_):
                    for k1 in range(k1_):
                        src = cols[a, b, k0 * k1_ + k1]
                        off = numba.uint64(k1 * d1)
                        for i in range(o0):
                            row = plane[numba.uint64(i * s0 + k0 * d0)]
                            part = src[i]
                            if s1 == 1:
                                for j in range(o1):
                                    row[numba.uint64(j) + off] += part[j]
                            else:
                                for j in range(o1):
                                    row[numba.uint64(j * s1) + off] += part[j]
                if padded:
                    out[a, b] = plane[lo0:lo0 + h, lo1:lo1 + w]

    # the gradient through a ReLU: g where y is not <= 0 (at NaN too, as PyTorch's
    # threshold_backward), one pass where NumPy's mask takes four
    @jit
    def relu_backward(g, y, out):
        for i in range(g.shape[0]):
            out[i] = g[i] if not y[i] <= 0 else 0

    # GELU's tanh approximation, the generic path's operations in its order, each rounded
    # to the arrays' dtype (the numbers come in that dtype): the argument of tanh, then
    # (after NumPy's vectorised tanh) the output; the gradient from a and tanh's value
    @jit
    def gelu_inner(a, ck, c, out):
        for i in range(a.shape[0]):
            x = a[i]
            v = x * x
            v = v * ck
            v = v + c
            out[i] = v * x

    @jit
    def gelu_out(t, a, one, half, out):
        for i in range(a.shape[0]):
            v = t[i] + one
            v = v * half
            out[i] = v * a[i]

    @jit
    def gelu_backward(g, a, t, one, uc, k3, half, out):
        for i in range(a.shape[0]):
            ti, ai = t[i], a[i]
            u = ti * ti
            u = u - one
            u = u * uc
            s = ai * k3
            s = s * u
            s = s * ai
            s = s + u
            s = s * ai
            r = ti + one
            r = r * half
            r = r - s
            out[i] = r * g[i]

    # attention's softmax along rows under a 2-D bool mask (True: may look), a causal
    # bound (row i of the block may look at keys j <= i + offset: the keys after it are
    # not read, and their weights are 0), both or neither, and its gradient. The scores
    # scaled (rounded to their dtype, as a product scaled in place), then shifted by each
    # row's largest allowed score, -inf where it may not look; NumPy's vectorised exp, in
    # place; the normalisation. Sums in float64, each value rounded once, at its store
    @jit
    def softmax_shift(scores, mask, masked, causal, offset, safe, scale, out):
        n_, l_, k_ = scores.shape
        for n in range(n_):
            for i in range(l_):
                stop = min(k_, max(0, i + offset + 1)) if causal else k_
                row, o = scores[n, i], out[n, i]
                nan = False
                if masked:
                    top = -np.inf
                    for j in range(stop):
                        x = row[j] * scale
                        o[j] = x
                        if mask[i, j]:
                            if x > top:
                                top = x
                            elif x != x:
                                nan = True
                else:  # (eight running maxima, each a register: LLVM vectorises them; a NaN is passed over
                    # by max here and found after)
                    t0 = t1 = t2 = t3 = t4 = t5 = t6 = t7 = -np.inf
                    whole = stop - stop % 8
                    for j in range(0, whole, 8):
                        x0, x1, x2, x3 = row[j] * scale, row[j + 1] * scale, row[j + 2] * scale, row[j + 3] * scale
                        x4, x5, x6, x7 = row[j + 4] * scale, row[j + 5] * scale, row[j + 6] * scale, row[j + 7] * scale
                        o[j], o[j + 1], o[j + 2], o[j + 3] = x0, x1, x2, x3
                        o[j + 4], o[j + 5], o[j + 6], o[j + 7] = x4, x5, x6, x7
                        t0, t1, t2, t3 = max(t0, x0), max(t1, x1), max(t2, x2), max(t3, x3)
                        t4, t5, t6, t7 = max(t4, x4), max(t5, x5), max(t6, x6), max(t7, x7)
                    for j in range(whole, stop):
                        x = row[j] * scale
                        o[j] = x
                        t0 = max(t0, x)
                    top = max(max(max(t0, t1), max(t2, t3)), max(max(t4, t5), max(t6, t7)))
                    for j in range(stop):
                        nan |= o[j] != o[j]
                if nan:  # as NumPy's max: NaN, and so the whole row, where it may not look too (-inf - NaN)
                    top = np.nan
                elif safe and top == -np.inf:  # a row that may look nowhere: weights 0 (PyTorch's safe softmax)
                    top = 0.0
                hidden = -np.inf - top  # (-inf, or NaN in a NaN row: as the generic path's where, then shift)
                if masked:
                    for j in range(stop):
                        o[j] = o[j] - top if mask[i, j] else hidden
                else:
                    for j in range(stop):
                        o[j] = o[j] - top
                for j in range(stop, k_):
                    o[j] = hidden

    @reassoc
    def softmax_scale(e, causal, offset):
        n_, l_, k_ = e.shape
        for n in range(n_):
            for i in range(l_):
                stop = min(k_, max(0, i + offset + 1)) if causal else k_  # (after it: exp(-inf), 0 already)
                row = e[n, i]
                total = 0.0
                for j in range(stop):
                    total += np.float64(row[j])
                if total == 0.0:  # a row that may look nowhere
                    total = 1.0
                for j in range(stop):
                    row[j] = np.float64(row[j]) / total

    @reassoc
    def softmax_grad(gw, w, scale, causal, offset):
        n_, l_, k_ = w.shape
        for n in range(n_):
            for i in range(l_):
                stop = min(k_, max(0, i + offset + 1)) if causal else k_
                g, p = gw[n, i], w[n, i]
                dot = 0.0
                for j in range(stop):
                    dot += np.float64(g[j]) * np.float64(p[j])
                for j in range(stop):
                    g[j] = (np.float64(g[j]) - dot) * np.float64(p[j]) * scale
                for j in range(stop, k_):  # (a key it may not look at: no gradient, whatever g says there)
                    g[j] = 0

    # cross-entropy of rows of logits at one class each: each row's largest logit (eight
    # running maxima, which pass over a NaN: the NaN itself then makes the row's sum, its
    # loss and its softmax NaN, as NumPy's max would) subtracted, and the picked class's
    # shifted logit kept; then (after NumPy's vectorised exp, in place) the
    # row sums in float64, the loss summed over the rows, and the softmax in place (each
    # value times the row's 1 / sum, rounded once). A class outside [0, classes) is never
    # read: its row's loss is NaN
    @jit
    def cross_entropy_shift(x, index, out, picked):
        n_, c_ = x.shape
        for r in range(n_):
            row, o = x[r], out[r]
            t0 = t1 = t2 = t3 = t4 = t5 = t6 = t7 = -np.inf
            whole = c_ - c_ % 8
            for j in range(0, whole, 8):
                t0, t1, t2, t3 = max(t0, row[j]), max(t1, row[j + 1]), max(t2, row[j + 2]), max(t3, row[j + 3])
                t4, t5 = max(t4, row[j + 4]), max(t5, row[j + 5])
                t6, t7 = max(t6, row[j + 6]), max(t7, row[j + 7])
            for j in range(whole, c_):
                t0 = max(t0, row[j])
            top = max(max(max(t0, t1), max(t2, t3)), max(max(t4, t5), max(t6, t7)))
            for j in range(c_):
                o[j] = row[j] - top
            k = index[r]
            picked[r] = o[k] if 0 <= k < c_ else np.nan

    @reassoc
    def cross_entropy_normalise(e, picked, scratch):
        n_, c_ = e.shape
        loss = 0.0
        for r in range(n_):
            row = e[r]
            total = 0.0
            for j in range(c_):
                total += np.float64(row[j])
            loss += np.log(total) - np.float64(picked[r])
            scratch[0] = 1.0 / total  # (in the rows' dtype: the products stay in it, and vectorise)
            inv = scratch[0]
            for j in range(c_):
                row[j] = row[j] * inv
        return loss

    # LayerNorm over the last axis of rows: the shift by the row's first value, the mean
    # and the biased variance in float64, the normalised row and the output in one more
    # pass; the gradient, and the weight's and the bias's (sums over the rows, in float64).
    # NumPy's error model: a row of variance 0 with eps 0 divides by 0 (inf, then NaN, as
    # the generic path), where Python's would raise ZeroDivisionError
    @reassoc
    def layer_norm(x, w, b, affine, shifted, eps, xhat, out, inv_std):
        r_, k_ = x.shape
        for r in range(r_):
            first = np.float64(x[r, 0])
            total = 0.0
            for k in range(k_):
                total += np.float64(x[r, k]) - first
            mean = total / k_
            squares = 0.0
            for k in range(k_):
                d = (np.float64(x[r, k]) - first) - mean
                squares += d * d
            inv = 1.0 / np.sqrt(squares / k_ + eps)
            inv_std[r] = inv
            for k in range(k_):
                v = ((np.float64(x[r, k]) - first) - mean) * inv
                xhat[r, k] = v
                if shifted:
                    out[r, k] = v * np.float64(w[k]) + np.float64(b[k])
                elif affine:
                    out[r, k] = v * np.float64(w[k])
                else:
                    out[r, k] = v

    @reassoc
    def layer_norm_backward(g, xhat, inv_std, w, affine, gx, gw, gb):
        r_, k_ = g.shape
        for r in range(r_):
            m_g = 0.0
            m_gx = 0.0
            for k in range(k_):
                gk = np.float64(g[r, k]) * np.float64(w[k]) if affine else np.float64(g[r, k])
                m_g += gk
                m_gx += gk * np.float64(xhat[r, k])
            m_g /= k_
            m_gx /= k_
            inv = inv_std[r]
            for k in range(k_):
                gk = np.float64(g[r, k]) * np.float64(w[k]) if affine else np.float64(g[r, k])
                h = np.float64(xhat[r, k])
                gx[r, k] = (gk - (h * m_gx + m_g)) * inv
                gw[k] += np.float64(g[r, k]) * h
                gb[k] += np.float64(g[r, k])

    # max_pool2d over 2 x 2 windows at stride 2, every window inside the input: the
    # maximum as NumPy's chain of ``maximum`` makes it (``a if a > b or a != a else b``:
    # the second operand where neither is larger, so -0 against 0 too; NaN where either is
    # NaN), and the gradient, which finds the maxima again: each window's first maximum in
    # row-major order takes the gradient, every other element 0 (g times 0, as the
    # generic path's product). A plane
    # with a NaN maximum is gone over again, where its windows' last NaN takes the
    # gradient: a test for NaN in the first pass kept LLVM from vectorising it (2.5 against
    # 1.5 ms on W5c's (64, 32, 28, 28) float32), as did a stride read at run time (2.9);
    # one loop body for both passes, its flag fixed for a whole pass, measured as fast as two
    @jit
    def max_pool_2x2(x, keep, one, zero, out, where):
        p_, oh, ow = out.shape
        for p in range(p_):
            for i in range(oh):
                r = 2 * i
                for j in range(ow):
                    q = 2 * j
                    v00, v01, v10, v11 = x[p, r, q], x[p, r, q + 1], x[p, r + 1, q], x[p, r + 1, q + 1]
                    b = v00 if v00 > v01 or v00 != v00 else v01  # (a call to a jitted function here missed
                    b = b if b > v10 or b != b else v10  # Numba's cache)
                    b = b if b > v11 or b != b else v11
                    out[p, i, j] = b
                    if keep:  # (fixed for the whole call: the loop is compiled once each way)
                        n00 = zero if v00 == b else one
                        n01 = zero if v01 == b else one
                        n10 = zero if v10 == b else one
                        where[p, i, j] = n00 * (one + n01 * (one + n10))

    @jit
    def max_pool_2x2_backward(x, g, one, zero, gx):
        p_, oh, ow = g.shape
        for p in range(p_):
            nan = False
            for again in (False, True):  # again: the windows with a NaN of a plane that has one
                if again and not nan:
                    break
                for i in range(oh):
                    r = 2 * i
                    for j in range(ow):
                        q = 2 * j
                        gg = g[p, i, j]
                        v00, v01, v10, v11 = x[p, r, q], x[p, r, q + 1], x[p, r + 1, q], x[p, r + 1, q + 1]
                        if not again:
                            b = v00 if v00 > v01 or v00 != v00 else v01
                            b = b if b > v10 or b != b else v10
                            b = b if b > v11 or b != b else v11
                            h00 = v00 == b
                            h01 = (v01 == b) & (not h00)
                            h10 = (v10 == b) & (not (h00 | h01))
                            h11 = (v11 == b) & (not (h00 | h01 | h10))
                            nan = nan | (b != b)
                        else:
                            if not (v00 != v00 or v01 != v01 or v10 != v10 or v11 != v11):
                                continue
                            h11 = v11 != v11
                            h10 = (v10 != v10) & (not h11)
                            h01 = (v01 != v01) & (not (h11 | h10))
                            h00 = (v00 != v00) & (not (h11 | h10 | h01))
                        gx[p, r, q] = gg * (one if h00 else zero)
                        gx[p, r, q + 1] = gg * (one if h01 else zero)
                        gx[p, r + 1, q] = gg * (one if h10 else zero)
                        gx[p, r + 1, q + 1] = gg * (one if h11 else zero)

    # the gradient from the winners max_pool_2x2 kept (``keep``: the offset of each window's
    # first maximum in row-major order, 0 to 3, in the data's dtype: same-width lanes
    # vectorise), reading g and the winners alone (from the input it took 2.3 ms on W5c's
    # (64, 32, 28, 28) float32, 0.6 from the winners). A window that holds a NaN gets a
    # winner of 3 there; the caller finds such windows from the output and takes the
    # gradient from the input (its last NaN wins)
    @jit
    def max_pool_2x2_scatter(where, g, one, zero, gx):
        p_, oh, ow = g.shape
        two = one + one
        three = two + one
        for p in range(p_):
            for i in range(oh):
                r = 2 * i
                for j in range(ow):
                    q = 2 * j
                    gg, k = g[p, i, j], where[p, i, j]
                    gx[p, r, q] = gg * (one if k == zero else zero)
                    gx[p, r, q + 1] = gg * (one if k == one else zero)
                    gx[p, r + 1, q] = gg * (one if k == two else zero)
                    gx[p, r + 1, q + 1] = gg * (one if k == three else zero)

    # a layer's bias added to each row of its fresh product, then ReLU where asked
    # (maximum(v, 0), NumPy's: 0 at -0.0, NaN kept), in place: one pass where NumPy's
    # broadcast add and maximum take two, about ten times slower on W1's first layer
    @jit
    def bias_rows(out, b, relu):
        for i in range(out.shape[0]):
            row = out[i]
            if relu:
                for j in range(row.shape[0]):
                    v = row[j] + b[j]
                    row[j] = v if not v <= 0 else 0
            else:
                for j in range(row.shape[0]):
                    row[j] = row[j] + b[j]

    return (affine, affine2, centered_squares, centered_dot, patches2d, scatter_add2d, sgd_momentum, adam,
            im2col2d, col2im2d, relu_backward, sgd, gelu_inner, gelu_out, gelu_backward, softmax_shift,
            softmax_scale, softmax_grad, layer_norm, layer_norm_backward, max_pool_2x2,
            max_pool_2x2_backward, affine_relu, masked_sums, affine2_masked, max_pool_2x2_scatter,
            cross_entropy_shift, cross_entropy_normalise, bias_rows)


def _rows(x):
    return np.ascontiguousarray(x)


def affine_rows(x, scale, shift):
    """``x * scale[:, None] + shift[:, None]`` for ``x`` of shape ``(R, K)``, one pass."""
    out = np.empty(x.shape, x.dtype)
    _compiled()[0](_rows(x), _rows(scale), _rows(shift), out)
    return out


def affine2_rows(g, a, x, c, d):
    """``g * a[:, None] + (x * c[:, None] + d[:, None])`` for ``g`` and ``x`` of shape
    ``(R, K)``, one pass."""
    out = np.empty(x.shape, x.dtype)
    _compiled()[1](_rows(g), _rows(a), _rows(x), _rows(c), _rows(d), out)
    return out


def affine_relu_rows(x, scale, shift):
    """``maximum(x * scale[:, None] + shift[:, None], 0)`` for ``x`` of shape ``(R, K)``
    (NumPy's maximum: NaN kept), one pass."""
    out = np.empty(x.shape, x.dtype)
    _compiled()[22](_rows(x), _rows(scale), _rows(shift), x.dtype.type(0), out)
    return out


def masked_sums(g, y, x, mean):
    """``(sum(m, axis=1), sum(m * (x - mean[:, None]), axis=1))`` with ``m = where(y <= 0,
    0, g)`` (the gradient through a ReLU of output ``y``), for arrays of shape ``(R, K)``,
    summed in float64, returned in ``x``'s dtype: one pass, no masked copy."""
    sums, dots = np.empty(x.shape[0], np.float64), np.empty(x.shape[0], np.float64)
    _compiled()[23](_rows(g), _rows(y), _rows(x), _rows(mean), g.dtype.type(0), sums, dots)
    return sums.astype(x.dtype, copy=False), dots.astype(x.dtype, copy=False)


def affine2_masked_rows(g, y, a, x, c, d):
    """:func:`affine2_rows` of ``where(y <= 0, 0, g)`` (the gradient through a ReLU of
    output ``y``) in place of ``g``, one pass."""
    out = np.empty(x.shape, x.dtype)
    _compiled()[24](_rows(g), _rows(y), _rows(a), _rows(x), _rows(c), _rows(d), x.dtype.type(0), out)
    return out


def centered_squares(x, mean):
    """``sum((x - mean[:, None]) ** 2, axis=1)`` for ``x`` of shape ``(R, K)``, summed
    in float64, returned in ``x``'s dtype: one pass, no centred copy."""
    out = np.empty(x.shape[0], np.float64)
    _compiled()[2](_rows(x), _rows(mean), out)
    return out.astype(x.dtype, copy=False)


def centered_dot(g, x, mean):
    """``sum(g * (x - mean[:, None]), axis=1)`` for ``g`` and ``x`` of shape ``(R, K)``,
    summed in float64, returned in ``x``'s dtype: one pass, no centred copy."""
    out = np.empty(x.shape[0], np.float64)
    _compiled()[3](_rows(g), _rows(x), _rows(mean), out)
    return out.astype(x.dtype, copy=False)


def patches2d(g, start, shape, stride, padding, dilation):
    """The patches of ``g`` (``(N, C, H, W)``, any strides) for the output rows
    ``start, start + 1, ...`` of a convolution, pixel-major: ``out[b, j, n, k0, k1, c]
    = g[n, c, (start + b) * s0 - p0 + k0 * d0, j * s1 - p1 + k1 * d1]``, 0 outside
    ``g``; ``shape`` is ``(rows, width, k0, k1)``."""
    rows, width, k0, k1 = shape
    out = np.empty((rows, width, g.shape[0], k0, k1, g.shape[1]), g.dtype)
    _compiled()[4](g, start, *stride, *padding, *dilation, out)
    return out


def scatter_add2d(cols, start, stride, padding, dilation, out):
    """The adjoint of :func:`patches2d`, into ``out`` in place: ``out[y, x, n, c] +=
    cols[b, j, n, k0, k1, c]`` for ``y = (start + b) * s0 - p0 + k0 * d0`` and ``x = j *
    s1 - p1 + k1 * d1`` inside ``out`` (``(H, W, N, C)``, C-contiguous)."""
    _compiled()[5](cols, start, *stride, *padding, *dilation, out)


# ---- element-wise programs (lp.compile's fused runs) --------------------------------------

_UFUNCS = frozenset({
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "exp", "expm1", "floor", "log",
    "log1p", "log2", "log10", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "isnan", "isinf",
    "isfinite", "signbit", "atan2", "copysign", "hypot", "logaddexp", "maximum", "minimum",
})
_SPELLED = {"acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh", "atan": "arctan",
            "atanh": "arctanh", "atan2": "arctan2"}
# the other functions, as templates of their arguments ({0}, {1}...) in the loop's dtype T
_TEMPLATES = {
    "neg": "-{0}", "negative": "-{0}", "positive": "+{0}", "not": "not {0}", "where": "{1} if {0} else {2}",
    "sign": "T(1) if {0} > 0 else (T(-1) if {0} < 0 else ({0} if {0} != {0} else T(0)))",  # NumPy's: +0 at -0
    "abs": "abs({0})", "square": "{0} * {0}", "reciprocal": "T(1) / {0}", "round": "np.rint({0})",
    "erf": "T(math.erf({0}))", "erfc": "T(math.erfc({0}))",
}


def _scalar_source(program) -> str | None:
    """The loop over elements that computes ``program`` (see
    :class:`leanpass._fusion.Program`), or None for a function it has no spelling of."""
    used = sorted({a[1] for _, fn, args in program.lines if fn != "full" for a in args if isinstance(a, tuple)}
                  | {o[1] for o in program.outputs if isinstance(o, tuple)})

    def arg(a):
        if isinstance(a, tuple):
            return f"a{a[1]}"
        if isinstance(a, str):
            return a
        return repr(a) if type(a) is bool else _constant(a)

    body = [f"        a{k} = i{k}[j]" for k in used]
    for name, fn, args in program.lines:
        a = [arg(x) for x in args] if fn != "full" else []
        if fn in INFIX:
            expr = f"{a[0]} {INFIX[fn]} {a[1]}"
        elif fn == "full":
            expr = _constant(args[0])
        elif fn in _TEMPLATES:
            expr = _TEMPLATES[fn].format(*a)
        elif fn in _UFUNCS:
            expr = f"np.{_SPELLED.get(fn, fn)}({', '.join(a)})"
        else:
            return None
        body.append(f"        {name} = {expr}")
    outs = [o for o in program.outputs if not isinstance(o, tuple)]
    if not outs:
        return None
    body += [f"        o{k}[j] = {o}" for k, o in enumerate(outs)]
    params = [f"i{k}" for k in range(program.n_inputs)] + [f"o{k}" for k in range(len(outs))]
    return (f"import math\n\nimport numpy as np\nfrom numpy import {np.dtype(program.dtype).name} as T\n\n\n"
            f"def kernel({', '.join(params)}):\n    for j in range({params[-1]}.shape[0]):\n" + "\n".join(body) + "\n")


def _constant(value) -> str:
    """A Python number as a constant of the kernel's dtype ``T`` (inf and NaN included)."""
    value = float(value)  # an int beyond 64 bits too: NumPy rounds it to the dtype so
    if value != value:
        return "T(np.nan)"
    if value in (math.inf, -math.inf):
        return "T(np.inf)" if value > 0 else "T(-np.inf)"
    return f"T({value!r})"


def _kernel_module(source: str):
    """The module of ``source``, written once into LeanPass's cache folder (so that
    Numba caches its compiled code beside it, for the next process), or run from
    memory where that folder cannot be written."""
    import hashlib
    import importlib.util
    import tempfile

    digest = hashlib.sha1(source.encode()).hexdigest()[:20]
    folder = os.path.join(os.environ.get("LEANPASS_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                                "leanpass"), "kernels")
    path = os.path.join(folder, f"k{digest}.py")
    try:
        if not os.path.exists(path):
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(source)
            os.replace(tmp, path)  # whole or not at all, for a process beside this one
        name = f"leanpass_kernel_{digest}"
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[name] = module  # Numba's disk cache finds a kernel's module by its name
        return module, True
    except OSError:
        namespace: dict = {}
        exec(compile(source, f"<lp.compile kernel {digest}>", "exec"), namespace)  # noqa: S102
        return type("Module", (), namespace), False


def elementwise(program):
    """``program`` (a fused run of :mod:`leanpass._fusion`, float32 or float64) as one
    compiled loop over the elements: a function of its input arrays (all of the
    program's shape, in a list) giving its outputs, C-ordered; None where a function has no
    spelling here. Where an input is laid out otherwise, the run's operations run one
    by one (:func:`leanpass.backends._layout.flat_where_strided`)."""
    dtype = np.dtype(program.dtype)
    if dtype not in _FLOATS:
        return None
    source = _scalar_source(program)
    if source is None:
        return None
    import numba

    module, on_disk = _kernel_module(source)
    loop = numba.njit(module.kernel, cache=on_disk, nogil=True, error_model="numpy")
    outputs, shape = program.outputs, tuple(program.shape)
    computed = [k for k, o in enumerate(outputs) if not isinstance(o, tuple)]

    @flat_where_strided(program, computed)
    def run(arrays):
        flat = [np.ascontiguousarray(a).reshape(-1) for a in arrays]  # (a broadcast one: copied)
        made = [np.empty(flat[0].shape if flat else math.prod(shape), dtype) for _ in computed]
        loop(*flat, *made)
        out = list(arrays[o[1]] if isinstance(o, tuple) else None for o in outputs)
        for k, array in zip(computed, made):
            out[k] = array.reshape(shape)
        return tuple(out)

    run.source = source
    return run


def im2col2d(x, kernel, stride, dilation, out_shape, padding):
    """A two-dimensional convolution's patches of ``x`` (``(A, B, H, W)``, any strides)
    padded with zeros by ``padding`` (one ``(before, after)`` pair per axis), channel-major:
    ``out[a, b, k0 * K1 + k1, i, j] = padded[a, b, i * s0 + k0 * d0, j * s1 + k1 * d1]``, of
    shape ``(A, B, K0 * K1, *out_shape)``."""
    out = np.empty((*x.shape[:2], math.prod(kernel), *out_shape), x.dtype)
    padded = any(lo or hi for lo, hi in padding)
    planes = _plane(x.shape, padding, x.dtype) if padded else x
    _compiled()[8](x, padding[0][0], padding[1][0], *kernel, *stride, *dilation, padded, planes, out)
    return out


def col2im2d(cols, size, kernel, stride, dilation, padding):
    """The adjoint of :func:`im2col2d`: the patches ``cols`` (``(A, B, K0 * K1, O0, O1)``,
    any strides) summed into zeros of ``(A, B, *size)`` padded by ``padding``, each
    element's contributions added in the kernel offsets' order (the generic loop's order:
    the same values), and the padding cut off: ``(A, B, *size)``."""
    padded = any(lo or hi for lo, hi in padding)
    out = (np.empty if padded else np.zeros)((*cols.shape[:2], *size), cols.dtype)
    planes = _plane(out.shape, padding, cols.dtype) if padded else out
    _compiled()[9](cols, padding[0][0], padding[1][0], *kernel, *stride, *dilation, padded, planes, out)
    return out


def _plane(shape, padding, dtype):
    """A plane of zeros of the padded size of ``shape``'s last two axes, as ``(1, 1, H,
    W)``: the patch kernels' scratch (an image plane padded while it is in the cache)."""
    return np.zeros((1, 1, *(n + lo + hi for n, (lo, hi) in zip(shape[-2:], padding))), dtype)


def _planes(x):
    """``x`` (``(..., H, W)``) as C-contiguous ``(P, H, W)``, and the 2 x 2 windows' output
    shape; None where it is not a float array with an axis to pool."""
    if x.dtype not in _FLOATS or x.ndim < 2:
        return None
    h, w = x.shape[-2:]
    return np.ascontiguousarray(x).reshape(-1, h, w), (*x.shape[:-2], h // 2, w // 2)


def max_pool_2x2(x):
    """max_pool2d of ``x`` (``(..., H, W)``) over 2 x 2 windows at stride 2 without
    padding, ``(..., H // 2, W // 2)``: the generic path's chain of ``maximum``, bit for
    bit, in one pass where it takes three (and a copy of the output for the gradient:
    :func:`max_pool_2x2_backward` finds the maxima again). None for an array that is not a
    float32/float64 one."""
    found = _max_pool(x, False)
    return None if found is None else found[0]


def _max_pool(x, keep):
    """``(out, winners)`` of the max-pool kernel (``winners`` None without ``keep``), or
    None for an array it does not take."""
    planes = _planes(x)
    if planes is None:
        return None
    flat, shape = planes
    out = np.empty(shape, x.dtype)
    where = np.empty(shape, x.dtype) if keep else None
    if out.size:
        t = x.dtype.type
        _compiled()[20](flat, keep, t(1), t(0), out.reshape(-1, *shape[-2:]),
                        where.reshape(-1, *shape[-2:]) if keep else _NO_WINNERS[x.dtype])
    return out, where


def _window_gradient(shape, windows, dtype):
    """The input gradient's array of a 2 x 2 max-pool: empty where every element is in a
    window (each is written), else zeros (an odd last row or column is in none)."""
    whole = 2 * windows[0] == shape[-2] and 2 * windows[1] == shape[-1]
    return np.empty(shape, dtype) if whole else np.zeros(shape, dtype)


def max_pool_2x2_backward(x, g):
    """The gradient of ``x`` (``(..., H, W)``) through :func:`max_pool_2x2` (``g`` the
    output's gradient): the generic path's values, bit for bit, in one pass where it takes
    about twelve (1.5 against 3.7 ms for W5c's (64, 32, 28, 28) float32). None where ``g``
    is not of the output's shape and ``x``'s float dtype."""
    planes = _planes(x)
    if planes is None or g.dtype != x.dtype or tuple(g.shape) != planes[1]:
        return None
    flat, shape = planes
    (h, w), (oh, ow) = x.shape[-2:], shape[-2:]
    gx = _window_gradient(x.shape, (oh, ow), x.dtype)
    if gx.size:
        t = x.dtype.type
        _compiled()[21](flat, np.ascontiguousarray(g).reshape(-1, oh, ow), t(1), t(0), gx.reshape(-1, h, w))
    return gx

def max_pool_2x2_winners(x):
    """:func:`max_pool_2x2` of ``x``, and each window's winner for the gradient: ``(out,
    winners)``, ``winners`` of the output's shape and ``x``'s dtype, the offset (0 to 3,
    row-major) of the window's first maximum; ``winners`` None where the output holds a
    NaN (the gradient then comes from the input: :func:`max_pool_2x2_backward`). None for
    an array that is not a float32/float64 one."""
    found = _max_pool(x, True)
    if found is None:
        return None
    out, where = found
    with np.errstate(invalid="ignore", over="ignore"):  # (a NaN, or maxima of both infinities: the input's
        # gradient then; large finite maxima may sum past the dtype's range: inf, no NaN)
        if math.isnan(out.sum()):
            where = None
    return out, where


def max_pool_2x2_scatter(where, g, shape):
    """The gradient of an input of ``shape`` through :func:`max_pool_2x2_winners`: ``g``
    at each window's winner, ``g * 0`` at the window's other elements, 0 outside the
    windows (an odd last row or column): :func:`max_pool_2x2_backward`'s values, bit for
    bit, from the winners alone. None where ``g`` is not of the winners' shape and dtype."""
    if g.dtype != where.dtype or tuple(g.shape) != tuple(where.shape):
        return None
    (h, w), (oh, ow) = shape[-2:], where.shape[-2:]
    gx = _window_gradient(shape, (oh, ow), g.dtype)
    if gx.size:
        t = g.dtype.type
        _compiled()[25](where.reshape(-1, oh, ow), np.ascontiguousarray(g).reshape(-1, oh, ow), t(1), t(0),
                        gx.reshape(-1, h, w))
    return gx


def cross_entropy_rows(logits, index):
    """The cross-entropy of the rows of ``logits`` (``(R, C)``) at the classes ``index``
    (``(R,)`` integers in ``[0, C)``): ``(the mean over the rows of log(sum(exp(shifted)))
    - shifted[index], summed in float64, a 0-d array of the logits' dtype; the softmax of
    each row, a new array)``, ``shifted`` each row less its largest value (a row that
    holds a NaN: a NaN loss and softmax). Three passes (the shift, NumPy's exp in place, the sums
    and the softmax) where NumPy's operations take about nine; the values up to rounding.
    None where ``logits`` is not a float32/float64 2-D array, or ``index`` not of its
    rows."""
    if logits.dtype not in _FLOATS or logits.ndim != 2 or index.shape != logits.shape[:1] or not logits.size:
        return None
    kernels = _compiled()
    logits = np.ascontiguousarray(logits)
    probs = np.empty_like(logits)
    picked = np.empty(logits.shape[0], logits.dtype)
    kernels[26](logits, np.ascontiguousarray(index), probs, picked)
    np.exp(probs, out=probs)
    total = kernels[27](probs, picked, np.empty(1, logits.dtype))
    return np.asarray(total / logits.shape[0], logits.dtype), probs


def bias_rows(out, b, relu=False):
    """``out += b`` on each row of the 2-D ``out`` (a layer's fresh product) with ``b``
    of one value per column, then ``maximum(out, 0)`` with ``relu``, in place and in one
    pass: NumPy's values, bit for bit (where both operands of a sum are NaN, NumPy's
    baseline loop may give the other's NaN). False (nothing done) for arrays it does not
    take: not float32/float64 of one dtype, ``out`` not 2-D, not C-contiguous or read-only,
    ``b`` not of one value per column."""
    dtype = out.dtype
    if (dtype not in _FLOATS or b.dtype != dtype or out.ndim != 2 or b.shape != out.shape[1:]
            or not (out.flags.c_contiguous and b.flags.c_contiguous and out.flags.writeable)):
        return False
    _compiled()[28](out, b, relu)
    return True


def relu_backward(g, y):
    """``g`` where ``y`` is not ``<= 0``, else 0, a new array (into ``g`` itself the loop
    would not vectorise: 112 against 4 us on W1's layer); None where they are not floats
    of one shape and dtype, or ``y`` is not C-contiguous (the caller's generic mask then).
    A strided ``g`` is copied first: a mean's broadcast gradient (W5c's second ReLU) took
    NumPy's ``where`` 3.2 ms, the copy and the loop 0.4."""
    if g.dtype != y.dtype or g.dtype not in _FLOATS or g.shape != y.shape or not y.flags.c_contiguous:
        return None
    if not g.flags.c_contiguous:
        g = np.ascontiguousarray(g)  # (never for a 0-d g: it would come back 1-d)
    out = np.empty_like(g)
    _compiled()[10](g.reshape(-1), y.reshape(-1), out.reshape(-1))
    return out


GELU_CHUNK = 32768  # the values gelu_tanh's three passes take at a time (128 KiB of float32: in the cache)


def gelu_tanh(a, c, k):
    """GELU's tanh approximation: ``(t, out)``, ``t = tanh(c (a + k a^3))`` and ``out =
    0.5 a (1 + t)``, in three passes where NumPy's operations take eight (2.1 against 1.2
    ms for W6's 2048 x 512 float32), over :data:`GELU_CHUNK` values at a time, so that
    the second and third read what the first wrote from the cache (2.1 -> 1.7 ms); the
    same values, bit for bit (NumPy's ``tanh`` itself, and its other operations in their
    order). None for an array that is not a C-contiguous float32/float64 one."""
    if a.dtype not in _FLOATS or not a.flags.c_contiguous:
        return None
    kernels, f = _compiled(), a.dtype.type
    flat = a.reshape(-1)
    t, out = np.empty_like(flat), np.empty_like(flat)
    ck, c, one, half = f(c * k), f(c), f(1.0), f(0.5)
    for start in range(0, flat.size, GELU_CHUNK):
        part, tp = flat[start:start + GELU_CHUNK], t[start:start + GELU_CHUNK]
        kernels[12](part, ck, c, tp)
        np.tanh(tp, out=tp)
        kernels[13](tp, part, one, half, out[start:start + GELU_CHUNK])
    return t.reshape(a.shape), out.reshape(a.shape)


def gelu_tanh_backward(g, a, t, c, k):
    """GELU's gradient, ``g (0.5 (1 + t) - u (1 + 3 k a^2) a)`` with ``u = 0.5 c (t^2 -
    1)``, in one pass where NumPy's operations take twelve (3.3 against 0.6 ms for W6's
    2048 x 512 float32), bit for bit. None where the arrays are not of one shape and one
    float dtype, or ``a`` or ``t`` is not C-contiguous; a strided ``g`` is copied first."""
    if (a.dtype not in _FLOATS or g.dtype != a.dtype or t.dtype != a.dtype or g.shape != a.shape
            or t.shape != a.shape or not (a.flags.c_contiguous and t.flags.c_contiguous)):
        return None
    if not g.flags.c_contiguous:
        g = np.ascontiguousarray(g)
    f = a.dtype.type
    out = np.empty_like(a)
    _compiled()[14](g.reshape(-1), a.reshape(-1), t.reshape(-1), f(1.0), f(0.5 * c), f(3.0 * k), f(0.5),
                    out.reshape(-1))
    return out


_NO_MASK = np.ones((1, 1), np.bool_)  # (the mask argument where there is none: one type for Numba)
_NO_WINNERS = {t: np.empty((1, 1, 1), t) for t in _FLOATS}  # (where max_pool_2x2 keeps none: the same)


def softmax_rows(scores, mask, safe, scale=1.0, causal=None):
    """``softmax(where(allowed, scores * scale, -inf))`` along the last axis, a new array:
    ``mask`` None or a bool array of the last two axes' shape, True where a row may
    look; ``causal`` None or an offset: row ``i`` of the last-but-one axis may look at
    keys ``j <= i + causal`` only (a block of a causal attention's rows), and those
    after it are not read. ``safe`` (a mask was given, bool or added to the scores): a
    row that may look nowhere, its scores all -inf, gets weights 0 (PyTorch's safe
    softmax), not NaN. Three passes (the scale and the shift, NumPy's exp in place, the
    normalisation) where NumPy's operations take nine; the values up to rounding (the
    sums in float64). None where the scores are not a C-contiguous float32/float64
    array of at least two axes, or the mask is not such a bool array."""
    if scores.dtype not in _FLOATS or scores.ndim < 2 or not scores.flags.c_contiguous or scores.size == 0:
        return None
    rows, keys = scores.shape[-2:]
    if mask is not None and (mask.dtype != np.bool_ or mask.shape != (rows, keys)):
        return None
    kernels = _compiled()
    out = np.empty_like(scores)
    scores, flat = scores.reshape(-1, rows, keys), out.reshape(-1, rows, keys)
    kernels[15](scores, _NO_MASK if mask is None else mask, mask is not None, causal is not None, causal or 0,
                bool(safe), scores.dtype.type(scale), flat)
    np.exp(out, out=out)
    kernels[16](flat, causal is not None, causal or 0)
    return out


def softmax_rows_backward(gw, w, scale=1.0, causal=None):
    """The scores' gradient of :func:`softmax_rows`, ``(gw - sum(gw * w)) * w * scale``
    along the last axis (``causal`` as there: 0 at the keys a row may not look at),
    written into ``gw`` (the caller's own array) and returned: two passes where NumPy's
    operations take five; the values up to rounding (one rounding, at the store). None
    where the two are not C-contiguous arrays of one shape and float dtype."""
    if (gw.dtype not in _FLOATS or w.dtype != gw.dtype or gw.shape != w.shape or gw.ndim < 2 or gw.size == 0
            or not (gw.flags.c_contiguous and gw.flags.writeable and w.flags.c_contiguous)):
        return None
    rows, keys = gw.shape[-2:]
    _compiled()[17](gw.reshape(-1, rows, keys), w.reshape(-1, rows, keys), float(scale), causal is not None,
                    causal or 0)
    return gw


def layer_norm_rows(x, weight, bias, eps):
    """LayerNorm over the last axis of ``x``: ``(xhat, out, inv_std)``, ``xhat`` the
    normalised ``x`` (shifted by each row's first value first, as the generic path),
    ``out = xhat * weight + bias`` (``xhat``'s copy without ``weight``; ``bias`` only with
    it) and ``inv_std`` one value per row, float64. Three passes over each row, in the
    cache, where NumPy's operations take about ten over the whole array; the values up
    to rounding (the sums in float64). None where ``x`` is not a C-contiguous float32 or
    float64 array with a last axis, or ``weight``/``bias`` not of that axis and dtype."""
    if x.dtype not in _FLOATS or x.ndim < 1 or x.size == 0 or not x.flags.c_contiguous:
        return None
    keys = x.shape[-1]
    affine = weight is not None
    for p in (weight, bias):
        if p is not None and (p.dtype != x.dtype or p.shape != (keys,)):
            return None
    rows = x.reshape(-1, keys)
    w = weight if affine else rows[0]  # (an array of the right type where there is none)
    b = bias if bias is not None else rows[0]
    xhat, out = np.empty_like(rows), np.empty_like(rows)
    inv_std = np.empty(rows.shape[0])
    _compiled()[18](rows, w, b, affine, bias is not None, float(eps), xhat, out, inv_std)
    return xhat.reshape(x.shape), out.reshape(x.shape), inv_std


def layer_norm_rows_backward(g, xhat, inv_std, weight):
    """:func:`layer_norm_rows`'s gradients: ``(gx, gweight, gbias)`` (the last two sums
    over the rows, None without ``weight``), two passes over each row. None where ``g``
    is not of ``xhat``'s shape and dtype (a strided ``g`` is copied first)."""
    if g.dtype != xhat.dtype or g.shape != xhat.shape:
        return None
    if not g.flags.c_contiguous:
        g = np.ascontiguousarray(g)
    keys = xhat.shape[-1]
    affine = weight is not None
    rows = g.reshape(-1, keys)
    gx = np.empty_like(rows)
    gw, gb = np.zeros(keys), np.zeros(keys)
    _compiled()[19](rows, xhat.reshape(-1, keys), inv_std, weight if affine else rows[0], affine, gx, gw, gb)
    if not affine:
        return gx.reshape(g.shape), None, None
    return gx.reshape(g.shape), gw.astype(g.dtype), gb.astype(g.dtype)


SGD_FROM = 4096  # elements: below, NumPy's ``param += -lr * grad`` (0.8 us for 128 float32) beats this
# call's dispatch (1.35 us); from 16384 on the one pass is faster (3.3 against 4.4 us)


def sgd(grad, lr, wd, param):
    """Plain SGD, ``param -= lr * (grad + wd * param)`` in place, one pass and no
    temporary; False (nothing done) for arrays it does not take. (SciPy's BLAS ``axpy``
    did this before: a second OpenBLAS in the process, whose threads and NumPy's spun
    against each other after every matrix product, 11 ms a step where 1.2 would do
    on two cores, unless the threads were limited.) Written out rather than through
    :func:`_in_place`: a small model's step is mostly this call (6 of W1's 30 us)."""
    dtype = param.dtype
    if grad.dtype != dtype or dtype not in _FLOATS or not (grad.flags.c_contiguous and param.flags.c_contiguous):
        return False
    if not wd and param.size < SGD_FROM:  # (NumPy's two passes: the same values, in less time than the call)
        return False
    t = dtype.type  # (wd's test before its cast: 1e-46 is 0 in float32)
    _compiled()[11](grad.reshape(-1), t(lr), t(wd), wd != 0, param.reshape(-1))
    return True


def sgd_momentum(grad, lr, momentum, wd, nesterov, first, param, buf):
    """PyTorch's SGD with momentum (dampening 0), ``param`` and ``buf`` in place, one
    pass; False (nothing done) for arrays it does not take."""
    return _in_place(6, grad, (lr, momentum, wd), (bool(nesterov), bool(first)), param, buf)


def adam(grad, step_size, one_minus_b1, b2, one_minus_b2, eps, bc2_sqrt, wd, decay, param, m, v):
    """One Adam/AdamW step, ``param``, ``m`` and ``v`` in place, one pass; False
    (nothing done) for arrays it does not take."""
    return _in_place(7, grad, (step_size, one_minus_b1, b2, one_minus_b2, eps, bc2_sqrt, wd, decay), (), param, m, v)


def _in_place(kernel, grad, numbers, flags, *state):
    """The update loop ``kernel`` on the gradient, its numbers (in the state's dtype),
    its flags and the state arrays it changes in place: True, or False where an array
    is not C-contiguous or the dtypes differ."""
    dtype = grad.dtype
    if dtype not in _FLOATS or not grad.flags.c_contiguous:
        return False
    for a in state:
        if a.dtype != dtype or not a.flags.c_contiguous:
            return False
    t = dtype.type
    _compiled()[kernel](grad.reshape(-1), *[t(c) for c in numbers], *flags, *[a.reshape(-1) for a in state])
    return True


def kernels() -> dict:
    """The kernels as :class:`~leanpass.backends._base.FusedKernels` fields (offer
    them only where :func:`enabled`)."""
    return {"affine_rows": affine_rows, "affine2_rows": affine2_rows, "affine_relu_rows": affine_relu_rows,
            "masked_sums": masked_sums, "affine2_masked_rows": affine2_masked_rows,
            "centered_squares": centered_squares, "centered_dot": centered_dot, "patches2d": patches2d,
            "scatter_add2d": scatter_add2d,
            "elementwise": elementwise, "sgd": sgd, "sgd_momentum": sgd_momentum, "adam": adam, "im2col2d": im2col2d,
            "col2im2d": col2im2d, "max_pool_2x2": max_pool_2x2, "max_pool_2x2_backward": max_pool_2x2_backward,
            "max_pool_2x2_winners": max_pool_2x2_winners, "max_pool_2x2_scatter": max_pool_2x2_scatter,
            "cross_entropy_rows": cross_entropy_rows, "bias_rows": bias_rows,
            "relu_backward": relu_backward, "gelu_tanh": gelu_tanh,
            "gelu_tanh_backward": gelu_tanh_backward, "softmax_rows": softmax_rows,
            "softmax_rows_backward": softmax_rows_backward, "layer_norm_rows": layer_norm_rows,
            "layer_norm_rows_backward": layer_norm_rows_backward, "scalar_calls": True, "row_dtypes": _FLOATS}
