"""The operations of ``lp.special``: forward and backward rule, gradients as
``torch.special``'s.

The functions the standard cannot express (``erf``, ``gammaln``, ``i0``...) come from
the backend's :attr:`~leanpass.backends.Backend.special` (``scipy.special`` on ``cpu``,
``cupyx.scipy.special`` on ``cuda``; on a device without them the forward raises
``NotImplementedError`` naming the function and the device). ``expit``, ``logit``,
``xlogy``, ``xlog1py`` and ``sinc`` are written with ``xp`` alone, so they run on every
device.

Backward rules use ``xp`` and ``be.special`` only: replayed with ``create_graph=True``
(``be`` a graph backend, whose ``special`` is ``lp.special`` itself) they record a
graph, so every function here can be differentiated again. Each rule is PyTorch's
(``tools/autograd/derivatives.yaml``), including its values at the special points:
``logit``'s nan outside ``[0, 1]`` and 0 outside ``[eps, 1 - eps]``, ``xlogy``'s 0 for
``x == 0, y <= 0``, ``sinc``'s 0 at 0, ``i1``'s 0.5 at 0. Constants stay Python floats,
so float32 stays float32.
"""

from __future__ import annotations

import math

from ._op import Op, op

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_SQRT_PI_OVER_TWO = math.sqrt(math.pi) / 2.0
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _unary(name, forward, rule, *, uses=("x",), xp_rule=False, quiet=False):
    """The Op of the unary function ``name``: ``forward(be, x) -> out`` (run under
    ``be.quietly`` if ``quiet``: the library's functions are quiet already) and
    ``rule(xp, special, x, out, g) -> gradient``. An ``xp_rule`` (one that never reads
    ``special``) is also the op's rule on saved values."""

    def fn(be, a):
        out = be.quietly(forward, be, a) if quiet else forward(be, a)

        def backward(g):
            return (rule(be.xp, be.special, a, out, g),)

        return out, backward

    saved = None
    if xp_rule:

        def saved(xp, inputs, out, g):
            return (rule(xp, None, inputs[0], out, g),)

    operation = Op(name, fn, saves=(0,) if "x" in uses else (), saves_out="out" in uses, rule=saved)
    operation.__doc__ = forward.__doc__
    return operation


# ---- from the library: erf, erfc, erfinv, ndtr, log_ndtr ------------------------------


def _erf(be, a):
    """The error function, ``2 / sqrt(pi)`` times the integral of ``exp(-t**2)`` from 0 to ``x``."""
    return be.special.erf(a)


def _erf_rule(xp, special, x, out, g):
    return g * (_TWO_OVER_SQRT_PI * xp.exp(-(x * x)))


def _erfc(be, a):
    """The complementary error function, ``1 - erf(x)`` (without its cancellation for large ``x``)."""
    return be.special.erfc(a)


def _erfc_rule(xp, special, x, out, g):
    return g * (-_TWO_OVER_SQRT_PI * xp.exp(-(x * x)))


def _erfinv(be, a):
    """The inverse of ``erf`` on ``[-1, 1]`` (``±inf`` at ``±1``, nan outside)."""
    return be.special.erfinv(a)


def _erfinv_rule(xp, special, x, out, g):
    return g * (_SQRT_PI_OVER_TWO * xp.exp(out * out))


def _ndtr(be, a):
    """The standard normal distribution function, ``(1 + erf(x / sqrt(2))) / 2``."""
    return be.special.ndtr(a)


def _ndtr_rule(xp, special, x, out, g):
    return g * (_INV_SQRT_2PI * xp.exp(-0.5 * (x * x)))


def _log_ndtr(be, a):
    """``log(ndtr(x))``, accurate far into the left tail."""
    return be.special.log_ndtr(a)


def _log_ndtr_rule(xp, special, x, out, g):
    return g * (_INV_SQRT_2PI * xp.exp(-(out + 0.5 * (x * x))))


erf = _unary("erf", _erf, _erf_rule, xp_rule=True)
erfc = _unary("erfc", _erfc, _erfc_rule, xp_rule=True)
erfinv = _unary("erfinv", _erfinv, _erfinv_rule, uses=("out",), xp_rule=True)
ndtr = _unary("ndtr", _ndtr, _ndtr_rule, xp_rule=True)
log_ndtr = _unary("log_ndtr", _log_ndtr, _log_ndtr_rule, uses=("x", "out"), xp_rule=True)


# ---- from the library, with a library function in the gradient ----------------------------


def _gammaln(be, a):
    """``log(|gamma(x)|)``, the log of the absolute value of the gamma function (inf at
    -inf, as C's ``lgamma`` and PyTorch; SciPy gives -inf there)."""
    xp = be.xp
    out = be.special.gammaln(a)
    return xp.where(a == -math.inf, xp.full_like(out, math.inf), out)


def _gammaln_rule(xp, special, x, out, g):
    return g * special.digamma(x)


def _digamma(be, a):
    """``psi(x)``, the derivative of ``gammaln``."""
    return be.special.digamma(a)


def _digamma_rule(xp, special, x, out, g):
    return g * special.polygamma(1, x)


def _i0(be, a):
    """The modified Bessel function of the first kind of order 0."""
    return be.special.i0(a)


def _i0_rule(xp, special, x, out, g):
    return g * special.i1(x)


def _i1(be, a):
    """The modified Bessel function of the first kind of order 1."""
    return be.special.i1(a)


def _i1_rule(xp, special, x, out, g):
    """``i0(x) - i1(x) / x``, and its limit 0.5 where ``|x|`` is not above the dtype's
    eps (also at NaN: PyTorch's rule)."""
    eps = float(xp.finfo(x.dtype).eps)
    big = xp.abs(x) > eps
    safe = xp.where(big, x, xp.full_like(x, eps))
    slope = special.i0(safe) - out / safe
    return g * xp.where(big, slope, xp.full_like(slope, 0.5))


gammaln = _unary("gammaln", _gammaln, _gammaln_rule)
digamma = _unary("digamma", _digamma, _digamma_rule)
i0 = _unary("i0", _i0, _i0_rule)
i1 = _unary("i1", _i1, _i1_rule, uses=("x", "out"))


@op("polygamma", saves=(0,), saves_out=False)
def polygamma(be, a, n):
    """The ``n``-th derivative of ``digamma`` (``n`` an integer >= 0)."""
    out = be.special.polygamma(n, a)

    def backward(g):
        return (g * be.special.polygamma(n + 1, a),)

    return out, backward


# ---- in the standard alone: logit, sinc, xlogy, xlog1py ----------------------------------


def _logit_rule(xp, x, g, eps):
    """PyTorch's: ``g / (x (1 - x))``, ``g * inf`` at 0 and 1 (+inf at -0.0 too); nan
    outside ``[0, 1]`` without ``eps``, 0 outside ``[eps, 1 - eps]`` with it (where the
    input was clamped)."""
    slope = g / (x * (1.0 - x))
    slope = xp.where((x == 0.0) | (x == 1.0), g * math.inf, slope)
    if eps is None:
        outside, fill = (x < 0.0) | (x > 1.0), math.nan
    else:
        outside, fill = (x < eps) | (x > 1.0 - eps), 0.0
    return xp.where(outside, xp.full_like(slope, fill), slope)


def _logit_saved(xp, inputs, out, g, eps):
    return (_logit_rule(xp, inputs[0], g, eps),)


def _log_odds(xp, z):
    return xp.log(z / (1.0 - z))


@op("logit", saves=(0,), saves_out=False, rule=_logit_saved)
def logit(be, a, eps):
    """``log(x / (1 - x))``, with ``x`` clamped to ``[eps, 1 - eps]`` first if ``eps`` is
    given (-inf at 0, inf at 1, nan outside ``[0, 1]``)."""
    xp = be.xp
    z = a if eps is None else xp.clip(a, eps, 1.0 - eps)
    out = be.quietly(_log_odds, xp, z)

    def backward(g):
        return (_logit_rule(xp, a, g, eps),)

    return out, backward


_SINC_SMALL = 1e-3  # below it the slope is its Taylor series: exact to ~1e-13, and smooth through 0


def _sinc_rule(xp, special, x, out, g):
    """PyTorch's ``(pi x cos(pi x) - sin(pi x)) / (pi x**2)``, and 0 at 0; near 0 its
    Taylor series ``x (-pi**2/3 + pi**4/30 x**2)``, so that differentiated again it gives
    the second derivative there, -pi**2/3 (a constant 0 would give 0; PyTorch's gives nan)."""
    small = xp.abs(x) < _SINC_SMALL
    safe = xp.where(small, xp.ones_like(x), x)
    px = math.pi * safe
    slope = (px * xp.cos(px) - xp.sin(px)) / (px * safe)
    series = x * (-(math.pi**2) / 3.0 + (math.pi**4 / 30.0) * (x * x))
    return g * xp.where(small, series, slope)


def _sinc(be, a):
    """The normalised sinc, ``sin(pi x) / (pi x)``, and 1 at 0."""
    xp = be.xp
    zero = a == 0
    px = math.pi * xp.where(zero, xp.ones_like(a), a)
    return xp.where(zero, xp.ones_like(a), xp.sin(px) / px)


sinc = _unary("sinc", _sinc, _sinc_rule, xp_rule=True, quiet=True)


def _times_log(xp, x, log_y, y):
    """``x * log_y``, and 0 where ``x == 0`` unless ``y`` is nan (``xlogy``'s convention)."""
    product = x * log_y
    return xp.where((x == 0) & xp.logical_not(xp.isnan(y)), xp.zeros_like(product), product)


def _xlogy_a(xp, a, b, out, g):
    """PyTorch's ``xlogy(g, y)``, 0 where ``x == 0`` and ``y <= 0``."""
    grad = _times_log(xp, g, xp.log(b), b)
    return xp.where((a == 0) & (b <= 0), xp.zeros_like(grad), grad)


def _xlogy_b(xp, a, b, out, g):
    return g * a / b


def _xlog1py_a(xp, a, b, out, g):
    grad = _times_log(xp, g, xp.log1p(b), b)
    return xp.where((a == 0) & (b <= -1), xp.zeros_like(grad), grad)


def _xlog1py_b(xp, a, b, out, g):
    return g * a / (b + 1.0)


def _binary(name, forward, rule_a, rule_b, doc):
    def fn(be, a, b, needs=(True, True)):
        xp = be.xp
        out = be.quietly(forward, xp, a, b)

        def backward(g):
            return (rule_a(xp, a, b, out, g) if needs[0] else None,
                    rule_b(xp, a, b, out, g) if needs[1] else None)

        return out, backward

    def saved(xp, inputs, out, g, needs=(True, True)):
        a, b = inputs
        return (rule_a(xp, a, b, out, g) if needs[0] else None, rule_b(xp, a, b, out, g) if needs[1] else None)

    return Op(name, fn, saves=(0, 1), saves_out=False, needs=True, rule=saved, doc=doc)


xlogy = _binary("xlogy", lambda xp, a, b: _times_log(xp, a, xp.log(b), b), _xlogy_a, _xlogy_b,
                "``x * log(y)``, and 0 where ``x == 0`` (unless ``y`` is nan).")
xlog1py = _binary("xlog1py", lambda xp, a, b: _times_log(xp, a, xp.log1p(b), b), _xlog1py_a, _xlog1py_b,
                  "``x * log1p(y)``, and 0 where ``x == 0`` (unless ``y`` is nan).")
