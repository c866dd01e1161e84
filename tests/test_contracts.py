"""Contracts that a mutation audit found unguarded: the standard's whole type
promotion table, iinfo limits written into integer tensors, the order of gradient
hooks, accumulation of backward(create_graph=True), jvp differentiable with respect
to its tangents, and the range of argnums."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import host, torch_or_skip

import leanpass as lp
from leanpass import Tensor

# ---- 1. type promotion: the array API standard's (2024.12) table -------------------------------

# The rows and columns in this order; "-" where the standard defines no promotion (a
# bool with a number, an integer with a floating-point type, uint64 with a signed
# integer): there LeanPass's result_type raises TypeError, as leanpass._dtypes.promote
# documents ("TypeError naming them where the standard defines none").
_ABBREV = {
    "b": "bool",
    "i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64",
    "u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64",
    "f4": "float32", "f8": "float64",
    "c8": "complex64", "c16": "complex128",
}
_ORDER = list(_ABBREV)
PROMOTION_TABLE = """
      b   i1  i2  i4  i8  u1  u2  u4  u8  f4  f8  c8  c16
b     b   -   -   -   -   -   -   -   -   -   -   -   -
i1    -   i1  i2  i4  i8  i2  i4  i8  -   -   -   -   -
i2    -   i2  i2  i4  i8  i2  i4  i8  -   -   -   -   -
i4    -   i4  i4  i4  i8  i4  i4  i8  -   -   -   -   -
i8    -   i8  i8  i8  i8  i8  i8  i8  -   -   -   -   -
u1    -   i2  i2  i4  i8  u1  u2  u4  u8  -   -   -   -
u2    -   i4  i4  i4  i8  u2  u2  u4  u8  -   -   -   -
u4    -   i8  i8  i8  i8  u4  u4  u4  u8  -   -   -   -
u8    -   -   -   -   -   u8  u8  u8  u8  -   -   -   -
f4    -   -   -   -   -   -   -   -   -   f4  f8  c8  c16
f8    -   -   -   -   -   -   -   -   -   f8  f8  c16 c16
c8    -   -   -   -   -   -   -   -   -   c8  c16 c8  c16
c16   -   -   -   -   -   -   -   -   -   c16 c16 c16 c16
"""


def _promotion_table() -> dict[tuple[str, str], str | None]:
    lines = PROMOTION_TABLE.strip().splitlines()
    assert lines[0].split() == _ORDER
    table = {}
    for line in lines[1:]:
        row, *cells = line.split()
        assert len(cells) == len(_ORDER), row
        for col, cell in zip(_ORDER, cells):
            table[_ABBREV[row], _ABBREV[col]] = None if cell == "-" else _ABBREV[cell]
    assert len(table) == 13 * 13
    return table


PROMOTIONS = _promotion_table()


def test_the_promotion_table_is_the_standards_and_symmetric():
    for (a, b), result in PROMOTIONS.items():
        assert PROMOTIONS[b, a] == result, (a, b)


@pytest.mark.parametrize("a", list(_ABBREV.values()))
def test_result_type_follows_the_standards_whole_promotion_table(a):
    for b in _ABBREV.values():
        expected = PROMOTIONS[a, b]
        da, db = getattr(lp, a), getattr(lp, b)
        if expected is None:
            with pytest.raises(TypeError, match="defines no promotion"):
                lp.result_type(da, db)
            assert not lp.can_cast(da, db)
            continue
        got = lp.result_type(da, db)
        assert got == getattr(lp, expected) and got.name == expected, f"result_type({a}, {b}) is {got}"
        assert lp.result_type(a, b) == expected  # dtype names too
        # can_cast is the standard's "promotes to": from a to b exactly where a with b gives b
        assert lp.can_cast(da, db) == (expected == b), f"can_cast({a}, {b})"


def test_result_type_of_three_dtypes_follows_the_table():
    assert lp.result_type(lp.float32, lp.float64, lp.complex64) == lp.complex128
    assert lp.result_type(lp.int8, lp.uint8, lp.uint16) == lp.int32
    assert lp.result_type(lp.uint8, lp.int8, lp.uint32) == lp.int64
    with pytest.raises(TypeError):
        lp.result_type(lp.int64, lp.uint32, lp.uint64)


# (a, b, a's values, b's values): values that a too narrow result dtype would change, and
# whose sums and products stay in the result's range
ARITHMETIC_SAMPLES = [
    ("int8", "uint8", [100, -128], [100, 255]),
    ("uint16", "int16", [60000, 1], [30000, -32768]),
    ("uint16", "int32", [65535, 0], [32767, -(2**31)]),
    ("uint32", "int8", [4_000_000_000, 0], [127, -128]),
    ("uint8", "uint64", [255, 1], [2**56, 2**64 - 2]),
    ("int16", "int64", [30000, -1], [2**40, -(2**63) + 1]),
    ("float32", "float64", [1.5, -2.0], [0.1, 1e300]),
    ("float64", "complex64", [0.1, 1e300], [1 + 2j, -0.5j]),
    ("float32", "complex64", [1.5, -2.0], [1 + 2j, -0.5j]),
    ("float32", "complex128", [1.5, -2.0], [0.1 + 0.2j, 1e300j]),
    ("complex64", "complex128", [1 + 2j, -0.5j], [0.1 + 0.2j, 1e300j]),
]


@pytest.mark.parametrize("a, b, va, vb", ARITHMETIC_SAMPLES, ids=[f"{a}-{b}" for a, b, *_ in ARITHMETIC_SAMPLES])
def test_tensor_arithmetic_promotes_as_the_table(device, a, b, va, vb):
    expected = PROMOTIONS[a, b]
    x = lp.asarray(va, dtype=a, device=device)
    y = lp.asarray(vb, dtype=b, device=device)
    assert lp.result_type(x, y) == expected
    # each operand cast to the result type on the host, then computed there: what the
    # standard's result is, to the last bit for integers
    hx, hy = x.numpy().astype(expected), y.numpy().astype(expected)
    for name, op in [("+", lambda p, q: p + q), ("*", lambda p, q: p * q)]:
        for left, right, hl, hr in [(x, y, hx, hy), (y, x, hy, hx)]:
            want = op(hl, hr)
            got = op(left, right)
            assert got.dtype == expected, f"{left.dtype} {name} {right.dtype} gave {got.dtype}"
            if expected.startswith(("int", "uint")):
                assert got.tolist() == want.tolist()
            else:  # a float64 operand computed in a 32-bit type would be off by about 1e-8
                rtol = 1e-6 if expected in ("float32", "complex64") else 1e-15
                np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=0)
    if expected.startswith(("int", "uint")):
        got = x & y
        assert got.dtype == expected
        assert got.tolist() == (hx & hy).tolist()


def test_bool_with_bool_stays_bool(device):
    x = lp.asarray([True, False, True], device=device)
    y = lp.asarray([True, True, False], device=device)
    assert lp.result_type(x, y) == lp.bool
    assert (x & y).dtype == lp.bool and (x & y).tolist() == [True, False, False]
    assert (x | y).dtype == lp.bool and (x ^ y).tolist() == [False, True, True]


# ---- 2. iinfo limits in integer tensors ---------------------------------------------------------

INTEGER_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_iinfo_is_the_integer_range(dtype):
    info = lp.iinfo(getattr(lp, dtype))
    bits = np.dtype(dtype).itemsize * 8
    assert info.bits == bits and info.dtype == dtype
    if dtype.startswith("u"):
        assert (info.min, info.max) == (0, 2**bits - 1)
    else:
        assert (info.min, info.max) == (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    assert (info.min, info.max) == (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_iinfo_limits_are_written_exactly_and_one_beyond_raises(device, dtype):
    dt = getattr(lp, dtype)
    info = lp.iinfo(dt)
    t = lp.zeros((4,), dtype=dt, device=device)
    t[0] = info.max
    t[1] = info.min
    t[2] = info.max - 1
    t[3] = info.min + 1 if info.min else 1
    expected = [info.max, info.min, info.max - 1, info.min + 1 if info.min else 1]
    assert t.dtype == dt
    assert t.tolist() == expected
    assert [int(t[i]) for i in range(4)] == expected
    assert int(lp.max(t)) == info.max and int(lp.min(t)) == info.min
    for beyond in (info.max + 1, info.min - 1, info.max + 2**info.bits):
        with pytest.raises(OverflowError, match="out of the range of dtype"):
            t[0] = beyond
        with pytest.raises(OverflowError, match="out of the range of dtype"):
            t[1:3] = beyond
        assert t.tolist() == expected  # nothing was written
    # the limits of a tensor's dtype, asked of the tensor
    assert lp.iinfo(t).max == info.max and lp.iinfo(t).min == info.min


# ---- 3. gradient hooks run in registration order -------------------------------------------------


def _ones(device, n=3):
    return Tensor([1.0] * n, device=device, dtype="float64", requires_grad=True)


def _double_then_add_one(t):
    t.register_hook(lambda g: g * 2)
    t.register_hook(lambda g: g + 1)


def test_hooks_on_a_leaf_run_in_registration_order(device):
    x = _ones(device)
    _double_then_add_one(x)
    x.sum().backward()
    assert host(x.grad).tolist() == [3.0, 3.0, 3.0]  # (1 * 2) + 1, not (1 + 1) * 2


def test_hooks_on_a_leaf_run_in_registration_order_in_autograd_grad(device):
    x = _ones(device)
    _double_then_add_one(x)
    (g,) = lp.autograd.grad(x.sum(), x)
    assert g.tolist() == [3.0, 3.0, 3.0]


def test_hooks_on_a_leaf_run_in_registration_order_with_create_graph(device):
    x = _ones(device)
    _double_then_add_one(x)
    (x * x).sum().backward(create_graph=True)  # 2x = 2, then * 2 + 1
    assert x.grad.tolist() == [5.0, 5.0, 5.0]
    (g,) = lp.autograd.grad((x * x).sum(), x, create_graph=True)
    assert g.tolist() == [5.0, 5.0, 5.0]


def test_hooks_on_a_non_leaf_run_in_registration_order(device):
    x = _ones(device)
    h = x * 1.0
    h.retain_grad()
    _double_then_add_one(h)
    h.sum().backward()
    assert host(h.grad).tolist() == [3.0, 3.0, 3.0]
    assert host(x.grad).tolist() == [3.0, 3.0, 3.0]  # the hooked gradient flows on


def test_hooks_on_a_non_leaf_run_in_registration_order_in_autograd_grad(device):
    x = _ones(device)
    h = x * 1.0
    _double_then_add_one(h)
    (gx,) = lp.autograd.grad(h.sum(), x)  # h's hooks change the gradient passed on to x
    assert gx.tolist() == [3.0, 3.0, 3.0]


def test_three_hooks_run_in_registration_order(device):
    x = _ones(device, 2)
    x.register_hook(lambda g: g + 1)
    x.register_hook(lambda g: g * 3)
    x.register_hook(lambda g: g - 4)
    x.sum().backward()
    assert host(x.grad).tolist() == [2.0, 2.0]  # ((1 + 1) * 3) - 4


def test_hook_order_matches_torch():
    torch = torch_or_skip()
    xt = torch.ones(3, dtype=torch.float64, requires_grad=True)
    xt.register_hook(lambda g: g * 2)
    xt.register_hook(lambda g: g + 1)
    xt.sum().backward()
    x = _ones("cpu")
    _double_then_add_one(x)
    x.sum().backward()
    np.testing.assert_array_equal(host(x.grad), host(xt.grad))


# ---- 4. backward(create_graph=True) accumulates, in the graph -----------------------------------


def test_two_create_graph_backwards_accumulate_in_a_graph(device):
    values = [0.5, -1.0, 2.0]
    x = Tensor(values, device=device, dtype="float64", requires_grad=True)
    y = (x ** 3).sum()
    y.backward(create_graph=True)
    first = x.grad
    np.testing.assert_allclose(first.numpy(), 3 * np.array(values) ** 2)
    y.backward(create_graph=True)
    assert isinstance(x.grad, Tensor) and x.grad.requires_grad
    np.testing.assert_allclose(x.grad.numpy(), 2 * 3 * np.array(values) ** 2)
    np.testing.assert_allclose(first.numpy(), 3 * np.array(values) ** 2)  # the first .grad is not written into
    # d/dx sum(x.grad) = d/dx sum(6 x^2) = 12 x: both calls' gradients are in the graph
    (h,) = lp.autograd.grad(x.grad.sum(), x)
    np.testing.assert_allclose(h.numpy(), 12 * np.array(values))


def test_create_graph_backward_after_a_plain_one_accumulates(device):
    values = [0.5, -1.0, 2.0]
    x = Tensor(values, device=device, dtype="float64", requires_grad=True)
    y = (x ** 3).sum()
    y.backward(retain_graph=True)
    y.backward(create_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), 6 * np.array(values) ** 2)
    (h,) = lp.autograd.grad(x.grad.sum(), x)  # only the second call's gradient is in a graph
    np.testing.assert_allclose(h.numpy(), 6 * np.array(values))


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")
def test_create_graph_accumulation_matches_torch():
    torch = torch_or_skip()
    values = np.array([0.3, -1.2, 2.0, 0.7])

    def f(x, lib):
        return (lib.sin(x) * x ** 2).sum()

    xt = torch.tensor(values, requires_grad=True)
    yt = f(xt, torch)
    yt.backward(create_graph=True)
    yt.backward(create_graph=True)
    (ht,) = torch.autograd.grad((xt.grad ** 2).sum(), xt)

    x = Tensor(values, dtype="float64", requires_grad=True)
    y = f(x, lp)
    y.backward(create_graph=True)
    y.backward(create_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.detach().numpy(), rtol=1e-12)
    (h,) = lp.autograd.grad((x.grad ** 2).sum(), x)
    np.testing.assert_allclose(h.numpy(), ht.numpy(), rtol=1e-12)


# ---- 5. jvp is differentiable with respect to its tangents ---------------------------------------

W = np.array([[0.4, -1.1, 0.3], [0.9, 0.2, -0.6]])
X = np.array([0.3, -1.2, 2.0])
V = np.array([0.5, -1.0, 0.25])


def test_jvp_is_differentiable_in_the_tangent_by_backward(device):
    x = Tensor(X, device=device, dtype="float64")  # the primal does not require grad: only the tangent does
    v = Tensor(V, device=device, dtype="float64", requires_grad=True)
    out, tangent_out = lp.jvp(lambda a: lp.sin(a) * a, (x,), (v,))
    np.testing.assert_allclose(out.numpy(), np.sin(X) * X)
    np.testing.assert_allclose(tangent_out.numpy(), (np.cos(X) * X + np.sin(X)) * V)
    assert tangent_out.requires_grad
    tangent_out.sum().backward()
    # J^T 1 with J = diag(f'(x))
    np.testing.assert_allclose(host(v.grad), np.cos(X) * X + np.sin(X), rtol=1e-12)


def test_jvp_is_differentiable_in_the_tangent_by_autograd_grad(device):
    w = Tensor(W, device=device, dtype="float64")
    x = Tensor(X, device=device, dtype="float64")
    v = Tensor(V, device=device, dtype="float64", requires_grad=True)
    _, tangent_out = lp.jvp(lambda a: w @ lp.tanh(a), (x,), (v,))
    jacobian = W * (1 - np.tanh(X) ** 2)  # J of W tanh(x)
    np.testing.assert_allclose(tangent_out.numpy(), jacobian @ V, rtol=1e-12)
    (gv,) = lp.autograd.grad(tangent_out.sum(), v, retain_graph=True)
    np.testing.assert_allclose(gv.numpy(), jacobian.T @ np.ones(2), rtol=1e-12)
    u = np.array([2.0, -3.0])
    (gv,) = lp.autograd.grad(tangent_out, v, Tensor(u, device=device, dtype="float64"))
    np.testing.assert_allclose(gv.numpy(), jacobian.T @ u, rtol=1e-12)


def test_jvp_is_differentiable_in_the_tangent_and_the_primal(device):
    x = Tensor(X, device=device, dtype="float64", requires_grad=True)
    v = Tensor(V, device=device, dtype="float64", requires_grad=True)
    _, tangent_out = lp.jvp(lambda a: lp.sin(a) * a, (x,), (v,))
    gx, gv = lp.autograd.grad(tangent_out.sum(), [x, v])
    np.testing.assert_allclose(gv.numpy(), np.cos(X) * X + np.sin(X), rtol=1e-12)
    np.testing.assert_allclose(gx.numpy(), (2 * np.cos(X) - X * np.sin(X)) * V, rtol=1e-12)  # f''(x) v


@pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")  # torch.func, PyTorch 2.13
@pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:FutureWarning")  # PyTorch 2.14
def test_jvp_tangent_gradient_matches_torch_func():
    torch = torch_or_skip()
    from torch import func as tf

    wt = torch.tensor(W)
    vt = torch.tensor(V, requires_grad=True)
    _, jt = tf.jvp(lambda a: wt @ (torch.sin(a) * a), (torch.tensor(X),), (vt,))
    (gt,) = torch.autograd.grad((jt ** 2).sum(), vt)

    w = Tensor(W, dtype="float64")
    v = Tensor(V, dtype="float64", requires_grad=True)
    _, tangent_out = lp.jvp(lambda a: w @ (lp.sin(a) * a), (Tensor(X, dtype="float64"),), (v,))
    np.testing.assert_allclose(tangent_out.detach().numpy(), jt.detach().numpy(), rtol=1e-12)
    (g,) = lp.autograd.grad((tangent_out ** 2).sum(), v)
    np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-12)


# ---- 6. argnums must name a positional argument ---------------------------------------------------


def _loss(a, b=None):
    return (a * a).sum() if b is None else (a * a * b).sum()


TRANSFORMS = {
    "grad": lambda f, n: lp.grad(f, argnums=n),
    "value_and_grad": lambda f, n: lp.value_and_grad(f, argnums=n),
    "jacobian": lambda f, n: lp.jacobian(f, argnums=n),
}


@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("nargs", [1, 2, 3])
def test_argnums_equal_to_the_number_of_arguments_raises(transform, nargs):
    args = [Tensor([1.0, 2.0]) for _ in range(nargs)]

    def f(*a):
        return sum((t * t).sum() for t in a)

    for bad in (nargs, nargs + 1, -nargs - 1):
        with pytest.raises(ValueError, match="does not name one of the"):
            TRANSFORMS[transform](f, bad)(*args)
        with pytest.raises(ValueError, match="does not name one of the"):
            TRANSFORMS[transform](f, (0, bad))(*args)
        with pytest.raises(ValueError, match="does not name one of the"):
            TRANSFORMS[transform](f, (bad, 0))(*args)


def test_grad_argnums_one_with_one_argument_raises_not_wraps():
    x = Tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="argnums 1 does not name one of the 1 positional arguments"):
        lp.grad(_loss, argnums=1)(x)
    with pytest.raises(ValueError, match="argnums"):
        lp.hessian(_loss, argnums=1)(x)


def test_negative_argnums_count_from_the_end():
    # as torch.func and JAX: -1 is the last positional argument, -len(args) the first
    a, b = Tensor([1.0, 2.0]), Tensor([3.0, -1.0])
    np.testing.assert_allclose(lp.grad(_loss, argnums=-1)(a, b).numpy(), [1.0, 4.0])  # a * a
    np.testing.assert_allclose(lp.grad(_loss, argnums=-2)(a, b).numpy(), [6.0, -4.0])  # 2 a b
    np.testing.assert_allclose(lp.grad(_loss, argnums=-1)(a).numpy(), [2.0, 4.0])
    ga, gb = lp.grad(_loss, argnums=(0, -1))(a, b)
    np.testing.assert_allclose(ga.numpy(), [6.0, -4.0])
    np.testing.assert_allclose(gb.numpy(), [1.0, 4.0])
    np.testing.assert_allclose(lp.jacobian(lambda p, q: p * q, argnums=-1)(a, b).numpy(), np.diag([1.0, 2.0]))
    np.testing.assert_allclose(lp.hessian(_loss, argnums=-1)(b, a).numpy(), np.zeros((2, 2)))
    np.testing.assert_allclose(lp.hessian(_loss, argnums=-2)(a, b).numpy(), np.diag([6.0, -2.0]))


@pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")  # torch.func, PyTorch 2.13
@pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:FutureWarning")  # PyTorch 2.14
def test_negative_argnums_match_torch_func():
    torch = torch_or_skip()
    from torch import func as tf

    values_a, values_b = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    for n in (-1, -2, (0, -1)):
        want = tf.grad(lambda p, q: (p * p * q).sum(), argnums=n)(torch.tensor(values_a), torch.tensor(values_b))
        got = lp.grad(_loss, argnums=n)(Tensor(values_a), Tensor(values_b))
        want, got = (want, got) if isinstance(n, tuple) else ((want,), (got,))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy())
