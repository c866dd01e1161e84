"""Element-wise operations: forward with ``xp``, backward rule beside it.

Each entry of the standard's element-wise section is one :class:`Op` here. Most are
made by :func:`unary` and :func:`binary` from a forward and a gradient rule
(``rule(xp, x, out, g)``, ``rule(xp, a, b, out, g)``); the arithmetic used on every
training step is written out by hand, with a variant for a Python-number operand.
Adding an element-wise function is one line here plus its row in the tests; the
namespace function and the Tensor method are made from this table.

Gradients follow PyTorch: step-like functions (``floor``, ``ceil``, ``round``,
``trunc``, ``sign``, ``floor_divide``, ``nextafter``) pass zero, ``abs`` has gradient
0 at 0 and at NaN, ``maximum``/``minimum`` split a tie equally, ``pow`` gives 0 (not nan) for
an exponent 0 and for a base 0 with exponent >= 0. Constants stay Python floats, so
float32 stays float32.

Values follow the standard's special cases on every device, also where the
library misses some: ``floor_divide`` with an infinite operand, and (through an
entry's ``complex`` forward) ``expm1``, ``tanh`` and ``sign`` of complex numbers.
An entry's ``accepts`` says which dtypes the standard defines it for; the
namespace layer converts or refuses the others.
"""

from __future__ import annotations

import cmath
import math
import operator
from dataclasses import dataclass, replace
from types import MethodType

from ._op import Op, op

# ---- the tables the namespace layer reads -----------------------------------------


@dataclass(frozen=True)
class Entry:
    """One element-wise function: its ``op``, its arity, and where it appears."""

    name: str  # the namespace name (``lp.sin``)
    op: Op
    arity: int
    method: tuple = ()  # Tensor method names (``t.sin()``)
    scalar_op: Op | None = None  # a faster op for ``tensor (op) python number``
    rscalar_op: Op | None = None  # ... and for ``python number (op) tensor``
    # The input the standard defines it for: "floating" (integer and bool tensors are
    # converted to the default float dtype first, as PyTorch does: NumPy would give
    # float16 for small integers), "numeric" (bool refused) or "any".
    accepts: str = "any"
    # the forward for complex input, where the library's misses cases: ``fn(xp, z)`` for
    # a tensor outside the graph, or an ``Op`` for every complex tensor (its own rule)
    complex: object = None


UNARY: dict[str, Entry] = {}
BINARY: dict[str, Entry] = {}

ZERO = "zero"  # a rule: the gradient is zero (step-like functions)


def _register(table, name, operation, arity, method, scalar_op=None, rscalar_op=None, accepts="any",
              complex=None):
    # a function of one tensor (the unary ones, and the binary ones' variants for a Python
    # number operand) gives gradients of its input's shape and dtype
    for one_tensor in ((operation,) if arity == 1 else ()) + (scalar_op, rscalar_op):
        if one_tensor is not None and one_tensor.differentiable:
            one_tensor.exact = True
    table[name] = Entry(name, operation, arity, tuple(method), scalar_op, rscalar_op, accepts, complex)
    return operation


def unary(name, forward, rule=None, *, uses=("x",), quiet=False, method=(), symbol=None, fresh=True,
          accepts="any", complex=None):
    """Register the unary function ``name``: ``forward(xp, x) -> out`` and
    ``rule(xp, x, out, g) -> gradient`` (``ZERO`` for a step, ``None`` when the
    result never carries gradients: bool or integer outputs); ``accepts`` and
    ``complex``: see :class:`Entry`."""
    if rule is None:

        def fn(be, a):
            return (be.quietly(forward, be.xp, a) if quiet else forward(be.xp, a)), None

        operation = Op(symbol or name, fn, saves=(), saves_out=False, differentiable=False)
    elif rule is ZERO:

        def fn(be, a):
            xp = be.xp
            return (be.quietly(forward, xp, a) if quiet else forward(xp, a)), lambda g: (xp.zeros_like(g),)

        operation = Op(symbol or name, fn, saves=(), saves_out=False, rule=_zero_rule, complex="holomorphic")
    else:

        def fn(be, a):
            xp = be.xp
            out = be.quietly(forward, xp, a) if quiet else forward(xp, a)

            def backward(g):  # the engine runs every backward rule with warnings off
                return (rule(xp, a, out, g),)

            return out, backward

        def on_saved(xp, inputs, out, g):
            return (rule(xp, inputs[0], out, g),)

        operation = Op(symbol or name, fn, saves=(0,) if "x" in uses else (), saves_out="out" in uses, fresh=fresh,
                       rule=on_saved)
    operation.__doc__ = f"Element-wise {name}."
    return _register(UNARY, name, operation, 1, method, accepts=accepts, complex=complex)


def binary(name, forward, rule_a=None, rule_b=None, *, uses=("a", "b"), method=(), symbol=None,
           scalar_op=None, rscalar_op=None, accepts="any"):
    """Register the binary function ``name``: ``forward(xp, a, b) -> out`` and one
    rule per operand, ``rule(xp, a, b, out, g)`` (``ZERO``, or ``None`` for results
    that never carry gradients). Either operand may be a Python number. Every forward
    runs under ``be.quietly``: any of them may warn (a comparison of a float32 tensor
    with the Python float 1e300 warns of the cast's overflow)."""
    if rule_a is None and rule_b is None:

        def fn(be, a, b, needs=None):
            return be.quietly(forward, be.xp, a, b), None

        operation = Op(symbol or name, fn, saves=(), saves_out=False, differentiable=False)
    else:

        def fn(be, a, b, needs=(True, True)):
            xp = be.xp
            out = be.quietly(forward, xp, a, b)
            need_a, need_b = needs

            def backward(g):  # the engine runs every backward rule with warnings off
                ga = _apply_rule(rule_a, xp, a, b, out, g) if need_a else None
                gb = _apply_rule(rule_b, xp, a, b, out, g) if need_b else None
                return ga, gb

            return out, backward

        def on_saved(xp, inputs, out, g, needs=(True, True)):
            a, b = inputs
            return (_apply_rule(rule_a, xp, a, b, out, g) if needs[0] else None,
                    _apply_rule(rule_b, xp, a, b, out, g) if needs[1] else None)

        saves = tuple(i for i, k in enumerate("ab") if k in uses)
        operation = Op(symbol or name, fn, saves=saves, saves_out="out" in uses, needs=True, rule=on_saved)
    operation.__doc__ = f"Element-wise {name}."
    return _register(BINARY, name, operation, 2, method, scalar_op, rscalar_op, accepts)


def _zero_rule(xp, inputs, out, g):
    return (xp.zeros_like(g),)


def _apply_rule(rule, xp, a, b, out, g):
    if rule is None:
        return None
    if rule is ZERO:
        return xp.zeros_like(g)
    return rule(xp, a, b, out, g)


# ---- arithmetic, written out (the hot path) ------------------------------------------


def _pass_both(g):
    return g, g


def _pass(g):
    return (g,)


def _neg_backward(g):
    return (-g,)


def _sub_backward(g):
    return g, -g


# A backward that reads saved values is a rule bound to them, ``MethodType(rule, saved)``
# (``g -> rule(saved, g)``), not a closure: see leanpass/_graph/node.py (W2's operations
# are a tenth faster for it, and leave the garbage collector half the objects).

# NumPy warns of overflow, of inf - inf, of inf * 0 and of division by 0: the forwards
# that may meet them run under ``be.quietly`` (IEEE results, no RuntimeWarning; backward
# rules need nothing, as the engine runs them all with warnings off). With a Python
# number whose size rules every warning out (``x * 0.5``, ``x + 1.0``: see ``_calm_*``)
# the scalar ops skip it, as it costs about a fifth of a small operation.


@op("+", saves=(), saves_out=False, fresh=False)
def add(be, a, b):
    return be.quietly(operator.add, a, b), _pass_both


@op("-", saves=(), saves_out=False, fresh=False)
def sub(be, a, b):
    return be.quietly(operator.sub, a, b), _sub_backward


@op("*", saves=(0, 1), saves_out=False)
def mul(be, a, b):
    return be.quietly(operator.mul, a, b), MethodType(_mul_rule, (a, b))


def _mul_rule(saved, g):
    a, b = saved
    return g * b, g * a


@op("/", saves=(0, 1), saves_out=False)
def div(be, a, b):
    return be.quietly(operator.truediv, a, b), MethodType(_div_rule, (a, b))


def _div_rule(saved, g):
    a, b = saved
    return g / b, -(g * a) / (b * b)


@op("**", saves=(0, 1), saves_out=True)
def pow(be, a, b):
    """``a ** b``; as in PyTorch, the gradient is 0 (not nan) for ``b == 0`` (base)
    and for ``a == 0, b >= 0`` (exponent)."""
    xp = be.xp
    out = be.quietly(operator.pow, a, b)
    # NumPy's sqrt path (below) is taken for a single exponent broadcast against a
    # (b may be a Python number: a complex one, which has no fast path of its own)
    if be.syncs_cheaply and xp.isdtype(out.dtype, "real floating") and (
            b == 0.5 if not hasattr(b, "shape") else math.prod(b.shape) == 1 and float(xp.reshape(b, ())) == 0.5):
        out = _half_power_cases(xp, a, out)

    def backward(g):  # holomorphic in both operands (complex values: the engine conjugates around it)
        if hasattr(b, "shape"):
            ga = xp.where(b == 0, xp.zeros_like(g), g * b * a ** (b - 1))
        else:  # a Python number (a complex one): its test is a bool, which the standard's where does not take
            ga = xp.zeros_like(g) if b == 0 else g * b * a ** (b - 1)
        complex_out = xp.isdtype(out.dtype, "complex floating")
        if complex_out and not xp.isdtype(a.dtype, "complex floating"):
            log_a = xp.log(xp.astype(a, out.dtype))  # a real base below 0 has a complex log
        else:
            log_a = xp.log(a)
        if not hasattr(b, "dtype"):  # a Python number (a complex exponent comes this way)
            flat = b.imag == 0 and b.real >= 0 if isinstance(b, complex) else b >= 0
        elif xp.isdtype(b.dtype, "complex floating"):  # 0 ** b has no slope in b for real b >= 0 (PyTorch)
            flat = (xp.imag(b) == 0) & (xp.real(b) >= 0)
        else:
            flat = b >= 0
        gb = xp.where((a == 0) & flat, xp.zeros_like(g), g * out * log_a)
        return ga, gb

    return out, backward


def _calm_sum(s) -> bool:
    """Whether ``a + s`` (``a - s``, ``s - a``) warns of nothing for every ``a``: a real
    ``s`` this small cannot overflow a sum (it is below half an ulp of float32's and
    float64's largest value), nor become inf in float32, nor meet an infinity."""
    return type(s) is not complex and -1e30 <= s <= 1e30


def _calm_product(a, s) -> bool:
    """Whether ``a * s`` warns of nothing for every element of the real ``a``: ``1e-30 <=
    |s| <= 1`` cannot overflow, nor make inf * 0 (a smaller ``s`` may be 0 in float32; a
    complex ``a`` can: (inf + 0j) * 0.5 forms inf * 0; a dtype without ``kind``,
    array_api_strict's, counts as complex)."""
    return type(s) is not complex and 1e-30 <= (-s if s < 0 else s) <= 1.0 and getattr(a.dtype, "kind", "c") != "c"


def _calm_quotient(a, s) -> bool:
    """Whether ``a / s`` warns of nothing for every element of the real ``a``: ``1 <=
    |s| <= 1e30`` (no overflow, no division by 0, no inf / inf, no cast to inf)."""
    return (type(s) is not complex and -1e30 <= s <= 1e30 and not -1.0 < s < 1.0
            and getattr(a.dtype, "kind", "c") != "c")


# With a Python number, ``a`` is combined with the backend's 0-d array of ``a``'s dtype
# holding it, where the backend keeps one (``Backend.number``: NumPy, real floating
# dtypes, a third faster than converting the number at each call, and the same result:
# NumPy rounds the number to ``a``'s dtype first), through ``be.numbers``, which keeps
# what ``Backend.number`` gave (None: the number itself). Such a number is calm for a sum.


@op("+", saves=(), saves_out=False, fresh=False)
def add_scalar(be, a, s):
    c = be.numbers[s, a.dtype]
    if c is not None:
        return a + c, _pass
    return (a + s if _calm_sum(s) else be.quietly(operator.add, a, s)), _pass


@op("-", saves=(), saves_out=False, fresh=False)
def sub_scalar(be, a, s):
    c = be.numbers[s, a.dtype]
    if c is not None:
        return a - c, _pass
    return (a - s if _calm_sum(s) else be.quietly(operator.sub, a, s)), _pass


@op("-", saves=(), saves_out=False)
def rsub_scalar(be, a, s):
    """``s - a``."""
    c = be.numbers[s, a.dtype]
    if c is not None:
        return c - a, _neg_backward
    return (s - a if _calm_sum(s) else be.quietly(operator.sub, s, a)), _neg_backward


@op("*", saves=(), saves_out=False)
def mul_scalar(be, a, s):
    c = be.numbers[s, a.dtype]
    if c is None:  # the number itself
        c = s
        out = a * s if _calm_product(a, s) else be.quietly(operator.mul, a, s)
    else:  # calm where -1.0 <= s <= 1.0 (a kept number is real, at least 1e-30 in size)
        out = a * c if -1.0 <= s <= 1.0 else be.quietly(operator.mul, a, c)
    return out, MethodType(_times, c)


def _times(c, g):
    """The gradient ``g * c`` (a product by ``c``; exp's, ``c`` its output)."""
    return (g * c,)


@op("/", saves=(), saves_out=False)
def div_scalar(be, a, s):
    c = be.numbers[s, a.dtype]
    if c is None:  # the number itself
        c = s
        out = a / s if _calm_quotient(a, s) else be.quietly(operator.truediv, a, s)
    else:  # calm where not -1.0 < s < 1.0 (a kept number is at most 1e30)
        out = a / c if not -1.0 < s < 1.0 else be.quietly(operator.truediv, a, c)
    return out, MethodType(_over, c)


def _over(c, g):
    """The gradient ``g / c`` (a quotient by ``c``; log's, ``c`` its input)."""
    return (g / c,)


@op("/", saves=(0,), saves_out=True)
def rdiv_scalar(be, a, s):
    """``s / a``."""
    out = be.quietly(operator.truediv, s, a)
    return out, MethodType(_rdiv_rule, (a, out))


def _rdiv_rule(saved, g):
    a, out = saved
    return (-(g * out) / a,)


def _half_power_cases(xp, a, out):
    """The standard's ``pow(-inf, 0.5) = +inf`` and ``pow(-0.0, 0.5) = +0`` of ``out =
    pow(a, b)`` for a tensor exponent ``b`` of one element 0.5: NumPy computes a power
    0.5 by a broadcast exponent as ``sqrt``, which gives nan and -0.0 there (PyTorch
    gives the standard's values for a tensor exponent). ``out + 0.0`` makes -0.0 +0."""
    return xp.where(a == -math.inf, math.inf, out + 0.0)


@op("**", saves=(0,), saves_out=False)
def pow_scalar(be, a, p):
    """``a ** p`` for a Python number ``p``; ``** 2`` gives exactly ``2 * a``, ``** 0.5``
    is ``sqrt`` (PyTorch's values and gradient at -0.0 and -inf). The shortcuts for
    ``p`` 2 and 0 only where ``a ** p`` keeps ``a``'s dtype (floats, or integers to an
    integer power: an integer tensor to a float power is a float)."""
    xp = be.xp
    same_dtype = xp.isdtype(a.dtype, ("real floating", "complex floating")) or (
        type(p) is int and xp.isdtype(a.dtype, "integral"))
    if p == 2 and same_dtype:

        def backward(g):
            return (g * (2.0 * a),)

        return be.quietly(operator.mul, a, a), backward
    if p == 0 and same_dtype:

        def backward(g):
            return (xp.zeros_like(g),)

        return xp.ones_like(a), backward
    if isinstance(p, float) and p == 0.5 and xp.isdtype(a.dtype, "real floating"):
        # sqrt, as PyTorch (and recent NumPy) compute ** 0.5: -0.0 at -0.0 and nan at -inf
        # (the standard's pow: +0 and +inf); the gradient g / (2 sqrt(a)) is PyTorch's
        # 0.5 * rsqrt(a): -inf at -0.0 and nan at -inf (pow(a, -0.5) gives +inf and 0)
        out = be.quietly(xp.sqrt, a)

        def backward(g):
            return (g / (2.0 * xp.sqrt(a)),)

        return out, backward
    out = be.quietly(operator.pow, a, p)

    def backward(g):
        return (g * (p * a ** (p - 1)),)

    return out, backward


@op("**", saves=(0,), saves_out=True)
def rpow_scalar(be, a, s):
    """``s ** a`` for a Python number ``s``; for ``s == 0`` the gradient is 0 where
    ``a >= 0`` (PyTorch's convention)."""
    xp = be.xp
    out = be.quietly(operator.pow, s, a)
    log_s = math.log(s) if s > 0 else (-math.inf if s == 0 else math.nan)
    if s < 0 and xp.isdtype(a.dtype, "complex floating"):  # a complex power of a negative number is finite
        log_s = cmath.log(s)

    def backward(g):
        if s == 0:
            return (xp.where(a >= 0, xp.zeros_like(g), g * out * log_s),)
        return (g * out * log_s,)

    return out, backward


@op("neg", saves=(), saves_out=False)
def neg(be, a):
    return -a, _neg_backward


def _exp_rule(xp, inputs, out, g):
    return (g * out,)


@op("exp", saves=(), saves_out=True, rule=_exp_rule)
def exp(be, a):
    xp = be.xp
    out = be.quietly(xp.exp, a)  # overflow: inf
    return out, MethodType(_times, out)  # _exp_rule: g * out


@op("log", saves=(0,), saves_out=False)
def log(be, a):
    """Natural log; log(0) is -inf and log(x < 0) is nan, without warnings."""
    return be.quietly(be.xp.log, a), MethodType(_over, a)


def _tanh_rule(xp, inputs, out, g):
    return _tanh_out_rule(out, g)


def _tanh_out_rule(out, g):
    return (g - g * out * out,)  # g * (1 - out**2), without a scalar operand (slow in NumPy)


def _fused_rule(saved, g):
    fused, out = saved
    return (fused(g, out),)


@op("tanh", saves=(), saves_out=True, rule=_tanh_rule)
def tanh(be, a):
    xp = be.xp
    out = xp.tanh(a)
    fused = be.fused.tanh_backward
    if fused is not None:
        return out, MethodType(_fused_rule, (fused, out))
    return out, MethodType(_tanh_out_rule, out)


def _sqrt_rule(xp, inputs, out, g):
    return _sqrt_out_rule(out, g)


def _sqrt_out_rule(out, g):
    return (g / (2.0 * out),)


@op("sqrt", saves=(), saves_out=True, rule=_sqrt_rule)
def sqrt(be, a):
    xp = be.xp
    out = be.quietly(xp.sqrt, a)
    return out, MethodType(_sqrt_out_rule, out)


def sgn(xp, a):
    """The sign of the real ``a`` as PyTorch's gradients take it (``sgn``): -1, 0 or 1,
    and 0 at NaN, where the standard's ``sign`` is nan. From two comparisons, so a NaN
    never enters the arithmetic; counted in int8, so the temporaries stay small (faster
    than NumPy's ``sign`` on large float64 arrays). Only backward rules call it, on
    real values (:func:`_complex_sign` is the complex one)."""
    return xp.astype(xp.astype(a > 0, xp.int8) - xp.astype(a < 0, xp.int8), a.dtype)


@op("abs", saves=(0,), saves_out=False)
def abs(be, a):
    """``|a|``; gradient ``g * sgn(a)``: 0 at 0 and at NaN (PyTorch); for complex ``a``,
    ``g * a / |a|`` (0 at 0)."""
    xp = be.xp

    def backward(g):
        if xp.isdtype(a.dtype, "complex floating"):
            return (xp.astype(g, a.dtype) * _complex_sign(xp, a),)
        return (g * sgn(xp, a),)

    return xp.abs(a), backward


# ---- complex input: forwards with the standard's special cases -----------------------------

def _make_complex(xp, re, im, dtype):
    """``re + im j`` exactly, also where ``im`` is infinite or nan (multiplying it by
    ``1j`` would give ``inf * 0``, nan, in the real part): adding is exact part by part."""
    out = xp.astype(re, dtype) + xp.astype(xp.where(xp.isfinite(im), im, 0.0), dtype) * 1j
    for hit, value in ((xp.isnan(im), math.nan), (im == math.inf, math.inf), (im == -math.inf, -math.inf)):
        out = xp.where(hit, out + complex(0.0, value), out)
    return out


def _complex_sign(xp, x):
    """``x / |x|``, and 0 for 0 (some libraries give nan there)."""
    magnitude = xp.abs(x)
    zero = magnitude == 0
    return xp.where(zero, xp.zeros_like(x), x / xp.astype(xp.where(zero, 1.0, magnitude), x.dtype))


def _complex_expm1(xp, z):
    """``exp(z) - 1`` without cancellation near 0 (``expm1(x) cos(y) - 2 sin(y/2)**2``
    for the real part), with the standard's special cases for infinite and nan parts."""
    x, y = xp.real(z), xp.imag(z)
    s = xp.sin(y / 2)
    re = xp.expm1(x) * xp.cos(y) - 2 * s * s + 0.0  # + 0.0: expm1(-0 + 0j) is +0
    im = xp.exp(x) * xp.sin(y)
    endless = ~xp.isfinite(y)
    re = xp.where((x == math.inf) & endless, math.inf, xp.where(x == -math.inf, -1.0, re))
    im = xp.where(y == 0, y, xp.where((x == -math.inf) & endless, 0.0, im))
    return _make_complex(xp, re, im, z.dtype)


def _complex_tanh(xp, z):
    """``tanh``, with the standard's ``±1 + 0j`` where the real part is infinite and
    the imaginary part finite (NumPy gives nan there)."""
    x = xp.real(z)
    fix = xp.isinf(x) & xp.isfinite(xp.imag(z))
    return xp.where(fix, xp.astype(xp.sign(x), z.dtype), xp.tanh(z))


# Hand-written ops join the table under their namespace names.
_register(BINARY, "add", add, 2, (), add_scalar, add_scalar)
_register(BINARY, "subtract", sub, 2, (), sub_scalar, rsub_scalar)
_register(BINARY, "multiply", mul, 2, (), mul_scalar, mul_scalar)
_register(BINARY, "divide", div, 2, (), div_scalar, rdiv_scalar, accepts="floating")
_register(BINARY, "pow", pow, 2, (), pow_scalar, rpow_scalar)
_register(UNARY, "negative", neg, 1, (), accepts="numeric")
_register(UNARY, "exp", exp, 1, ("exp",), accepts="floating")
_register(UNARY, "log", log, 1, ("log",), accepts="floating")
_register(UNARY, "tanh", tanh, 1, ("tanh",), accepts="floating", complex=_complex_tanh)
_register(UNARY, "sqrt", sqrt, 1, ("sqrt",), accepts="floating")
_register(UNARY, "abs", abs, 1, ("abs",), accepts="numeric")


# ---- the rest of the standard, from rules ---------------------------------------------

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)

positive = unary("positive", lambda xp, x: xp.positive(x), lambda xp, x, out, g: g, uses=(), fresh=False)
acos = unary("acos", lambda xp, x: xp.acos(x), lambda xp, x, out, g: -g / xp.sqrt(1 - x * x),
             quiet=True, method=("acos", "arccos"))
acosh = unary("acosh", lambda xp, x: xp.acosh(x), lambda xp, x, out, g: g / (xp.sqrt(x - 1) * xp.sqrt(x + 1)),
              quiet=True, method=("acosh", "arccosh"))
asin = unary("asin", lambda xp, x: xp.asin(x), lambda xp, x, out, g: g / xp.sqrt(1 - x * x),
             quiet=True, method=("asin", "arcsin"))
asinh = unary("asinh", lambda xp, x: xp.asinh(x), lambda xp, x, out, g: g / xp.sqrt(x * x + 1),
              method=("asinh", "arcsinh"))
atan = unary("atan", lambda xp, x: xp.atan(x), lambda xp, x, out, g: g / (x * x + 1), method=("atan", "arctan"))
atanh = unary("atanh", lambda xp, x: xp.atanh(x), lambda xp, x, out, g: g / (1 - x * x),
              quiet=True, method=("atanh", "arctanh"))
cos = unary("cos", lambda xp, x: xp.cos(x), lambda xp, x, out, g: -g * xp.sin(x), quiet=True, method=("cos",))
cosh = unary("cosh", lambda xp, x: xp.cosh(x), lambda xp, x, out, g: g * xp.sinh(x), quiet=True, method=("cosh",))
sin = unary("sin", lambda xp, x: xp.sin(x), lambda xp, x, out, g: g * xp.cos(x), quiet=True, method=("sin",))
sinh = unary("sinh", lambda xp, x: xp.sinh(x), lambda xp, x, out, g: g * xp.cosh(x), quiet=True, method=("sinh",))
tan = unary("tan", lambda xp, x: xp.tan(x), lambda xp, x, out, g: g + g * out * out, uses=("out",),
            quiet=True, method=("tan",))
expm1 = unary("expm1", lambda xp, x: xp.expm1(x), lambda xp, x, out, g: g + g * out, uses=("out",), quiet=True,
              method=("expm1",), complex=_complex_expm1)
log1p = unary("log1p", lambda xp, x: xp.log1p(x), lambda xp, x, out, g: g / (x + 1), quiet=True,
              method=("log1p",))
log2 = unary("log2", lambda xp, x: xp.log2(x), lambda xp, x, out, g: g / (x * _LN2), quiet=True, method=("log2",))
log10 = unary("log10", lambda xp, x: xp.log10(x), lambda xp, x, out, g: g / (x * _LN10), quiet=True,
              method=("log10",))
reciprocal = unary("reciprocal", lambda xp, x: xp.reciprocal(x), lambda xp, x, out, g: -(g * out * out),
                   uses=("out",), quiet=True, method=("reciprocal",))
square = unary("square", lambda xp, x: xp.square(x), lambda xp, x, out, g: g * (2 * x), quiet=True,
               method=("square",))
conj = unary("conj", lambda xp, x: xp.conj(x), lambda xp, x, out, g: _conj(xp, g), uses=(), fresh=False,
             method=("conj",))
# Copies: NumPy gives the input itself (real of a real array) or a view of a complex
# one, which would change unseen by version counters (the standard leaves it open).
real = unary("real", lambda xp, x: xp.asarray(xp.real(x), copy=True), lambda xp, x, out, g: g, uses=(),
             fresh=False)
imag = unary("imag", lambda xp, x: (xp.asarray(xp.imag(x), copy=True) if xp.isdtype(x.dtype, "complex floating")
                                    else xp.zeros_like(x)), lambda xp, x, out, g: _imag_rule(xp, x, g),
             uses=())  # 0 for real input on every library (it reads x's dtype only)
ceil = unary("ceil", lambda xp, x: xp.ceil(x), ZERO, method=("ceil",))
floor = unary("floor", lambda xp, x: xp.floor(x), ZERO, method=("floor",))
trunc = unary("trunc", lambda xp, x: xp.trunc(x), ZERO, method=("trunc",))
round = unary("round", lambda xp, x: xp.round(x), ZERO, method=("round",))


@op("sign", saves=(0,), saves_out=False, complex="own")
def complex_sign(be, a):
    """``sign`` of a complex ``a``: ``a / |a|`` (0 at 0), with PyTorch's ``sgn``
    gradient ``(g - Re(conj(s) g) s) / |a|`` (0 at 0). Every complex input takes it,
    also one that requires grad; a real one takes ``sign``'s own op."""
    xp = be.xp

    def backward(g):
        magnitude = xp.abs(a)
        zero = magnitude == 0
        inverse = xp.astype(xp.where(zero, xp.zeros_like(magnitude), 1.0 / xp.where(zero, 1.0, magnitude)), a.dtype)
        phase = a * inverse
        g = xp.astype(g, a.dtype)
        return ((g - xp.astype(xp.real(xp.conj(phase) * g), a.dtype) * phase) * inverse,)

    return _complex_sign(xp, a), backward


sign = unary("sign", lambda xp, x: xp.sign(x), ZERO, method=("sign",), accepts="numeric", complex=complex_sign)
signbit = unary("signbit", lambda xp, x: xp.signbit(x), method=("signbit",))
isfinite = unary("isfinite", lambda xp, x: xp.isfinite(x), method=("isfinite",))
isinf = unary("isinf", lambda xp, x: xp.isinf(x), method=("isinf",))
isnan = unary("isnan", lambda xp, x: xp.isnan(x), method=("isnan",))
logical_not = unary("logical_not", lambda xp, x: xp.logical_not(x), method=("logical_not",))
bitwise_invert = unary("bitwise_invert", lambda xp, x: xp.bitwise_invert(x), symbol="~")


def _conj(xp, g):
    return xp.conj(g) if xp.isdtype(g.dtype, "complex floating") else g


def _imag_rule(xp, x, g):
    """``imag``'s gradient: ``i g`` for complex ``x`` (PyTorch's), 0 for real ``x``."""
    if xp.isdtype(x.dtype, "complex floating"):
        return xp.astype(g, x.dtype) * 1j
    return xp.zeros_like(g)


# ---- complex gradients (Op.complex) -------------------------------------------------------
# These rules, written for real numbers, are holomorphic (or linear) in complex input:
# the engine runs them as conj(rule(conj(g))). abs, conj, real and imag have their own.
for _op in (add, add_scalar, sub, sub_scalar, rsub_scalar, mul, mul_scalar, div, div_scalar, rdiv_scalar,
            pow_scalar, rpow_scalar, neg, exp, log, tanh, sqrt, positive, acos, acosh, asin, asinh, atan, atanh,
            cos, cosh, sin, sinh, tan, expm1, log1p, log2, log10, reciprocal, square, pow):
    _op.complex = "holomorphic"
for _op in (abs, conj, real, imag):
    _op.complex = "own"
del _op


def _share(xp, g, lose, a, b):
    """``g`` to an operand of maximum/minimum unless it ``lose``s, halved at a tie, and
    whole to both where one is NaN (neither is below the other): PyTorch's rule, from
    the operands alone, as PyTorch saves them (the result may be changed in place
    after the forward: ``m = maximum(x, 0); m *= 2``)."""
    return g * (1.0 - xp.astype(lose, g.dtype) - 0.5 * xp.astype(a == b, g.dtype))


def _max_a(xp, a, b, out, g):
    return _share(xp, g, a < b, a, b)


def _max_b(xp, a, b, out, g):
    return _share(xp, g, a > b, a, b)


def _zero_where_zero(xp, den, rule):
    """``rule(den)`` where ``den`` is not 0, and 0 where it is: a rule's 0/0 at a point
    where PyTorch's gradient is 0 (copysign at 0; atan2 at the origin, where an angle
    of a zero vector must not send NaN into every weight)."""
    zero = den == 0
    value = rule(xp.where(zero, xp.ones_like(den), den))
    return xp.where(zero, xp.zeros_like(value), value)


def _copysign_a(xp, a, b, out, g):
    return _zero_where_zero(xp, a, lambda d: g * (out / d))


atan2 = binary("atan2", lambda xp, a, b: xp.atan2(a, b),
               lambda xp, a, b, out, g: _zero_where_zero(xp, a * a + b * b, lambda d: g * b / d),
               lambda xp, a, b, out, g: _zero_where_zero(xp, a * a + b * b, lambda d: -g * a / d),
               method=("atan2",))
copysign = binary("copysign", lambda xp, a, b: xp.copysign(a, b), _copysign_a, ZERO, uses=("a", "out"))
hypot = binary("hypot", lambda xp, a, b: xp.hypot(a, b),
               lambda xp, a, b, out, g: g * a / out, lambda xp, a, b, out, g: g * b / out,
               uses=("a", "b", "out"), method=("hypot",))
# d/da = 1 / (1 + exp(b - a)), PyTorch's form: exact for any size of a and b (exp(a - out)
# loses |out| * eps to the rounding of out, and is NaN at out = inf)
logaddexp = binary("logaddexp", lambda xp, a, b: xp.logaddexp(a, b),
                   lambda xp, a, b, out, g: g / (1.0 + xp.exp(b - a)),
                   lambda xp, a, b, out, g: g / (1.0 + xp.exp(a - b)),
                   uses=("a", "b"), method=("logaddexp",))
def _ordered(xp, a, b):
    """Refuse complex operands of a function that orders values (NumPy orders complex
    numbers lexicographically; the standard and PyTorch do not order them)."""
    for x in (a, b):
        dtype = getattr(x, "dtype", None)
        if dtype is None:
            complex_ = isinstance(x, complex)
        else:  # NumPy's, CuPy's and LeanPass's dtypes have a kind; array_api_strict's do not
            kind = getattr(dtype, "kind", None)
            complex_ = kind == "c" if kind is not None else xp.isdtype(dtype, "complex floating")
        if complex_:
            raise TypeError("complex numbers have no order")


def _maximum(xp, a, b):
    _ordered(xp, a, b)
    return xp.maximum(a, b)


def _minimum(xp, a, b):
    _ordered(xp, a, b)
    return xp.minimum(a, b)


maximum = binary("maximum", _maximum, _max_a, _max_b, uses=("a", "b"), method=("maximum",))
minimum = binary("minimum", _minimum, _max_b, _max_a, uses=("a", "b"), method=("minimum",))
remainder = binary("remainder", lambda xp, a, b: xp.remainder(a, b),
                   lambda xp, a, b, out, g: g, lambda xp, a, b, out, g: -g * xp.floor_divide(a, b),
                   symbol="%")


def _isinf(xp, v):
    return xp.isinf(v) if hasattr(v, "dtype") else math.isinf(v)


def _floor_divide(xp, a, b):
    """``a // b``. For floats with an infinite operand the standard wants
    ``floor(a / b)`` (``inf // 2`` is inf, ``-1 // inf`` is -0), where NumPy follows
    Python (nan, -1): those elements are computed that way."""
    out = xp.floor_divide(a, b)
    if not xp.isdtype(out.dtype, "real floating"):
        return out
    return xp.where(_isinf(xp, a) | _isinf(xp, b), xp.floor(a / b), out)


floor_divide = binary("floor_divide", _floor_divide, ZERO, ZERO, uses=(), symbol="//")
nextafter = binary("nextafter", lambda xp, a, b: xp.nextafter(a, b), ZERO, ZERO, uses=())


equal = binary("equal", lambda xp, a, b: a == b, symbol="==")
not_equal = binary("not_equal", lambda xp, a, b: a != b, symbol="!=")
less = binary("less", lambda xp, a, b: _ordered(xp, a, b) or a < b, symbol="<")
less_equal = binary("less_equal", lambda xp, a, b: _ordered(xp, a, b) or a <= b, symbol="<=")
greater = binary("greater", lambda xp, a, b: _ordered(xp, a, b) or a > b, symbol=">")
greater_equal = binary("greater_equal", lambda xp, a, b: _ordered(xp, a, b) or a >= b, symbol=">=")
logical_and = binary("logical_and", lambda xp, a, b: xp.logical_and(a, b))
logical_or = binary("logical_or", lambda xp, a, b: xp.logical_or(a, b))
logical_xor = binary("logical_xor", lambda xp, a, b: xp.logical_xor(a, b))
bitwise_and = binary("bitwise_and", lambda xp, a, b: xp.bitwise_and(a, b), symbol="&")
bitwise_or = binary("bitwise_or", lambda xp, a, b: xp.bitwise_or(a, b), symbol="|")
bitwise_xor = binary("bitwise_xor", lambda xp, a, b: xp.bitwise_xor(a, b), symbol="^")
bitwise_left_shift = binary("bitwise_left_shift", lambda xp, a, b: xp.bitwise_left_shift(a, b), symbol="<<")
bitwise_right_shift = binary("bitwise_right_shift", lambda xp, a, b: xp.bitwise_right_shift(a, b), symbol=">>")

# The functions the standard defines for floating-point input only (integer and bool
# tensors are converted first), and those it defines for numbers only (bool refused).
for _table, _names, _accepts in (
    (UNARY, ("acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "sin", "sinh", "tan", "expm1",
             "log1p", "log2", "log10", "reciprocal", "signbit"), "floating"),
    (BINARY, ("atan2", "copysign", "hypot", "logaddexp", "nextafter"), "floating"),
    (UNARY, ("positive", "square", "ceil", "floor", "trunc", "round", "conj", "real", "imag"), "numeric"),
):
    for _name in _names:
        _table[_name] = replace(_table[_name], accepts=_accepts)
del _table, _names, _accepts, _name


# ---- clip: a bound may be a number, a tensor or absent ------------------------------------


@op("clip", saves=(0, 1, 2), saves_out=False, needs=True)
def clip(be, a, low, high, needs=(True, False, False)):
    """Clamp ``a`` to ``[low, high]`` (either may be ``None``, a number or an array);
    ``maximum`` first, then ``minimum``, so ``low > high`` gives ``high`` everywhere
    (PyTorch). The gradient goes to ``a`` inside the range and to the bound that
    was taken outside it."""
    xp = be.xp
    out = a if low is None else xp.maximum(a, low)
    if high is not None:
        out = xp.minimum(out, high)
    if out is a:
        out = xp.asarray(a, copy=True)

    def backward(g):
        zero = xp.zeros_like(g)
        inside = None
        if low is not None:
            inside = a >= low
        if high is not None:
            inside = (a <= high) if inside is None else inside & (a <= high)
        ga = xp.where(inside, g, zero) if inside is not None else g
        gl = gh = None
        if needs[1]:
            took_low = a < low
            if high is not None:  # low == high: all to high, as torch.clamp
                took_low = took_low & (low < high)
            gl = xp.where(took_low, g, zero)
        if needs[2]:
            took_high = a > high
            if low is not None:
                took_high = took_high | (high < low)
            gh = xp.where(took_high, g, zero)
        return ga, gl, gh

    return out, backward
