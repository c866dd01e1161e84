"""Linear algebra: ``matmul`` and the rest of the standard's main-namespace functions
(``tensordot``, ``vecdot``) and of its ``linalg`` extension.

Forwards go through the device's own linear algebra (``be.linalg``: NumPy's,
CuPy's or ``array_api_strict``'s ``linalg`` namespace); backward rules are
PyTorch's, written with ``xp`` and ``be.linalg`` alone. Only real floating-point
tensors carry gradients, so the rules are the real forms (transposes, not
conjugate transposes). Arguments arrive checked by :mod:`leanpass.linalg` and
:mod:`leanpass._namespace.linalg` (shapes, axes normalised to non-negative ints).

A decomposition with several outputs (``eigh``, ``svd``, ``qr``, ``slogdet``) is
one forward that returns ``(outputs, backwards)``: one backward per output. Each
backward rule is linear in its output's gradient, so the input's gradient is the
sum of the outputs' contributions and the engine adds them like any other.
"""

from __future__ import annotations

import math

from ._op import op
from .elementwise import _complex_sign, sgn


def _as_grad(xp, x, g):
    """``x`` in the gradient's dtype: an integer operand of a product with a float one
    (which some libraries allow in the product, not in its backward's)."""
    return x if x.dtype == g.dtype else xp.astype(x, g.dtype)


def _transpose(xp, m):
    return m.T if m.ndim == 2 else xp.matrix_transpose(m)


def _summed(*parts):
    """The gradient of the one input of a multi-output operation from its rules'
    parts (each a 1-tuple, or None for an output that got no gradient)."""
    total = None
    for part in parts:
        if part is not None and part[0] is not None:
            total = part[0] if total is None else total + part[0]
    return (total,)


def _none(g):
    """The backward of an output that passes no gradient (``slogdet``'s sign, ``A ** 0``)."""
    return (None,)


def _eye_like(be, n, dtype):
    return be.create("eye", n, dtype=dtype)


def _right_solve(be, x, r):
    """``x @ inv(r)``, as ``solve(r.T, x.T).T`` (the standard has no triangular solve)."""
    return _right_solved(be.xp, be.linalg.solve, x, r)


def _right_solved(xp, solve, x, r):
    return _transpose(xp, solve(_transpose(xp, r), _transpose(xp, x)))


@op("@", saves=(0, 1), saves_out=False, needs=True, complex="holomorphic")
def matmul(be, a, b, needs=(True, True)):
    """``xp.matmul`` with 1-D and batched N-D operands; the engine sums batch broadcasts."""
    xp = be.xp
    out = be.quietly(be.matmul, a, b)  # inf * 0 and overflow: nan and inf, without a warning
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
        ga = be.matmul(g, _transpose(xp, B)) if need_a else None
        gb = be.matmul(_transpose(xp, A), g) if need_b else None
        if a_vec and ga is not None:
            ga = ga[..., 0, :]
        if b_vec and gb is not None:
            gb = gb[..., 0]
        return ga, gb

    return out, backward


# ---- main namespace: contractions -------------------------------------------------------------


@op("tensordot", saves=(0, 1), saves_out=False, needs=True, complex="holomorphic")
def tensordot(be, a, b, axes_a, axes_b, needs=(True, True)):
    """Contract ``a``'s ``axes_a`` with ``b``'s ``axes_b`` (tuples of non-negative axes,
    paired in order); each gradient is the output's gradient contracted with the
    other operand over its free axes, with the axes put back in place."""
    xp = be.xp
    out = xp.tensordot(a, b, axes=(axes_a, axes_b))
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [j for j in range(b.ndim) if j not in axes_b]
    na, nb = len(free_a), len(free_b)

    def backward(g):
        ga = gb = None
        if needs[0]:
            t = xp.tensordot(g, b, axes=(tuple(range(na, na + nb)), tuple(free_b)))
            order = free_a + [axes_a[axes_b.index(j)] for j in sorted(axes_b)]  # a's axis of each axis of t
            ga = xp.permute_dims(t, tuple(order.index(i) for i in range(a.ndim)))
        if needs[1]:
            t = xp.tensordot(a, g, axes=(tuple(free_a), tuple(range(na))))
            order = [axes_b[axes_a.index(i)] for i in sorted(axes_a)] + free_b
            gb = xp.permute_dims(t, tuple(order.index(j) for j in range(b.ndim)))
        return ga, gb

    return out, backward


@op("vecdot", saves=(0, 1), saves_out=False, needs=True, complex="own")
def vecdot(be, a, b, axis, needs=(True, True)):
    """``sum(conj(a) * b, axis=axis)`` (``axis`` negative, the same size in both).
    Gradients (PyTorch's convention): ``conj(g) b`` to ``a`` (the result is conjugate
    in ``a``), ``g a`` to ``b``; ``g b`` and ``g a`` for real tensors."""
    xp = be.xp

    def backward(g):
        g = xp.expand_dims(g, axis=axis)
        conj_g = xp.conj(g) if xp.isdtype(g.dtype, "complex floating") else g
        return (conj_g * _as_grad(xp, b, g) if needs[0] else None), (g * _as_grad(xp, a, g) if needs[1] else None)

    return xp.vecdot(a, b, axis=axis), backward


# ---- linalg: products and parts of matrices ---------------------------------------------------


@op("cross", saves=(0, 1), saves_out=False, needs=True, complex="holomorphic")
def cross(be, a, b, axis, needs=(True, True)):
    """Cross products of 3-vectors along ``axis`` (negative); ``(a x b) . g = a . (b x g)``."""
    product = be.linalg.cross

    def backward(g):
        xp = be.xp
        return ((product(_as_grad(xp, b, g), g, axis=axis) if needs[0] else None),
                (product(g, _as_grad(xp, a, g), axis=axis) if needs[1] else None))

    return product(a, b, axis=axis), backward


@op("outer", saves=(0, 1), saves_out=False, needs=True, complex="holomorphic")
def outer(be, a, b, needs=(True, True)):
    """``a[:, None] * b[None, :]`` for 1-D ``a`` and ``b``."""

    def backward(g):
        xp = be.xp
        return (g @ _as_grad(xp, b, g) if needs[0] else None), (g.T @ _as_grad(xp, a, g) if needs[1] else None)

    return be.linalg.outer(a, b), backward


@op("diagonal", saves=(), saves_out=False, complex="holomorphic")
def diagonal(be, a, offset):
    """The ``offset`` diagonal of the last two axes (a copy: NumPy's is a read-only view);
    the gradient goes back onto that diagonal."""
    xp = be.xp
    shape = a.shape
    m, n = shape[-2:]
    out = be.copy(be.linalg.diagonal(a, offset=offset))

    def backward(g):
        d = g.shape[-1]
        if d == 0:
            return (be.zeros(shape, g.dtype),)
        mask = be.create("eye", m, n, k=offset, dtype=g.dtype)
        size = m if offset >= 0 else n  # the diagonal's i-th entry is in row i (column i for offset < 0)
        if d < size:
            g = xp.concat([g, be.zeros(g.shape[:-1] + (size - d,), g.dtype)], axis=-1)
        g = xp.expand_dims(g, axis=-1 if offset >= 0 else -2)
        return (g * mask,)

    return out, backward


@op("trace", saves=(), saves_out=False, complex="holomorphic")
def trace(be, a, offset, dtype):
    """Sums of the ``offset`` diagonal of the last two axes (``dtype``: the sum's dtype)."""
    xp = be.xp
    m, n = a.shape[-2:]

    def backward(g):
        mask = be.create("eye", m, n, k=offset, dtype=g.dtype)
        return (g[..., None, None] * mask,)

    return xp.asarray(be.linalg.trace(a, offset=offset, dtype=dtype)), backward


# ---- linalg: inverses and solves -------------------------------------------------------------


# The backward rules of inv, solve and cholesky read only their output (and solve its A):
# each is one function of the namespace ``xp`` and a ``solve``, which the forward's backward
# runs on arrays and the op's ``rule`` on Tensors (create_graph after an in-place change).


def _inv_grad(xp, y, g):
    yt = _transpose(xp, y)
    return -(yt @ g @ yt)


def _inv_rule(xp, inputs, out, g):
    return (_inv_grad(xp, out, g),)


@op("inv", saves=(), saves_out=True, rule=_inv_rule, complex="holomorphic")
def inv(be, a):
    """Matrix inverse ``Y``: ``gA = -Y^T g Y^T``."""
    xp = be.xp
    y = be.linalg.inv(a)
    return y, lambda g: (_inv_grad(xp, y, g),)


def _solve_grads(xp, solve, a, x, g, needs):
    """``(gA, gB)`` of ``X = solve(A, B)`` in matrix form (``B`` and ``X`` of shape ``(..., M, K)``)."""
    gb = solve(_transpose(xp, a), g)
    return (-(gb @ _transpose(xp, x)) if needs[0] else None), (gb if needs[1] else None)


def _solve_rule(xp, inputs, out, g, batch, needs=(True, True)):
    if inputs[1].ndim == 1:  # one right-hand side
        ga, gb = _solve_grads(xp, xp.linalg.solve, inputs[0], out[..., None], g[..., None], needs)
        return ga, (None if gb is None else gb[..., 0])
    return _solve_grads(xp, xp.linalg.solve, inputs[0], out, g, needs)


@op("solve", saves=(0,), saves_out=True, needs=True, rule=_solve_rule, complex="holomorphic")
def solve(be, a, b, batch, needs=(True, True)):
    """``X`` with ``A X = B``: ``A`` of shape ``(..., M, M)``, ``B`` of shape ``(M,)`` (one
    right-hand side for every matrix) or ``(..., M, K)``; ``batch`` is the broadcast
    of the stack shapes. ``gB = solve(A^T, g)``, ``gA = -gB X^T``: the backward reads ``A``
    (it saves it: a change of ``A`` after the forward makes it raise) and ``X``."""
    xp = be.xp
    dtype = xp.result_type(a, b)
    vector = b.ndim == 1
    if vector:
        b = b[:, None]
    m = a.shape[-1]
    a = xp.broadcast_to(xp.astype(a, dtype, copy=False), batch + (m, m))
    b = xp.broadcast_to(xp.astype(b, dtype, copy=False), batch + tuple(b.shape[-2:]))
    x = be.linalg.solve(a, b)

    def backward(g):
        ga, gb = _solve_grads(xp, be.linalg.solve, a, x, g[..., None] if vector else g, needs)
        return ga, (gb[..., 0] if vector and gb is not None else gb)

    return (x[..., 0] if vector else x), backward


@op("pinv", saves=(0,), saves_out=True, complex="own")
def pinv(be, a, rtol):
    """Moore-Penrose pseudo-inverse (``rtol``: None, a number or an array broadcast
    against the stack); PyTorch's gradient (for matrices of constant rank), complex
    matrices too."""
    xp = be.xp
    p = be.linalg.pinv(a, rtol=rtol)
    m, n = a.shape[-2:]

    def backward(g):
        t = lambda x: _adjoint(xp, x)  # noqa: E731 - the conjugate transpose (complex matrices too)
        pt, gt = t(p), t(g)
        if m <= n:
            k = gt @ p
            kpt = k @ pt
            ga = -t(p @ k) + kpt - (a @ p) @ kpt + (pt @ p) @ (gt - k @ a)
        else:
            k = p @ gt
            ptk = pt @ k
            ga = -t(k @ p) + (gt - a @ k) @ p @ pt + ptk - ptk @ p @ a
        return ga, None  # nothing for rtol

    return p, backward


# ---- linalg: determinants ----------------------------------------------------------------------


def _svd_cofactor(be, a):
    """The cofactor matrix of ``a`` from an SVD ``A = U S Vh``: ``det(U) det(Vh) U
    diag(prod_{j != i} s_j) Vh`` (right for singular matrices too)."""
    xp = be.xp
    u, s, vh = be.linalg.svd(a)
    sign = be.linalg.det(u) * be.linalg.det(vh)
    before = xp.cumulative_prod(s, axis=-1, include_initial=True)[..., :-1]
    after = xp.flip(xp.cumulative_prod(xp.flip(s, axis=-1), axis=-1, include_initial=True)[..., :-1], axis=-1)
    return sign[..., None, None] * ((u * (before * after)[..., None, :]) @ vh)


@op("det", saves=(0,), saves_out=True, complex="holomorphic")
def det(be, a):
    """Determinant. Its gradient is the cofactor matrix: ``det(A) A^-T`` where ``A`` is
    invertible in practice (PyTorch's rule: smooth there, so second derivatives exist
    even where singular values repeat, as at the identity), and the SVD form of
    :func:`_svd_cofactor` where it is singular, or so ill-conditioned (``||A|| ||A^-1||``
    in the infinity norm above ``1 / sqrt(eps)``) that the derivative of ``det(A) A^-T``
    cancels catastrophically (a product of rank-deficient factors, whose det is rounding
    noise, not 0). A batch of both kinds, where reading back which is which would make
    the device wait, computes both forms, each on matrices made safe for it (the
    identity; ``diag(1..n)``), and picks per matrix."""
    xp = be.xp
    d = xp.asarray(be.linalg.det(a))

    def backward(g):
        if xp.isdtype(a.dtype, "complex floating"):  # holomorphic: d A^-T (the engine conjugates around it)
            try:
                inverse = be.linalg.inv(a)
            except ValueError as exc:  # NumPy's LinAlgError
                raise type(exc)(f"det: the gradient at a singular complex matrix is not supported (shape "
                                f"{a.shape}): {exc}") from None
            return ((g * d)[..., None, None] * _transpose(xp, inverse),)
        n = a.shape[-1]
        nonzero = d != 0
        whole = be.syncs_cheaply and bool(xp.all(nonzero))
        if be.syncs_cheaply and not whole and not bool(xp.any(nonzero)):
            return (g[..., None, None] * _svd_cofactor(be, a),)
        eye = None if whole else _eye_like(be, n, a.dtype)
        safe = a if whole else xp.where(nonzero[..., None, None], a, eye)
        inv = be.linalg.inv(safe)
        with be.quiet():  # the norms of a huge inverse may overflow: infinitely ill-conditioned
            cond = be.linalg.matrix_norm(safe, ord=math.inf) * be.linalg.matrix_norm(inv, ord=math.inf)
        invertible = nonzero & (cond < 1.0 / math.sqrt(xp.finfo(a.dtype).eps))
        if be.syncs_cheaply and bool(xp.all(invertible)):
            return ((g * d)[..., None, None] * _transpose(xp, inv),)
        if be.syncs_cheaply and not bool(xp.any(invertible)):
            return (g[..., None, None] * _svd_cofactor(be, a),)
        mask = invertible[..., None, None]
        # grouped as the paths above, so that each matrix's gradient is theirs bit for bit (lp.compile takes
        # this path, which reads nothing on the host, where eagerly one of those may run)
        regular = (g * d)[..., None, None] * _transpose(xp, inv)
        eye = _eye_like(be, n, a.dtype) if eye is None else eye
        distinct = eye * xp.reshape(be.arange(n, a.dtype) + 1, (1, n))  # diag(1..n): distinct singular values
        singular = g[..., None, None] * _svd_cofactor(be, xp.where(mask, distinct, a))
        return (xp.where(mask, regular, singular),)

    return d, backward


@op("slogdet", saves=(0,), saves_out=False, complex="own")
def slogdet(be, a):
    """``(sign, logabsdet)`` of the determinant: ``logabsdet`` passes ``g conj(A^-1)^T``;
    a real sign passes no gradient, a complex one (``exp(i arg det A)``) passes
    ``-i Im(conj(g) sign) conj(A^-1)^T`` (PyTorch's, from ``log det`` being holomorphic)."""
    xp = be.xp
    sign, logabsdet = be.linalg.slogdet(a)
    sign = xp.asarray(sign)
    complex_input = xp.isdtype(a.dtype, "complex floating")

    def inverse_transposed():
        try:
            inverse = be.linalg.inv(a)
        except ValueError as exc:  # NumPy's LinAlgError: a singular matrix
            raise type(exc)(f"slogdet: the gradient of logabsdet at a singular matrix is infinite (shape "
                            f"{a.shape}): {exc}") from None
        return _transpose(xp, xp.conj(inverse) if complex_input else inverse)

    def backward(g_sign, g_logabsdet):
        total = None if g_logabsdet is None else g_logabsdet  # the gradient of log det, as a complex number
        if g_sign is not None and complex_input:
            turn = xp.imag(xp.conj(g_sign) * sign) * (-1j)
            total = turn if total is None else total + turn
        if total is None:  # a real sign passes nothing
            return (None,)
        return (total[..., None, None] * inverse_transposed(),)

    return (sign, xp.asarray(logabsdet)), backward


# ---- linalg: decompositions --------------------------------------------------------------------


def _adjoint(xp, m):
    """The conjugate transpose (the transpose of a real matrix)."""
    return xp.conj(_transpose(xp, m)) if xp.isdtype(m.dtype, "complex floating") else _transpose(xp, m)


def _cholesky_grad(xp, solve, out, g, upper):
    """PyTorch's ``cholesky_backward``: ``gA = L^-H Phi L^-1``, ``M = tril(L^H gL)``,
    ``Phi = (M + tril(M, -1)^H) / 2`` (for real matrices ^H is ^T)."""
    low = _adjoint(xp, out) if upper else out
    g = _adjoint(xp, g) if upper else g
    low_h = _adjoint(xp, low)
    m = xp.tril(low_h @ g)
    phi = 0.5 * (m + _adjoint(xp, xp.tril(m, k=-1)))
    return _right_solved(xp, solve, solve(low_h, phi), low)


def _cholesky_rule(xp, inputs, out, g, upper):
    return (_cholesky_grad(xp, xp.linalg.solve, out, g, upper),)


@op("cholesky", saves=(), saves_out=True, rule=_cholesky_rule, complex="own")
def cholesky(be, a, upper):
    """Cholesky factor ``L`` (``U = L^H`` when ``upper``). PyTorch's rule:
    ``gA = L^-H Phi L^-1`` with ``M = tril(L^H gL)``, ``Phi = (M + tril(M, -1)^H) / 2``
    (complex matrices too)."""
    xp = be.xp
    out = be.linalg.cholesky(a, upper=upper)
    return out, lambda g: (_cholesky_grad(xp, be.linalg.solve, out, g, upper),)


def _eigen_vectors_backward(be, w, v):
    """``gA = V (skew(V^H gV) / E) V^H``, ``E_ij = w_j - w_i`` (distinct eigenvalues; for
    real matrices ^H is ^T). Complex eigenvectors are defined up to a phase each: a loss
    that depends on the phases (``Im diag(V^H gV)`` not 0) is refused, as PyTorch does."""
    xp = be.xp

    def backward(g):
        vt = _adjoint(xp, v)
        vg = vt @ g
        if xp.isdtype(v.dtype, "complex floating"):  # a read on the host, on a GPU too: never a gradient by chance
            phase = xp.imag(xp.linalg.diagonal(vg))
            if bool(xp.any(xp.abs(phase) > 1e-2)):
                raise RuntimeError(
                    "eigh: the eigenvectors of a complex matrix are defined up to a phase each (e^{i phi}), and "
                    "the loss depends on those phases, so its gradient is not defined (PyTorch refuses it too); "
                    "use quantities that do not depend on them (abs(v), v @ v^H, the eigenvalues)"
                )
        skew = 0.5 * (vg - _adjoint(xp, vg))
        gaps = w[..., None, :] - w[..., :, None] + _eye_like(be, w.shape[-1], w.dtype)  # 1 on the diagonal
        with be.quiet():  # repeated eigenvalues: inf/nan, as PyTorch
            return (v @ (skew / gaps) @ vt,)

    return backward


def _eigen_values_backward(be, v):
    """``gA = V diag(gw) V^H``."""
    xp = be.xp

    def backward(g):
        return ((v * xp.astype(g, v.dtype)[..., None, :]) @ _adjoint(xp, v),)

    return backward


def _eigh_rule(be, outs):
    """eigh's backward from its outputs ``(w, v)``: ``backward(gw, gv)``."""
    w, v = outs
    values, vectors = _eigen_values_backward(be, v), _eigen_vectors_backward(be, w, v)
    return lambda gw, gv: _summed(values(gw) if gw is not None else None, vectors(gv) if gv is not None else None)


@op("eigh", saves=(), saves_out=True, complex="own", rule=_eigh_rule)
def eigh(be, a):
    """``(eigenvalues, eigenvectors)`` of symmetric matrices, with PyTorch's gradients
    (symmetric, for distinct eigenvalues)."""
    outs = be.linalg.eigh(a)
    return tuple(outs), _eigh_rule(be, outs)


@op("eigvalsh", saves=(), saves_out=True, complex="own")
def eigvalsh(be, a, grad):
    """Eigenvalues of symmetric matrices (``grad``: compute the eigenvectors the
    gradient needs)."""
    if not grad:
        return be.linalg.eigvalsh(a), None
    w, v = be.linalg.eigh(a)
    return w, _eigen_values_backward(be, v)


def _svd_values_backward(be, u, vh):
    """``gA = U diag(gS) Vh`` (``gS`` real, also for complex matrices)."""
    xp = be.xp

    def backward(g):
        return ((u * xp.astype(g, u.dtype)[..., None, :]) @ vh,)

    return backward


def _diagonal_matrix(be, d, dtype):
    """Matrices with the vectors ``d`` (a stack) on their diagonals."""
    return d[..., None, :] * _eye_like(be, d.shape[-1], dtype)


def _svd_backward(be, u, s, vh, m, n):
    """PyTorch's ``svd_backward`` (reduced ``U``, ``Vh``; distinct, non-zero singular
    values), given the gradients of all three outputs at once::

        gA = U [(skew(U^H gU) / E) S + S (skew(V^H gV) / E) + diag(gS)] V^H
             + (I - U U^H) gU S^-1 V^H + U S^-1 gV^H (I - V V^H)

    with ``skew(X) = X - X^H`` and ``E_jk = s_k^2 - s_j^2`` (1 on the diagonal). The
    columns of complex ``U`` and ``V`` are defined up to a phase each (``u_j e^{i phi}``,
    ``v_j e^{i phi}``): a loss that depends on those phases (``Im (U^H gU)_jj + Im (V^H
    gV)_jj`` not 0) is refused, as PyTorch refuses it; for one that does not, the
    diagonal gets ``i Im (U^H gU)_jj / s_j`` (the phases moved to ``U``)."""
    xp = be.xp
    k = s.shape[-1]
    complex_input = xp.isdtype(u.dtype, "complex floating")
    values = _svd_values_backward(be, u, vh)

    def h(x):
        return _adjoint(xp, x)

    def backward(gu, gs, gvh):
        if gu is None and gvh is None:
            return values(gs) if gs is not None else (None,)
        with be.quiet():  # repeated or zero singular values: inf/nan, as PyTorch
            return (vectors(gu, gs, gvh),)

    def vectors(gu, gs, gvh):
        s2 = s * s
        gaps = s2[..., None, :] - s2[..., :, None] + _eye_like(be, k, s.dtype)
        inner = 0.0
        uhgu = vhgv = None
        if gu is not None:
            gu = gu[..., :k]  # full_matrices: the columns past k get no gradient (PyTorch)
            uhgu = h(u) @ gu
            inner = (uhgu - h(uhgu)) / gaps * s[..., None, :]
        if gvh is not None:
            gvh = gvh[..., :k, :]
            vhgv = vh @ h(gvh)
            inner = inner + s[..., :, None] * ((vhgv - h(vhgv)) / gaps)
        if complex_input:
            phases = [xp.imag(xp.linalg.diagonal(x)) for x in (uhgu, vhgv) if x is not None]
            total = phases[0] if len(phases) == 1 else phases[0] + phases[1]
            if bool(xp.any(xp.abs(total) > 1e-2 + 1e-2 * xp.abs(phases[-1]))):  # a read on the host, as eigh's
                raise RuntimeError(
                    "svd: the singular vectors of a complex matrix are defined up to a phase each (u_j e^{i phi}, "
                    "v_j e^{i phi}), and the loss depends on those phases, so its gradient is not defined (PyTorch "
                    "refuses it too); use quantities that do not depend on them (abs(U), U @ Vh, the singular values)"
                )
            if uhgu is not None:
                inner = inner + _diagonal_matrix(be, xp.astype(xp.imag(xp.linalg.diagonal(uhgu)) / s, u.dtype) * 1j,
                                                 u.dtype)
        if gs is not None:
            inner = inner + _diagonal_matrix(be, xp.astype(gs, u.dtype), u.dtype)
        if m > k and gu is not None:
            scaled = gu / xp.astype(s, u.dtype)[..., None, :]
            return (u @ inner + scaled - u @ (h(u) @ scaled)) @ vh
        if n > k and gvh is not None:
            scaled = gvh / xp.astype(s, u.dtype)[..., :, None]
            return u @ (inner @ vh + scaled - (scaled @ h(vh)) @ vh)
        return u @ inner @ vh

    return backward


def _svd_rule(be, outs, full_matrices):
    """svd's backward from its outputs ``(U, S, Vh)``: ``backward(gU, gS, gVh)``."""
    u, s, vh = outs
    k = s.shape[-1]
    ur = u[..., :k] if u.shape[-1] > k else u
    vhr = vh[..., :k, :] if vh.shape[-2] > k else vh
    return _svd_backward(be, ur, s, vhr, u.shape[-2], vh.shape[-1])


@op("svd", saves=(), saves_out=True, complex="own", rule=_svd_rule)
def svd(be, a, full_matrices):
    """``(U, S, Vh)`` with PyTorch's gradients (distinct singular values; with
    ``full_matrices`` the extra singular vectors get none; complex matrices too)."""
    outs = tuple(be.linalg.svd(a, full_matrices=full_matrices))
    return outs, _svd_rule(be, outs, full_matrices)


@op("svdvals", saves=(), saves_out=True, complex="own")
def svdvals(be, a, grad):
    """Singular values, largest first (``grad``: compute the singular vectors the
    gradient needs)."""
    if not grad:
        return be.linalg.svdvals(a), None
    u, s, vh = be.linalg.svd(a, full_matrices=False)
    return s, _svd_values_backward(be, u, vh)


def _qr_rule(be, outs, mode):
    """qr's backward from its outputs ``(Q, R)``: ``backward(gQ, gR)``."""
    xp = be.xp
    t = lambda x: _adjoint(xp, x)  # noqa: E731 - the conjugate transpose (complex matrices too)
    q, r = outs
    m, n = q.shape[-2], r.shape[-1]
    complex_input = xp.isdtype(q.dtype, "complex floating")

    def square(gq, gr, r):
        """TensorFlow's ``_QrGradSquareAndDeepMatrices`` (M >= N): ``gA = [(I - QQ^H) gQ
        + Q (gR R^H + N)] R^-H`` with ``M = Q^H gQ - gR R^H`` and ``N = tril(M - M^H)``
        with half its diagonal (``i Im diag M``: R's diagonal is real, so only the
        imaginary part of ``Q^H dQ``'s diagonal is free); gq or gr may be None."""
        inner = 0.0
        total = 0.0
        if gq is not None:
            qgq = t(q) @ gq
            inner = qgq - t(qgq)
            total = _right_solve(be, gq - q @ qgq, t(r))  # x R^-T
        if gr is not None:
            rgr = r @ t(gr)
            inner = inner + (rgr - t(rgr))
        lower = xp.tril(inner)
        if complex_input:  # the diagonal of inner is 2i Im(diag M): R's real diagonal takes half of it
            lower = lower - 0.5 * _diagonal_matrix(be, xp.linalg.diagonal(inner), inner.dtype)
        part = _right_solve(be, lower, t(r))
        if gr is not None:
            part = part + gr
        return q @ part + total

    def backward(gq, gr):
        if mode == "complete" and m > n:
            raise RuntimeError(
                f"qr: the decomposition of a {m}x{n} matrix (more rows than columns) is not differentiable with "
                "mode='complete'; use mode='reduced'"
            )
        if m >= n:
            return (square(gq, gr, r),)
        # wide: A = [X | Y], R = [U | V] with X = Q U (square), Y = Q V
        u, v = r[..., :m], r[..., m:]
        if gr is None:
            return (xp.concat([square(gq, None, u), be.zeros(q.shape[:-2] + (m, n - m), q.dtype)], axis=-1),)
        gv = gr[..., m:]
        y = q @ v
        gx = square(y @ t(gv) if gq is None else gq + y @ t(gv), gr[..., :m], u)
        return (xp.concat([gx, q @ gv], axis=-1),)

    return backward


@op("qr", saves=(), saves_out=True, complex="own", rule=_qr_rule)
def qr(be, a, mode):
    """``(Q, R)``; gradients for ``mode="reduced"`` (any shape) and for
    ``mode="complete"`` when ``M <= N`` (the same factors), as PyTorch; complex
    matrices too (with conjugate transposes)."""
    outs = tuple(be.linalg.qr(a, mode=mode))
    return outs, _qr_rule(be, outs, mode)


# ---- linalg: norms -----------------------------------------------------------------------------


def _sign(xp, a):
    """``sgn(a)``, PyTorch's: -1, 0, 1 (0 at NaN) for real ``a``, ``a / |a|`` (0 at 0) for complex."""
    return _complex_sign(xp, a) if xp.isdtype(a.dtype, "complex floating") else sgn(xp, a)


def _kept(shape, axes):
    return tuple(1 if i in axes else size for i, size in enumerate(shape))


@op("vector_norm", saves=(0,), saves_out=True, complex="own")
def vector_norm(be, a, axes, keepdims, ord):  # noqa: A002 - the standard's name
    """``ord``-norms over ``axes`` (a tuple, or None: all); PyTorch's ``norm_backward``:
    no gradient for ord 0, the gradient shared among ties for ord +-inf (a NaN counts
    as one), zero where the norm is zero; ord 1 and +-inf take the sign as PyTorch's
    ``sgn``, 0 at NaN."""
    xp = be.xp
    axis = axes[0] if axes is not None and len(axes) == 1 else axes
    with be.quiet():  # negative orders of zeros: 0, without a warning
        out = xp.asarray(be.linalg.vector_norm(a, axis=axis, keepdims=keepdims, ord=ord))
    every = tuple(range(a.ndim)) if axes is None else axes
    kept = _kept(a.shape, every)

    def backward(g):
        if ord == 0:
            return (None,)
        g = xp.reshape(g, kept)
        norm = xp.reshape(out, kept)
        if ord == 1:
            return (_sign(xp, a) * g,)
        with be.quiet():  # zero norms: masked below
            return (_rule(g, norm),)

    def _rule(g, norm):
        if ord == 2:
            return g * xp.where(norm == 0, 0.0, a / norm)
        size = xp.abs(a)
        if ord in (float("inf"), float("-inf")):
            ties = xp.astype((size == norm) | xp.isnan(size), size.dtype)
            return _sign(xp, a) * xp.astype(ties, g.dtype) * (g / xp.sum(ties, axis=every, keepdims=True))
        if ord < 1:
            scaled = _sign(xp, a) * xp.astype(xp.where(a == 0, 0.0, size ** (ord - 1)), a.dtype)
            return scaled * g * norm ** (1 - ord)
        scaled = _sign(xp, a) * xp.astype(size ** (ord - 1), a.dtype) if ord < 2 else a * size ** (ord - 2)
        return scaled * xp.where(norm == 0, 0.0, g / norm ** (ord - 1))

    return out, backward


@op("matrix_power", saves=(), saves_out=False, complex="holomorphic")
def identity_power(be, a):
    """``A ** 0``: identity matrices of ``a``'s shape, with zero gradient (PyTorch)."""
    xp = be.xp
    eye = _eye_like(be, a.shape[-1], a.dtype)
    return be.copy(xp.broadcast_to(eye, a.shape)), _none


@op("matrix_rank", differentiable=False)
def matrix_rank(be, a, rtol):
    """The number of singular values above ``rtol`` times the largest (int64)."""
    xp = be.xp
    if a.shape[-1] == 0 or a.shape[-2] == 0:  # no singular values: rank 0 (the library's max of nothing raises)
        rank = be.zeros(a.shape[:-2], xp.int64)
        if hasattr(rtol, "shape"):  # the stack's shape broadcast with rtol's, as for other matrices
            rank = rank + xp.astype(xp.zeros_like(rtol), xp.int64)
        return rank, None
    return xp.astype(xp.asarray(be.linalg.matrix_rank(a, rtol=rtol)), xp.int64, copy=False), None
