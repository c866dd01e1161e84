"""Higher-order autodiff: backward(create_graph=True), leanpass.autograd.grad, the
function transforms (grad, value_and_grad, vjp, jvp, jacobian, hessian, hvp) and
gradgradcheck of the fused nodes, on every device; the transforms against
torch.func where PyTorch is installed.

Every operation's second derivatives are checked by running the gradcheck tests of
the other files with LEANPASS_GRADGRAD=1 (``nox -s gradgrad``)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import host

import leanpass as lp
from leanpass import Tensor, gradgradcheck, nn, ops
from leanpass.tensor import apply

RNG = np.random.default_rng(7)


def rand(*shape, low=-1.5, high=1.5):
    return RNG.uniform(low, high, size=shape)


def param(device, array):
    return Tensor(array, requires_grad=True, device=device, dtype="float64")


# ---- autograd.grad and backward(create_graph=True) ---------------------------------------------


def test_grad_of_grad_is_the_second_derivative(device):
    x = param(device, [0.5, -1.0, 2.0])
    (g,) = lp.autograd.grad((x ** 3).sum(), x, create_graph=True)
    assert g.requires_grad and x.grad is None or not x.has_grad  # autograd.grad writes no .grad
    np.testing.assert_allclose(g.numpy(), 3 * x.numpy() ** 2)
    (h,) = lp.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), 6 * x.numpy())
    assert not h.requires_grad


def test_grad_with_several_outputs_inputs_and_grad_outputs(device):
    a, b = param(device, rand(3)), param(device, rand(3))
    y1, y2 = a * b, (a ** 2).sum()
    ga, gb = lp.autograd.grad([y1, y2], [a, b], [lp.ones(3, device=device, dtype="float64") * 2.0, None])
    np.testing.assert_allclose(ga.numpy(), 2 * b.numpy() + 2 * a.numpy())
    np.testing.assert_allclose(gb.numpy(), 2 * a.numpy())


def test_grad_with_respect_to_a_non_leaf(device):
    x = param(device, rand(4))
    h = x * 3.0
    y = (h ** 2).sum()
    (gh,) = lp.autograd.grad(y, h)
    np.testing.assert_allclose(gh.numpy(), 2 * h.numpy())


def test_gradient_penalty_through_backward_create_graph(device):
    """d/dx |d/dx sum(sin(x) x)|^2, with .grad a Tensor in a graph."""
    x = param(device, rand(5))
    (lp.sin(x) * x).sum().backward(create_graph=True)
    assert isinstance(x.grad, Tensor) and x.grad.requires_grad
    penalty = (x.grad ** 2).sum()
    xn = x.numpy()
    first = np.sin(xn) + xn * np.cos(xn)
    np.testing.assert_allclose(x.grad.numpy(), first)
    x.grad = None
    penalty.backward()
    np.testing.assert_allclose(host(x.grad), 2 * first * (2 * np.cos(xn) - xn * np.sin(xn)), rtol=1e-12)


def test_an_optimizer_steps_with_a_gradient_from_create_graph(device):
    w = param(device, [1.0, 2.0])
    (w ** 2).sum().backward(create_graph=True)
    lp.optim.SGD([w], lr=0.25).step()
    np.testing.assert_allclose(w.numpy(), [0.5, 1.0])


def test_double_backward_through_an_mlp_loss_matches_finite_differences(device):
    lp.manual_seed(0)
    model = nn.MLP([3, 5, 2], dtype="float64", device=device)
    x = param(device, rand(4, 3))
    y = lp.asarray([0, 1, 1, 0], device=device)

    def penalty(inp):  # gradcheck's finite differences run it in no_grad mode: lp.grad records anyway
        g = lp.grad(lambda t: nn.cross_entropy_loss(model(t), y))(inp)
        return (g ** 2).sum()

    assert lp.gradcheck(penalty, (x,))


# ---- bad input: a clear error, nothing changed --------------------------------------------------


def test_grad_of_an_unused_input_raises_and_the_graph_still_works(device):
    x, unused = param(device, rand(3)), param(device, rand(2))
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match=r"inputs\[1\].*not used.*allow_unused=True"):
        lp.autograd.grad(y, [x, unused])
    gx, none = lp.autograd.grad(y, [x, unused], allow_unused=True, retain_graph=True)
    assert none is None
    y.backward()  # the graph was not released by the failed call
    np.testing.assert_allclose(host(x.grad), 2 * x.numpy())


def test_grad_refuses_non_scalar_outputs_without_grad_outputs(device):
    x = param(device, rand(3))
    with pytest.raises(RuntimeError, match="scalar outputs"):
        lp.autograd.grad(x * 2.0, x)
    with pytest.raises(ValueError, match=r"grad_outputs\[0\] has shape \(2,\)"):
        lp.autograd.grad(x * 2.0, x, lp.ones(2, device=device, dtype="float64"))
    with pytest.raises(RuntimeError, match="does not require grad"):
        lp.autograd.grad((x * 2.0).sum(), Tensor([1.0], device=device))


def test_transforms_refuse_bad_functions_and_inputs(device):
    x = lp.asarray([1.0, 2.0], device=device)
    with pytest.raises(RuntimeError, match=r"grad: .*scalar.*shape \(2,\)"):
        lp.func.grad(lambda t: t * 2.0)(x)
    with pytest.raises(TypeError, match=r"jacobian: argument 0 has dtype int64.*floating-point"):
        lp.jacobian(lambda t: t * 2)(lp.asarray([1, 2], device=device))
    with pytest.raises(ValueError, match="argnums"):
        lp.grad(lambda t: t.sum(), argnums=3)(x)
    with pytest.raises(ValueError, match="tangent 0 has shape"):
        lp.jvp(lambda t: t * 2.0, (x,), (lp.ones(3, device=device),))
    assert x.numpy().tolist() == [1.0, 2.0] and not x.requires_grad


# ---- the transforms ----------------------------------------------------------------------------


def f_scalar(x):
    return (lp.sin(x) * x ** 2).sum() + (x[0] * x[1]) ** 2


def test_grad_hessian_hvp_of_a_scalar_function(device):
    x = lp.asarray(rand(3), device=device)
    xn = x.numpy()
    g = lp.grad(f_scalar)(x)
    want = np.cos(xn) * xn ** 2 + 2 * xn * np.sin(xn)
    want[0] += 2 * xn[0] * xn[1] ** 2
    want[1] += 2 * xn[1] * xn[0] ** 2
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-12)
    h = lp.hessian(f_scalar)(x)
    diag = -np.sin(xn) * xn ** 2 + 4 * xn * np.cos(xn) + 2 * np.sin(xn)
    want_h = np.diag(diag)
    want_h[0, 0] += 2 * xn[1] ** 2
    want_h[1, 1] += 2 * xn[0] ** 2
    want_h[0, 1] = want_h[1, 0] = 4 * xn[0] * xn[1]
    np.testing.assert_allclose(h.numpy(), want_h, rtol=1e-10, atol=1e-12)
    v = lp.asarray(rand(3), device=device)
    value, (hv,) = lp.hvp(f_scalar, (x,), (v,))
    np.testing.assert_allclose(hv.numpy(), want_h @ v.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(float(value), float(f_scalar(x)))


def test_jacobian_jvp_vjp_of_a_vector_function(device):
    def f(x, y):
        return lp.stack([x[0] * y[1], lp.exp(x[1]) + y[0], (x * y).sum()])

    x, y = lp.asarray(rand(2), device=device), lp.asarray(rand(2), device=device)
    xn, yn = x.numpy(), y.numpy()
    jx, jy = lp.jacobian(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(jx.numpy(), [[yn[1], 0], [0, np.exp(xn[1])], yn], rtol=1e-12)
    np.testing.assert_allclose(jy.numpy(), [[0, xn[0]], [1, 0], xn], rtol=1e-12)
    tx, ty = lp.asarray(rand(2), device=device), lp.asarray(rand(2), device=device)
    out, tangent = lp.jvp(f, (x, y), (tx, ty))
    np.testing.assert_allclose(tangent.numpy(), jx.numpy() @ tx.numpy() + jy.numpy() @ ty.numpy(), rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), f(x, y).numpy())
    out, vjp_fn = lp.vjp(f, x, y)
    u = lp.asarray(rand(3), device=device)
    for _ in range(2):  # vjp_fn may be called again
        gx, gy = vjp_fn(u)
        np.testing.assert_allclose(gx.numpy(), u.numpy() @ jx.numpy(), rtol=1e-12)
        np.testing.assert_allclose(gy.numpy(), u.numpy() @ jy.numpy(), rtol=1e-12)


def test_value_and_grad_with_aux_and_argnums(device):
    def loss(w, b):
        pred = w * 2.0 + b
        return (pred ** 2).sum(), pred

    w, b = lp.asarray([1.0, -1.0], device=device), lp.asarray([0.5, 0.5], device=device)
    (value, pred), (gw, gb) = lp.value_and_grad(loss, argnums=(0, 1), has_aux=True)(w, b)
    np.testing.assert_allclose(pred.numpy(), [2.5, -1.5])
    assert float(value) == pytest.approx(2.5 ** 2 + 1.5 ** 2)
    np.testing.assert_allclose(gw.numpy(), 4 * pred.numpy())
    np.testing.assert_allclose(gb.numpy(), 2 * pred.numpy())
    g, aux = lp.grad(loss, has_aux=True)(w, b)
    np.testing.assert_allclose(g.numpy(), gw.numpy())
    assert not value.requires_grad and not gw.requires_grad


def test_transforms_nest(device):
    """grad of grad, and jacobian of a function that calls grad."""
    x = lp.asarray([0.3, -0.7], device=device)
    d2 = lp.grad(lambda t: lp.grad(lambda s: (s ** 4).sum())(t).sum())(x)
    np.testing.assert_allclose(d2.numpy(), 12 * x.numpy() ** 2)
    d3 = lp.jacobian(lp.grad(lambda t: (t ** 4).sum()))(x)
    np.testing.assert_allclose(d3.numpy(), np.diag(12 * x.numpy() ** 2))


def test_grad_closing_over_a_parameter_stays_differentiable(device):
    """A gradient penalty: the inner gradient (over x) is differentiated over w."""
    w = param(device, [0.5, 2.0])
    x = lp.asarray([1.0, 3.0], device=device)
    gx = lp.grad(lambda t: (w * t ** 2).sum())(x)  # 2 w x
    assert gx.requires_grad
    (gx ** 2).sum().backward()  # d/dw sum(4 w^2 x^2) = 8 w x^2
    np.testing.assert_allclose(host(w.grad), 8 * w.numpy() * x.numpy() ** 2)


def test_transforms_count_only_the_paths_through_their_argument(device):
    """No perturbation confusion: an argument that already requires grad (an outer
    transform's variable, a parameter) is differentiated as itself, not through the
    other tensors computed from it (torch.func's results)."""
    # the inner grad's closure over the outer variable is not its argument: d/dy (x + y) = 1
    f = lambda x: x * lp.grad(lambda y: x + y)(x)  # noqa: E731
    assert float(lp.grad(f)(lp.asarray(1.0, device=device))) == 1.0
    inner = lambda x: lp.grad(lambda y: (y * x).sum())(x)  # noqa: E731  (= x)
    np.testing.assert_allclose(lp.grad(lambda x: inner(x).sum())(lp.asarray([1.0, 2.0], device=device)).numpy(),
                               [1.0, 1.0])
    x = param(device, [1.0, 2.0])
    w = x * 2  # computed from x, closed over
    np.testing.assert_allclose(lp.grad(lambda a: (a * w).sum())(x).numpy(), [2.0, 4.0])
    np.testing.assert_allclose(lp.jacobian(lambda a: a * w)(x).numpy(), np.diag([2.0, 4.0]))
    np.testing.assert_allclose(lp.vjp(lambda a: a * w, x)[1](lp.ones((2,), device=device))[0].numpy(), [2.0, 4.0])
    np.testing.assert_allclose(lp.jvp(lambda a: a * w, (x,), (lp.ones((2,), device=device),))[1].numpy(),
                               [2.0, 4.0])
    ga, gb = lp.grad(lambda a, b: (a * b ** 2).sum(), (0, 1))(x, x)  # one tensor at two argnums
    np.testing.assert_allclose(ga.numpy(), [1.0, 4.0])
    np.testing.assert_allclose(gb.numpy(), [2.0, 8.0])
    # and the gradient still flows on to the tensor itself
    lp.grad(lambda a: (a ** 3).sum())(x).sum().backward()
    np.testing.assert_allclose(host(x.grad), 6 * x.numpy())


def test_transforms_pass_keyword_arguments_through(device):
    x = lp.asarray([1.0, 2.0], device=device)
    f = lambda a, scale=1.0: (a * scale).sum()  # noqa: E731
    np.testing.assert_allclose(lp.grad(f)(x, scale=2.0).numpy(), [2.0, 2.0])
    (value, aux), g = lp.value_and_grad(lambda a, k=0: ((a * k).sum(), k), has_aux=True)(x, k=3.0)
    assert float(value) == 9.0 and aux == 3.0
    np.testing.assert_allclose(g.numpy(), [3.0, 3.0])
    np.testing.assert_allclose(lp.jacobian(lambda a, scale=1.0: a * scale)(x, scale=3.0).numpy(), 3 * np.eye(2))


def test_vjp_of_a_one_tuple_takes_a_tuple_of_cotangents(device):
    """torch.func's form: the cotangents have the structure of the output."""
    x = lp.asarray([1.0, -2.0, 3.0], device=device)
    _, fn = lp.vjp(lambda a: (a ** 2,), x)
    np.testing.assert_allclose(fn((lp.ones((3,), device=device),))[0].numpy(), [2.0, -4.0, 6.0])
    np.testing.assert_allclose(fn(lp.ones((3,), device=device))[0].numpy(), [2.0, -4.0, 6.0])


# ---- second derivatives of the fused nodes -----------------------------------------------------


FUSED = {
    "linear": lambda x, w, b: apply(ops.linear, x, w.mT, b),  # weights (out, in)
    "linear_relu": lambda x, w, b: apply(ops.linear_relu, x, w.mT, b),
    "mlp": lambda x, w, b: apply(ops.nn.mlp(2), x, w.mT, w, b, x[0]),
    "relu": lambda x, w, b: (x @ w + b).relu(),
    "gelu": lambda x, w, b: (x @ w + b).gelu(approximate="tanh"),
    "sigmoid": lambda x, w, b: (x @ w + b).sigmoid(),
    "tanh": lambda x, w, b: (x @ w + b).tanh(),
    "leaky_relu": lambda x, w, b: (x @ w + b).leaky_relu(0.1),
    "softmax": lambda x, w, b: (x @ w + b).softmax(-1),
    "log_softmax": lambda x, w, b: (x @ w + b).log_softmax(-1),
    "cross_entropy_index":
        lambda x, w, b: nn.cross_entropy_loss(x @ w + b, lp.asarray([0, 1, 1, 0, 1], device=x.device)),
    "cross_entropy_probs": lambda x, w, b: nn.cross_entropy_loss(x @ w + b, ((x @ w) * 0.0 + 0.5).detach()),
    "mse": lambda x, w, b: nn.mse_loss(x @ w + b, ((x @ w) * 0.0 + 0.25).detach()),
    "binary_cross_entropy": lambda x, w, b: nn.binary_cross_entropy_loss(x @ w + b, ((x @ w) * 0.0 + 1.0).detach()),
}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_nodes_pass_gradgradcheck(device, name):
    inputs = (param(device, rand(5, 3)), param(device, rand(3, 2)), param(device, rand(2)))
    assert gradgradcheck(FUSED[name], inputs)


def test_gradgradcheck_catches_a_wrong_second_derivative(device):
    """A custom op whose backward is right but not differentiable the right way (its
    backward uses a constant where it should use x) fails gradgradcheck."""

    def square(be, a):
        const = be.xp.asarray(a, copy=True)
        if isinstance(const, Tensor):
            const = const.detach()
        return a * a, lambda g: (2.0 * const * g,)

    x = param(device, rand(3))
    assert lp.gradcheck(lambda t: apply(square, t), (x,))
    with pytest.raises(lp.GradcheckError):
        gradgradcheck(lambda t: apply(square, t), (x,))


# ---- against torch.func -------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")  # torch.func, PyTorch 2.13
@pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:FutureWarning")  # PyTorch 2.14
def test_transforms_match_torch_func():
    torch = pytest.importorskip("torch")
    from torch import func as tf

    rng = np.random.default_rng(3)
    w1, w2 = rng.normal(size=(4, 6)), rng.normal(size=(6, 3))
    xs = rng.normal(size=(5, 4))
    labels = np.array([0, 2, 1, 1, 0])

    def lp_loss(x):
        h = lp.tanh(x @ lp.asarray(w1))
        return nn.cross_entropy_loss(h @ lp.asarray(w2), lp.asarray(labels))

    def torch_loss(x):
        h = torch.tanh(x @ torch.tensor(w1))
        return torch.nn.functional.cross_entropy(h @ torch.tensor(w2), torch.tensor(labels))

    x, xt = lp.asarray(xs), torch.tensor(xs)
    v = rng.normal(size=xs.shape)
    np.testing.assert_allclose(lp.grad(lp_loss)(x).numpy(), tf.grad(torch_loss)(xt).numpy(), rtol=1e-10)
    np.testing.assert_allclose(lp.hessian(lp_loss)(x).numpy(), tf.hessian(torch_loss)(xt).numpy(), rtol=1e-9,
                               atol=1e-12)
    _, (hv,) = lp.hvp(lp_loss, (x,), (lp.asarray(v),))
    _, hv_t = tf.jvp(tf.grad(torch_loss), (xt,), (torch.tensor(v),))
    np.testing.assert_allclose(hv.numpy(), hv_t.numpy(), rtol=1e-9, atol=1e-12)

    def lp_vec(x):
        return lp.sin(x) @ lp.asarray(w1)

    def torch_vec(x):
        return torch.sin(x) @ torch.tensor(w1)

    np.testing.assert_allclose(lp.jacobian(lp_vec)(x).numpy(), tf.jacrev(torch_vec)(xt).numpy(), rtol=1e-12)
    t = rng.normal(size=xs.shape)
    out, jt = lp.jvp(lp_vec, (x,), (lp.asarray(t),))
    out_t, jt_t = tf.jvp(torch_vec, (xt,), (torch.tensor(t),))
    np.testing.assert_allclose(jt.numpy(), jt_t.numpy(), rtol=1e-12)
    u = rng.normal(size=(5, 6))
    _, fn = lp.vjp(lp_vec, x)
    _, fn_t = tf.vjp(torch_vec, xt)
    np.testing.assert_allclose(fn(lp.asarray(u))[0].numpy(), fn_t(torch.tensor(u))[0].numpy(), rtol=1e-12)


# ---- regressions: in-place nodes, released graphs, kept outputs --------------------------------


def test_double_backward_through_an_in_place_change(device):
    """An in-place change is run again on Tensors (on a copy of the old state, which holds
    the values the change read), so create_graph differentiates through it, as PyTorch."""
    w = param(device, [1.0, 2.0, 3.0])
    x = param(device, [1.0, -1.0, 0.5])
    h = w * Tensor([10.0, 10.0, 10.0], device=device)
    h += x * x  # recorded in place: its node is not the multiplication any more
    h *= w  # reads h's old values: the old state keeps the copy it read
    (gx1,) = lp.autograd.grad(h.sum(), x, retain_graph=True)  # first order
    (gx, gw) = lp.autograd.grad(h.sum(), [x, w], create_graph=True)
    np.testing.assert_allclose(gx1.numpy(), gx.numpy())
    np.testing.assert_allclose(gx.numpy(), 2 * x.numpy() * w.numpy())
    np.testing.assert_allclose(gw.numpy(), 20 * w.numpy() + x.numpy() ** 2)
    (hx, hw) = lp.autograd.grad((gx * gw).sum(), [x, w])
    xv, wv = x.numpy(), w.numpy()
    np.testing.assert_allclose(hx.numpy(), 2 * wv * (20 * wv + xv**2) + 2 * xv * wv * 2 * xv)
    np.testing.assert_allclose(hw.numpy(), 2 * xv * (20 * wv + xv**2) + 2 * xv * wv * 20)


def test_grad_through_a_released_graph_says_so(device):
    w = param(device, [1.0, 2.0])
    loss = (w * w).sum()
    lp.autograd.grad(loss, w)
    for unused in (False, True):
        with pytest.raises(RuntimeError, match="retain_graph=True"):
            lp.autograd.grad(loss, w, allow_unused=unused)


@pytest.mark.parametrize("make", ["stack", "where", "concat"])
def test_a_kept_output_frees_its_inputs_after_backward(device, make):
    """The replay of a node holds its inputs; a releasing backward drops it."""
    import gc
    import weakref

    x = param(device, rand(3))
    big = x * 2.0
    ref = weakref.ref(big)
    if make == "stack":
        out = lp.stack([big, big])
    elif make == "where":
        out = lp.where(big > 0, big, 0.0)
    else:
        out = lp.concat([big, big])
    del big
    out.sum().backward()
    gc.collect()
    assert ref() is None


def test_grad_past_a_freed_part_of_the_graph_that_it_does_not_need(device):
    """As torch.autograd.grad: a part freed by an earlier backward is fine where the
    inputs asked for do not lie below it (or it is the input itself)."""
    w, w2 = param(device, [1.0, 2.0]), param(device, [3.0])
    h = w * 1.5
    (h * h).sum().backward()  # frees h's node
    loss2 = (h * h).sum() + (w2 * w2).sum()
    (g2,) = lp.autograd.grad(loss2, w2, retain_graph=True)
    np.testing.assert_allclose(g2.numpy(), [6.0])
    (gh,) = lp.autograd.grad(loss2, h, retain_graph=True)
    np.testing.assert_allclose(gh.numpy(), 2 * h.numpy())
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        lp.autograd.grad(loss2, w)


def test_backward_create_graph_checks_and_copies_a_tensor_gradient(device):
    x = param(device, [1.0, 2.0])
    other = "strict" if device == "cpu" else "cpu"
    y = param(device, [1.0, 2.0])
    (y * 2.0).backward(Tensor([1.0, 1.0], device=other), create_graph=True)  # moved, as without create_graph
    assert y.grad.device == y.device and y.grad.tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        (x * 2.0).backward(Tensor([1.0, 1.0, 1.0], device=device), create_graph=True)
    assert not x.has_grad
    v = Tensor([1.0, 3.0], device=device, dtype="float32")
    x.backward(v, create_graph=True)  # a leaf: its .grad is the gradient, as a copy in x's dtype
    assert x.grad is not v and str(x.grad.dtype) == "float64"
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 3.0])


@pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")  # torch.func, PyTorch 2.13
@pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:FutureWarning")  # PyTorch 2.14
def test_cumulative_prod_hessian_with_zeros_matches_torch():
    """The rule at zeros is torch.cumprod's, written so that its double backward is
    exact too (two zeros in the line, and one at its start)."""
    torch = pytest.importorskip("torch")
    from torch import func as tf

    w = np.array([0.7, -1.1, 0.4, 1.3, -0.6, 0.9])
    for values in ([1.5, 0.0, 2.0, -0.5, 0.0, 1.2], [0.0, 1.1, -0.7, 2.0, 0.8, 1.4]):
        x = np.array(values)
        h = lp.hessian(lambda t: (lp.cumulative_prod(t) * lp.asarray(w)).sum())(lp.asarray(x))
        want = tf.hessian(lambda t: (torch.cumprod(t, 0) * torch.tensor(w)).sum())(torch.tensor(x))
        np.testing.assert_allclose(h.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


# ---- autograd.grad through recorded in-place changes ------------------------------------------

def _slice_add(x):
    h = x * 1.0
    h[0:2] += 1.0
    return (h * h).sum()


def _view_scaled(x):
    h = x * 1.0
    v = h[1:]
    v *= 3.0
    return (h * h).sum()


def _slice_times_input(x):
    h = x * 1.0
    h[1:] *= x[:2]
    return (h * h).sum()


@pytest.mark.parametrize("f", [_slice_add, _view_scaled, _slice_times_input])
def test_grad_through_in_place_changes_of_slices_matches_backward(device, f):
    """autograd.grad and the transforms prune the graph to the paths that reach the
    inputs; a recorded in-place change keeps the tensor's identity, so the pruning
    must follow each node's inputs as that node saw them (it used to give [0, 0, 6]
    for the first function, where backward() gives [4, 6, 6], as PyTorch)."""
    x = param(device, [1.0, 2.0, 3.0])
    f(x).backward()
    want = host(x.grad).copy()
    (got,) = lp.autograd.grad(f(x), [x])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(lp.grad(f)(x.detach()).numpy(), want, rtol=1e-12)
    assert lp.gradcheck(f, (x,))
    if f is _slice_add:
        np.testing.assert_allclose(want, [4.0, 6.0, 6.0])


def test_grad_into_a_buffer_written_by_slices(device):
    a = param(device, [1.0, -2.0, 3.0, 0.5])
    out = lp.zeros(3, device=device, dtype=lp.float64)
    out[0:2] += (a * a)[0:2]
    (g,) = lp.autograd.grad(out.sum(), [a])  # it raised "inputs[0] ... was not used"
    np.testing.assert_allclose(g.numpy(), [2.0, -4.0, 0.0, 0.0])


def test_hessians_through_pooling_and_convolution(device):
    """Their second derivatives run backward rules that write slices in place (the
    patches' sum); lp.hessian used to give zeros through max_pool2d."""
    F = nn.functional
    x = param(device, rand(1, 1, 3, 3))
    w = param(device, rand(2, 1, 2, 2))
    assert gradgradcheck(lambda t: (F.max_pool2d(t, 2, 1) ** 3).sum(), (x,))
    assert gradgradcheck(lambda t, k: F.conv2d(t, k, padding=1).tanh().sum(), (x, w))
    f = lambda t: (F.avg_pool2d(t, 2, 1) ** 3).sum()  # noqa: E731
    h = lp.hessian(f)(x.detach()).numpy().reshape(9, 9)
    eps, base = 1e-6, np.asarray(x.detach().numpy())
    numeric = np.zeros((9, 9))
    for i in range(9):
        step = np.zeros(9)
        step[i] = eps
        plus = lp.grad(f)(Tensor(base + step.reshape(base.shape), device=device)).numpy().ravel()
        minus = lp.grad(f)(Tensor(base - step.reshape(base.shape), device=device)).numpy().ravel()
        numeric[:, i] = (plus - minus) / (2 * eps)
    np.testing.assert_allclose(h, numeric, atol=1e-6)
    assert np.abs(h).max() > 0.1


def test_vjp_fn_with_a_cotangent_that_requires_grad_stays_differentiable(device):
    """grad/jacobian of a function of the cotangent (vjp nested inside): torch.func gives
    d(J^T u)/du = J^T, not zeros."""
    x0 = lp.asarray([1.0, 2.0, 3.0], device=device)
    u0 = lp.asarray([1.0, 1.0, 1.0], device=device)
    g = lp.grad(lambda u: lp.vjp(lambda x: x**2, x0)[1](u)[0].sum())(u0)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0, 6.0])
    _, fn = lp.vjp(lambda x: x**2, x0)
    np.testing.assert_allclose(lp.jacobian(lambda u: fn(u)[0])(u0).numpy(), np.diag([2.0, 4.0, 6.0]))


def test_has_aux_needs_a_pair_and_aux_comes_back_detached(device):
    x = lp.asarray([1.0, 2.0], device=device)
    for call in (lambda: lp.jacobian(lambda t: t * 2, has_aux=True)(x),
                 lambda: lp.vjp(lambda t: t * 2, x, has_aux=True),
                 lambda: lp.grad(lambda t: (t * t).sum(), has_aux=True)(x)):
        with pytest.raises(TypeError, match=r"must return a tuple \(output, aux\)"):
            call()
    _, aux = lp.grad(lambda t: ((t**2).sum(), t * 2), has_aux=True)(x)
    assert not aux.requires_grad
    _, aux = lp.grad(lambda t: (((t * 2) ** 2).sum(), t * 2), has_aux=True)(x)  # aux in the loss's graph too
    assert not aux.requires_grad
    (_, aux), _ = lp.value_and_grad(lambda t: ((t**2).sum(), t**2), has_aux=True)(x)
    assert not aux.requires_grad
    _, aux = lp.jacobian(lambda t: (t**2, {"a": [t * 3], "n": 1}), has_aux=True)(x)
    assert not aux["a"][0].requires_grad and aux["n"] == 1
    _, _, aux = lp.vjp(lambda t: (t**2, t + 1), x, has_aux=True)
    assert not aux.requires_grad
    w = Tensor([1.0, 2.0], requires_grad=True, device=device)  # aux reaching a tensor outside: kept in its graph
    _, aux = lp.grad(lambda t: ((t * w).sum(), (t * w).sum()), has_aux=True)(x)
    aux.backward()
    np.testing.assert_allclose(lp.backends.get_backend(device).to_host(w.grad), [1.0, 2.0])


def test_aux_in_namedtuples_and_dict_subclasses_keeps_its_types(device):
    import collections

    pair = collections.namedtuple("pair", "a b")
    x = lp.asarray([1.0, 2.0], device=device)
    _, aux = lp.grad(lambda t: ((t * t).sum(), pair(t * 2, 3)), has_aux=True)(x)
    assert type(aux) is pair and aux.b == 3 and not aux.a.requires_grad
    table = collections.defaultdict(list, k=[x * 1])
    _, aux = lp.grad(lambda t: ((t * t).sum(), table), has_aux=True)(x)
    assert type(aux) is collections.defaultdict and aux.default_factory is list
