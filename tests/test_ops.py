"""Every operation: forward against NumPy, backward against finite differences
(leanpass.gradcheck) with broadcast shapes, on every device."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from helpers import other_device

import leanpass
from leanpass import Tensor, gradcheck, ops
from leanpass.backends import get_backend

RNG = np.random.default_rng(1234)


def rand(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, size=shape)


def away_from_zero(*shape):
    """Values in ±[0.5, 2]: safe for /, log|x|, sqrt and kinks at 0."""
    return RNG.uniform(0.5, 2.0, size=shape) * RNG.choice([-1.0, 1.0], size=shape)


def leaf(device, array):
    return Tensor(array, requires_grad=True, device=device)


def host(device, array):
    return get_backend(device).to_host(array)


# name -> (function of tensors, input arrays); shapes broadcast against each other.
BINARY = {
    "add": (lambda a, b: a + b, (rand(3, 1), rand(1, 4))),
    "sub": (lambda a, b: a - b, (rand(2, 3, 4), rand(4))),
    "mul": (lambda a, b: a * b, (rand(4, 1, 3), rand(2, 1))),
    "div": (lambda a, b: a / b, (rand(3, 4), away_from_zero(3, 1))),
    "pow": (lambda a, b: a**b, (rand(3, 1, low=0.5, high=2.0), rand(4))),
    "matmul_2d": (lambda a, b: a @ b, (rand(3, 4), rand(4, 5))),
    "matmul_batched": (lambda a, b: a @ b, (rand(2, 1, 3, 4), rand(3, 4, 2))),
    "matmul_vec_mat": (lambda a, b: a @ b, (rand(4), rand(2, 4, 3))),
    "matmul_mat_vec": (lambda a, b: a @ b, (rand(2, 3, 4), rand(4))),
    "matmul_vec_vec": (lambda a, b: a @ b, (rand(4), rand(4))),
    "matmul_method": (lambda a, b: a.matmul(b), (rand(3, 4), rand(4, 2))),
}


@pytest.mark.parametrize("x_shape", [(5, 3), (2, 4, 3), (3,)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name", ["linear", "linear_relu"])
def test_linear_node_gradcheck(device, x_shape, bias, name):
    from leanpass.tensor import apply

    x, w, b = leaf(device, rand(*x_shape)), leaf(device, rand(2, 3)), leaf(device, rand(2))  # w (out, in)
    inputs = (x, w, b) if bias else (x, w)
    op = getattr(ops, name)
    out = apply(op, *inputs)
    assert out._op == name
    expected = x.numpy() @ w.numpy().T + (b.numpy() if bias else 0.0)
    if name == "linear_relu":
        if expected.size > 2:  # both sides of the kink are checked
            assert (expected < 0).any() and (expected > 0).any()
        expected = np.maximum(expected, 0.0)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)
    assert gradcheck(lambda *t: apply(op, *t), inputs)


def _numpy_mlp(x, weights, biases):
    h = x
    for i, (w, b) in enumerate(zip(weights, biases)):
        h = h @ w.T + b
        if i < len(weights) - 1:
            h = np.maximum(h, 0.0)
    return h


@pytest.mark.parametrize("x_shape", [(6, 3), (2, 4, 3), (3,)])
@pytest.mark.parametrize("frozen", [(), ("x",), ("x", "w1"), ("x", "w0"), ("x", "w0", "b0"), ("w2", "b2")])
def test_mlp_node_matches_numpy_and_gradcheck(device, x_shape, frozen):
    """The one-node MLP: its output is the layers', and gradcheck passes for every input
    that requires grad, whichever do not (``frozen``: those the backward may skip)."""
    from leanpass.tensor import apply

    sizes = [3, 5, 4, 2]
    names = ["x"] + [f"w{i}" for i in range(3)] + [f"b{i}" for i in range(3)]
    rng = np.random.default_rng(0)  # its own draws: each case has hidden sums of both signs
    shapes = [x_shape] + list(zip(sizes[1:], sizes[:-1])) + [(b,) for b in sizes[1:]]  # weights (out, in)
    arrays = [rng.uniform(-2.0, 2.0, size=shape) for shape in shapes]
    inputs = [Tensor(a, requires_grad=name not in frozen, device=device) for name, a in zip(names, arrays)]
    op = ops.nn.mlp(3)
    out = apply(op, *inputs)
    assert out._op == "mlp"
    expected = _numpy_mlp(arrays[0], arrays[1:4], arrays[4:])
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)
    hidden = arrays[0] @ arrays[1].T + arrays[4]
    assert (hidden < 0).any() and (hidden > 0).any()  # both sides of ReLU's kink
    live = [i for i, name in enumerate(names) if name not in frozen]

    def f(*tensors):
        full = list(inputs)
        for i, t in zip(live, tensors):
            full[i] = t
        return apply(op, *full)

    assert gradcheck(f, [inputs[i] for i in live])


def test_mlp_is_one_node_with_the_gradients_of_its_layers():
    """A stock MLP (Linear with biases, ReLU) is one ``mlp`` node; its output and
    gradients are those of its layers run one by one, zero gradient where a hidden sum
    is 0 (ReLU's kink, as PyTorch); any other activation or a layer without bias runs
    layer by layer."""
    leanpass.manual_seed(0)
    mlp = leanpass.nn.MLP([3, 4, 4, 2], dtype="float64")
    x = Tensor(rand(5, 3))
    x.data[0] = 0.0  # hidden sums equal to the bias (0): ReLU's kink
    fused = mlp(x)
    assert fused._op == "mlp" and all(p._node is None for p in fused._node._prev[1:])
    fused.sum().backward()
    fused_grads = [p.grad.copy() for p in mlp.parameters()]
    mlp.zero_grad()
    h = x
    for i, layer in enumerate(mlp.layers):
        h = layer(h)
        if i < len(mlp.layers) - 1:
            h = mlp.activations[i](h)
    apart = h
    assert apart._op == "linear"
    apart.sum().backward()
    np.testing.assert_array_equal(fused.numpy(), apart.numpy())
    for got, want in zip(fused_grads, (p.grad for p in mlp.parameters())):
        np.testing.assert_allclose(got, want, rtol=1e-15)
    assert leanpass.nn.MLP([3, 4, 2], activation="tanh")(x)._op == "linear"
    no_bias = leanpass.nn.MLP([3, 4, 2])
    no_bias.layers[1] = leanpass.nn.Linear(4, 2, bias=False)
    assert no_bias(x)._op == "linear"
    with pytest.raises(ValueError, match=r"Linear\(3, 4\): input of shape \(5, 2\)"):
        mlp(Tensor(rand(5, 2)))  # the layer-by-layer path names the layer


def test_mlp_node_follows_replaced_layers_weights_and_activations():
    """Whether an MLP is one node is decided at each call: replacing a weight, a layer
    or an activation afterwards is seen at the next call."""
    leanpass.manual_seed(0)
    mlp = leanpass.nn.MLP([3, 4, 2], dtype="float64")
    x = Tensor(rand(5, 3))
    assert mlp(x)._op == "mlp"
    new_weight = rand(2, 4)
    mlp.layers[1].weight = leanpass.nn.Parameter(new_weight)
    out = mlp(x)
    assert out._op == "mlp"
    first = mlp.layers[0]
    hidden = np.maximum(x.numpy() @ first.weight.numpy().T + first.bias.numpy(), 0.0)
    np.testing.assert_allclose(out.numpy(), hidden @ new_weight.T + mlp.layers[1].bias.numpy(), rtol=1e-12)
    mlp.layers[1].bias = None
    assert mlp(x)._op == "linear"
    mlp.layers[1] = leanpass.nn.Linear(4, 2, dtype="float64")
    assert mlp(x)._op == "mlp"
    mlp.activations[0] = leanpass.nn.Tanh()
    assert mlp(x)._op == "linear"
    mlp.activations[0] = leanpass.nn.ReLU()
    assert mlp(x)._op == "mlp"
    mlp.layers.append(leanpass.nn.Linear(2, 3, dtype="float64"))  # grown in place: seen too
    mlp.activations.append(leanpass.nn.ReLU())
    out = mlp(x)
    assert out._op == "mlp" and out.shape == (5, 3)
    mlp.layers[2] = leanpass.nn.Linear(4, 3, dtype="float64")  # widths no longer chain
    with pytest.raises(ValueError, match=r"Linear\(4, 3\): input of shape \(5, 2\)"):
        mlp(x)
    del mlp.layers[2].bias
    mlp.layers[2].bias = None
    mlp.layers[2] = leanpass.nn.Linear(2, 3, dtype="float64")
    assert mlp(x)._op == "mlp"


def test_mlp_copies_decide_for_their_own_layers():
    """A copied or unpickled MLP runs with its own parameters, and a change to the
    copy is seen by the copy alone."""
    leanpass.manual_seed(0)
    mlp = leanpass.nn.MLP([3, 4, 2], dtype="float64")
    x = Tensor(rand(5, 3))
    before = mlp(x).numpy()
    for other in (copy.deepcopy(mlp), pickle.loads(pickle.dumps(mlp))):
        np.testing.assert_array_equal(other(x).numpy(), before)
        new_weight = rand(2, 4)
        other.layers[1].weight = leanpass.nn.Parameter(new_weight)
        first = other.layers[0]
        hidden = np.maximum(x.numpy() @ first.weight.numpy().T + first.bias.numpy(), 0.0)
        out = other(x)
        assert out._op == "mlp" and out._node._prev[2] is other.layers[1].weight
        np.testing.assert_allclose(out.numpy(), hidden @ new_weight.T + other.layers[1].bias.numpy(), rtol=1e-12)
        np.testing.assert_array_equal(mlp(x).numpy(), before)


SCALAR = {
    "add_scalar": (lambda a: a + 1.5, lambda x: x + 1.5),
    "radd_scalar": (lambda a: 1.5 + a, lambda x: 1.5 + x),
    "sub_scalar": (lambda a: a - 1.5, lambda x: x - 1.5),
    "rsub_scalar": (lambda a: 3.0 - a, lambda x: 3.0 - x),
    "mul_scalar": (lambda a: a * -2.5, lambda x: x * -2.5),
    "rmul_scalar": (lambda a: 2 * a, lambda x: 2 * x),
    "div_scalar": (lambda a: a / 4.0, lambda x: x / 4.0),
    "rdiv_scalar": (lambda a: 2.0 / a, lambda x: 2.0 / x),
    "pow_2": (lambda a: a**2, lambda x: x**2),
    "pow_3": (lambda a: a**3, lambda x: x**3),
    "pow_neg": (lambda a: a**-1.5, lambda x: np.abs(x) ** -1.5),
    "pow_half": (lambda a: a**0.5, lambda x: np.abs(x) ** 0.5),
    "pow_0": (lambda a: a**0, lambda x: x**0),
    "rpow": (lambda a: 2.0**a, lambda x: 2.0**x),
    "neg": (lambda a: -a, lambda x: -x),
}


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


UNARY = {
    "relu": (lambda a: a.relu(), lambda x: np.maximum(x, 0)),
    "leaky_relu": (lambda a: a.leaky_relu(0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    "leaky_relu_default": (lambda a: a.leaky_relu(), lambda x: np.where(x > 0, x, 0.01 * x)),
    "exp": (lambda a: a.exp(), np.exp),
    "log": (lambda a: a.abs().log(), lambda x: np.log(np.abs(x))),
    "sigmoid": (lambda a: a.sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (lambda a: a.tanh(), np.tanh),
    "softplus": (lambda a: a.softplus(), lambda x: np.log1p(np.exp(x))),
    "gelu": (lambda a: a.gelu(approximate="tanh"), _gelu),
    "abs": (lambda a: a.abs(), np.abs),
    "sqrt": (lambda a: a.abs().sqrt(), lambda x: np.sqrt(np.abs(x))),
    "clip": (lambda a: a.clip(-1.0, 1.2), lambda x: np.clip(x, -1.0, 1.2)),
    "clip_low": (lambda a: a.clip(a_min=-0.7), lambda x: np.clip(x, -0.7, None)),
    "clamp_high": (lambda a: a.clamp(max=0.8), lambda x: np.clip(x, None, 0.8)),
    "softmax": (lambda a: a.softmax(), lambda x: _softmax(x, -1)),
    "softmax_axis0": (lambda a: a.softmax(axis=0), lambda x: _softmax(x, 0)),
    "log_softmax": (lambda a: a.log_softmax(), lambda x: np.log(_softmax(x, -1))),
    "log_softmax_axis1": (lambda a: a.log_softmax(1), lambda x: np.log(_softmax(x, 1))),
    "sum": (lambda a: a.sum(), lambda x: x.sum()),
    "sum_axis": (lambda a: a.sum(axis=1), lambda x: x.sum(axis=1)),
    "sum_neg_tuple_keep": (lambda a: a.sum(axis=(0, -1), keepdims=True), lambda x: x.sum(axis=(0, -1), keepdims=True)),
    "mean": (lambda a: a.mean(), lambda x: x.mean()),
    "mean_axis_keep": (lambda a: a.mean(axis=-1, keepdims=True), lambda x: x.mean(axis=-1, keepdims=True)),
    "mean_tuple": (lambda a: a.mean(axis=(1, 2)), lambda x: x.mean(axis=(1, 2))),
    "max": (lambda a: a.max(), lambda x: x.max()),
    "max_axis": (lambda a: a.max(axis=0), lambda x: x.max(axis=0)),
    "max_tuple_keep": (lambda a: a.max(axis=(0, 2), keepdims=True), lambda x: x.max(axis=(0, 2), keepdims=True)),
    "reshape": (lambda a: a.reshape(4, -1), lambda x: x.reshape(4, -1)),
    "reshape_tuple": (lambda a: a.reshape((2, 12)), lambda x: x.reshape(2, 12)),
    "transpose": (lambda a: a.transpose(), lambda x: x.transpose()),
    "transpose_axes": (lambda a: a.transpose(1, 2, 0), lambda x: x.transpose(1, 2, 0)),
    "transpose_swap": (lambda a: a.transpose(0, 2), lambda x: np.swapaxes(x, 0, 2)),
    "T": (lambda a: a.T, lambda x: x.T),
    "flatten": (lambda a: a.flatten(), lambda x: x.reshape(-1)),
    "flatten_from_1": (lambda a: a.flatten(1), lambda x: x.reshape(2, -1)),
    "getitem_basic": (lambda a: a[1, ::2, None, -1], lambda x: x[1, ::2, None, -1]),
    "getitem_array": (lambda a: a[[0, 0, 1]], lambda x: x[[0, 0, 1]]),
    "getitem_axis1": (lambda a: a[:, [2, 0, 2]], lambda x: x[:, [2, 0, 2]]),
    "getitem_points": (lambda a: a[[0, 1, 1], [2, 2, 0]], lambda x: x[[0, 1, 1], [2, 2, 0]]),
}


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_gradcheck(device, name):
    fn, arrays = BINARY[name]
    inputs = [leaf(device, x) for x in arrays]
    assert gradcheck(fn, inputs)
    out = fn(*inputs)
    reference = np.matmul(*arrays) if name.startswith("matmul") else fn(*arrays)
    np.testing.assert_allclose(out.numpy(), reference, rtol=1e-12)


@pytest.mark.parametrize("name", list(SCALAR))
def test_scalar_gradcheck(device, name):
    fn, reference = SCALAR[name]
    x = away_from_zero(3, 4)
    if name in ("pow_neg", "pow_half"):
        x = np.abs(x)
    assert gradcheck(fn, (leaf(device, x),))
    np.testing.assert_allclose(fn(leaf(device, x)).numpy(), reference(x), rtol=1e-12)


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_gradcheck(device, name):
    fn, reference = UNARY[name]
    x = away_from_zero(2, 3, 4)
    assert gradcheck(fn, (leaf(device, x),))
    np.testing.assert_allclose(fn(leaf(device, x)).numpy(), reference(x), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "tanh", "gelu", "sigmoid", "exp", "softmax", "log_softmax"])
def test_unary_under_broadcast_chain(device, name):
    """An element-wise op between two broadcasting binary ops."""
    fn, _ = UNARY[name]
    a, b = leaf(device, rand(3, 1)), leaf(device, away_from_zero(4))
    assert gradcheck(lambda a, b: fn(a * b) + b, (a, b))


def test_composite_expression(device):
    x, w, b = leaf(device, rand(5, 3)), leaf(device, rand(3, 2)), leaf(device, rand(2))

    def f(x, w, b):
        h = (x @ w + b).tanh()
        return (h * h).mean(axis=0).log_softmax() - h.max()

    assert gradcheck(f, (x, w, b))


def test_same_tensor_on_both_sides(device):
    x = leaf(device, away_from_zero(3))
    assert gradcheck(lambda x: x * x + x / x - x, (x,))


def test_to_and_astype_are_differentiable(device):
    x = leaf(device, rand(3))
    y = (x.to(other_device(device)) * 2.0).to(device).astype("float32").sum()
    y.backward()
    np.testing.assert_array_equal(host(device, x.grad), [2.0, 2.0, 2.0])
    assert leanpass.backends.get_backend(device).dtype("float64") == x.grad.dtype


def test_float32_stays_float32(device):
    """Python constants never promote a float32 tensor (or its gradient) to float64."""
    x = Tensor(rand(2, 3).astype(np.float32), requires_grad=True, device=device)
    w = Tensor(rand(3, 2).astype(np.float32), requires_grad=True, device=device)
    y = ((x @ w).gelu(approximate="tanh") * 0.5 + 1.0) / 3.0 - 2.0
    y = (y**2).sigmoid().tanh().exp().log_softmax() + (2.0 ** x).sum() + x.abs().sqrt().sum() * 1e-3
    y = y.clip(-10.0, 10.0).leaky_relu(0.2).relu().max(axis=1).mean()
    y.backward()
    f32 = get_backend(device).dtype("float32")
    assert y.dtype == f32 and x.grad.dtype == f32 and w.grad.dtype == f32


def test_large_logits_stay_finite(device):
    x = leaf(device, np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, 1e4]]))
    for out in (x.softmax(), x.log_softmax()):
        out.sum().backward()
        assert np.isfinite(out.numpy()).all()
        assert np.isfinite(host(device, x.grad)).all()


def test_sigmoid_no_overflow_warning(device):
    """pytest turns warnings into errors here, so an overflow in exp would fail."""
    x = leaf(device, np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0]))
    s = x.sigmoid()
    np.testing.assert_allclose(s.numpy(), [0.0, 1.9287498479639178e-22, 0.5, 1.0, 1.0], atol=1e-30)
    s.sum().backward()
    assert np.isfinite(host(device, x.grad)).all()


def test_softplus_is_stable_and_exact_at_zero(device):
    x = leaf(device, np.array([-1e4, 0.0, 1e4]))
    y = x.softplus()
    np.testing.assert_allclose(y.numpy(), [0.0, np.log(2.0), 1e4])
    y.sum().backward()
    np.testing.assert_allclose(host(device, x.grad), [0.0, 0.5, 1.0])


def test_log_of_zero_and_negative_without_warning(device):
    x = leaf(device, np.array([-1.0, 0.0, 1.0]))
    out = x.log().numpy()
    assert np.isnan(out[0]) and out[1] == -np.inf and out[2] == 0.0


def test_max_shares_gradient_between_ties(device):
    x = leaf(device, np.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]]))
    x.max().backward()
    np.testing.assert_array_equal(host(device, x.grad), [[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]])


def test_zero_d_results_are_arrays(device):
    x = leaf(device, rand(3))
    s = x.sum()
    backend = get_backend(device)
    assert type(s.data) is backend.array_type and s.shape == ()
    assert type((s * 2.0).data) is backend.array_type
    assert isinstance(s.item(), float)
    s.backward()
    z = leaf(device, 3.0)
    (z * z).backward()
    assert type(z.grad) is backend.array_type and float(z.grad) == 6.0


def test_gelu_gradient_is_finite_for_huge_float32_inputs(device):
    """Where tanh saturates the second term is exactly 0: no inf * 0 = NaN (PyTorch: 0, 1)."""
    x = Tensor([-1e18, -3e13, 3e13, 1e15, 1e18], dtype="float32", device=device, requires_grad=True)
    x.gelu(approximate="tanh").sum().backward()
    assert leanpass.asarray(x.grad).numpy().tolist() == [0.0, 0.0, 1.0, 1.0, 1.0]
