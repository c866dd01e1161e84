"""The backward engine: depth, memory, laziness, retained gradients and graphs,
accumulation, diamonds, grad mode per thread, zero_grad_all, gradcheck errors."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import leanpass
from leanpass import GradcheckError, Tensor, enable_grad, gradcheck, is_grad_enabled, no_grad
from leanpass.backends import get_backend


def host(t_or_array, device=None):
    if isinstance(t_or_array, Tensor):
        return t_or_array.numpy()
    return get_backend(device).to_host(t_or_array)


def test_backward_through_a_100000_op_chain(device):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    y = x
    for _ in range(50_000):
        y = y * 1.0
        y = y + 0.0
    y.sum().backward()
    np.testing.assert_array_equal(host(x.grad, device), [1.0, 1.0])
    del y  # freeing a 100,000-deep graph must not overflow the C stack either


def test_dropped_graph_is_freed_without_the_garbage_collector(device):
    gc.collect()
    gc.disable()
    try:
        x = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
        hidden = (x * 2.0).exp()
        probe = weakref.ref(hidden)
        loss = (hidden * x).sum()
        del hidden
        assert probe() is not None  # still held by the graph
        loss.backward()
        del loss
        assert probe() is None  # freed by reference counting alone
        # and without backward:
        hidden = x.tanh()
        probe = weakref.ref(hidden)
        loss = hidden.sum()
        del hidden, loss
        assert probe() is None
    finally:
        gc.enable()


def test_backward_function_holds_no_tensor(device):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    y = x * x
    closure = y._backward.__closure__ or ()
    assert not any(isinstance(cell.cell_contents, Tensor) for cell in closure)


def test_gradients_are_allocated_lazily(device):
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    y = (x * 2.0).sum()
    assert x._grad is None and y._grad is None  # nothing allocated at forward time
    np.testing.assert_array_equal(host(x.grad, device), [0.0, 0.0, 0.0])  # zeros on read
    assert x._grad is not None
    assert Tensor([1.0], device=device).grad is None


def test_non_leaf_gradient_only_when_retained(device):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    h = x * 3.0
    k = x * 4.0
    h.retain_grad()
    (h * k).sum().backward()
    np.testing.assert_array_equal(host(h.grad, device), [4.0, 8.0])
    assert k.grad is None
    np.testing.assert_array_equal(host(x.grad, device), [24.0, 48.0])


def test_retained_gradient_is_its_own_array(device):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    h = x + 0.0
    h.retain_grad()
    h.sum().backward()
    assert h.grad is not x.grad


def test_retain_graph_and_the_released_graph_error(device):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_array_equal(host(x.grad, device), [4.0, 8.0])
    before = host(x.grad, device)
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()
    np.testing.assert_array_equal(host(x.grad, device), before)
    assert y._prev  # links stay, so zero_grad_all still reaches the leaves
    y.zero_grad_all()
    np.testing.assert_array_equal(host(x.grad, device), [0.0, 0.0])


def test_released_graph_shared_by_a_later_graph(device):
    x = Tensor([1.0], requires_grad=True, device=device)
    h = x * 2.0
    (h * 3.0).sum().backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        (h * 4.0).sum().backward()


def test_gradients_accumulate_across_backward_calls(device):
    x = Tensor([1.0, -1.0], requires_grad=True, device=device)
    for _ in range(3):
        (x * 5.0).sum().backward()
    np.testing.assert_array_equal(host(x.grad, device), [15.0, 15.0])


def test_diamond_node_used_twice(device):
    x = Tensor([2.0], requires_grad=True, device=device)
    a = x * 3.0  # used by both branches
    b = a.exp()
    c = a * a
    y = (b + c).sum()
    y.backward()
    expected = 3.0 * np.exp(6.0) + 2 * 6.0 * 3.0
    np.testing.assert_allclose(host(x.grad, device), [expected], rtol=1e-14)


def test_deep_diamond_chain(device):
    """A chain of diamonds: each node feeds two branches that meet again."""
    x = Tensor([0.5], requires_grad=True, device=device)
    y = x
    for _ in range(30):
        y = y * 0.5 + y * 0.5  # derivative 1 at every level
    y.backward()
    np.testing.assert_allclose(host(x.grad, device), [1.0])


def test_leaf_gradients_do_not_share_memory(device):
    a = Tensor([1.0, 2.0], requires_grad=True, device=device)
    b = Tensor([3.0, 4.0], requires_grad=True, device=device)
    (a + b).sum().backward()
    a.grad[0] = 100.0
    assert host(b.grad, device)[0] == 1.0


def test_backward_leaves_user_gradient_untouched(device):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    g = np.array([1.0, 1.0])
    x.backward(g)
    x.backward(g)
    np.testing.assert_array_equal(g, [1.0, 1.0])
    np.testing.assert_array_equal(host(x.grad, device), [2.0, 2.0])


def test_backward_gradient_as_tensor_from_another_device(device):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    y = x * 2.0
    y.backward(Tensor([1.0, 10.0], device="strict:1"))
    np.testing.assert_array_equal(host(x.grad, device), [2.0, 20.0])


def test_no_grad_context_and_decorator(device):
    x = Tensor([1.0], requires_grad=True, device=device)
    with no_grad():
        assert not is_grad_enabled()
        y = x * 2.0
        with enable_grad():
            assert is_grad_enabled()
            z = x * 2.0
        assert not is_grad_enabled()
    assert is_grad_enabled()
    assert not y.requires_grad and y._prev == ()
    assert z.requires_grad

    @no_grad()
    def f(t):
        return t * 3.0, is_grad_enabled()

    @no_grad
    def g(t):
        return t * 3.0

    out, enabled = f(x)
    assert not enabled and not out.requires_grad
    assert not g(x).requires_grad
    assert is_grad_enabled()


def test_no_grad_restores_state_after_an_exception():
    with pytest.raises(ZeroDivisionError):
        with no_grad():
            raise ZeroDivisionError
    assert is_grad_enabled()


def test_grad_mode_is_per_thread():
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def worker():
        with no_grad():
            inside.set()
            release.wait(5)
            seen["worker"] = is_grad_enabled()

    thread = threading.Thread(target=worker)
    thread.start()
    inside.wait(5)
    seen["main"] = is_grad_enabled()
    x = Tensor([1.0], requires_grad=True)
    seen["main_records"] = (x * 2.0).requires_grad
    release.set()
    thread.join()
    assert seen == {"worker": False, "main": True, "main_records": True}


def test_zero_grad_all_resets_the_whole_graph(device):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    w = Tensor([3.0, 4.0], requires_grad=True, device=device)
    h = x * w
    h.retain_grad()
    y = h.sum() + 1.0
    y.backward()
    assert host(w.grad, device).tolist() == [1.0, 2.0]
    y.zero_grad_all()
    for t in (x, w, h):
        np.testing.assert_array_equal(host(t.grad, device), [0.0, 0.0])


def test_backward_on_a_tensor_without_grad():
    with pytest.raises(RuntimeError, match="does not require grad"):
        Tensor([1.0]).backward()


def test_backward_default_gradient_is_ones_for_non_scalars(device):
    x = Tensor([[1.0, 2.0]], requires_grad=True, device=device)
    (x * 3.0).backward()
    np.testing.assert_array_equal(host(x.grad, device), [[3.0, 3.0]])


def test_detach_cuts_the_graph(device):
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    y = (x * 2.0).detach()
    assert y.is_leaf and not y.requires_grad
    z = (y * x).sum()
    z.backward()
    np.testing.assert_array_equal(host(x.grad, device), [2.0, 4.0])


def test_gradcheck_names_input_index_and_values(device):
    from leanpass import ops
    from leanpass.tensor import apply

    def wrong_square(be, a):
        def backward(g):
            return (g * 3.0 * a,)  # should be 2 * a

        return a * a, backward

    x = Tensor([1.0, 2.0], requires_grad=True, name="x", device=device)
    with pytest.raises(GradcheckError) as info:
        gradcheck(lambda t: apply(wrong_square, t, op="square"), (x,))
    err = info.value
    assert err.input == 0 and err.index == (0,)
    # the output is reduced with fixed weights w, so analytic = 3 w0 and numeric = 2 w0
    assert err.analytic / err.numeric == pytest.approx(1.5)
    message = str(err)
    assert "input 0 (x)" in message and "(0,)" in message
    assert repr(err.analytic) in message and repr(err.numeric) in message
    assert gradcheck(lambda t: apply(ops.pow_scalar, t, p=2), (x,))


def test_gradcheck_needs_an_input_that_requires_grad():
    with pytest.raises(ValueError, match="requires_grad"):
        gradcheck(lambda t: t * 2.0, (Tensor([1.0]),))


def test_gradcheck_checks_float32_inputs_in_float64(device):
    x = Tensor(np.array([0.3, -0.7], dtype=np.float32), requires_grad=True, device=device)
    assert gradcheck(lambda t: (t * t).tanh(), (x,))
    assert x.grad.dtype == get_backend(device).dtype("float32")  # the input itself is untouched
    assert not np.any(host(x.grad, device))


def test_manual_seed_reproducible_on_every_backend(device):
    backend = get_backend(device)
    leanpass.manual_seed(7)
    a = backend.to_host(backend.init_uniform((3,), -1.0, 1.0, "float64"))
    leanpass.manual_seed(7)
    b = get_backend("cpu").init_uniform((3,), -1.0, 1.0, "float64")
    np.testing.assert_array_equal(a, b)


def test_a_custom_operation_that_passes_its_gradient_on_shares_no_grad(device):
    from leanpass.tensor import apply

    def scaled_add(be, a, b, alpha):
        def backward(g):
            return g, g * alpha  # the incoming gradient itself, as "+" does

        return a + alpha * b, backward

    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    y = Tensor([3.0, 4.0], requires_grad=True, device=device)
    c = Tensor([1.0, 1.0], requires_grad=True, device=device)
    (apply(scaled_add, x, c, alpha=0.5) + apply(scaled_add, y, c, alpha=0.5)).sum().backward()
    assert x.grad is not y.grad
    x.grad[0] = 7.0  # writeable, and y's gradient does not change
    assert host(y.grad, device).tolist() == [1.0, 1.0]


def test_apply_keeps_no_custom_function_alive(device):
    """A function made anew at each call (a closure) is freed with its result: nothing
    caches it, so a training loop that calls ``apply`` this way does not grow."""
    from leanpass.tensor import apply

    def layer(x, scale):
        def scaled(be, a):
            return a * scale, lambda g: (g * scale,)

        return apply(scaled, x), weakref.ref(scaled)

    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    y, probe = layer(x, 3.0)
    y.sum().backward()
    np.testing.assert_array_equal(host(x.grad, device), [3.0, 3.0])
    assert y._op == "scaled"
    del y
    gc.collect()
    assert probe() is None
