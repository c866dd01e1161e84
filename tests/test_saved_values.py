"""Saved values (PyTorch's ``SavedVariable`` rule): a backward, first-order or
``create_graph``, reads what its node saved at the version it saw. A value changed
since -- by a recorded in-place op, ``+=`` under ``no_grad``, an optimizer step or
``.data = ...`` -- either is not read (and the derivative is right) or makes
backward raise ``RuntimeError`` naming the operation. Never a silently wrong
derivative: a ``create_graph`` backward never re-runs a forward on changed values.

Each case is checked against the closed form on every device, and against PyTorch
where it is installed (the first and second derivatives torch computes)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import host

import leanpass as lp
from leanpass import Tensor

A = np.array([0.5, 1.5, -0.25])


def param(device, values=A):
    return Tensor(values, requires_grad=True, device=device, dtype="float64")


def changes(t, how: str) -> None:
    """Change ``t`` (a leaf) in place without recording it, one of the ways a user does."""
    if how == "no_grad":
        with lp.no_grad():
            t += 1.0
    elif how == "optimizer":
        t.grad = -np.ones(t.shape)
        lp.optim.SGD([t], lr=1.0).step()
    elif how == "data":
        t.data = t.data + 1.0
    else:
        raise AssertionError(how)


# f, its derivative at x (where the node saved only its output), the same function in torch
SAVES_OUTPUT = {
    "exp": (lambda x: x.exp(), lambda x: np.exp(x), lambda x: x.exp()),
    "tanh": (lambda x: x.tanh(), lambda x: 1 - np.tanh(x) ** 2, lambda x: x.tanh()),
    "sigmoid": (lambda x: x.sigmoid(), lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2, lambda x: x.sigmoid()),
    "sqrt": (lambda x: (x + 1.0).sqrt(), lambda x: 0.5 / np.sqrt(x + 1), lambda x: (x + 1.0).sqrt()),
    "expm1": (lambda x: lp.expm1(x), lambda x: np.exp(x), lambda x: x.expm1()),
}


@pytest.mark.parametrize("how", ["no_grad", "optimizer", "data"])
@pytest.mark.parametrize("name", sorted(SAVES_OUTPUT))
def test_create_graph_after_an_unrecorded_change_uses_the_saved_output(device, name, how):
    """The issue's silent wrong result: W.exp(), an optimizer step, then grad with
    create_graph=True gave exp(W_new) instead of exp(W_old)."""
    f, derivative, _ = SAVES_OUTPUT[name]
    w = param(device)
    loss = f(w).sum()
    changes(w, how)
    (g,) = lp.autograd.grad(loss, w, create_graph=True)
    np.testing.assert_allclose(g.numpy(), derivative(A), rtol=1e-12)
    assert g.requires_grad


def test_second_derivative_after_an_unrecorded_change_matches_torch(device):
    torch = pytest.importorskip("torch")
    w = param(device)
    loss = w.exp().sum()
    changes(w, "no_grad")
    (g,) = lp.autograd.grad(loss, w, create_graph=True)
    (h,) = lp.autograd.grad((g * g).sum(), w)

    tw = torch.tensor(A, requires_grad=True)
    tloss = tw.exp().sum()
    with torch.no_grad():
        tw += 1.0
    (tg,) = torch.autograd.grad(tloss, tw, create_graph=True)
    (th,) = torch.autograd.grad((tg * tg).sum(), tw)
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-12)


@pytest.mark.parametrize("how", ["no_grad", "optimizer", "data"])
def test_create_graph_through_a_saved_changed_input_raises(device, how):
    """``w * w`` saves w: after the change its backward would read the new values."""
    w = param(device)
    loss = (w * w).sum()
    changes(w, how)
    for create_graph in (False, True):
        with pytest.raises(RuntimeError, match=r"'\*'.*changed in place"):
            lp.autograd.grad(loss, w, create_graph=create_graph, retain_graph=True)


def test_data_assignment_counts_as_a_change(device):
    w = param(device)
    before = w._version
    w.data = w.data + 1.0
    assert w._version == before + 1


# Recorded in-place changes: torch differentiates through these (the node read only
# what it saved), and so does LeanPass, first order and create_graph.
RECORDED = {
    "add": lambda x: x + 2.0,
    "sum": lambda x: x.sum() * 1.0,
    "cumulative_sum": lambda x: lp.cumulative_sum(x),
    "where": lambda x: lp.where(x > 10.0, x * 0.0, x),
    "reshape_exp": lambda x: x.reshape(3, 1).exp(),
    "getitem_exp": lambda x: x[1:].exp(),
    "softmax": lambda x: x.softmax(axis=-1),
    "log_softmax": lambda x: x.log_softmax(axis=-1),
    "sqrt": lambda x: (x + 1.0).sqrt(),
    "sigmoid": lambda x: x.sigmoid(),
    "tanh": lambda x: x.tanh(),
    "exp": lambda x: x.exp(),
}

TORCH_RECORDED = {
    "add": lambda x: x + 2.0,
    "sum": lambda x: x.sum() * 1.0,
    "cumulative_sum": lambda x: x.cumsum(0),
    "where": lambda x: x.where(~(x > 10.0), x * 0.0),
    "reshape_exp": lambda x: x.reshape(3, 1).exp(),
    "getitem_exp": lambda x: x[1:].exp(),
    "softmax": lambda x: x.softmax(-1),
    "log_softmax": lambda x: x.log_softmax(-1),
    "sqrt": lambda x: (x + 1.0).sqrt(),
    "sigmoid": lambda x: x.sigmoid(),
    "tanh": lambda x: x.tanh(),
    "exp": lambda x: x.exp(),
}

WEIGHTS = np.array([0.3, -1.2, 0.7])


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_create_graph_through_a_recorded_inplace_change_matches_a_fresh_graph(device, name):
    """``x = a * 1; c = f(x); x.add_(1)``: the gradient of c with respect to a, and its
    derivative, are those of ``f(a)`` (the change comes after c)."""
    def weighted(c):
        c = c.reshape(-1)
        return (c * c * Tensor(WEIGHTS[: c.shape[0]], device=device)).sum()

    a = param(device)
    x = a * 1.0
    c = RECORDED[name](x)
    x += 1.0
    (g,) = lp.autograd.grad(weighted(c), a, create_graph=True)
    (h,) = lp.autograd.grad((g * g).sum(), a)

    fresh = param(device)
    (g0,) = lp.autograd.grad(weighted(RECORDED[name](fresh)), fresh, create_graph=True)
    (h0,) = lp.autograd.grad((g0 * g0).sum(), fresh)
    np.testing.assert_allclose(g.numpy(), g0.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(h.numpy(), h0.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_inplace_change_against_torch(name):
    torch = pytest.importorskip("torch")
    a = param("cpu")
    x = a * 1.0
    c = RECORDED[name](x)
    x += 1.0
    (g,) = lp.autograd.grad((c.reshape(-1) ** 2 * Tensor(WEIGHTS[: c.size])).sum(), a, create_graph=True)

    ta = torch.tensor(A, requires_grad=True)
    tx = ta * 1.0
    tc = TORCH_RECORDED[name](tx)
    tx.add_(1.0)
    (tg,) = torch.autograd.grad((tc.reshape(-1) ** 2 * torch.tensor(WEIGHTS[: tc.numel()])).sum(), ta,
                                create_graph=True)
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-12, atol=1e-15)


def test_changed_output_still_raises_in_create_graph(device):
    """exp saved its output: changing the output itself is refused (as torch)."""
    a = param(device)
    c = (a * 1.0).exp()
    loss = c.sum()
    c += 1.0
    with pytest.raises(RuntimeError, match="exp"):
        lp.autograd.grad(loss, a, create_graph=True)


def test_inv_with_a_changed_input_differentiates_twice_from_its_saved_output(device):
    """inv reads only its output: after its input changed, create_graph forms the
    derivative from the saved output (its Op.rule), as PyTorch's inv_backward."""
    m = Tensor(np.array([[2.0, 0.5], [0.25, 3.0]]), requires_grad=True, device=device)
    loss = lp.linalg.inv(m).sum()
    (first,) = lp.autograd.grad(loss, m, retain_graph=True)  # first order reads the saved output: fine
    with lp.no_grad():
        m += 1.0
    (again,) = lp.autograd.grad(loss, m, retain_graph=True)
    np.testing.assert_allclose(again.numpy(), first.numpy())
    (graph,) = lp.autograd.grad(loss, m, create_graph=True)
    np.testing.assert_allclose(graph.numpy(), first.numpy())


def test_a_decomposition_with_a_changed_input_differentiates_twice_from_its_saved_outputs(device):
    """eigh's outputs read each other in backward: after its input changed (outside the
    graph), create_graph forms the derivative from the saved outputs, whose graph leads
    back through eigh (PyTorch's SavedVariables), never from eigh run again on the new
    values; changing an output itself is still refused."""
    m = Tensor(np.array([[2.0, 0.5], [0.5, 3.0]]), requires_grad=True, device=device)
    w, v = lp.linalg.eigh(m)
    loss = w.sum() + (v * 2.0).sum()  # nothing but eigh reads v
    (first,) = lp.autograd.grad(loss, m, retain_graph=True)
    with lp.no_grad():
        m += 1.0
    (graph,) = lp.autograd.grad(loss, m, create_graph=True, retain_graph=True)
    np.testing.assert_allclose(host(graph), host(first), rtol=1e-12)
    with lp.no_grad():
        v += 1.0
    with pytest.raises(RuntimeError, match="eigh.*changed in place"):
        lp.autograd.grad(loss, m, create_graph=True)


LINALG_RULES = {  # the input changed by a recorded op after the forward, then second derivatives
    "inv": (lambda a, b: a.linalg.inv(a.x), "a"),
    "cholesky": (lambda a, b: a.linalg.cholesky(a.x), "a"),
    "cholesky_upper": (lambda a, b: a.linalg.cholesky(a.x, upper=True), "a"),
    "solve_vector": (lambda a, b: a.linalg.solve(a.x.detach() + 0.0, b.x), "b"),
    "solve_matrix": (lambda a, b: a.linalg.solve(a.x.detach() + 0.0, b.x), "b2"),
    # decompositions: their rules on their saved outputs (signs chosen alike: one LAPACK)
    "eigh": (lambda a, b: _two(a.linalg.eigh(a.x), 0.5), "a"),
    "svd": (lambda a, b: _two(a.linalg.svd(a.x)[:2], 0.5) + a.linalg.svd(a.x)[2].sum(), "a"),
    "qr": (lambda a, b: _two(a.linalg.qr(a.x), 2.0), "a"),
}


def _two(outs, weight):
    """A scalar of both outputs of a decomposition, squared (no sign ambiguity)."""
    first, second = outs
    return (first * first).sum() + (second * second * weight).sum() + second.sum() * first.sum()


class _Lib:
    def __init__(self, module, x):
        self.linalg, self.x = module.linalg, x


@pytest.mark.parametrize("name", sorted(LINALG_RULES))
def test_linalg_rules_on_saved_values_match_torch_through_a_recorded_change(device, name):
    """inv, cholesky and solve form create_graph derivatives from their saved output (and
    solve's saved A) after an input changed in place by a recorded op: first and second
    derivatives equal PyTorch's (they used to raise)."""
    torch = pytest.importorskip("torch")
    fn, which = LINALG_RULES[name]
    rng = np.random.default_rng(3)
    m = rng.normal(size=(3, 3))
    values = {"a": m @ m.T + 3.0 * np.eye(3), "b": rng.normal(size=3), "b2": rng.normal(size=(3, 2))}
    a_value, b_value = values["a"], values["b2" if which == "b2" else "b"]

    def run(module, make, grad, add_):
        a0, b0 = make(a_value), make(b_value)
        a, b = a0 * 1.0, b0 * 1.0
        y = fn(_Lib(module, a), _Lib(module, b))
        changed, wrt = (b, b0) if which.startswith("b") else (a, a0)
        add_(changed)
        (g,) = grad((y * y).sum(), wrt, create_graph=True)
        (h,) = grad(g.sum(), wrt)
        return g, h

    g, h = run(lp, lambda v: Tensor(v, requires_grad=True, device=device), lp.autograd.grad, lambda t: t.add_(1.0))
    tg, th = run(torch, lambda v: torch.tensor(v, requires_grad=True), torch.autograd.grad, lambda t: t.add_(1.0))
    np.testing.assert_allclose(host(g), tg.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(host(h), th.numpy(), rtol=1e-10, atol=1e-12)


# Second derivatives through the in-place changes themselves (the change is run again on a
# copy of its old state, which holds the values the change read), as PyTorch.
INPLACE = {
    "imul": (lambda x: _chain(x * 1.0, "__imul__", x), lambda x: (x * 1.0).mul_(x)),
    "setitem": (lambda x: _set(x * 1.0, x[1] ** 2), lambda x: _set(x * 1.0, x[1] ** 2)),
    "view_imul": (lambda x: _view_mul(x * 2.0, x), lambda x: _view_mul(x * 2.0, x, torch_like=True)),
    "idiv_ipow": (lambda x: _chain(_chain(x * 1.0, "__itruediv__", 3.0), "__ipow__", 2),
                  lambda x: (x * 1.0).div_(3.0).pow_(2)),
}


def _chain(y, method, other):
    getattr(y, method)(other)
    return y


def _set(y, value):
    y[0] = value
    return y


def _view_mul(y, x, torch_like=False):
    v = y[1:]
    if torch_like:
        v.mul_(x[1:])
    else:
        v *= x[1:]
    return y


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_second_derivatives_through_in_place_changes_match_torch(name):
    torch = pytest.importorskip("torch")
    ours, theirs = INPLACE[name]
    x = param("cpu")
    y = ours(x)
    (g,) = lp.autograd.grad((y * y).sum(), x, create_graph=True)
    (h,) = lp.autograd.grad(g.sum(), x)
    tx = torch.tensor(A, requires_grad=True)
    ty = theirs(tx)
    (tg,) = torch.autograd.grad((ty * ty).sum(), tx, create_graph=True)
    (th,) = torch.autograd.grad(tg.sum(), tx)
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-12)


def test_a_recorded_in_place_change_gives_the_tensor_a_new_node_and_makes_no_cycle(device):
    """Nodes are apart from tensors: ``h += h * 2`` gives ``h`` a new node whose input is
    the old one; the nodes made before keep the old node (the values they saw), and the
    graph is freed by reference counting alone (the old design kept the tensor's
    identity as a node and made a cycle here)."""
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        a = Tensor([0.5, 1.5], requires_grad=True, device=device)
        h = a * 1.0
        before = h.grad_fn
        c = h.exp()
        h += h * 2.0
        assert h.grad_fn is not before and h.grad_fn.inputs[0] is before
        assert c.grad_fn.inputs[0] is before  # what c saw
        probe = weakref.ref(before)
        loss = h.sum() + c.sum()
        loss.backward()
        np.testing.assert_allclose(host(a.grad), 3.0 + np.exp([0.5, 1.5]))
        del h, c, loss, before
        assert probe() is None
    finally:
        gc.enable()


def test_a_change_after_a_create_graph_backward_is_seen_by_its_second_order_graph(device):
    """The create_graph backward of ``@`` makes views of the stand-in Tensor of ``y``'s
    value (its transpose) before ``y`` had a version counter: ``y``'s counter, made at its
    later change, must be that one, so the second-order graph sees the change and raises
    (as PyTorch); it gave a silently wrong gradient."""
    x = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True, device=device)
    w = Tensor([[1.0, 0.5], [0.0, 1.0]], requires_grad=True, device=device)
    c = Tensor([[1.0, 1.0], [1.0, 1.0]], requires_grad=True, device=device)
    y = x * 2.0
    z = ((y @ w) * c).sum()
    (gw,) = lp.autograd.grad(z, [w], create_graph=True)
    with lp.no_grad():
        y.add_(100.0)
    with pytest.raises(RuntimeError, match="changed in place"):
        lp.autograd.grad(gw.sum(), [c])


def test_data_assignment_on_a_result_is_the_value_its_node_replays(device):
    """``y.data = ...`` on a result rebinds its node's value too: a create_graph backward
    reads the new array there, as the first-order one does (and as PyTorch)."""
    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    y = x * 2.0
    y.data = Tensor([10.0, 20.0], device=device).data
    (g,) = lp.autograd.grad((y * y).sum(), [x], create_graph=True)
    np.testing.assert_allclose(host(g), [40.0, 80.0])
    (first,) = lp.autograd.grad((y * y).sum(), [x])
    np.testing.assert_allclose(host(first), [40.0, 80.0])


def test_a_view_outside_the_graph_is_named_by_the_op_that_made_it(device):
    """The refusal to change a view outside the graph in place names the op that made the
    view, not "leaf" (a result outside any graph has no node to name it)."""
    c = Tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    w = Tensor(np.ones((2, 2)), requires_grad=True, device=device)
    with pytest.raises(RuntimeError, match=r"made by (permute_dims|matrix_transpose|transpose)"):
        c.T.add_(w)


def test_hooks_registered_before_an_in_place_change_see_the_old_values_gradient(device):
    """As PyTorch: a gradient hook registered on a tensor belongs to the node of its value
    at that time, so after ``y.mul_(3)`` the earlier hook sees the gradient of ``y``'s old
    value and a later one the new value's; ``retain_grad`` follows the tensor (the new
    value). Hooks used to follow the tensor too."""
    torch = pytest.importorskip("torch")

    def values(a):
        return [float(v) for v in (a.tolist() if hasattr(a, "tolist") else np.asarray(host(a)).tolist())]

    def run(module, make):
        x = make([1.0, 2.0, 3.0])
        y = x * 2
        seen = []
        y.register_hook(lambda g: seen.append(("before", values(g))))
        y.mul_(3)
        y.register_hook(lambda g: seen.append(("after", values(g))))
        y.retain_grad()
        (y * y).sum().backward()
        return seen, values(y.grad), values(x.grad)

    ours = run(lp, lambda v: Tensor(v, requires_grad=True, device=device))
    theirs = run(torch, lambda v: torch.tensor(v, requires_grad=True, dtype=torch.float64))
    assert ours == theirs
    assert ours[0] == [("after", [12.0, 24.0, 36.0]), ("before", [36.0, 72.0, 108.0])]
