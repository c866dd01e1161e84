"""Bad input at the tensor layer (SPEC "Bad input").

Each case raises a clear exception of a standard type, and every tensor made
before the failing call -- its data, its gradient (or the absence of one), its
shape, dtype, device and place in the graph -- is exactly as it was.
"""

from __future__ import annotations

import importlib.util
import math
import operator
import re
from typing import NamedTuple

import numpy as np
import pytest
from helpers import other_device

import leanpass as lp
from leanpass import GradcheckError, Tensor, gradcheck
from leanpass.backends import get_backend
from leanpass.tensor import apply

# ---- helpers ---------------------------------------------------------------------------


class _State(NamedTuple):
    shape: tuple
    dtype: str
    device: str
    requires_grad: bool
    op: str
    prev: tuple
    data: np.ndarray
    grad: np.ndarray | None  # host copy of ._grad, None when no gradient array exists


def _state(t: Tensor) -> _State:
    grad = None if t._grad is None else np.array(get_backend(t.device).to_host(t._grad), copy=True)
    return _State(
        t.shape, str(t.dtype), t.device, t.requires_grad, t._op,
        (id(t._node), *(id(p) for p in (t._node._prev if t._node else ()))),
        np.array(t.numpy(), copy=True), grad,
    )


class Snapshot:
    """The state of some tensors now; :meth:`check` asserts nothing of it changed."""

    def __init__(self, *tensors: Tensor):
        self._saved = [(t, _state(t)) for t in tensors]

    def check(self) -> None:
        for t, before in self._saved:
            after = _state(t)
            label = f"{t!r} (name={t.name})"
            assert after[:6] == before[:6], f"{label}: metadata changed from {before[:6]} to {after[:6]}"
            np.testing.assert_array_equal(after.data, before.data, err_msg=f"{label}: data changed")
            if before.grad is None:
                assert t._grad is None, f"{label}: a gradient array appeared"
            else:
                assert after.grad is not None, f"{label}: the gradient was dropped"
                np.testing.assert_array_equal(after.grad, before.grad, err_msg=f"{label}: gradient changed")


def raises_unchanged(exc_type, fn, tensors, *parts):
    """Call ``fn``; assert it raises ``exc_type`` whose message contains every one of
    ``parts`` (plain substrings), and that every tensor in ``tensors`` is unchanged."""
    snapshot = Snapshot(*tensors)
    with pytest.raises(exc_type) as info:
        fn()
    message = str(info.value)
    for part in parts:
        assert part in message, f"{part!r} is not in the message {message!r}"
    snapshot.check()
    return message


def names_op(message: str, symbol: str) -> bool:
    """The operator symbol stands on its own in ``message`` ("*" does not match inside "**",
    "-" does not match inside "second-to-last")."""
    return re.search(rf"(?<![-+*/@\w]){re.escape(symbol)}(?![-+*/@\w])", message) is not None


def host(device, array):
    return np.asarray(get_backend(device).to_host(array))


def names_device(message: str, device: str) -> bool:
    """``device`` appears as a whole device string ("strict" does not match inside "strict:1")."""
    return re.search(rf"(?<![\w:]){re.escape(device)}(?![\w:])", message) is not None


def make_world(device):
    """Tensors in every state a failing call could disturb: leaves with accumulated
    gradients, a leaf without grad, a leaf whose gradient was never allocated, a non-leaf."""
    a = Tensor(np.arange(6.0).reshape(2, 3) - 2.5, requires_grad=True, device=device, name="a")
    b = Tensor([1.0, -2.0, 3.0, 4.0], requires_grad=True, device=device, name="b")
    (a * a).sum().backward()
    (b * 3.0).sum().backward()
    c = Tensor([[0.5, 1.5, 2.5]], device=device, name="c")
    d = Tensor(np.ones((3, 2)), requires_grad=True, device=device, name="d")
    h = a * 2.0
    h.name = "h"
    assert a._grad is not None and b._grad is not None and d._grad is None and h._grad is None
    return a, b, c, d, h


BINARY = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "**": operator.pow,
}

# ---- mismatched shapes -------------------------------------------------------------------


@pytest.mark.parametrize("symbol", list(BINARY))
@pytest.mark.parametrize("reflected", [False, True], ids=["a_op_b", "b_op_a"])
def test_elementwise_shape_mismatch(device, symbol, reflected):
    world = make_world(device)
    a, b = world[0], world[1]
    left, right = (b, a) if reflected else (a, b)
    message = raises_unchanged(ValueError, lambda: BINARY[symbol](left, right), world, "(2, 3)", "(4,)")
    assert names_op(message, symbol), f"{symbol!r} is not named in {message!r}"


@pytest.mark.parametrize("symbol", list(BINARY))
@pytest.mark.parametrize(
    "host", [[1.0, 2.0, 3.0, 4.0], np.ones(4)], ids=["list", "ndarray"]
)
@pytest.mark.parametrize("reflected", [False, True], ids=["tensor_op_host", "host_op_tensor"])
def test_elementwise_shape_mismatch_with_host_operand(device, symbol, host, reflected):
    world = make_world(device)
    a = world[0]
    saved = np.array(host, copy=True)

    def call():
        return BINARY[symbol](host, a) if reflected else BINARY[symbol](a, host)

    message = raises_unchanged(ValueError, call, world, "(2, 3)", "(4,)")
    assert names_op(message, symbol), f"{symbol!r} is not named in {message!r}"
    np.testing.assert_array_equal(np.asarray(host), saved)


MATMUL_CASES = [
    ((2, 3), (4,)),
    ((4,), (2, 3)),
    ((2, 3), (4, 2)),
    ((3,), (4,)),
    ((2, 3, 4), (5, 4, 2)),  # batch axes do not broadcast
    ((2, 3), (2, 4, 2)),
    ((), (3,)),  # matmul needs at least one axis
]


@pytest.mark.parametrize("shapes", MATMUL_CASES, ids=lambda s: f"{s[0]}@{s[1]}")
@pytest.mark.parametrize("form", ["operator", "method"])
def test_matmul_shape_mismatch(device, shapes, form):
    world = make_world(device)
    x = Tensor(np.ones(shapes[0]), requires_grad=True, device=device, name="x")
    y = Tensor(np.full(shapes[1], 2.0), device=device, name="y")

    def call():
        return x @ y if form == "operator" else x.matmul(y)

    message = raises_unchanged(ValueError, call, (*world, x, y), str(shapes[0]), str(shapes[1]))
    assert names_op(message, "@") or "matmul" in message, message


# ---- mixed devices ---------------------------------------------------------------------------

MIXED_OPS = {**BINARY, "@": operator.matmul}


def _check_mixed(first, second, symbol, shape=(2, 2)):
    x = Tensor(np.arange(4.0).reshape(shape) + 1.0, requires_grad=True, device=first, name="x")
    y = Tensor(np.ones(shape), requires_grad=True, device=second, name="y")
    (x * 2.0).sum().backward()
    world = (*make_world(first), x, y)
    for left, right in ((x, y), (y, x)):
        message = raises_unchanged(ValueError, lambda lhs=left, rhs=right: MIXED_OPS[symbol](lhs, rhs), world)
        assert names_device(message, first) and names_device(message, second), (
            f"{first!r} and {second!r} are not both named in {message!r}"
        )


@pytest.mark.parametrize("symbol", list(MIXED_OPS))
@pytest.mark.parametrize(
    "pair", [("strict", "strict:1"), ("cpu", "strict"), ("strict:1", "strict:2")], ids=lambda p: "-".join(p)
)
def test_mixed_devices_raise_naming_both(pair, symbol):
    _check_mixed(*pair, symbol)


@pytest.mark.parametrize("symbol", list(MIXED_OPS))
def test_mixed_devices_against_every_device(device, symbol):
    _check_mixed(device, other_device(device), symbol)


def test_mixed_devices_matmul_method(device):
    x = Tensor(np.ones((2, 2)), requires_grad=True, device=device)
    other = other_device(device)
    y = Tensor(np.ones((2, 2)), device=other)
    message = raises_unchanged(ValueError, lambda: x.matmul(y), (x, y))
    assert names_device(message, device) and names_device(message, other), message


def test_mixed_devices_with_a_raw_array_of_another_device(device):
    """An array of another library keeps its device, so it mismatches too. (Only on the
    right: array_api_strict's own operators reject foreign operands before Python asks
    the Tensor.)"""
    other = get_backend(other_device(device))
    raw = other.xp.asarray([1.0, 2.0], device=other.xp_device)
    world = make_world(device)
    x = Tensor([3.0, 4.0], requires_grad=True, device=device)
    for call in (lambda: x + raw, lambda: x * raw, lambda: x - raw, lambda: x @ raw):
        message = raises_unchanged(ValueError, call, (*world, x))
        assert names_device(message, device) and names_device(message, other.device), message


def test_mixed_devices_index_tensor(device):
    world = make_world(device)
    a = world[0]
    other = other_device(device)
    index = Tensor([0.0, 1.0], device=other)
    message = raises_unchanged(ValueError, lambda: a[index], (*world, index))
    assert names_device(message, device) and names_device(message, other), message


# ---- unknown and unusable devices --------------------------------------------------------------


@pytest.mark.parametrize("name", ["tpu", "gpu:0", "mps"])
def test_unknown_device_type_is_a_runtime_error(device, name):
    """PyTorch: RuntimeError "Expected one of cpu, cuda, ... device type at start of
    device string: tpu"."""
    world = make_world(device)
    a = world[0]
    type_ = name.partition(":")[0]
    for call in (
        lambda: Tensor(1.0, device=name),
        lambda: Tensor([1.0, 2.0], requires_grad=True, device=name),
        lambda: Tensor(np.ones(3), device=name),
        lambda: Tensor(a, device=name),
        lambda: a.to(name),
        lambda: lp.asarray([1.0], device=name),
    ):
        raises_unchanged(RuntimeError, call, world, name, f"device type at start of device string: {type_}")


@pytest.mark.parametrize("name", ["cpu:x", "strict:-1", "strict:1:2", "", ":0"])
def test_malformed_device_string_is_a_runtime_error(name):
    """PyTorch: RuntimeError "Invalid device string: 'cuda:x'"."""
    with pytest.raises(RuntimeError, match=re.escape(repr(name))):
        lp.backends.canonical_device(name)
    with pytest.raises(RuntimeError, match=re.escape(repr(name))):
        Tensor(1.0, device=name)


@pytest.mark.parametrize("name", ["tpu", "gpu:0", "cpu:x", "strict:7"])
def test_set_default_device_to_a_bad_device_keeps_the_default(name):
    before = lp.get_default_device()
    try:
        lp.set_default_device("strict:1")
        with pytest.raises(RuntimeError, match=re.escape(name)):
            lp.set_default_device(name)
        assert lp.get_default_device() == "strict:1"
        assert Tensor([1.0]).device == "strict:1"
    finally:
        lp.set_default_device(before)
    assert lp.get_default_device() == before


def test_set_default_device_to_unknown_device_keeps_the_default():
    before = lp.get_default_device()
    with pytest.raises(RuntimeError, match="tpu"):
        lp.set_default_device("tpu")
    assert lp.get_default_device() == before
    with pytest.raises(RuntimeError, match="strict:7"):
        lp.set_default_device("strict:7")
    assert lp.get_default_device() == before


@pytest.mark.parametrize("name", ["strict:7", "strict:3"])
def test_missing_device_index_is_a_runtime_error(device, name):
    world = make_world(device)
    a = world[0]
    for call in (
        lambda: Tensor(1.0, device=name),
        lambda: Tensor(np.ones((2, 3)), requires_grad=True, device=name),
        lambda: a.to(name),
    ):
        raises_unchanged(RuntimeError, call, world, name)


def test_malformed_device_strings(device):
    world = make_world(device)
    raises_unchanged(RuntimeError, lambda: Tensor(1.0, device="strict:x"), world, "strict:x")
    raises_unchanged(TypeError, lambda: Tensor(1.0, device=3), world)


@pytest.mark.skipif(
    importlib.util.find_spec("cupy") is not None,
    reason="CuPy is installed here: the missing-CuPy message cannot be observed",
)
def test_cuda_without_cupy_says_how_to_install(device):
    world = make_world(device)
    a = world[0]
    before = lp.get_default_device()
    for call in (
        lambda: Tensor(1.0, device="cuda"),
        lambda: Tensor([1.0, 2.0], device="cuda:0"),
        lambda: a.to("cuda"),
        lambda: a.cuda(),
        lambda: lp.set_default_device("cuda"),
        lambda: Tensor(1.0, device="cuda"),  # asking again gives the same answer
    ):
        message = raises_unchanged(RuntimeError, call, world, "leanpass[cuda12]")
        assert "cuda" in message.replace("leanpass[cuda12]", "").lower(), message
    assert lp.get_default_device() == before
    assert not any(d.startswith("cuda") for d in lp.available_devices())


# ---- non-numeric and ragged data -----------------------------------------------------------------

NON_NUMERIC = {
    "str": "abc",
    "bytes": b"abc",
    "list_with_str": [1, "a"],
    "None": None,
    "empty_dict": {},
    "dict": {1: 2.0},
    "object": object(),
    "list_with_None": [1.0, None],
    "str_ndarray": np.array(["a", "b"]),
    "nested_str": [[1.0, 2.0], ["x", 4.0]],
}


@pytest.mark.parametrize("data", list(NON_NUMERIC.values()), ids=list(NON_NUMERIC))
def test_non_numeric_data_is_a_type_error(device, data):
    world = make_world(device)
    raises_unchanged(TypeError, lambda: Tensor(data, device=device), world)
    raises_unchanged(TypeError, lambda: Tensor(data, requires_grad=True, device=device), world)


COMPLEX = {
    "complex": 1 + 2j,
    "complex_list": [1.0, 2j],
    "complex_ndarray": np.array([1 + 1j, 2.0]),
}


@pytest.mark.parametrize("data", list(COMPLEX.values()), ids=list(COMPLEX))
def test_complex_data_makes_complex_tensors_that_can_require_grad(device, data):
    assert Tensor(data, device=device).dtype == "complex128"
    t = Tensor(data, requires_grad=True, device=device)
    assert t.requires_grad and t.dtype == "complex128"


RAGGED = {
    "rows": [[1.0, 2.0], [3.0]],
    "scalar_and_list": [1.0, [2.0, 3.0]],
    "deep": [[[1.0], [2.0]], [[3.0]]],
}


@pytest.mark.parametrize("data", list(RAGGED.values()), ids=list(RAGGED))
def test_ragged_lists_are_a_value_error(device, data):
    world = make_world(device)
    raises_unchanged(ValueError, lambda: Tensor(data, device=device), world)


@pytest.mark.parametrize("other", ["abc", None, [1.0, "a"], b"x"], ids=repr)
@pytest.mark.parametrize("symbol", list(MIXED_OPS))
def test_non_numeric_operand_is_a_type_error(device, symbol, other):
    world = make_world(device)
    a = world[0]
    raises_unchanged(TypeError, lambda: MIXED_OPS[symbol](a, other), world)
    raises_unchanged(TypeError, lambda: MIXED_OPS[symbol](other, a), world)


@pytest.mark.parametrize("symbol", list(BINARY))
def test_ragged_operand_is_a_value_error(device, symbol):
    world = make_world(device)
    raises_unchanged(ValueError, lambda: BINARY[symbol](world[0], [[1.0, 2.0], [3.0]]), world)


# ---- backward ---------------------------------------------------------------------------------

WRONG_GRADIENTS = {
    "row": (lambda dev: np.ones(3), "(3,)"),
    "transposed": (lambda dev: np.ones((3, 2)), "(3, 2)"),
    "flat_list": (lambda dev: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "(6,)"),
    "broadcastable": (lambda dev: np.ones((1, 3)), "(1, 3)"),
    "scalar": (lambda dev: 1.0, "()"),
    "extra_axis_tensor": (lambda dev: Tensor(np.ones((2, 3, 1)), device=dev), "(2, 3, 1)"),
    "other_device_tensor": (lambda dev: Tensor(np.ones((3, 2)), device=other_device(dev)), "(3, 2)"),
}


@pytest.mark.parametrize("case", list(WRONG_GRADIENTS))
def test_backward_gradient_of_wrong_shape(device, case):
    make_gradient, gradient_shape = WRONG_GRADIENTS[case]
    world = make_world(device)
    a, h = world[0], world[4]
    gradient = make_gradient(device)
    extra = (gradient,) if isinstance(gradient, Tensor) else ()
    raises_unchanged(ValueError, lambda: h.backward(gradient), (*world, *extra), "(2, 3)", gradient_shape)
    # the failed call released nothing: the graph still runs, and adds exactly once
    before = np.array(get_backend(device).to_host(a._grad), copy=True)
    h.backward(np.ones((2, 3)))
    np.testing.assert_array_equal(get_backend(device).to_host(a.grad), before + 2.0)


def test_backward_gradient_of_wrong_shape_on_a_leaf(device):
    world = make_world(device)
    a = world[0]
    raises_unchanged(ValueError, lambda: a.backward(np.ones(3)), world, "(2, 3)", "(3,)")
    d = world[3]
    raises_unchanged(ValueError, lambda: d.backward(np.ones((2, 3))), world, "(3, 2)", "(2, 3)")


def test_backward_gradient_non_numeric(device):
    world = make_world(device)
    h = world[4]
    raises_unchanged(TypeError, lambda: h.backward("abc"), world)
    raises_unchanged(TypeError, lambda: h.backward([[1.0, None, 1.0], [1.0, 1.0, 1.0]]), world)


def test_backward_without_grad_is_a_runtime_error(device):
    world = make_world(device)
    c = world[2]
    raises_unchanged(RuntimeError, lambda: (c * 2.0).backward(np.ones((1, 3))), world)


def test_second_backward_through_released_graph(device):
    world = make_world(device)
    a, b = world[0], world[1]
    loss = (a.sum() * b.sum()) ** 2
    loss.backward()
    raises_unchanged(RuntimeError, loss.backward, world, "retain_graph")


def test_released_part_of_a_graph_is_detected_before_any_gradient_moves(device):
    """A new graph built on a released node raises before writing any gradient."""
    world = make_world(device)
    a, b = world[0], world[1]
    e = Tensor([[1.0, 2.0, 3.0]], requires_grad=True, device=device, name="e")
    y = a * 2.0
    y.sum().backward()
    z = (e * 5.0 + y).sum()  # e's branch is fresh, y's is released
    raises_unchanged(RuntimeError, z.backward, (*world, e, y, z), "retain_graph")
    assert b._grad is not None


def test_retain_graph_allows_exactly_one_more_call(device):
    world = make_world(device)
    a = world[0]
    loss = (a * a).sum()
    start = get_backend(device).to_host(a.grad)
    loss.backward(retain_graph=True)
    loss.backward()
    np.testing.assert_allclose(get_backend(device).to_host(a.grad), start + 4.0 * a.numpy())
    raises_unchanged(RuntimeError, loss.backward, world, "retain_graph")


# ---- reductions and axes ---------------------------------------------------------------------


@pytest.mark.parametrize("method", ["sum", "mean", "max"])
@pytest.mark.parametrize("axis", [2, -3, 7, (0, 2), (-3,)], ids=str)
def test_reduction_axis_out_of_range(device, method, axis):
    world = make_world(device)
    a = world[0]
    bad = next(x for x in (axis if isinstance(axis, tuple) else (axis,)) if not -2 <= x < 2)
    # NumPy raises AxisError (a ValueError and an IndexError); PyTorch an IndexError.
    message = raises_unchanged((IndexError, ValueError), lambda: getattr(a, method)(axis=axis), world, method)
    assert re.search(rf"(?<![\w-]){bad}(?!\d)", message), f"axis {bad} is not named in {message!r}"
    raises_unchanged((IndexError, ValueError), lambda: getattr(a, method)(axis=axis, keepdims=True), world, method)


@pytest.mark.parametrize("method", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [2, -3])
def test_axis_function_out_of_range(device, method, axis):
    world = make_world(device)
    raises_unchanged((IndexError, ValueError), lambda: getattr(world[0], method)(axis=axis), world, method, str(axis))


@pytest.mark.parametrize("method", ["sum", "mean", "max"])
def test_reduction_repeated_or_non_integer_axis(device, method):
    world = make_world(device)
    a = world[0]
    raises_unchanged(ValueError, lambda: getattr(a, method)(axis=(0, -2)), world, method)
    raises_unchanged(TypeError, lambda: getattr(a, method)(axis=0.5), world, method)


# ---- reshape and other shape operations ---------------------------------------------------------


@pytest.mark.parametrize(
    "shape", [(4, 2), (5,), (-1, 4), (-1, -1), (0, 6), (7, -1), (2, 3, 2), (-2, -3)], ids=str
)
def test_reshape_incompatible(device, shape):
    world = make_world(device)
    a = world[0]
    raises_unchanged(ValueError, lambda: a.reshape(*shape), world, "reshape", "(2, 3)", str(shape))
    raises_unchanged(ValueError, lambda: a.reshape(shape), world, "reshape", "(2, 3)", str(shape))


def test_transpose_axes_not_a_permutation(device):
    world = make_world(device)
    raises_unchanged(ValueError, lambda: world[0].transpose(0, 0, 1), world, "(2, 3)")
    raises_unchanged((IndexError, ValueError), lambda: world[0].transpose(0, 2), world)


def test_setting_grad_of_wrong_shape(device):
    world = make_world(device)
    a = world[0]

    def assign():
        a.grad = np.ones((3, 2))

    raises_unchanged(ValueError, assign, world, "(3, 2)", "(2, 3)")


def test_item_of_many_elements(device):
    world = make_world(device)
    raises_unchanged(ValueError, world[0].item, world, "(2, 3)")


# ---- out-of-range indices (more in test_indexing.py) ------------------------------------------------


@pytest.mark.parametrize(
    "index, bad",
    [
        (2, "2"),
        (-3, "-3"),
        ((0, 3), "3"),
        ((slice(None), -4), "-4"),
        ((..., 9), "9"),
        ([0, 5], "5"),
        ([-7, 0], "-7"),
        ((slice(None), [1, 8]), "8"),
        (([0, 1], [0, -6]), "-6"),
        (np.array([[0, 1], [1, 11]]), "11"),
    ],
    ids=str,
)
def test_out_of_range_index(device, index, bad):
    world = make_world(device)
    a = world[0]
    message = raises_unchanged(IndexError, lambda: a[index], world, "getitem", "(2, 3)")
    assert re.search(rf"(?<![\w-]){re.escape(bad)}(?!\d)", message), f"index {bad} is not named in {message!r}"


# ---- gradcheck's arguments, and its every input ------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        ({"eps": 0}, ValueError, "eps"),
        ({"eps": 0.0}, ValueError, "eps"),
        ({"eps": -1e-6}, ValueError, "eps"),
        ({"eps": math.nan}, ValueError, "eps"),
        ({"eps": math.inf}, ValueError, "eps"),
        ({"eps": "1e-6"}, TypeError, "eps"),
        ({"eps": True}, TypeError, "eps"),
        ({"atol": -1.0}, ValueError, "atol"),
        ({"atol": math.nan}, ValueError, "atol"),
        ({"atol": math.inf}, ValueError, "atol"),
        ({"rtol": -1e-3}, ValueError, "rtol"),
        ({"rtol": math.nan}, ValueError, "rtol"),
        ({"rtol": None}, TypeError, "rtol"),
    ],
    ids=repr,
)
def test_gradcheck_rejects_bad_step_and_tolerances(device, kwargs, exc, words):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    with pytest.raises(exc, match=f"gradcheck: {words}"):
        gradcheck(lambda t: t * t, (x,), **kwargs)
    assert x._grad is None  # nothing ran


def test_gradcheck_takes_zero_tolerances_and_integer_steps(device):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    assert gradcheck(lambda t: t * 3.0, (x,), eps=1, atol=0, rtol=0.01)


def _product_wrong_for(wrong):
    """``a * b`` whose backward doubles the gradient of input ``wrong`` (0 or 1)."""
    def product(be, a, b):
        def backward(g):
            ga, gb = g * b, g * a
            return (2.0 * ga, gb) if wrong == 0 else (ga, 2.0 * gb)
        return a * b, backward
    return product


@pytest.mark.parametrize("wrong", [0, 1])
def test_gradcheck_checks_every_input(device, wrong):
    """A backward that is wrong only for the second input is caught, too."""
    a = Tensor([1.0, -2.0, 0.5], requires_grad=True, device=device, name="a")
    b = Tensor([3.0, 0.25, -1.0], requires_grad=True, device=device, name="b")
    fn = _product_wrong_for(wrong)
    with pytest.raises(GradcheckError, match=f"input {wrong}") as info:
        gradcheck(lambda x, y: apply(fn, x, y, op="product"), (a, b))
    assert info.value.input == wrong and info.value.index == (0,)
    # the right rule passes
    assert gradcheck(lambda x, y: x * y, (a, b))


# ---- Tensor.to ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs, kind",
    [
        ((np.ones(3),), {}, "ndarray"),
        ((np.ones((2, 2)),), {}, "ndarray"),
        (([1],), {}, "list"),
        ((3.5,), {}, "float"),
        ((), {"device": np.ones(3)}, "ndarray"),
        ((), {"dtype": np.ones(3)}, "ndarray"),
        (("cpu",), {"dtype": [1]}, "list"),
    ],
    ids=repr,
)
def test_to_with_an_array_says_what_it_takes(device, args, kwargs, kind):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    with pytest.raises(TypeError, match=f"to: .*device.*dtype.*got {kind}"):
        x.to(*args, **kwargs)
    assert x._grad is None and x.device == device


def test_to_still_takes_devices_and_dtypes(device):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    assert x.to(device) is x
    assert x.to("float32").dtype == lp.float32
    assert x.to(lp.float32).dtype == lp.float32
    assert x.to(np.float32).dtype == lp.float32
    assert x.to(device, "float32").dtype == lp.float32
    assert x.to(get_backend(device)) is x
    assert x.to(dtype=float).dtype == lp.float64


def test_set_default_dtype_with_an_array_is_a_type_error():
    with pytest.raises(TypeError, match="set_default_dtype"):
        lp.set_default_dtype(np.ones((2, 2)))
    with pytest.raises(ValueError, match="set_default_dtype: dtype 'int32'"):
        lp.set_default_dtype("int32")
    assert lp.get_default_dtype() == "float64"


# ---- masked arrays -----------------------------------------------------------------------------

MASKED = np.ma.array([1.0, 2.0, 3.0], mask=[False, True, False])


FILL_FIRST = r"masked arrays \(numpy.ma\) are not supported.*a\.filled\("


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda d: Tensor(MASKED, device=d), "Tensor: " + FILL_FIRST),
        (lambda d: Tensor(MASKED, requires_grad=True, device=d), "Tensor: " + FILL_FIRST),
        (lambda d: Tensor(np.ma.array([1, 2]), device=d), "Tensor: " + FILL_FIRST),  # nothing masked: refused too
        (lambda d: lp.asarray(MASKED, device=d), "asarray: " + FILL_FIRST),
        (lambda d: lp.as_tensor(MASKED, device=d), FILL_FIRST),
        (lambda d: Tensor([0.0, 0.0, 0.0], device=d) + MASKED, "operand: " + FILL_FIRST),
        (lambda d: MASKED * Tensor([0.0, 0.0, 0.0], device=d), "operand: " + FILL_FIRST),
        (lambda d: lp.add(Tensor([0.0, 0.0, 0.0], device=d), MASKED), "operand: " + FILL_FIRST),
    ],
    ids=["Tensor", "Tensor_grad", "nothing_masked", "asarray", "as_tensor", "operator", "reflected", "add"],
)
def test_masked_arrays_are_refused(device, call, pattern):
    """Taking the data of a masked array would drop its mask: refused, with the fix."""
    with pytest.raises(TypeError, match=pattern):
        call(device)
    assert MASKED.mask.tolist() == [False, True, False]


def test_filled_masked_arrays_are_taken(device):
    t = Tensor(MASKED.filled(0.0), device=device)
    np.testing.assert_array_equal(t.numpy(), [1.0, 0.0, 3.0])


# ---- axes: a bool is not an axis ----------------------------------------------------------------

AXIS_CALLS = {
    "sum": lambda x, a: lp.sum(x, axis=a),
    "prod": lambda x, a: lp.prod(x, axis=a),
    "mean": lambda x, a: lp.mean(x, axis=a),
    "max": lambda x, a: lp.max(x, axis=a),
    "min": lambda x, a: lp.min(x, axis=a),
    "std": lambda x, a: lp.std(x, axis=a),
    "var": lambda x, a: lp.var(x, axis=a),
    "argmax": lambda x, a: lp.argmax(x, axis=a),
    "argmin": lambda x, a: lp.argmin(x, axis=a),
    "all": lambda x, a: lp.all(x, axis=a),
    "any": lambda x, a: lp.any(x, axis=a),
    "count_nonzero": lambda x, a: lp.count_nonzero(x, axis=a),
    "cumulative_sum": lambda x, a: lp.cumulative_sum(x, axis=a),
    "concat": lambda x, a: lp.concat([x, x], axis=a),
    "stack": lambda x, a: lp.stack([x, x], axis=a),
    "expand_dims": lambda x, a: lp.expand_dims(x, axis=a),
    "squeeze": lambda x, a: lp.squeeze(lp.reshape(x, (2, 1, 12)), axis=a),
    "flip": lambda x, a: lp.flip(x, axis=a),
    "roll": lambda x, a: lp.roll(x, 1, axis=a),
    "sort": lambda x, a: lp.sort(x, axis=a),
    "argsort": lambda x, a: lp.argsort(x, axis=a),
    "unstack": lambda x, a: lp.unstack(x, axis=a),
    "moveaxis": lambda x, a: lp.moveaxis(x, a, 0),
    "flatten": lambda x, a: x.flatten(a),
    "sum_method": lambda x, a: x.sum(a),
    "max_method": lambda x, a: x.max(axis=a),
}


MANY_AXES = ["sum", "prod", "mean", "max", "min", "std", "var", "all", "any", "count_nonzero", "squeeze", "flip"]


@pytest.mark.parametrize("axis", [True, False, np.bool_(True), (0, True)], ids=repr)
@pytest.mark.parametrize("name", list(AXIS_CALLS))
def test_a_bool_is_not_an_axis(device, name, axis):
    """``sum(axis=True)`` is not ``sum(axis=1)``: TypeError naming the function."""
    if isinstance(axis, tuple) and name not in MANY_AXES:
        axis = axis[1]  # the function takes one axis
    x = Tensor(np.arange(24.0).reshape(2, 3, 4), requires_grad=True, device=device)
    pattern = f"{name.split('_method')[0]}: ax[ie]s must be (an integer|integers).*, got (bool|True|False|np.True_)"
    with pytest.raises(TypeError, match=pattern):
        AXIS_CALLS[name](x, axis)
    assert x._grad is None


# ---- flatten -------------------------------------------------------------------------------------


@pytest.mark.parametrize("start, end", [(2, 0), (1, 0), (-1, 0), (2, -2)])
def test_flatten_start_after_end_is_a_value_error(device, start, end):
    """PyTorch: "flatten() has invalid args: start_dim cannot come after end_dim"."""
    x = Tensor(np.ones((2, 3, 4)), device=device)
    with pytest.raises(ValueError, match="flatten: start_dim cannot come after end_dim"):
        x.flatten(start, end)


@pytest.mark.parametrize("start, end, shape", [(0, -1, (24,)), (1, 1, (2, 3, 4)), (-2, 2, (2, 12)), (0, 1, (6, 4))])
def test_flatten_merges_the_axes_from_start_to_end(device, start, end, shape):
    assert Tensor(np.ones((2, 3, 4)), device=device).flatten(start, end).shape == shape


# ---- clip's gradients (values of torch.clamp, torch 2.13) ----------------------------------------


def test_clip_passes_the_gradient_at_its_bounds(device):
    """torch.clamp(x, -1, 1) at [-1, 0, 1]: gradient [1, 1, 1] (the bounds belong to the range)."""
    x = Tensor([-1.0, 0.0, 1.0, -1.5, 1.5], requires_grad=True, device=device)
    lp.clip(x, -1.0, 1.0).sum().backward()
    np.testing.assert_array_equal(host(device, x.grad), [1.0, 1.0, 1.0, 0.0, 0.0])


def test_clip_with_only_one_bound_passes_the_gradient_at_it(device):
    x = Tensor([-1.0, 0.0, 1.0], requires_grad=True, device=device)
    lp.clip(x, min=0.0).sum().backward()
    np.testing.assert_array_equal(host(device, x.grad), [0.0, 1.0, 1.0])
    x.grad = None
    lp.clip(x, max=0.0).sum().backward()
    np.testing.assert_array_equal(host(device, x.grad), [1.0, 1.0, 0.0])


# (low, high) -> gradients of x, low, high for x = [-2, -1, 0, 1, 2], from torch.clamp
CLAMP = {
    "inside": (-1.0, [1.0] * 5, [0, 1, 1, 1, 0], 1.0, [0, 0, 0, 0, 1]),
    "per_element": ([-3.0, -1.0, 0.5, 0.0, 1.0], 1.0, [1, 1, 0, 1, 0], [0, 0, 1, 0, 0], 1.0),
    "low_above_high": (1.0, -1.0, [0] * 5, 0.0, 5.0),
    "low_equals_high": (0.0, 0.0, [0, 0, 1, 0, 0], 0.0, 2.0),
}


@pytest.mark.parametrize("case", list(CLAMP))
def test_clip_sends_the_gradient_to_tensor_bounds_as_torch_clamp(device, case):
    low_value, high_value, gx, glow, ghigh = CLAMP[case]
    x = Tensor([-2.0, -1.0, 0.0, 1.0, 2.0], requires_grad=True, device=device)
    low = Tensor(low_value, requires_grad=True, device=device)
    high = Tensor(high_value, requires_grad=True, device=device)
    lp.clip(x, low, high).sum().backward()
    np.testing.assert_array_equal(host(device, x.grad), gx)
    np.testing.assert_array_equal(host(device, low.grad), glow)
    np.testing.assert_array_equal(host(device, high.grad), ghigh)


def test_clip_sends_the_gradient_to_a_bound_when_x_needs_none(device):
    x = Tensor([-2.0, 0.0, 2.0], device=device)
    low = Tensor(-1.0, requires_grad=True, device=device)
    (lp.clip(x, min=low) * 3.0).sum().backward()
    assert float(host(device, low.grad)) == 3.0


# ---- Tensor(data, *, requires_grad, name) --------------------------------------------------------


@pytest.mark.parametrize("args", [(2, 3), (2.0, True), ([1.0], "x"), ([1.0], False, "x")], ids=repr)
def test_requires_grad_and_name_are_keyword_only(device, args):
    with pytest.raises(TypeError, match="positional"):
        Tensor(*args, device=device)


def test_requires_grad_and_name_by_keyword(device):
    t = Tensor([1.0, 2.0], requires_grad=True, name="w", device=device)
    assert t.requires_grad and t.name == "w"


# ---- casts the fuzz test (test_fuzz.py) found -----------------------------------------------------


@pytest.mark.parametrize(
    "call, op",
    [
        (lambda d: Tensor([1 + 2j], dtype="float32", device=d), "Tensor"),
        (lambda d: Tensor(np.array([0j]), dtype="int8", device=d), "Tensor"),
        (lambda d: Tensor(Tensor([1j], device=d), dtype="float64"), "Tensor"),
        (lambda d: lp.asarray(np.array(1j), dtype="float64", device=d), "asarray"),
        (lambda d: lp.as_tensor(np.array(1j), dtype="float64", device=d), "Tensor"),
        (lambda d: Tensor([1j], device=d).astype("float32"), "astype"),
        (lambda d: lp.astype(Tensor([1j], device=d), lp.float64), "astype"),
        (lambda d: lp.nn.mse_loss(Tensor([0.0], device=d), np.array([1j])), "Tensor"),
    ],
    ids=["list", "ndarray", "tensor", "asarray", "as_tensor", "method", "function", "loss_target"],
)
def test_complex_to_real_casts_are_refused(device, call, op):
    """The array API standard forbids casting complex to real; NumPy would warn
    (a ComplexWarning) and drop the imaginary part."""
    with pytest.raises(TypeError, match=f"{op}: cannot cast complex.* the imaginary part would be lost"):
        call(device)


def test_non_finite_floats_to_an_integer_dtype(device):
    """Arrays: NumPy's value without a warning (PyTorch's too); Python NaN and inf:
    an error naming Tensor (PyTorch: "value cannot be converted to type int32")."""
    t = Tensor(np.array([np.inf, 1.0]), dtype="int32", device=device)
    assert t.dtype == lp.int32 and t.numpy()[1] == 1
    with pytest.raises(ValueError, match="Tensor: cannot convert float NaN to integer"):
        Tensor([1.0, math.nan], dtype="int32", device=device)
    with pytest.raises(OverflowError, match="Tensor: cannot convert float infinity to integer"):
        Tensor(math.inf, dtype="int64", device=device)


def test_an_empty_complex_index_is_an_index_error(device):
    t = Tensor([1.0, 2.0], requires_grad=True, device=device)
    with pytest.raises(IndexError, match="getitem: index arrays must hold integers or booleans, got dtype complex128"):
        t[np.array([], dtype=complex)]
    assert t[np.array([], dtype=float)].shape == (0,)


# ---- bool arguments, dtype=bool, reshape entries, searchsorted's sorter -----------------------------

FLAG_CALLS = {
    "sum": lambda x, v: lp.sum(x, keepdims=v),
    "prod": lambda x, v: lp.prod(x, keepdims=v),
    "mean": lambda x, v: lp.mean(x, keepdims=v),
    "max": lambda x, v: lp.max(x, keepdims=v),
    "var": lambda x, v: lp.var(x, keepdims=v),
    "argmax": lambda x, v: lp.argmax(x, axis=0, keepdims=v),
    "count_nonzero": lambda x, v: lp.count_nonzero(x, keepdims=v),
    "sort": lambda x, v: lp.sort(x, descending=v),
    "argsort": lambda x, v: lp.argsort(x, stable=v),
    "cumulative_sum": lambda x, v: lp.cumulative_sum(x, axis=0, include_initial=v),
    "reshape": lambda x, v: lp.reshape(x, (6,), copy=v),
}


@pytest.mark.parametrize("value", ["no", 1, 0.0], ids=repr)
@pytest.mark.parametrize("name", list(FLAG_CALLS))
def test_a_bool_argument_takes_only_a_bool(device, name, value):
    """keepdims="no" is not keepdims=True: TypeError naming the function and argument
    (None too, where None is not the argument's own "unset" value)."""
    x = Tensor(np.arange(6.0).reshape(2, 3), device=device)
    with pytest.raises(TypeError, match=f"{name}: [a-z_]+ must be a bool, got"):
        FLAG_CALLS[name](x, value)
    FLAG_CALLS[name](x, np.True_)  # NumPy's bool is a bool


def test_sum_and_prod_refuse_a_bool_dtype_on_every_device(device):
    x = Tensor([1.5, 2.0], device=device)
    for call in (lambda: lp.sum(x, dtype=lp.bool), lambda: lp.prod(x, dtype=lp.bool),
                 lambda: lp.cumulative_sum(x, dtype=lp.bool)):
        with pytest.raises(TypeError, match=r"(sum|prod|cumulative_sum): dtype=bool is not a numeric dtype"):
            call()


def test_reshape_refuses_bool_entries(device):
    x = lp.ones((2, 3), device=device)
    for call in (lambda: lp.reshape(x, (True, 6)), lambda: x.view(True, -1), lambda: x.reshape(2, True, 3)):
        with pytest.raises(TypeError, match="reshape: shape must be a tuple of integers"):
            call()


def test_mean_over_an_empty_axis_differentiates_without_a_warning(device):
    import warnings

    x = Tensor(np.zeros((0, 3)), device=device, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lp.mean(x, axis=0).sum().backward()
    assert x.grad.shape == (0, 3)


def test_searchsorted_checks_sorter_values_and_python_ints(device):
    x1 = lp.asarray([3.0, 1.0, 2.0], device=device)
    with pytest.raises(ValueError, match=r"searchsorted: sorter has indices outside \[0, 3\)"):
        lp.searchsorted(x1, lp.asarray([2.5], device=device), sorter=lp.asarray([5, 0, 1], device=device))
    with pytest.raises(ValueError, match=r"searchsorted: sorter has indices outside"):
        lp.searchsorted(x1, 2.5, sorter=lp.asarray([-1, 0, 1], device=device))
    small = lp.asarray([1, 2], dtype=lp.int8, device=device)
    with pytest.raises(OverflowError, match="searchsorted: the Python int 1000 is out of the range of dtype int8"):
        lp.searchsorted(small, 1000)
    with pytest.raises(OverflowError, match="where: the Python int 1000"):
        lp.where(lp.asarray([True, False], device=device), small, 1000)


def test_any_all_flags_and_sort_method_errors_name_themselves(device):
    x = Tensor(np.arange(6.0).reshape(2, 3), device=device)
    for name, call in (("any", lambda: lp.any(x, keepdims="no")), ("all", lambda: lp.all(x, keepdims=1)),
                       ("sort", lambda: x.sort(descending=1))):
        with pytest.raises(TypeError, match=f"^{name}: [a-z]+ must be a bool"):
            call()
    with pytest.raises(ValueError, match="^sort: x must have at least one axis"):
        Tensor(3.0, device=device).sort()
