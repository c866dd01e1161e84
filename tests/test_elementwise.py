"""Every element-wise function of the standard: forward against NumPy, gradients
by finite differences with broadcast shapes, PyTorch's conventions, dtypes.

The rows are keyed by the names in ``leanpass.ops.elementwise.UNARY`` / ``BINARY``
and the tests are parametrised over those tables, so a function added there
without a row here fails ``test_every_function_has_a_row`` (and its own tests).
"""

from __future__ import annotations

import math
import operator
import warnings
from dataclasses import dataclass

import numpy as np
import pytest
from helpers import other_device
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import leanpass as lp
from leanpass import Tensor, gradcheck
from leanpass.backends import get_backend
from leanpass.ops.elementwise import BINARY, UNARY

SETTINGS = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# ---- domains: where each input is drawn (inside the domain, away from kinks) ----------------


@dataclass(frozen=True)
class Domain:
    """Values in ``[lo, hi]``; ``signed``: ``|x|`` in ``[lo, hi]`` with either sign;
    ``step``: values on the lattice ``offset + step * k`` (no ties between two
    domains of different offsets). ``scalar`` is a Python number inside it."""

    lo: float = -2.0
    hi: float = 2.0
    signed: bool = False
    step: float = 0.0
    offset: float = 0.0
    scalar: float = 0.7

    def draw(self, rng, shape):
        if self.step:
            k = rng.integers(math.ceil(self.lo / self.step), math.floor(self.hi / self.step), size=shape)
            return k * self.step + self.offset
        x = rng.uniform(self.lo, self.hi, size=shape)
        if self.signed:
            x = x * rng.choice([-1.0, 1.0], size=shape)
        return x


ANY = Domain()
POSITIVE = Domain(0.2, 3.0, scalar=1.3)
UNIT = Domain(-0.9, 0.9, scalar=0.4)
NONZERO = Domain(0.3, 2.0, signed=True, scalar=-1.2)
QUARTERS_A = Domain(-2.0, 2.0, step=0.5, offset=0.1, scalar=0.35)  # never equal to QUARTERS_B
QUARTERS_B = Domain(-2.0, 2.0, step=0.5, offset=0.35, scalar=0.6)
SMALL = Domain(0.2, 1.3, signed=True, scalar=-0.9)  # |a| < |b|: a / b away from whole numbers
LARGE = Domain(1.5, 2.5, signed=True, scalar=1.75)


# ---- the rows ------------------------------------------------------------------------------


@dataclass(frozen=True)
class U:
    """A unary function: NumPy reference, domain, gradient kind, dtypes to try."""

    ref: object
    domain: Domain = ANY
    grad: str = "smooth"  # "smooth" (gradcheck), "step" (zero gradient), "none" (bool/int result)
    inputs: str = "float"  # "float", "bool", "int", "complex"
    complex: bool = False  # also compare a complex forward with NumPy


@dataclass(frozen=True)
class B:
    """A binary function: NumPy reference, the domain of each operand, gradient kind."""

    ref: object
    a: Domain = ANY
    b: Domain = ANY
    grad: str = "smooth"
    inputs: str = "float"  # "float", "bool", "int", "int_bool" (both)


UNARY_ROWS = {
    "negative": U(np.negative, complex=True),
    "positive": U(np.positive, complex=True),
    "abs": U(np.abs, NONZERO, complex=True),
    "exp": U(np.exp, complex=True),
    "expm1": U(np.expm1),
    "log": U(np.log, POSITIVE, complex=True),
    "log1p": U(np.log1p, Domain(-0.8, 3.0)),
    "log2": U(np.log2, POSITIVE),
    "log10": U(np.log10, POSITIVE),
    "sqrt": U(np.sqrt, POSITIVE, complex=True),
    "square": U(np.square, complex=True),
    "reciprocal": U(np.reciprocal, NONZERO, complex=True),
    "sin": U(np.sin, complex=True),
    "cos": U(np.cos, complex=True),
    "tan": U(np.tan, Domain(-1.2, 1.2), complex=True),
    "asin": U(np.arcsin, UNIT, complex=True),
    "acos": U(np.arccos, UNIT, complex=True),
    "atan": U(np.arctan, complex=True),
    "sinh": U(np.sinh, complex=True),
    "cosh": U(np.cosh, complex=True),
    "tanh": U(np.tanh, complex=True),
    "asinh": U(np.arcsinh, complex=True),
    "acosh": U(np.arccosh, Domain(1.1, 3.0), complex=True),
    "atanh": U(np.arctanh, UNIT, complex=True),
    "conj": U(np.conj, complex=True),
    "real": U(np.real, complex=True),
    "imag": U(np.imag, grad="none", inputs="complex"),
    "ceil": U(np.ceil, grad="step"),
    "floor": U(np.floor, grad="step"),
    "trunc": U(np.trunc, grad="step"),
    "round": U(np.round, grad="step"),
    "sign": U(np.sign, NONZERO, grad="step"),
    "signbit": U(np.signbit, NONZERO, grad="none"),
    "isfinite": U(np.isfinite, grad="none"),
    "isinf": U(np.isinf, grad="none"),
    "isnan": U(np.isnan, grad="none"),
    "logical_not": U(np.logical_not, grad="none", inputs="bool"),
    "bitwise_invert": U(np.invert, grad="none", inputs="int"),
}

BINARY_ROWS = {
    "add": B(np.add),
    "subtract": B(np.subtract),
    "multiply": B(np.multiply),
    "divide": B(np.divide, ANY, NONZERO),
    "pow": B(np.power, POSITIVE, Domain(-1.5, 1.5, scalar=1.3)),
    "atan2": B(np.arctan2, NONZERO, NONZERO),
    "copysign": B(np.copysign, NONZERO, NONZERO),
    "hypot": B(np.hypot, NONZERO, NONZERO),
    "logaddexp": B(np.logaddexp),
    "maximum": B(np.maximum, QUARTERS_A, QUARTERS_B),
    "minimum": B(np.minimum, QUARTERS_A, QUARTERS_B),
    "remainder": B(np.remainder, SMALL, LARGE),
    "floor_divide": B(np.floor_divide, SMALL, LARGE, grad="step"),
    "nextafter": B(np.nextafter, ANY, ANY, grad="step"),
    "equal": B(np.equal, grad="none"),
    "not_equal": B(np.not_equal, grad="none"),
    "less": B(np.less, grad="none"),
    "less_equal": B(np.less_equal, grad="none"),
    "greater": B(np.greater, grad="none"),
    "greater_equal": B(np.greater_equal, grad="none"),
    "logical_and": B(np.logical_and, grad="none", inputs="bool"),
    "logical_or": B(np.logical_or, grad="none", inputs="bool"),
    "logical_xor": B(np.logical_xor, grad="none", inputs="bool"),
    "bitwise_and": B(np.bitwise_and, grad="none", inputs="int_bool"),
    "bitwise_or": B(np.bitwise_or, grad="none", inputs="int_bool"),
    "bitwise_xor": B(np.bitwise_xor, grad="none", inputs="int_bool"),
    "bitwise_left_shift": B(np.left_shift, grad="none", inputs="int"),
    "bitwise_right_shift": B(np.right_shift, grad="none", inputs="int"),
}

# The operators of the array object, by function: (t op u, its reflected form with a number).
OPERATORS = {
    "add": operator.add, "subtract": operator.sub, "multiply": operator.mul, "divide": operator.truediv,
    "pow": operator.pow, "floor_divide": operator.floordiv, "remainder": operator.mod,
    "bitwise_and": operator.and_, "bitwise_or": operator.or_, "bitwise_xor": operator.xor,
    "bitwise_left_shift": operator.lshift, "bitwise_right_shift": operator.rshift,
    "equal": operator.eq, "not_equal": operator.ne, "less": operator.lt, "less_equal": operator.le,
    "greater": operator.gt, "greater_equal": operator.ge,
}
UNARY_OPERATORS = {"negative": operator.neg, "positive": operator.pos, "abs": operator.abs,
                   "bitwise_invert": operator.invert}

SHAPE_A, SHAPE_B = (3, 1), (4,)  # broadcast to (3, 4)


def test_every_function_has_a_row():
    assert set(UNARY) == set(UNARY_ROWS), "rows missing or stale: " + str(set(UNARY) ^ set(UNARY_ROWS))
    assert set(BINARY) == set(BINARY_ROWS), "rows missing or stale: " + str(set(BINARY) ^ set(BINARY_ROWS))


def test_every_function_is_in_the_namespace():
    for name in (*UNARY, *BINARY, "clip"):
        assert callable(getattr(lp, name)), name
        assert name in lp.__all__, name


# ---- helpers -------------------------------------------------------------------------------


def host(array, device):
    return get_backend(device).to_host(array)


def rng_for(name):
    return np.random.default_rng(sum(map(ord, name)))


def leaf(x, device, dtype="float64", requires_grad=True):
    return Tensor(np.asarray(x, dtype=dtype), requires_grad=requires_grad, device=device)


def assert_close(actual, expected, what, dtype="float64"):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == "float32" else {"rtol": 1e-12, "atol": 1e-12}
    np.testing.assert_allclose(actual, expected, err_msg=what, equal_nan=True, **tol)


def int_or_bool_inputs(kind, rng, shape, name):
    if kind == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if name.startswith("bitwise_") and name.endswith("shift"):
        return rng.integers(0, 6, size=shape).astype(np.int64)
    return rng.integers(-20, 20, size=shape).astype(np.int64)


# ---- unary functions -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_forward_matches_numpy(device, name):
    row = UNARY_ROWS[name]
    rng = rng_for(name)
    fn = getattr(lp, name)
    kinds = {"float": ["float64", "float32"], "bool": ["bool"], "int": ["int64", "int8", "uint8", "bool"],
             "complex": ["complex128"]}[row.inputs]
    for dtype in kinds:
        if dtype.startswith("float"):
            x = row.domain.draw(rng, (3, 4)).astype(dtype)
        elif dtype.startswith("complex"):
            x = (rng.uniform(-2, 2, (3, 4)) + 1j * rng.uniform(-2, 2, (3, 4))).astype(dtype)
        else:
            x = int_or_bool_inputs("bool" if dtype == "bool" else "int", rng, (3, 4), name).astype(dtype)
        t = lp.asarray(x, device=device)
        out = fn(t)
        expected = row.ref(x)
        assert out.dtype == expected.dtype, f"{name}({dtype}): dtype {out.dtype} != NumPy's {expected.dtype}"
        assert_close(out.numpy(), expected, f"{name}({dtype})", dtype)
        assert out.requires_grad is False
        if name in UNARY_OPERATORS:
            assert_close(UNARY_OPERATORS[name](t).numpy(), expected, f"operator form of {name}", dtype)
    if row.complex:
        z = rng.uniform(-0.8, 0.8, (5,)) + 1j * rng.uniform(-0.8, 0.8, (5,))
        if name == "acosh":
            z = z + 2.0
        out = fn(lp.asarray(z, device=device))
        assert_close(out.numpy(), row.ref(z), f"{name}(complex128)")


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradient(device, name):
    row = UNARY_ROWS[name]
    fn = getattr(lp, name)
    x = leaf(row.domain.draw(rng_for(name), (2, 3)), device)
    if row.grad == "smooth":
        assert gradcheck(fn, [x])
        return
    if row.inputs != "float":
        pytest.skip(f"{name} takes {row.inputs} inputs: nothing can require grad")
    out = fn(x)
    if row.grad == "none":
        assert out.requires_grad is False and out._node is None
        assert out.dtype == lp.bool
        return
    assert out.requires_grad  # step-like: in the graph, with a zero gradient (PyTorch)
    (out * 3.0).sum().backward()
    assert_close(host(x.grad, device), np.zeros((2, 3)), f"zero gradient of {name}")


@pytest.mark.parametrize("name", sorted(n for n in UNARY if UNARY_ROWS[n].grad == "smooth"))
def test_unary_gradient_under_broadcast(device, name):
    """The function of a broadcast operand: the gradient sums back to its shape."""
    row = UNARY_ROWS[name]
    fn = getattr(lp, name)
    x = leaf(row.domain.draw(rng_for(name), SHAPE_A), device)
    assert gradcheck(lambda t: fn(t) * lp.asarray(np.ones(SHAPE_B), device=device), [x])


@pytest.mark.parametrize("name", sorted(n for n in UNARY if UNARY_ROWS[n].grad != "none"))
def test_unary_float32_stays_float32(device, name):
    row = UNARY_ROWS[name]
    x = leaf(row.domain.draw(rng_for(name), (4,)), device, "float32")
    out = getattr(lp, name)(x)
    assert out.dtype == lp.float32
    out.sum().backward()
    assert x.grad.dtype == x._data.dtype


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_methods(device, name):
    entry = UNARY[name]
    row = UNARY_ROWS[name]
    if not entry.method:
        return
    x = lp.asarray(row.domain.draw(rng_for(name), (5,)), device=device)
    if row.inputs == "bool":
        x = x > 0
    elif row.inputs == "int":
        x = lp.astype(x, lp.int64)
    expected = getattr(lp, name)(x).numpy()
    for method in entry.method:
        assert_close(getattr(x, method)().numpy(), expected, f"t.{method}()")


# ---- binary functions ----------------------------------------------------------------------


def binary_inputs(name, device, dtype="float64", shapes=(SHAPE_A, SHAPE_B), requires_grad=True):
    row = BINARY_ROWS[name]
    rng = rng_for(name)
    if row.inputs == "float":
        a, b = row.a.draw(rng, shapes[0]), row.b.draw(rng, shapes[1])
        return leaf(a, device, dtype, requires_grad), leaf(b, device, dtype, requires_grad)
    kind = "bool" if row.inputs == "bool" or dtype == "bool" else "int"
    a = int_or_bool_inputs(kind, rng, shapes[0], name)
    b = int_or_bool_inputs(kind, rng, shapes[1], name)
    return lp.asarray(a, device=device), lp.asarray(b, device=device)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_forward_matches_numpy(device, name):
    row = BINARY_ROWS[name]
    dtypes = {"float": ["float64", "float32"], "bool": ["bool"], "int": ["int64"],
              "int_bool": ["int64", "bool"]}[row.inputs]
    fn = getattr(lp, name)
    for dtype in dtypes:
        a, b = binary_inputs(name, device, dtype, requires_grad=False)
        a_np, b_np = a.numpy(), b.numpy()
        with np.errstate(all="ignore"):
            expected = row.ref(a_np, b_np)
        out = fn(a, b)
        assert out.shape == (3, 4)
        assert out.dtype == expected.dtype, f"{name}({dtype}): dtype {out.dtype} != NumPy's {expected.dtype}"
        assert_close(out.numpy(), expected, f"{name}({dtype})", dtype)
        if name in OPERATORS:
            assert_close(OPERATORS[name](a, b).numpy(), expected, f"operator form of {name}({dtype})", dtype)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_python_scalars(device, name):
    """A Python number on either side, through the function and the operator: the
    tensor's dtype is kept (float32 stays float32), values as NumPy's."""
    row = BINARY_ROWS[name]
    fn = getattr(lp, name)
    if row.inputs == "float":
        cases = [("float32", row.a.scalar, row.b.scalar), ("float64", row.a.scalar, row.b.scalar)]
    elif row.inputs == "bool":
        cases = [("bool", True, False)]
    else:
        cases = [("int64", 3, 2)]
    for dtype, sa, sb in cases:
        a, b = binary_inputs(name, device, dtype, requires_grad=False)
        a_np, b_np = a.numpy(), b.numpy()
        with np.errstate(all="ignore"):
            right = row.ref(a_np, np.asarray(sb, dtype=dtype))
            left = row.ref(np.asarray(sa, dtype=dtype), b_np)
        forms = [(fn(a, sb), right, "f(t, s)"), (fn(sa, b), left, "f(s, t)")]
        if name in OPERATORS:
            op = OPERATORS[name]
            forms += [(op(a, sb), right, "t op s"), (op(sa, b), left, "s op t")]
        for out, expected, form in forms:
            assert out.dtype == expected.dtype, f"{name} {form} ({dtype}): dtype {out.dtype} != {expected.dtype}"
            assert_close(out.numpy(), expected, f"{name} {form} ({dtype})", dtype)


def test_two_python_scalars_are_refused():
    with pytest.raises(TypeError, match="add"):
        lp.add(1.0, 2.0)


@pytest.mark.parametrize("name", sorted(n for n in BINARY if BINARY_ROWS[n].grad == "smooth"))
def test_binary_gradcheck_broadcast(device, name):
    a, b = binary_inputs(name, device)
    fn = getattr(lp, name)
    assert gradcheck(fn, [a, b])
    if name in OPERATORS:
        assert gradcheck(OPERATORS[name], [a, b])
    # one operand constant
    assert gradcheck(fn, [a, b.detach()])
    assert gradcheck(fn, [a.detach(), b])


@pytest.mark.parametrize("name", sorted(n for n in BINARY if BINARY_ROWS[n].grad == "smooth"))
def test_binary_gradcheck_with_python_scalars(device, name):
    row = BINARY_ROWS[name]
    a, b = binary_inputs(name, device)
    fn = getattr(lp, name)
    sa, sb = row.a.scalar, row.b.scalar
    assert gradcheck(lambda t: fn(t, sb), [a])
    assert gradcheck(lambda t: fn(sa, t), [b])
    if isinstance(sb, float) and sb == int(sb):
        assert gradcheck(lambda t: fn(t, int(sb)), [a])
    if name in OPERATORS:
        op = OPERATORS[name]
        assert gradcheck(lambda t: op(t, sb), [a])
        assert gradcheck(lambda t: op(sa, t), [b])


@pytest.mark.parametrize("name", sorted(n for n in BINARY if BINARY_ROWS[n].grad != "none"))
def test_binary_mixed_float32_float64(device, name):
    """float32 with float64: the result is float64, and each input's gradient comes
    back in its own dtype."""
    a32, b64 = binary_inputs(name, device)
    a32 = leaf(a32.numpy(), device, "float32")
    out = getattr(lp, name)(a32, b64)
    assert out.dtype == lp.float64
    out.sum().backward()
    assert a32.grad.dtype == a32._data.dtype and b64.grad.dtype == b64._data.dtype
    assert a32.grad.shape == SHAPE_A and b64.grad.shape == SHAPE_B
    a64, b32 = binary_inputs(name, device)
    b32 = leaf(b32.numpy(), device, "float32")
    getattr(lp, name)(a64, b32).sum().backward()
    assert a64.grad.dtype == a64._data.dtype and b32.grad.dtype == b32._data.dtype


@pytest.mark.parametrize("name", sorted(n for n in BINARY if BINARY_ROWS[n].grad == "smooth"))
def test_binary_float32_stays_float32(device, name):
    row = BINARY_ROWS[name]
    a, b = binary_inputs(name, device, "float32")
    fn = getattr(lp, name)
    for out in (fn(a, b), fn(a, row.b.scalar), fn(row.a.scalar, b)):
        assert out.dtype == lp.float32, str(out.dtype)
        out.sum().backward()
    assert a.grad.dtype == a._data.dtype and b.grad.dtype == b._data.dtype


@pytest.mark.parametrize("name", sorted(n for n in BINARY if BINARY_ROWS[n].grad == "step"))
def test_step_like_binary_gives_zero_gradients(device, name):
    a, b = binary_inputs(name, device)
    out = getattr(lp, name)(a, b)
    assert out.requires_grad
    (out * 2.0).sum().backward()
    assert_close(host(a.grad, device), np.zeros(SHAPE_A), f"zero gradient of {name} (x1)")
    assert_close(host(b.grad, device), np.zeros(SHAPE_B), f"zero gradient of {name} (x2)")
    if name in OPERATORS:
        a.grad = None
        OPERATORS[name](a, BINARY_ROWS[name].b.scalar).sum().backward()
        assert_close(host(a.grad, device), np.zeros(SHAPE_A), f"zero gradient of {name} with a number")


@pytest.mark.parametrize("name", sorted(n for n in BINARY if BINARY_ROWS[n].grad == "none"))
def test_bool_and_int_results_never_require_grad(device, name):
    row = BINARY_ROWS[name]
    if row.inputs == "float":  # comparisons of tensors that require grad
        a, b = binary_inputs(name, device)
        for out in (getattr(lp, name)(a, b), getattr(lp, name)(a, 0.5), getattr(lp, name)(0.5, b)):
            assert out.dtype == lp.bool and out.requires_grad is False and out._node is None
        if name in OPERATORS:
            for out in (OPERATORS[name](a, b), OPERATORS[name](a, 0.5), OPERATORS[name](0.5, b)):
                assert out.dtype == lp.bool and out.requires_grad is False
    else:
        a, b = binary_inputs(name, device, requires_grad=False)
        assert getattr(lp, name)(a, b).requires_grad is False


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_methods(device, name):
    entry = BINARY[name]
    if not entry.method:
        return
    a, b = binary_inputs(name, device, requires_grad=False)
    expected = getattr(lp, name)(a, b).numpy()
    for method in entry.method:
        assert_close(getattr(a, method)(b).numpy(), expected, f"t.{method}(u)")


def test_comparisons_are_elementwise_and_tensors_hash_by_identity(device):
    a = lp.asarray([1.0, 2.0, 3.0], device=device)
    b = lp.asarray([1.0, 0.0, 3.0], device=device)
    assert (a == b).numpy().tolist() == [True, False, True]
    assert (a != b).numpy().tolist() == [False, True, False]
    assert len({a, b, a}) == 2 and {a: 1, b: 2}[b] == 2


def test_integer_results_of_float_division_of_ints(device):
    """``/`` of integer tensors is true division (a float result), ``//`` stays integer."""
    a = lp.asarray([7, -7, 6], device=device)
    b = lp.asarray([2, 2, 3], device=device)
    assert (a // b).numpy().tolist() == [3, -4, 2] and (a // b).dtype == lp.int64
    assert (a % b).numpy().tolist() == [1, 1, 0]


# ---- PyTorch's conventions, explicitly ----------------------------------------------------------


@pytest.mark.parametrize("name", ["floor", "ceil", "round", "trunc", "sign"])
def test_step_like_unary_gives_zero_gradient_even_at_steps(device, name):
    x = leaf([-1.5, -1.0, 0.0, 0.5, 2.0], device)
    getattr(lp, name)(x).sum().backward()
    assert host(x.grad, device).tolist() == [0.0] * 5
    if name in UNARY[name].method:
        x.grad = None
        getattr(x, name)().sum().backward()
        assert host(x.grad, device).tolist() == [0.0] * 5


def test_abs_gradient_is_zero_at_zero(device):
    x = leaf([-2.0, 0.0, 3.0, -0.0], device)
    abs(x).sum().backward()
    assert host(x.grad, device).tolist() == [-1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_split_ties(device, name):
    a = leaf([1.0, 2.0, 5.0], device)
    b = leaf([1.0, 3.0, 4.0], device)
    getattr(lp, name)(a, b).sum().backward()
    if name == "maximum":
        assert host(a.grad, device).tolist() == [0.5, 0.0, 1.0]
        assert host(b.grad, device).tolist() == [0.5, 1.0, 0.0]
    else:
        assert host(a.grad, device).tolist() == [0.5, 1.0, 0.0]
        assert host(b.grad, device).tolist() == [0.5, 0.0, 1.0]
    s = leaf([1.0, 2.0], device)
    getattr(lp, name)(s, 1.0).sum().backward()  # a tie with a number: half of it
    assert host(s.grad, device).tolist() == ([0.5, 1.0] if name == "maximum" else [0.5, 0.0])


def test_pow_gradients_at_zero_follow_pytorch(device):
    # exponent 0: the base gets 0 (not nan), also for a base of 0
    a = leaf([0.0, 2.0, -1.0], device)
    b = leaf([0.0, 0.0, 0.0], device)
    (a**b).sum().backward()
    assert host(a.grad, device).tolist() == [0.0, 0.0, 0.0]
    # base 0 with exponent >= 0: the exponent gets 0 (not nan or -inf)
    a = leaf([0.0, 0.0, 2.0], device)
    b = leaf([0.0, 2.5, 1.0], device)
    (a**b).sum().backward()
    assert host(b.grad, device).tolist() == [0.0, 0.0, 2.0 * math.log(2.0)]
    assert host(a.grad, device).tolist() == [0.0, 0.0, 1.0]
    # the same with Python numbers
    x = leaf([0.0, 1.5], device)
    (x**0).sum().backward()
    assert host(x.grad, device).tolist() == [0.0, 0.0]
    x = leaf([0.0, 1.5], device)
    (0.0**x).sum().backward()
    assert host(x.grad, device).tolist() == [0.0, 0.0]
    x = leaf([0.0, 1.5], device)
    lp.pow(x, 0.0).sum().backward()
    assert host(x.grad, device).tolist() == [0.0, 0.0]


def test_pow_two_gives_exactly_two_x(device):
    x = leaf([0.1, -3.7, 1e10], device)
    (x**2).sum().backward()
    assert host(x.grad, device).tolist() == [0.2, -7.4, 2e10]


def test_clip_gradient_goes_to_x_inside_and_to_the_taken_bound_outside(device):
    x = leaf([[-3.0, -1.0, 0.0, 1.0, 3.0]], device)
    low = leaf([[-2.0], [-0.5]], device)  # broadcast: (2, 1) against (1, 5)
    high = leaf(0.5 + np.zeros((2, 5)), device)
    out = lp.clip(x, low, high)
    assert out.shape == (2, 5)
    np.testing.assert_array_equal(out.numpy(), np.clip(x.numpy(), low.numpy(), high.numpy()))
    out.sum().backward()
    inside = (x.numpy() >= low.numpy()) & (x.numpy() <= high.numpy())
    np.testing.assert_array_equal(host(x.grad, device), inside.sum(axis=0, keepdims=True))
    np.testing.assert_array_equal(host(low.grad, device), (x.numpy() < low.numpy()).sum(axis=1, keepdims=True))
    np.testing.assert_array_equal(host(high.grad, device), (x.numpy() > high.numpy()).astype(float))


def test_clip_gradcheck_and_numbers(device):
    rng = np.random.default_rng(5)
    x = leaf(rng.uniform(-3, 3, (3, 4)), device)
    low = leaf(rng.uniform(-2.0, -1.0, (4,)), device)
    high = leaf(rng.uniform(1.0, 2.0, (3, 1)), device)
    assert gradcheck(lambda a, lo, hi: lp.clip(a, lo, hi), [x, low, high])
    assert gradcheck(lambda a: lp.clip(a, -1.3, 1.7), [x])
    assert gradcheck(lambda a: lp.clip(a, max=1.7), [x])
    assert gradcheck(lambda a: a.clamp(min=-1.3), [x])
    assert gradcheck(lambda a: lp.clip(a), [x])
    np.testing.assert_array_equal(lp.clip(x, -1.3, 1.7).numpy(), np.clip(x.numpy(), -1.3, 1.7))
    ints = lp.asarray([-5, 0, 5], device=device)
    clipped = lp.clip(ints, -1, 2)
    assert clipped.dtype == lp.int64 and clipped.numpy().tolist() == [-1, 0, 2]
    x32 = leaf([-2.0, 0.5, 2.0], device, "float32")
    out = lp.clip(x32, -1, 1.0)
    assert out.dtype == lp.float32 and out.numpy().tolist() == [-1.0, 0.5, 1.0]


def test_clip_with_nothing_to_clip_is_a_copy(device):
    x = lp.asarray([1.0, 2.0], device=device)
    out = lp.clip(x)
    assert out is not x and out.numpy().tolist() == [1.0, 2.0]
    out += 1.0
    assert x.numpy().tolist() == [1.0, 2.0]


def test_clip_by_a_numpy_scalar_keeps_the_dtype_of_x(device):
    """A NumPy ``float64`` bound (a Python float subclass) is a number, as in the
    operators and PyTorch's ``clamp``: a float32 ``x`` stays float32 (it came out
    float64: NumPy's promotion of the scalar). A review of compiled scripts found it."""
    x = lp.asarray(np.array([0.1, 0.5], dtype=np.float32), device=device)
    for out in (lp.clip(x, None, np.float64(0.2)), x.clamp(min=np.float64(0.2)), lp.clip(x, np.float64(0.2))):
        assert out.dtype == x.dtype
    np.testing.assert_array_equal(lp.clip(x, None, np.float64(0.2)).numpy(), np.array([0.1, 0.2], np.float32))


# ---- broadcasting, as properties ----------------------------------------------------------------

SMOOTH_BINARY = sorted(n for n in BINARY if BINARY_ROWS[n].grad == "smooth")


@pytest.mark.parametrize("name", SMOOTH_BINARY)
@settings(SETTINGS, max_examples=15)
@given(data=st.data())
def test_binary_broadcasting_property(device, name, data):
    """For any pair of broadcastable shapes: the forward equals NumPy's, and each
    operand's gradient equals the sum, over the broadcast axes, of the gradient it
    gets when broadcast explicitly beforehand."""
    row = BINARY_ROWS[name]
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3), label="shapes")
    (sa, sb), out_shape = shapes.input_shapes, shapes.result_shape
    seed = data.draw(st.integers(0, 2**16), label="seed")
    rng = np.random.default_rng(seed)
    a_np, b_np = row.a.draw(rng, sa), row.b.draw(rng, sb)
    fn = getattr(lp, name)
    a, b = leaf(a_np, device), leaf(b_np, device)
    out = fn(a, b)
    assert out.shape == out_shape
    assert_close(out.numpy(), row.ref(a_np, b_np), f"{name} of shapes {sa} and {sb}")
    weights = rng.uniform(0.5, 1.5, out_shape)
    (out * lp.asarray(weights, device=device)).sum().backward()
    a_full, b_full = leaf(np.broadcast_to(a_np, out_shape), device), leaf(np.broadcast_to(b_np, out_shape), device)
    (fn(a_full, b_full) * lp.asarray(weights, device=device)).sum().backward()
    for small, full, shape in ((a, a_full, sa), (b, b_full, sb)):
        g = host(small.grad, device)
        assert g.shape == shape
        expected = host(full.grad, device)
        lead = expected.ndim - len(shape)
        expected = expected.sum(axis=tuple(range(lead)))
        expected = expected.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)
        np.testing.assert_allclose(g, expected.reshape(shape), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["add", "multiply", "less", "bitwise_and"])
def test_binary_shapes_that_do_not_broadcast(device, name):
    a = lp.asarray(np.ones((2, 3), dtype=np.int64), device=device)
    b = lp.asarray(np.ones((4,), dtype=np.int64), device=device)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
        getattr(lp, name)(a, b)


def test_binary_different_devices(device):
    other = other_device(device)
    a = lp.asarray([1.0], device=device)
    b = lp.asarray([1.0], device=other)
    with pytest.raises(ValueError, match=other):
        lp.atan2(a, b)
    with pytest.raises(ValueError, match=other):
        a + b


def test_function_on_a_non_tensor(device):
    with pytest.raises(TypeError, match="sin"):
        lp.sin([1.0, 2.0])
    with pytest.raises(TypeError, match="atan2"):
        lp.atan2([1.0], 2.0)


@pytest.mark.parametrize("name", sorted(n for n in (*UNARY, *BINARY)
                                        if (UNARY.get(n) or BINARY.get(n)).accepts == "floating"))
def test_integer_and_bool_inputs_of_floating_functions_become_the_default_float(device, name):
    """As in PyTorch, on every device (NumPy alone would give float16 for int8 and bool)."""
    fn = getattr(lp, name)
    row = UNARY_ROWS.get(name) or BINARY_ROWS[name]
    a_np, b_np = np.array([1, 1, 0]), np.array([1, 2, 1])
    for dtype in ("int8", "uint8", "int64", "bool"):
        x, y = lp.asarray(a_np.astype(dtype), device=device), lp.asarray(b_np.astype(dtype), device=device)
        out = fn(x) if name in UNARY else fn(x, y)
        a64, b64 = a_np.astype(dtype).astype(np.float64), b_np.astype(dtype).astype(np.float64)
        with np.errstate(all="ignore"):
            expected = row.ref(a64) if name in UNARY else row.ref(a64, b64)
        assert out.dtype == expected.dtype, f"{name}({dtype}) gave {out.dtype}"
        assert_close(out.numpy(), expected, f"{name}({dtype})")
    if name in OPERATORS:
        ints = lp.asarray([1, 2, 3], device=device)
        assert OPERATORS[name](ints, 2).dtype == lp.float64
        assert OPERATORS[name](2, ints).dtype == lp.float64
        assert OPERATORS[name](ints, ints).dtype == lp.float64


def test_integer_input_follows_the_default_dtype(device):
    lp.set_default_dtype("float32")
    try:
        assert lp.exp(lp.asarray([0, 1], device=device)).dtype == lp.float32
        assert (lp.asarray([1, 2], device=device) / 2).dtype == lp.float32
    finally:
        lp.set_default_dtype("float64")


@pytest.mark.parametrize("name", sorted(n for n in UNARY if UNARY[n].accepts == "numeric"))
def test_numeric_functions_refuse_bool(device, name):
    x = lp.asarray([True, False], device=device)
    with pytest.raises(TypeError, match=f"{name}.*bool"):
        getattr(lp, name)(x)


# ---- the standard's special cases, where NumPy or array_api_strict miss them ---------------------

INF, NAN = math.inf, math.nan


def test_floor_divide_with_infinities(device):
    a = lp.asarray([INF, INF, -INF, -INF, 1.0, -1.0, 1.0, -1.0, INF, 5.0], device=device)
    b = lp.asarray([2.0, -2.0, 2.0, -2.0, INF, INF, -INF, -INF, INF, 2.0], device=device)
    expected = [INF, -INF, -INF, INF, 0.0, -0.0, -0.0, 0.0, NAN, 2.0]
    for out in (lp.floor_divide(a, b), a // b):
        got = out.numpy()
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(np.signbit(got[:8]), np.signbit(expected[:8]))
    c = lp.asarray([1.0, -1.0, INF], device=device)
    c //= INF
    np.testing.assert_array_equal(c.numpy(), [0.0, -0.0, NAN])
    np.testing.assert_array_equal((lp.asarray([-1.0, 3.0], device=device) // INF).numpy(), [-0.0, 0.0])
    np.testing.assert_array_equal((INF // lp.asarray([-2.0, 3.0], device=device)).numpy(), [-INF, INF])
    ints = lp.asarray([7, -7], device=device)
    assert (ints // 2).numpy().tolist() == [3, -4]


def test_complex_special_cases(device):
    z = lp.asarray([complex(0.0, 0.0), complex(-0.0, 0.0), complex(INF, 0.0), complex(-INF, INF),
                    complex(-INF, NAN), complex(NAN, 0.0), complex(INF, INF), complex(0.1, 0.2)], device=device)
    out = lp.expm1(z).numpy()
    assert out[0] == 0 and not np.signbit(out[0].real) and not np.signbit(out[0].imag)
    assert out[1] == 0 and not np.signbit(out[1].real)
    assert out[2].real == INF and out[2].imag == 0
    assert out[3] == -1 and out[4] == -1
    assert np.isnan(out[5].real) and out[5].imag == 0
    assert abs(out[6].real) == INF and np.isnan(out[6].imag)
    np.testing.assert_allclose(out[7], np.expm1(0.1 + 0.2j), rtol=1e-14)
    out = lp.tanh(lp.asarray([complex(INF, 1.0), complex(-INF, 2.0), 0.3 + 0.1j], device=device)).numpy()
    assert out[0] == 1 and out[1] == -1
    np.testing.assert_allclose(out[2], np.tanh(0.3 + 0.1j), rtol=1e-14)
    out = lp.sign(lp.asarray([0j, 3 + 4j, -2j], device=device)).numpy()
    np.testing.assert_allclose(out, [0, 0.6 + 0.8j, -1j])


def test_integer_tensor_to_a_float_power_is_float(device):
    """`x ** 2.0` and `x ** 0.0` promote as `x ** 3.0` does (NumPy: float64); the
    shortcuts for 2 and 0 kept the integer dtype (and wrapped around)."""
    x = lp.asarray([100, 3], dtype=lp.int8, device=device)
    for p in (2.0, 0.0, 3.0):
        try:
            out = x ** p
        except TypeError:  # array_api_strict refuses a float scalar with an integer array, for every p
            assert device.startswith("strict")
            continue
        assert out.dtype == lp.float64
        assert out.tolist() == [100.0 ** p, 3.0 ** p]
    assert (x ** 2).dtype == lp.int8 and (x ** 0).tolist() == [1, 1]


def test_host_integer_operands_out_of_the_tensor_dtype_promote(device):
    """A list or NumPy array operand goes to the tensor's dtype, unless its integers do
    not fit: then it keeps its own dtype and the two promote, as in NumPy (it used to
    wrap around: int8 [44] == [300] was True)."""
    x = lp.asarray([44, 1], dtype=lp.int8, device=device)
    assert (x == [300, 1]).tolist() == [False, True]
    assert (x < np.array(300)).tolist() == [True, True]
    assert (x >= [-200]).tolist() == [True, True]
    total = x + np.array([300, 0])
    assert total.tolist() == [344, 1] and total.dtype == lp.int64
    assert (x + [1, 2]).tolist() == [45, 3] and (x + [1, 2]).dtype == lp.int8


def test_maximum_minimum_send_the_gradient_to_both_where_the_result_is_nan(device):
    """PyTorch's rule: at a NaN result neither operand is below the other, so both get
    g (not NaN); at a tie each gets half."""
    for f in (lp.maximum, lp.minimum):
        a = Tensor([math.nan, 1.0, 2.0, math.nan], device=device, requires_grad=True)
        b = Tensor([1.0, math.nan, 2.0, math.nan], device=device, requires_grad=True)
        f(a, b).sum().backward()
        assert lp.asarray(a.grad).numpy().tolist() == [1.0, 1.0, 0.5, 1.0]
        assert lp.asarray(b.grad).numpy().tolist() == [1.0, 1.0, 0.5, 1.0]


def test_clip_takes_real_numbers_and_keeps_the_dtype(device):
    """clip of complex or bool raises; a float bound does not mix with an integer
    tensor (TypeError naming clip, on every device); an integer bound beyond the
    dtype's range is no bound; the result has x's dtype."""
    for x in (lp.asarray([1j, 2j], device=device), lp.asarray([True, False], device=device)):
        with pytest.raises(TypeError, match="clip: x must have a real numeric dtype"):
            lp.clip(x, 0, 1)
    i = lp.asarray([1, 5, 9], dtype=lp.int8, device=device)
    with pytest.raises(TypeError, match="clip: a Python float bound does not mix with x of dtype int8"):
        lp.clip(i, 2.5, 7)
    with pytest.raises(TypeError, match="clip: a bound of dtype float64 does not mix"):
        lp.clip(i, lp.asarray(2.0, device=device))
    got = lp.clip(i, -1000, 300)
    assert got.dtype == lp.int8 and got.numpy().tolist() == [1, 5, 9]
    got = lp.clip(lp.asarray([1, 200], dtype=lp.uint8, device=device), -5, 100)
    assert got.dtype == lp.uint8 and got.numpy().tolist() == [1, 100]
    assert lp.clip(Tensor([0.5, 3.0], device=device), 1, 2).numpy().tolist() == [1.0, 2.0]
    # tensor bounds of a wider dtype: cast to x's (array_api_strict's result), clamped to its range first
    got = lp.clip(i, min=lp.asarray([5, -1000, 5], device=device), max=lp.asarray([300, 3, 7], dtype=lp.int16,
                                                                                device=device))
    assert got.dtype == lp.int8 and got.numpy().tolist() == [5, 3, 7]
    got = lp.clip(lp.asarray([1, 200], dtype=lp.uint8, device=device), lp.asarray(-5, device=device))
    assert got.dtype == lp.uint8 and got.numpy().tolist() == [1, 200]
    x32 = Tensor([0.5, 3.0], device=device, dtype=lp.float32, requires_grad=True)
    high = Tensor([1.5, 1.5], device=device, requires_grad=True)
    got = lp.clip(x32, max=high)
    assert got.dtype == lp.float32 and got.numpy().tolist() == [0.5, 1.5]
    got.sum().backward()
    assert host(x32.grad, device).tolist() == [1.0, 0.0] and host(high.grad, device).tolist() == [0.0, 1.0]
    assert host(high.grad, device).dtype == np.float64



def test_functions_that_order_values_refuse_complex_on_every_device(device):
    """NumPy orders complex numbers lexicographically; the standard (and PyTorch) do
    not: maximum, minimum and <, <=, >, >= raise TypeError on every device."""
    z = lp.asarray([1 + 1j], device=device)
    for f in (lp.maximum, lp.minimum, lp.less, lp.less_equal, lp.greater, lp.greater_equal):
        with pytest.raises(TypeError, match="complex numbers have no order"):
            f(z, z)
    with pytest.raises(TypeError, match="complex numbers have no order"):
        _ = lp.asarray([1.0], device=device) < 1j
    assert (z == z).tolist() == [True]


def test_imag_of_a_real_tensor_is_zeros_on_every_device(device):
    x = Tensor([1.0, -2.0], device=device, requires_grad=True)
    y = lp.imag(x)
    assert y.dtype == lp.float64 and y.tolist() == [0.0, 0.0]
    (y * 3.0 + lp.real(x)).sum().backward()
    assert lp.asarray(x.grad).numpy().tolist() == [1.0, 1.0]
    assert lp.imag(lp.asarray([1, 2], device=device)).tolist() == [0, 0]


def test_integer_tensors_with_python_scalars_agree_on_every_device(device):
    """An int tensor with a Python float computes in the default float dtype (NumPy's
    result; array_api_strict refuses the mix), a bool counts as 0/1, and what no
    device can do raises naming the function."""
    i = lp.asarray([3, -2], device=device)
    assert (i * 1.5).tolist() == [4.5, -3.0] and (i * 1.5).dtype == lp.float64
    assert (1.5 + i).tolist() == [4.5, -0.5] and lp.multiply(i, 1.5).dtype == lp.float64
    assert (i // 1.5).tolist() == [2.0, -2.0]
    assert (i + True).tolist() == [4, -1] and (i + True).dtype == lp.int64
    with pytest.raises(ValueError, match="pow: not defined for a tensor of dtype int64 and the int -1"):
        i ** -1
    small = lp.asarray([3, -2], dtype=lp.int8, device=device)
    for call in (lambda: small + 300, lambda: lp.add(small, 300)):
        with pytest.raises(OverflowError, match="add: 300 does not fit the tensor's dtype int8"):
            call()


def test_power_one_half_follows_the_standards_special_cases(device):
    """With a tensor exponent, pow(-inf, 0.5) is +inf and pow(-0.0, 0.5) is +0 also where
    it broadcasts (NumPy computes a broadcast power 0.5 as sqrt: nan and -0.0), as
    PyTorch's. (``t ** 0.5`` follows the library: sqrt on recent NumPy, as PyTorch.)"""
    t = Tensor([-math.inf, -0.0, 4.0], device=device)
    for exponent in (Tensor([0.5], device=device), Tensor(0.5, device=device), Tensor([0.5] * 3, device=device)):
        values = lp.asarray(lp.pow(t, exponent)).numpy()
        assert values.tolist() == [math.inf, 0.0, 2.0] and not np.signbit(values[1])


def test_host_operands_of_a_higher_kind_keep_their_dtype(device):
    """A bool tensor with integer host data is int64 (NumPy's), not the default float."""
    b = lp.asarray([True, False], device=device)
    if device.startswith("strict"):
        pytest.skip("strict refuses mixed kinds, as the standard leaves them undefined")
    assert (b + [1, 2]).dtype == lp.int64 and (b + np.array([1, 2])).tolist() == [2, 2]
    assert (b + [1.5, 2.0]).dtype == lp.float64


def test_python_bools_with_tensors_that_require_grad_and_clip_bounds(device):
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    y = x + True
    y.sum().backward()
    assert y.tolist() == [2.0, 3.0] and lp.asarray(x.grad).numpy().tolist() == [1.0, 1.0]
    i = lp.asarray([1, 2], dtype=lp.int32, device=device)
    with pytest.raises(TypeError, match="bitwise_and: not defined for a tensor of dtype int32 and the float 1.5"):
        i & 1.5
    f = Tensor([0.5, 5.0], dtype="float32", device=device)
    assert lp.clip(f, True).tolist() == [1.0, 5.0]
    got = lp.clip(f, lp.asarray([1, 2], device=device))
    assert got.dtype == lp.float32 and got.tolist() == [1.0, 5.0]


_SCALAR_FORMS = {
    "t + s": (lambda t, s: t + s, operator.add, False), "s + t": (lambda t, s: s + t, operator.add, True),
    "t - s": (lambda t, s: t - s, operator.sub, False), "s - t": (lambda t, s: s - t, operator.sub, True),
    "t * s": (lambda t, s: t * s, operator.mul, False), "s * t": (lambda t, s: s * t, operator.mul, True),
    "t / s": (lambda t, s: t / s, operator.truediv, False),
}


@SETTINGS
@given(dtype=st.sampled_from(["float32", "float64"]), form=st.sampled_from(sorted(_SCALAR_FORMS)),
       s=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**60, 2**60),
                   st.sampled_from([0.5, 0.25, -1.0, 1.0, 2.0, 0.1, 1e30, -1e30, 1e31, 3, -0.0, 0.0, 2**53 + 1])),
       data=st.data())
def test_tensor_and_python_number_give_numpys_bits(device, dtype, form, s, data):
    """``t (op) s`` with a Python number gives NumPy's result bit for bit, on both sides
    and twice (the second time from the backend's kept operand, ``Backend.number``), and
    its gradient ``s`` (``*``) or ``1/s`` (``/``): the number is rounded to the tensor's
    dtype, never promoted, at every size, sign and kind."""
    a = data.draw(hnp.arrays(dtype, 5, elements=st.floats(width=32 if dtype == "float32" else 64)))
    fn, ref, reflected = _SCALAR_FORMS[form]
    with np.errstate(all="ignore"):
        expected = ref(s, a) if reflected else ref(a, s)
    for _ in range(2):
        t = Tensor(a, device=device, requires_grad=True)
        out = fn(t, s)
        got = out.numpy()
        assert got.dtype == expected.dtype, form
        np.testing.assert_array_equal(got, expected, err_msg=f"{form} with {s!r}")
        assert (np.signbit(got) == np.signbit(expected)).all(), f"{form} with {s!r}: sign of a zero"
    if form in ("t * s", "s * t", "t / s") and math.isfinite(s) and s != 0:
        out.sum().backward()
        with np.errstate(all="ignore"):
            slope = np.full(5, 1 / np.asarray(s, dtype=dtype) if form == "t / s" else np.asarray(s, dtype=dtype))
        np.testing.assert_array_equal(host(t.grad, device), slope, err_msg=f"the gradient of {form} with {s!r}")


def test_kept_numbers_are_bounded():
    """A number that changes at every step (a decaying learning rate) keeps at most
    1024 operands on the backend; an integer tensor is never given one, nor is 0
    (``0.0 == -0.0``: ``-0.0 + -0.0`` is ``-0.0``, ``-0.0 + 0.0`` is ``0.0``)."""
    backend = get_backend("cpu")
    z = Tensor(np.array([-0.0, 1.0]))
    for s in (0.0, -0.0, 0.0, -0.0):
        assert np.signbit((z + s).numpy()[0]) == (math.copysign(1, s) < 0), s
    t = Tensor(np.ones(3))
    for k in range(3000):
        t = t * (1 - 1e-6 * k) + 0.0
    assert len(backend.numbers) <= 1024
    i = lp.arange(3)
    assert (i + 1).dtype == lp.int64 and (i * 0.5).dtype == lp.float64
    assert backend.numbers[(1, i._data.dtype)] is None
    Tensor(np.ones(2), dtype="float32") * 0.5
    assert not backend.numbers[(0.5, np.dtype(np.float32))].flags.writeable  # shared: read-only
    with warnings.catch_warnings():  # 1e-50 is 0 in float32: inf * 0 is NaN, quietly, as NumPy's
        warnings.simplefilter("error")
        tiny = Tensor(np.array([np.inf, 1.0]), dtype="float32") * 1e-50
    assert np.isnan(tiny.numpy()[0]) and tiny.numpy()[1] == 0.0
