"""In-place operations and versions (SPEC.md, "In-place operations and versions").

In-place operators and ``t[index] = value`` change the tensor itself; under
``no_grad`` they only change the data; with grad recording on, a leaf that
requires grad refuses them and a non-leaf records them in the graph. Every
change bumps the tensor's version counter, and a backward that needs an array
saved at an older version raises, naming the operation and both versions.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest
from helpers import other_device

import leanpass as lp
from leanpass import Tensor
from leanpass.autograd import increment_version
from leanpass.backends import get_backend

try:
    import torch
except ImportError:  # the gradients are checked by hand then
    torch = None


def host(array, device):
    return get_backend(device).to_host(array)


def values(t):
    return t.numpy().tolist()


# ---- every in-place operator changes the tensor itself -------------------------------------------

# operator -> (its in-place form, the plain form, left operand, right operand)
FLOAT_OPERATORS = {
    "+=": (operator.iadd, operator.add, [1.5, -2.0, 3.0], [0.5, 1.0, -1.0]),
    "-=": (operator.isub, operator.sub, [1.5, -2.0, 3.0], [0.5, 1.0, -1.0]),
    "*=": (operator.imul, operator.mul, [1.5, -2.0, 3.0], [0.5, 1.0, -1.0]),
    "/=": (operator.itruediv, operator.truediv, [1.5, -2.0, 3.0], [0.5, 4.0, -1.0]),
    "//=": (operator.ifloordiv, operator.floordiv, [7.5, -2.0, 3.0], [2.0, 4.0, -1.5]),
    "%=": (operator.imod, operator.mod, [7.5, -2.0, 3.0], [2.0, 4.0, -1.5]),
    "**=": (operator.ipow, operator.pow, [1.5, 2.0, 3.0], [0.5, 2.0, -1.0]),
}
INT_OPERATORS = {
    "&=": (operator.iand, operator.and_, [12, 10, 7], [10, 6, 1]),
    "|=": (operator.ior, operator.or_, [12, 10, 7], [10, 6, 1]),
    "^=": (operator.ixor, operator.xor, [12, 10, 7], [10, 6, 1]),
    "<<=": (operator.ilshift, operator.lshift, [12, 10, 7], [1, 2, 3]),
    ">>=": (operator.irshift, operator.rshift, [12, 10, 7], [1, 2, 3]),
    "+=": (operator.iadd, operator.add, [12, 10, 7], [1, 2, 3]),
    "*=": (operator.imul, operator.mul, [12, 10, 7], [1, 2, 3]),
    "//=": (operator.ifloordiv, operator.floordiv, [12, -10, 7], [5, 3, 2]),
    "%=": (operator.imod, operator.mod, [12, -10, 7], [5, 3, 2]),
}


def check_changed_in_place(t, apply, expected):
    """``apply(t)`` returns ``t`` itself, with its array object kept and its values changed."""
    ident, array, version = id(t), t.data, t._version
    view = t[0:2]
    result = apply(t)
    assert result is t and id(t) == ident
    assert t.data is array, "the tensor's array was replaced instead of changed"
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(view.numpy(), np.asarray(expected)[0:2], rtol=1e-12)  # views see the change
    assert t._version == version + 1 and view._version == t._version


@pytest.mark.parametrize("symbol", list(FLOAT_OPERATORS))
@pytest.mark.parametrize("other", ["tensor", "number", "numpy"])
def test_float_in_place_operators(device, symbol, other):
    inplace, plain, left, right = FLOAT_OPERATORS[symbol]
    expected = plain(np.array(left), np.array(right))
    t = lp.asarray(left, device=device)
    operand = {"tensor": lp.asarray(right, device=device), "number": right[1], "numpy": np.array(right)}[other]
    if other == "number":
        expected = plain(np.array(left), right[1])
    with np.errstate(all="ignore"):
        check_changed_in_place(t, lambda x: inplace(x, operand), expected)


@pytest.mark.parametrize("symbol", list(INT_OPERATORS))
@pytest.mark.parametrize("other", ["tensor", "number"])
def test_integer_in_place_operators(device, symbol, other):
    inplace, plain, left, right = INT_OPERATORS[symbol]
    t = lp.asarray(left, device=device)
    if other == "number":
        operand, expected = right[1], plain(np.array(left), right[1])
    else:
        operand, expected = lp.asarray(right, device=device), plain(np.array(left), np.array(right))
    check_changed_in_place(t, lambda x: inplace(x, operand), expected)
    assert t.dtype == lp.int64


def test_bool_in_place_operators(device):
    t = lp.asarray([True, False, True], device=device)
    check_changed_in_place(t, lambda x: operator.iand(x, lp.asarray([True, True, False], device=device)),
                           [True, False, False])
    check_changed_in_place(t, lambda x: operator.ior(x, False), [True, False, False])
    check_changed_in_place(t, lambda x: operator.ixor(x, True), [False, True, True])


def test_in_place_matmul(device):
    m = lp.asarray(np.eye(3) * 2.0, device=device)
    n = np.arange(9.0).reshape(3, 3)
    expected = (np.eye(3) * 2.0) @ n
    ident, array = id(m), m.data
    m @= lp.asarray(n, device=device)
    assert id(m) == ident and m.data is array and m._version == 1
    np.testing.assert_allclose(m.numpy(), expected)
    with pytest.raises(ValueError, match="@="):
        m @= lp.asarray(np.ones((3, 2)), device=device)
    np.testing.assert_allclose(m.numpy(), expected)
    assert m._version == 1


@pytest.mark.parametrize("kind", ["basic", "integer", "mask"])
def test_setitem_changes_the_tensor_itself(device, kind):
    t = lp.asarray(np.arange(12.0).reshape(3, 4), device=device)
    expected = np.arange(12.0).reshape(3, 4)
    key = {"basic": (slice(0, 2), 1), "integer": lp.asarray([2, 0], device=device),
           "mask": lp.asarray(expected > 6, device=device)}[kind]
    np_key = {"basic": (slice(0, 2), 1), "integer": np.array([2, 0]), "mask": expected > 6}[kind]
    expected[np_key] = -1.0

    def apply(x):
        x[key] = -1.0
        return x

    check_changed_in_place(t, apply, expected)


# ---- grad mode off: only the data changes ---------------------------------------------------------


def test_no_grad_update_of_a_parameter(device):
    w = Tensor([1.0, -2.0, 3.0], requires_grad=True, device=device)
    (w * w).sum().backward()
    ident, array = id(w), w.data
    with lp.no_grad():
        w -= 0.1 * w.grad
    assert id(w) == ident and w.data is array
    assert w.requires_grad and w.is_leaf and w._version == 1
    np.testing.assert_allclose(w.numpy(), [0.8, -1.6, 2.4])
    with lp.no_grad():
        w[0] = 5.0
        w *= 2
    assert w.requires_grad and w.is_leaf and w._version == 3
    np.testing.assert_allclose(w.numpy(), [10.0, -3.2, 4.8])
    (w * 1.0).sum().backward()  # the leaf still collects gradients
    np.testing.assert_allclose(host(w.grad, device), [2 * 1.0 + 1, 2 * -2.0 + 1, 2 * 3.0 + 1])


def test_leaf_that_requires_grad_refuses_in_place_changes(device):
    w = Tensor([1.0, 2.0], requires_grad=True, device=device)
    u = Tensor([3.0, 4.0], device=device)
    for change in (lambda: operator.iadd(w, 1.0), lambda: operator.imul(w, u), lambda: w.__setitem__(0, 7.0),
                   lambda: operator.ipow(w, 2)):
        with pytest.raises(RuntimeError, match="leaf"):
            change()
        assert values(w) == [1.0, 2.0] and w._version == 0 and w.is_leaf and w.requires_grad


# ---- grad mode on: a non-leaf records the change ----------------------------------------------------


def test_in_place_on_a_non_leaf_by_hand(device):
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    y = Tensor([0.5, -1.0, 2.0], requires_grad=True, device=device)
    h = x * 2.0
    z = h * 3.0  # an earlier consumer of the old value (saves nothing of h)
    h *= y  # h = 2 x y
    h += 1.0
    assert h._op == "+" and not h.is_leaf and h._version == 2
    (z + h).sum().backward()
    np.testing.assert_allclose(host(x.grad, device), 6.0 + 2.0 * np.array([0.5, -1.0, 2.0]))
    np.testing.assert_allclose(host(y.grad, device), 2.0 * np.array([1.0, 2.0, 3.0]))


def test_in_place_on_a_tensor_that_does_not_require_grad_with_one_that_does(device):
    buf = lp.zeros((3,), device=device, dtype=lp.float64)
    w = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    buf += w * w
    assert buf.requires_grad and not buf.is_leaf
    buf.sum().backward()
    np.testing.assert_allclose(host(w.grad, device), [2.0, 4.0, 6.0])


@pytest.mark.parametrize("kind", ["basic", "integer", "mask"])
def test_setitem_with_a_value_that_requires_grad(device, kind):
    """``h[idx] = f(a)``: ``a`` gets the gradient of the part written, the overwritten
    part of the old ``h`` gets none, and an earlier consumer of the old ``h`` keeps its own."""
    x = Tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True, device=device)
    a = Tensor([0.5, -1.5], requires_grad=True, device=device)
    h = x * 2.0
    before = h.sum() * 10.0  # consumer of the old h
    key = {"basic": (slice(None), 1), "integer": (lp.asarray([0, 1], device=device), 1),
           "mask": lp.asarray(np.array([[False, True, False], [False, True, False]]), device=device)}[kind]
    h[key] = a * a
    assert h._version == 1 and h._op == "setitem"
    weights = lp.asarray(np.arange(6.0).reshape(2, 3) + 1.0, device=device)
    (before + (h * weights).sum()).backward()
    w = np.arange(6.0).reshape(2, 3) + 1.0
    expected_x = 20.0 + 2.0 * w
    expected_x[:, 1] = 20.0  # overwritten: only the earlier consumer's gradient
    np.testing.assert_allclose(host(x.grad, device), expected_x)
    np.testing.assert_allclose(host(a.grad, device), 2.0 * np.array([0.5, -1.5]) * w[:, 1])


def test_augmented_assignment_of_an_element(device):
    """``h[0] += a``: Python reads ``h[0]``, adds in place, writes it back."""
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    a = Tensor(4.0, requires_grad=True, device=device)
    h = x * x
    h[0] += a * 3.0
    np.testing.assert_allclose(h.numpy(), [13.0, 4.0, 9.0])
    (h * lp.asarray([1.0, 2.0, 3.0], device=device)).sum().backward()
    np.testing.assert_allclose(host(x.grad, device), [2.0, 8.0, 18.0])
    np.testing.assert_allclose(host(a.grad, device), 3.0)


def test_in_place_with_the_tensor_itself_or_a_view_of_it(device):
    x = Tensor([2.0, 3.0, 4.0], requires_grad=True, device=device)
    h = x * 2.0
    h *= h  # 4 x**2
    h.sum().backward()
    np.testing.assert_allclose(h.numpy(), [16.0, 36.0, 64.0])
    np.testing.assert_allclose(host(x.grad, device), [16.0, 24.0, 32.0])
    x.grad = None
    h = x * 1.0
    h *= h[0:1]  # x * x0
    np.testing.assert_allclose(h.numpy(), [4.0, 6.0, 8.0])
    h.sum().backward()
    np.testing.assert_allclose(host(x.grad, device), [2.0 + 9.0, 2.0, 2.0])
    x.grad = None
    h = x * 1.0
    h += h
    h.sum().backward()
    np.testing.assert_allclose(host(x.grad, device), [2.0, 2.0, 2.0])


def _chain(lib, x, y, a, idx):
    h = x * y
    z = lib.exp(h) if lib is not None else None
    h = h * 1.0
    h += y
    h *= 2.0
    h -= a.sum()
    h[idx] = a * a
    h /= 1.5
    h **= 2
    return (h * z).sum() if z is not None else h


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed: the chain is compared with it")
def test_chain_of_in_place_changes_against_pytorch(device):
    rng = np.random.default_rng(0)
    xs, ys, as_ = rng.uniform(0.5, 1.5, (2, 3)), rng.uniform(0.5, 1.5, (3,)), rng.uniform(-1, 1, (2,))
    lx, ly, la = (Tensor(v, requires_grad=True, device=device) for v in (xs, ys, as_))
    tx, ty, ta = (torch.tensor(v, requires_grad=True) for v in (xs, ys, as_))
    loss = _chain(lp, lx, ly, la, (slice(None), 2))
    reference = _chain(torch, tx, ty, ta, (slice(None), 2))
    reference.backward()
    loss.backward()
    np.testing.assert_allclose(loss.item(), reference.item(), rtol=1e-12)
    for ours, theirs in ((lx, tx), (ly, ty), (la, ta)):
        np.testing.assert_allclose(host(ours.grad, device), theirs.grad.numpy(), rtol=1e-10)


# ---- versions ------------------------------------------------------------------------------------------


def test_version_counts_every_in_place_change(device):
    t = lp.asarray([1.0, 2.0, 3.0], device=device)
    assert t._version == 0
    u = t + 1.0  # out of place: no change
    assert t._version == 0 and u._version == 0
    t += 1.0
    t[0] = 3.0
    t[lp.asarray([1, 2], device=device)] = 0.0
    t[t > 1.0] = 5.0
    t *= u
    assert t._version == 5 and u._version == 0
    with lp.no_grad():
        t -= 1.0
    assert t._version == 6
    assert lp.Tensor([1.0], device=device)._version == 0


def test_backward_through_a_changed_output_raises(device):
    x = Tensor([0.5, 1.0], requires_grad=True, device=device)
    y = x.exp()
    y += 1.0
    with pytest.raises(RuntimeError, match=r"'exp'.*version 1.*version 0"):
        y.sum().backward()
    assert x.grad is not None and host(x.grad, device).tolist() == [0.0, 0.0]  # nothing was written


def test_backward_through_a_changed_saved_input_raises(device):
    x = Tensor([0.5, 1.0], requires_grad=True, device=device)
    h = x + 0.0
    y = h * h  # saves h
    h += 1.0
    with pytest.raises(RuntimeError, match=r"'\*'.*version 1.*version 0"):
        y.sum().backward()


def test_no_error_when_the_changed_array_was_not_saved(device):
    x = Tensor([0.5, 1.0], requires_grad=True, device=device)
    y = x + 1.0  # + saves nothing
    z = x * 2.0  # a number times x: saves nothing of x
    with lp.no_grad():
        x += 10.0
    (y + z).sum().backward()
    assert host(x.grad, device).tolist() == [3.0, 3.0]
    h = x * 1.0
    s = h + lp.asarray([1.0, 1.0], device=device)
    h *= 4.0
    x.grad = None
    (s.sum() + h.sum()).backward()
    assert host(x.grad, device).tolist() == [5.0, 5.0]


def test_optimizer_step_makes_a_retained_graph_stale(device):
    w = Tensor([1.0, -2.0], requires_grad=True, device=device)
    x = Tensor([3.0, 4.0], device=device)
    loss = ((w * x) ** 2).sum()
    opt = lp.optim.SGD([w], lr=0.01)
    loss.backward(retain_graph=True)
    opt.step()
    assert w._version == 1
    grad = host(w.grad, device).tolist()
    with pytest.raises(RuntimeError, match=r"'\*'.*version 1.*version 0"):
        loss.backward()
    assert host(w.grad, device).tolist() == grad  # nothing added


def test_views_share_versions(device):
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    t = x * 1.0
    v = t[0:2]
    assert v._version == t._version == 0
    y = v * v  # saves v
    t += 1.0
    assert v._version == 1
    with pytest.raises(RuntimeError, match="version 1.*version 0"):
        y.sum().backward()
    d = t.detach()
    with lp.no_grad():
        d *= 2.0
    assert t._version == 2 and values(t) == [4.0, 6.0, 8.0]


def test_data_escape_hatch_is_not_tracked(device):
    t = lp.asarray([1.0, 2.0], device=device)
    t.data[...] = get_backend(device).from_host(np.array([5.0, 6.0]))
    assert t._version == 0 and values(t) == [5.0, 6.0]
    increment_version(t)  # what code that writes into .data can call
    assert t._version == 1


# ---- what cannot be done in place: errors, with nothing changed --------------------------------------


def test_dtype_changing_in_place_raises_and_changes_nothing(device):
    t = lp.asarray([1, 2, 3], device=device)
    for change in (lambda: operator.iadd(t, 1.5), lambda: operator.itruediv(t, 2),
                   lambda: operator.iadd(t, lp.asarray([0.5, 0.5, 0.5], device=device))):
        with pytest.raises(TypeError, match="dtype"):
            change()
        assert values(t) == [1, 2, 3] and t.dtype == lp.int64 and t._version == 0
    # with recording on
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    b = lp.asarray([True, False, True], device=device)
    with pytest.raises(TypeError):
        b += x
    assert values(b) == [True, False, True] and b._version == 0


def test_same_kind_in_place_keeps_the_dtype(device):
    """``float32 += float64`` casts back to float32 (NumPy, PyTorch), on every device."""
    t = lp.asarray([1.0, 2.0], dtype=lp.float32, device=device)
    t += lp.asarray([0.5, 0.25], dtype=lp.float64, device=device)
    assert t.dtype == lp.float32 and values(t) == [1.5, 2.25] and t._version == 1
    x = Tensor([1.0, 2.0], requires_grad=True, device=device, dtype="float32")
    y = Tensor([3.0, 4.0], requires_grad=True, device=device)
    h = x * 1.0
    h *= y
    assert h.dtype == lp.float32
    h.sum().backward()
    assert x.grad.dtype == x.data.dtype and y.grad.dtype == y.data.dtype
    np.testing.assert_allclose(host(x.grad, device), [3.0, 4.0])
    np.testing.assert_allclose(host(y.grad, device), [1.0, 2.0])


def test_shape_changing_in_place_raises_and_changes_nothing(device):
    a = lp.asarray([1.0, 2.0], device=device)
    b = lp.asarray([[1.0, 2.0], [3.0, 4.0]], device=device)
    with pytest.raises(ValueError, match=r"\(2,\)"):
        a += b
    assert values(a) == [1.0, 2.0] and a._version == 0
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    h = x * 1.0
    with pytest.raises(ValueError, match=r"\(2,\)"):
        h *= b
    assert values(h) == [1.0, 2.0] and h._version == 0 and h._op == "*"
    h.sum().backward()  # the graph is intact
    assert host(x.grad, device).tolist() == [1.0, 1.0]


def test_in_place_with_another_device_raises(device):
    other = other_device(device)
    a = lp.asarray([1.0, 2.0], device=device)
    with pytest.raises(ValueError, match=other):
        a += lp.asarray([1.0, 2.0], device=other)
    assert values(a) == [1.0, 2.0] and a._version == 0


# ---- in-place changes through views (basic-index slices share memory) --------------------------


def test_changing_a_slice_in_place_changes_the_base_and_its_gradient(device):
    a = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    h = a * 1.0
    v = h[0:2]
    v *= 3.0
    np.testing.assert_allclose(h.numpy(), [3.0, 6.0, 3.0])
    h.sum().backward()
    np.testing.assert_allclose(host(a.grad, device), [3.0, 3.0, 1.0])  # PyTorch: [3, 3, 1]


def test_a_view_made_before_its_base_changed_follows_the_change(device):
    a = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    h = a * 1.0
    v = h[0:2]
    h *= 3.0
    np.testing.assert_allclose(v.numpy(), [3.0, 6.0])
    v.sum().backward()
    np.testing.assert_allclose(host(a.grad, device), [3.0, 3.0, 0.0])  # PyTorch: [3, 3, 0]


def test_nodes_made_before_a_change_keep_the_view_they_saw(device):
    a = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    h = a * 1.0
    v = h[0:2]
    before = v.sum() * 1.0  # uses v before the change: gradient 1 per element
    h *= 2.0
    (before + v.sum()).backward()  # v after the change is 2 a: gradient 2
    np.testing.assert_allclose(host(a.grad, device), [3.0, 3.0, 0.0])


def test_slices_of_slices_and_newaxis_views(device):
    a = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    h = a * 1.0
    w = h[0:2][1:]
    w *= 5.0
    (h * 1.0).sum().backward()
    np.testing.assert_allclose(host(a.grad, device), [1.0, 5.0, 1.0])
    a.grad = None
    h = a * 1.0
    u = h[None, 1:]
    u *= 2.0
    h.sum().backward()
    np.testing.assert_allclose(host(a.grad, device), [1.0, 2.0, 2.0])


def test_augmented_assignment_to_an_element(device):
    a = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    b = Tensor([5.0], requires_grad=True, device=device)
    h = a * 1.0
    h[0] += b[0]
    (h * h).sum().backward()
    np.testing.assert_allclose(host(a.grad, device), [12.0, 4.0, 6.0])
    np.testing.assert_allclose(host(b.grad, device), [12.0])


def test_views_that_cannot_follow_refuse_a_recorded_change(device):
    a = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True, device=device)
    h = a * 1.0
    r = h.reshape(2, 2)
    before = h.numpy()
    with pytest.raises(RuntimeError, match="view"):
        r += a.reshape(2, 2)
    np.testing.assert_array_equal(h.numpy(), before)
    leaf_view = a[0:2]
    with pytest.raises(RuntimeError, match="leaf"):
        leaf_view *= 2.0
    np.testing.assert_array_equal(a.numpy(), [1.0, 2.0, 3.0, 4.0])
    with lp.no_grad():  # outside grad mode the memory simply changes
        leaf_view *= 2.0
    np.testing.assert_array_equal(a.numpy(), [2.0, 4.0, 3.0, 4.0])


def test_an_element_read_with_integers_is_a_view_of_its_tensor(device):
    """``t[0, 1]`` shares ``t``'s memory (NumPy alone would give a copy for integers
    only): it follows a change of ``t``, with a gradient that matches its value."""
    a = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True, device=device)
    h = a * 1.0
    v = h[0, 1]
    h *= 3.0
    assert v.item() == 6.0  # PyTorch: 6
    v.backward()
    np.testing.assert_allclose(host(a.grad, device), [[0.0, 3.0], [0.0, 0.0]])
    t = lp.asarray([[1.0, 2.0], [3.0, 4.0]], device=device)
    e = t[1, 0]
    t += 1.0
    assert e.item() == 4.0 and e._version == t._version == 1
    with lp.no_grad():
        e += 10.0  # changes t too
    assert values(t) == [[2.0, 3.0], [14.0, 5.0]]
    s = lp.asarray(5.0, device=device)
    whole = s[()]
    s *= 2.0
    assert whole.item() == 10.0


def test_a_view_made_in_no_grad_mode_stays_out_of_the_graph(device):
    """A view made under ``no_grad`` does not join the graph when its base is later
    changed in place with recording on (PyTorch refuses to use such a view)."""
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    h = x * 1.0
    with lp.no_grad():
        v = h[0:2]
    h *= 2.0
    assert not v.requires_grad and v.is_leaf and values(v) == [2.0, 4.0]
    # a view made with grad mode on, of a tensor that did not require grad, joins it
    buf = lp.zeros((3,), dtype=lp.float64, device=device)
    b = buf[0:2]
    buf += x * x
    assert b.requires_grad
    b.sum().backward()
    np.testing.assert_allclose(host(x.grad, device), [2.0, 4.0, 0.0])


def test_a_later_change_after_an_in_place_change_with_itself(device):
    """``h *= h[0:1]`` and ``h **= y`` read copies of ``h`` (and their own result):
    changing ``h`` again later is no reason to refuse the backward."""
    x = Tensor([2.0, 3.0, 4.0], requires_grad=True, device=device)
    y = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    h = x * 1.0
    h *= h[0:1]  # x * x0
    h += 1.0
    h.sum().backward()
    np.testing.assert_allclose(host(x.grad, device), [2.0 + 9.0, 2.0, 2.0])
    x.grad = None
    h = x * 1.0
    h **= y
    h *= 2.0
    h.sum().backward()
    np.testing.assert_allclose(host(x.grad, device), 2.0 * np.array([1.0, 2.0 * 3.0, 3.0 * 16.0]))
    np.testing.assert_allclose(host(y.grad, device), 2.0 * np.array([2.0, 9.0, 64.0]) * np.log([2.0, 3.0, 4.0]))
    h = x * 1.0
    z = h * h  # saves h: a later change of h must still raise
    h **= y
    h += 1.0
    with pytest.raises(RuntimeError, match=r"'\*'.*version"):
        z.sum().backward()


def test_real_and_imag_share_no_memory_that_versions_do_not_see(device):
    """``real``/``imag`` results own their memory: NumPy would give the input itself
    (real of a real array) or a view of a complex one, so an in-place change of one
    would change the other unseen and a saved array would give a wrong gradient."""
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    h = x * 1.0
    z = h * h  # saves h
    r = lp.real(h)
    r += 1.0
    assert values(h) == [1.0, 2.0]
    z.sum().backward()
    np.testing.assert_allclose(host(x.grad, device), [2.0, 4.0])
    for part, expected in ((lp.real, [1.0, 3.0]), (lp.imag, [2.0, 4.0])):
        x.grad = None
        c = lp.asarray([1 + 2j, 3 + 4j], device=device)
        y = x * part(c)  # saves part(c)
        c *= 10.0
        y.sum().backward()
        np.testing.assert_allclose(host(x.grad, device), expected)


# ---- found by reviews: masks reused, integer-index results, views made in no_grad ----------


def test_a_mask_changed_after_indexing_does_not_change_the_gradient(device):
    """Backward keeps the mask it was given: changing the caller's mask afterwards
    (reusing it) must not move the gradient (it did: [1, 10, 100, 0])."""
    x = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True, device=device)
    mask = x.detach() > 1.5
    y = x[mask]
    mask[...] = x.detach() < 3.5
    (y * Tensor([1.0, 10.0, 100.0], device=device)).sum().backward()
    np.testing.assert_array_equal(host(x.grad, device), [0.0, 1.0, 10.0, 100.0])
    x.grad = None
    h = x * 1.0
    callers = np.array([True, False, False, False]) if device == "cpu" else lp.asarray([True, False, False, False],
                                                                                       device=device)
    h[callers] = 0.0
    callers[...] = True
    (h * 1000.0).sum().backward()
    np.testing.assert_array_equal(host(x.grad, device), [0.0, 1000.0, 1000.0, 1000.0])
    if device == "cpu":  # a buffer that shares the caller's memory (here a memoryview) is copied too
        x.grad = None
        m = np.array([True, True, False, False])
        y = x[memoryview(m)]
        m[:] = [False, False, True, True]
        y.sum().backward()
        np.testing.assert_array_equal(host(x.grad, device), [1.0, 1.0, 0.0, 0.0])


def test_the_result_of_a_2d_integer_index_changes_in_place(device):
    """W[tokens] with 2-D tokens (an embedding lookup) is a new array: it can be
    changed in place like any result (it raised as a 'view'). PyTorch's gradient."""
    w = Tensor(np.arange(12.0).reshape(4, 3), requires_grad=True, device=device)
    e = w[lp.asarray([[0, 2], [3, 3]], device=device)]
    e += Tensor([[0.5, 0.5, 0.5], [1.0, 1.0, 1.0]], device=device)
    (e * e).sum().backward()
    np.testing.assert_array_equal(host(w.grad, device), [[1, 3, 5], [0, 0, 0], [14, 16, 18], [39, 43, 47]])
    np.testing.assert_array_equal(w.numpy(), np.arange(12.0).reshape(4, 3))


def test_a_view_made_in_no_grad_mode_refuses_changes_with_grad_mode_on(device):
    """As PyTorch: the graph of the view's base cannot record such a change, and its
    gradients went silently wrong ([0, 0, 100] for [0, 10, 100]). Nothing changes."""
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    w = Tensor(5.0, requires_grad=True, device=device)
    h = x * 1.0
    with lp.no_grad():
        head = h[:2]
    version = h._version
    for change in (lambda: head.__setitem__(0, w), lambda: head.__setitem__(0, 7.0), lambda: head.__iadd__(1.0)):
        with pytest.raises(RuntimeError, match="view made in no_grad mode"):
            change()
        np.testing.assert_array_equal(h.numpy(), [1.0, 2.0, 3.0])
        assert h._version == version
    with lp.no_grad():
        head[0] = 7.0  # in no_grad mode, as an optimizer's step: allowed
    np.testing.assert_array_equal(h.numpy(), [7.0, 2.0, 3.0])
    h2 = x * 1.0
    ok = h2[:2]  # made with grad mode on: its change is recorded
    ok[0] = w
    (h2 * Tensor([1.0, 10.0, 100.0], device=device)).sum().backward()
    np.testing.assert_array_equal(host(x.grad, device), [0.0, 10.0, 100.0])
    assert float(host(w.grad, device)) == 1.0


def test_a_reshape_that_copies_is_not_a_view(device):
    """NumPy (and array_api_strict) copy a reshape of a transposed tensor: the result is
    a tensor of its own, not made anew from its base after the base changes (that gave
    the gradient of values it does not hold), and it has its own version counter."""
    a = Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True, device=device)
    h = lp.reshape(a, (2, 2)) * 1.0
    r = lp.reshape(h.T, (4,))
    h[0, 1] = a[0] * 10.0  # a recorded change of h
    assert r.tolist() == [1.0, 3.0, 2.0, 4.0]
    (r * lp.asarray([0.0, 1.0, 2.0, 3.0], device=device)).sum().backward()
    np.testing.assert_array_equal(get_backend(device).to_host(a.grad), [0.0, 2.0, 1.0, 3.0])
    b = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True, device=device)
    g = b * 1.0
    copied = lp.reshape(g.T, (4,))
    y = (g * g).sum()
    with lp.no_grad():
        copied += 1.0  # changes the copy only
    y.backward()
    np.testing.assert_array_equal(get_backend(device).to_host(b.grad), 2 * np.array([[1.0, 2.0], [3.0, 4.0]]))
    view = lp.reshape(g, (4,))  # a true view still follows its base
    with lp.no_grad():
        g[0, 0] = 7.0
    assert view.tolist()[0] == 7.0


def test_a_change_through_nested_views_counts_once(device):
    """One ``+=`` of a slice of a slice is one change of the memory (PyTorch: version
    1), with or without a graph; the gradient is still right."""
    x = Tensor(np.arange(6.0), device=device, requires_grad=True)
    h = x * 1
    w = h[1:][1:][1:]
    w += 1
    assert h._version == w._version == 1
    h.sum().backward()
    assert lp.asarray(x.grad).numpy().tolist() == [1.0] * 6
    with lp.no_grad():
        a = lp.asarray(np.arange(6.0), device=device)
        b = a[1:][1:][1:]
        b += 1
    assert a._version == 1


def test_setitem_value_gradient_is_its_own_writable_array(device):
    """The gradient a written value gets (a basic index of the incoming gradient) is
    a new array: clipping it in place, or ``v.grad *= 0.5``, works."""
    x = Tensor(np.ones(4), device=device, requires_grad=True)
    v = Tensor([2.0, 3.0], device=device, requires_grad=True)
    h = x * 1
    h[0:2] = v
    h.sum().backward()
    v.grad *= 0.5
    assert lp.asarray(v.grad).numpy().tolist() == [0.5, 0.5]
    lp.nn.utils.clip_grad_norm_([x, v], 0.1)


def test_setitem_drops_leading_axes_of_one_and_names_itself(device):
    h = lp.zeros(3, device=device)
    h[...] = lp.asarray([[7.0, 8.0, 9.0]], device=device)
    assert h.numpy().tolist() == [7.0, 8.0, 9.0]
    with pytest.raises(ValueError, match="does not broadcast"):
        h[...] = lp.asarray([[7.0, 8.0, 9.0], [1.0, 2.0, 3.0]], device=device)
    with pytest.raises(TypeError, match=r"setitem: cannot write a value of type NoneType into the tensor of shape"):
        h[0:2] = None
    assert h.numpy().tolist() == [7.0, 8.0, 9.0]


def test_a_custom_op_view_refuses_a_recorded_change_of_its_base(device):
    """A custom op whose result is a view of its input cannot be made anew after its
    base changes: the change raises RuntimeError up front, and nothing changes."""
    from leanpass.tensor import apply

    def first_row(be, a):
        shape, dtype = a.shape, a.dtype

        def backward(g):
            return (be.xp.concat([be.xp.reshape(g, (1, -1)), be.zeros((shape[0] - 1, shape[1]), dtype)]),)

        return a[0, ...], backward

    x = Tensor([[1.0, 2.0], [3.0, 4.0]], device=device, requires_grad=True)
    h = x * 2
    r = apply(first_row, h)
    before = (h.numpy().tolist(), h._version)
    with pytest.raises(RuntimeError, match="setitem: .* is a view of this tensor's memory made by 'first_row'"):
        h[1] = 0.0
    assert (h.numpy().tolist(), h._version) == before
    r.sum().backward()
    assert lp.asarray(x.grad).numpy().tolist() == [[2.0, 2.0], [0.0, 0.0]]


def _returns_within(seconds, fn):
    """``fn()``'s result, or a failure if it runs longer than ``seconds`` (a backward
    through a loop in the graph never returns)."""
    import threading

    result = []
    worker = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "backward did not return: the graph has a loop"
    return result[0]


@pytest.mark.parametrize("change", ["v += h", "v.copy_(h) reversed", "w += u (two levels)", "v[:] = h * 2"])
def test_a_view_changed_with_its_own_base_differentiates(device, change):
    """``v = h[:]; v += h``: the base enters the graph as its state before the change
    (it looped forever: h became an input of the node h itself became)."""
    torch = pytest.importorskip("torch")
    weights = [1.0, 2.0, 3.0]

    def run(lib, x, w):
        h = x * 1.0
        if change == "v += h":
            v = h[:]
            v += h
        elif change == "v.copy_(h) reversed":
            v = h.flip(0) if lib is torch else h[::-1]
            if lib is torch:  # PyTorch's flip is a copy: write the reversed values as NumPy's overlap rule does
                h = h.flip(0)
            else:
                v.copy_(h)
        elif change == "w += u (two levels)":
            u = h[:]
            w2 = u[:]
            w2 += u
        else:
            v = h[:]
            v[:] = h * 2
        loss = (h * w).sum()
        return h, loss

    x = Tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    h, loss = run(lp, x, lp.asarray(weights, device=device))
    _returns_within(30, loss.backward)
    tx = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    th, tloss = run(torch, tx, torch.tensor(weights, dtype=torch.float64))
    tloss.backward()
    np.testing.assert_allclose(h.numpy(), th.detach().numpy())
    np.testing.assert_allclose(host(x.grad, device), tx.grad.numpy())
    y = Tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    _, loss = run(lp, y, lp.asarray(weights, device=device))
    (grad,) = _returns_within(30, lambda: lp.autograd.grad(loss, [y]))
    np.testing.assert_allclose(grad.numpy(), tx.grad.numpy())


def test_python_numbers_write_and_combine_in_place_alike_on_every_device(device):
    """array_api_strict refuses a Python number of another kind; LeanPass casts it as
    NumPy and PyTorch do, on every device (``i += True``, ``i[...] = 2.7``)."""
    i = lp.asarray([7, -3], device=device)
    i += True
    i <<= True
    assert i.tolist() == [16, -4]
    f = lp.asarray([1.5], device=device)
    f += True
    assert f.tolist() == [2.5]
    cases = [("int64", 2.7, [2, 2]), ("int64", -2.7, [-2, -2]), ("int64", True, [1, 1]), ("bool", 2, [True, True]),
             ("bool", 0.0, [False, False]), ("float32", True, [1.0, 1.0]), ("complex64", 2, [2 + 0j, 2 + 0j])]
    for dtype, value, expected in cases:
        t = lp.zeros(2, dtype=dtype, device=device)
        t[...] = value
        assert t.tolist() == expected and t.dtype == dtype
    t = lp.zeros(2, dtype="uint8", device=device)
    for value, error, text in ((1j, TypeError, "a complex number cannot be written"),
                               (-1, OverflowError, "the Python int -1 is out of the range of dtype uint8"),
                               (float("nan"), ValueError, "nan cannot be written")):
        with pytest.raises(error, match=f"setitem: {text}"):
            t[...] = value
    assert t.tolist() == [0, 0] and t._version == 0


def test_a_number_of_no_standard_kind_is_refused():
    import decimal

    x = Tensor([1.0, 2.0])
    with pytest.raises(TypeError, match="unsupported operand"):
        x + decimal.Decimal("2")
    y = x * 1
    with pytest.raises(TypeError):
        y **= decimal.Decimal("2")
    assert (lp.asarray([1.0, 4.0]) ** 1j).dtype == lp.complex128  # a complex exponent: a complex result
