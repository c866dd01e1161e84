"""leanpass.nn: modules, layers and losses on every device."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import leanpass
from leanpass import Tensor, gradcheck, nn, optim
from leanpass.backends import get_backend


def host(device, array):
    return get_backend(device).to_host(array)


class Block(nn.Module):
    def __init__(self, device=None):
        self.first = nn.Linear(3, 4, device=device)
        self.stack = [nn.Linear(4, 4, device=device), nn.ReLU()]
        self.heads = {"a": nn.Linear(4, 2, device=device), "b": nn.Linear(4, 1, bias=False, device=device)}
        self.shared = self.first  # the same module twice: its parameters count once
        self.scale = Tensor([1.5], requires_grad=True, device=device)
        self._cache = Tensor([0.0], device=device)  # private: not a parameter

    def forward(self, x):
        h = self.stack[1](self.stack[0](self.first(x)))
        return self.heads["a"](h) * self.scale, self.heads["b"](h)


def test_layers_and_losses_stay_on_their_device_whatever_the_default(device):
    leanpass.set_default_device("strict:2")
    try:
        layer = nn.Linear(3, 2, device=device)
        assert layer.weight.device == layer.bias.device == get_backend(device).device
        x = Tensor(np.ones((4, 3)), device=device)
        y = nn.Dropout(0.5)(layer(x))
        loss = nn.cross_entropy_loss(y, [0, 1, 1, 0])
        assert loss.device == get_backend(device).device
    finally:
        leanpass.set_default_device("cpu")


def test_parameters_are_found_once_in_a_stable_order(device):
    block = Block(device)
    names = [n for n, _ in block.named_parameters()]
    assert names == [
        "first.weight", "first.bias", "stack.0.weight", "stack.0.bias",
        "heads.a.weight", "heads.a.bias", "heads.b.weight", "scale",
    ]
    assert [id(p) for p in block.parameters()] == [id(p) for _, p in block.named_parameters()]
    assert isinstance(block.parameters(), list)
    assert names == [n for n, _ in Block(device).named_parameters()]


def test_linear_shapes_and_initialisation(device):
    leanpass.manual_seed(0)
    layer = nn.Linear(100, 7, device=device)
    w = layer.weight.numpy()
    assert w.shape == (7, 100) and layer.bias.shape == (7,)  # weight is (out, in), as PyTorch's
    assert np.abs(w).max() <= 1 / math.sqrt(100) and np.abs(w).max() > 0.8 / math.sqrt(100)
    assert not layer.bias.numpy().any()
    assert layer(Tensor(np.ones((5, 100)), device=device)).shape == (5, 7)
    assert layer.weight.device == get_backend(device).device


def test_same_seed_same_weights_on_every_device(device):
    leanpass.manual_seed(42)
    here = nn.MLP([4, 8, 2], device=device)
    leanpass.manual_seed(42)
    cpu = nn.MLP([4, 8, 2])
    for a, b in zip(here.parameters(), cpu.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_mlp_structure_and_gradcheck(device):
    leanpass.manual_seed(1)
    model = nn.MLP([3, 5, 4, 2], activation="tanh", device=device)
    assert [layer.weight.shape for layer in model.layers] == [(5, 3), (4, 5), (2, 4)]
    x = Tensor(np.random.default_rng(0).normal(size=(6, 3)), device=device)
    assert model(x).shape == (6, 2)
    params = model.parameters()
    assert len(params) == 6
    np.testing.assert_allclose(_forward_with(model, params, x).numpy(), model(x).numpy())
    # gradcheck the whole MLP through copies of its parameters
    assert gradcheck(lambda *ps: _forward_with(model, ps, x), [Tensor(p, requires_grad=True) for p in params])


def _forward_with(model, values, x):
    """The model's output with its parameters replaced by ``values`` (Tensors)."""
    out = x
    layers = model.layers
    for i in range(len(layers)):
        out = out @ values[2 * i].T + values[2 * i + 1]
        if i < len(layers) - 1:
            out = model.activations[i](out)
    return out


def test_mlp_activations_and_errors():
    for name in ("relu", "tanh", "sigmoid", "gelu", "leaky_relu"):
        assert nn.MLP([2, 3, 1], activation=name)(Tensor(np.ones((1, 2)))).shape == (1, 1)
    assert nn.MLP([2, 3, 1], activation=nn.LeakyReLU(0.2)).activations[0].negative_slope == 0.2
    with pytest.raises(ValueError, match="unknown activation"):
        nn.MLP([2, 1], activation="swish")
    with pytest.raises(ValueError):
        nn.MLP([2])
    with pytest.raises(ValueError, match=r"\(4, 3\)"):
        nn.Linear(2, 1)(Tensor(np.ones((4, 3))))


def test_sequential_and_activation_modules(device):
    x = Tensor(np.linspace(-2, 2, 8).reshape(2, 4), device=device)
    for module, method in [(nn.ReLU(), "relu"), (nn.Sigmoid(), "sigmoid"), (nn.Tanh(), "tanh")]:
        np.testing.assert_array_equal(module(x).numpy(), getattr(x, method)().numpy())
    np.testing.assert_array_equal(nn.GELU(approximate="tanh")(x).numpy(), x.gelu(approximate="tanh").numpy())
    if get_backend(device).special.available:  # the exact form needs erf (not on strict)
        np.testing.assert_array_equal(nn.GELU()(x).numpy(), x.gelu().numpy())
    np.testing.assert_array_equal(nn.LeakyReLU(0.3)(x).numpy(), x.leaky_relu(0.3).numpy())
    np.testing.assert_array_equal(nn.Softmax(axis=0)(x).numpy(), x.softmax(axis=0).numpy())
    seq = nn.Sequential(nn.Linear(4, 3, device=device), nn.ReLU(), nn.Linear(3, 1, device=device))
    assert seq(x).shape == (2, 1) and len(seq) == 3 and isinstance(seq[1], nn.ReLU)
    assert len(seq.parameters()) == 4


def test_dropout(device):
    x = Tensor(np.ones((200, 50)), device=device)
    drop = nn.Dropout(0.25)
    leanpass.manual_seed(0)
    y = drop(x).numpy()
    assert set(np.unique(y)) <= {0.0, 1.0 / 0.75}
    assert abs((y == 0).mean() - 0.25) < 0.02
    leanpass.manual_seed(0)
    np.testing.assert_array_equal(drop(x).numpy(), y)  # reproducible
    drop.eval()
    assert drop(x) is x
    assert drop(x, training=True) is not x  # 0.1.x style override
    drop.train()
    assert drop(x, training=False) is x
    assert nn.Dropout(0.0)(x) is x
    for p in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="Dropout"):
            nn.Dropout(p)


def test_dropout_gradient_uses_the_same_mask(device):
    x = Tensor(np.ones((10, 10)), requires_grad=True, device=device)
    y = nn.Dropout(0.5)(x)
    y.sum().backward()
    np.testing.assert_array_equal(host(device, x.grad), y.numpy())


def test_train_eval_recursive():
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.Sequential(nn.Dropout(0.1)))
    assert model.eval() is model
    assert not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())


def test_zero_grad_reads_as_zeros(device):
    model = nn.Linear(3, 2, device=device)
    nn.mse_loss(model(Tensor(np.ones((4, 3)), device=device)), np.ones((4, 2))).backward()
    assert host(device, model.weight.grad).any()
    model.zero_grad()
    assert not host(device, model.weight.grad).any()


def test_to_moves_in_place_and_the_optimizer_keeps_working():
    leanpass.manual_seed(0)
    model = nn.MLP([3, 4, 1])
    params = model.parameters()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = Tensor(np.ones((2, 3))), Tensor(np.zeros((2, 1)))
    nn.mse_loss(model(x), y).backward()
    opt.step()
    assert model.to("strict:1") is model
    assert [id(p) for p in model.parameters()] == [id(p) for p in params]
    assert all(p.device == "strict:1" for p in params)
    x, y = x.to("strict:1"), y.to("strict:1")
    opt.zero_grad()
    nn.mse_loss(model(x), y).backward()
    opt.step()  # the momentum buffers follow the parameters to strict:1
    assert opt.state_dict()["state"][0]["momentum_buffer"].device == get_backend("strict:1").xp_device


def test_state_dict_round_trip_and_checks(device):
    leanpass.manual_seed(0)
    a = nn.MLP([3, 4, 2], device=device)
    leanpass.manual_seed(1)
    b = nn.MLP([3, 4, 2], device=device)
    weight = b.layers[0].weight
    state = a.state_dict()
    assert list(state) == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]
    b.load_state_dict(state)
    assert b.layers[0].weight is weight  # same objects, new values
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    b.layers[0].weight.data -= 1.0  # training b must not change a's arrays
    assert not np.array_equal(a.layers[0].weight.numpy(), b.layers[0].weight.numpy())

    before = [p.numpy() for p in b.parameters()]
    bad_shape = dict(state, **{"layers.0.bias": np.zeros(5)})
    bad_dtype = dict(state, **{"layers.0.bias": np.zeros(4, dtype=np.float32)})
    missing = {k: v for k, v in state.items() if k != "layers.1.bias"}
    extra = dict(state, extra=np.zeros(1))
    for bad, pattern in [(bad_shape, r"\(5,\).*\(4,\)"), (bad_dtype, "float32"), (missing, "missing"),
                         (extra, "unexpected")]:
        with pytest.raises(ValueError, match=pattern):
            b.load_state_dict(bad)
        for p, old in zip(b.parameters(), before):  # nothing changed
            np.testing.assert_array_equal(p.numpy(), old)
    b.load_state_dict(missing, strict=False)
    with pytest.raises(TypeError):
        b.load_state_dict([1, 2])


def test_mse_loss(device):
    p = Tensor([[1.0], [2.0], [4.0]], requires_grad=True, device=device)
    loss = nn.mse_loss(p, [[1.0], [0.0], [1.0]])
    assert loss.shape == () and loss.item() == pytest.approx((0 + 4 + 9) / 3)
    assert gradcheck(lambda p: nn.mse_loss(p, np.array([[1.0], [0.0], [1.0]])), (p,))
    with pytest.raises(ValueError, match=r"\(3, 1\).*\(3,\)"):
        nn.mse_loss(p, [1.0, 0.0, 1.0])  # no silent broadcast to (3, 3)


def test_cross_entropy_targets(device):
    rng = np.random.default_rng(0)
    logits_np = rng.normal(size=(5, 4))
    labels = np.array([0, 3, 1, 1, 2])
    onehot = np.eye(4)[labels]
    probs = rng.dirichlet(np.ones(4), size=5)
    logits = Tensor(logits_np, requires_grad=True, device=device)
    log_softmax = logits_np - np.log(np.exp(logits_np).sum(axis=1, keepdims=True))
    expected = -log_softmax[np.arange(5), labels].mean()
    assert nn.cross_entropy_loss(logits, labels).item() == pytest.approx(expected)
    assert nn.cross_entropy_loss(logits, onehot).item() == pytest.approx(expected)
    assert nn.cross_entropy_loss(logits, Tensor(labels, device=device)).item() == pytest.approx(expected)
    assert nn.cross_entropy_loss(logits, probs).item() == pytest.approx(-(probs * log_softmax).sum(axis=1).mean())
    for target in (labels, onehot, probs):
        assert gradcheck(lambda z, target=target: nn.cross_entropy_loss(z, target), (logits,))
    # the class axis elsewhere
    t_logits = Tensor(logits_np.T.copy(), requires_grad=True, device=device)
    assert nn.cross_entropy_loss(t_logits, labels, axis=0).item() == pytest.approx(expected)
    with pytest.raises(ValueError, match=r"\(3,\)"):
        nn.cross_entropy_loss(logits, [0, 1, 2])


@pytest.mark.parametrize("labels", [[0, 3, 1, 1, 2], [0.0, 3.0, 1.0, 1.0, 2.0]], ids=["int", "whole float"])
def test_cross_entropy_class_indices_of_any_real_dtype(device, labels):
    rng = np.random.default_rng(1)
    logits_np = rng.normal(size=(5, 4))
    logits = Tensor(logits_np, requires_grad=True, device=device)
    log_softmax = logits_np - np.log(np.exp(logits_np).sum(axis=1, keepdims=True))
    expected = -log_softmax[np.arange(5), [0, 3, 1, 1, 2]].mean()
    for target in (labels, np.asarray(labels), leanpass.asarray(labels, device=device)):
        loss = nn.cross_entropy_loss(logits, target)
        assert loss.item() == pytest.approx(expected, rel=1e-12)
    onehot = np.eye(4)[[0, 3, 1, 1, 2]]
    softmax = np.exp(log_softmax)
    logits.grad = None
    nn.cross_entropy_loss(logits, leanpass.asarray(labels, device=device)).backward()
    np.testing.assert_allclose(host(device, logits.grad), (softmax - onehot) / 5, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("bad", [[0, 4, 1, 1, 2], [0, -1, 1, 1, 2], [0.5, 1, 1, 1, 2], [np.nan, 1, 1, 1, 2]],
                         ids=["too big", "negative", "not whole", "nan"])
def test_invalid_class_indices_raise_where_a_check_is_free(device, bad):
    """Host data (a list, a NumPy array) is checked before it moves, on every device;
    a tensor already on a CPU device is checked there. (On a GPU a tensor's invalid
    index makes the loss NaN instead, in tests/test_cuda.py: checking would wait.)"""
    logits = Tensor(np.zeros((5, 4)), requires_grad=True, device=device)
    targets = [bad, np.asarray(bad)]
    if not device.startswith("cuda"):
        targets.append(leanpass.asarray(bad, device=device))
    for target in targets:
        with pytest.raises(ValueError, match=r"cross_entropy_loss: class indices must be whole numbers in \[0, 4\)"):
            nn.cross_entropy_loss(logits, target)
    assert logits.grad is None or not logits.has_grad
    with pytest.raises(TypeError, match="bool"):
        nn.cross_entropy_loss(logits, np.ones(5, dtype=bool))


def test_binary_cross_entropy(device):
    x = np.array([-2.0, -0.5, 0.0, 0.7, 3.0])
    y = np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    p = 1 / (1 + np.exp(-x))
    expected = -(y * np.log(p) + (1 - y) * np.log(1 - p)).mean()
    logits = Tensor(x, requires_grad=True, device=device)
    assert nn.binary_cross_entropy_loss(logits, y).item() == pytest.approx(expected)
    assert gradcheck(lambda z: nn.binary_cross_entropy_loss(z, y), (logits,))
    nn.binary_cross_entropy_loss(logits, y).backward()
    np.testing.assert_allclose(host(device, logits.grad), (p - y) / 5)  # exact at 0 too


@pytest.mark.parametrize("loss", ["cross_entropy", "bce"])
def test_losses_finite_for_huge_logits(device, loss):
    z = Tensor(np.array([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4]]), requires_grad=True, device=device)
    if loss == "cross_entropy":
        value = nn.cross_entropy_loss(z, [1, 0])
    else:
        value = nn.binary_cross_entropy_loss(z, np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0]]))
    value.backward()
    assert math.isfinite(value.item()) and value.item() > 1e3
    assert np.isfinite(host(device, z.grad)).all()


def test_losses_keep_float32(device):
    z = Tensor(np.ones((2, 3), dtype=np.float32), requires_grad=True, device=device)
    f32 = get_backend(device).dtype("float32")
    for value in (nn.mse_loss(z, np.zeros((2, 3))), nn.cross_entropy_loss(z, [0, 2]),
                  nn.binary_cross_entropy_loss(z, np.zeros((2, 3)))):
        assert value.dtype == f32


def test_module_repr():
    text = repr(nn.MLP([2, 3, 1]))
    assert "Linear(in_features=2, out_features=3, bias=True)" in text and "ReLU()" in text


def test_code_written_for_leanpass_0_1_runs_unchanged():
    """The NumPy-only 0.1.x style: parameters() a list, plain updates of .data,
    Dropout(p)(x, training=...), losses imported from leanpass.nn. (The weight was
    (in, out) until 0.3; it is PyTorch's (out, in) since.)"""
    from leanpass.nn import MLP, Dropout, Linear, binary_cross_entropy_loss, cross_entropy_loss, mse_loss

    assert Linear(3, 5).weight.shape == (5, 3)
    model = MLP([2, 16, 1])
    params = model.parameters()
    assert isinstance(params, list) and len(params) == 4
    x = Tensor(np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]))
    y = Tensor(np.array([[0.0], [1.0], [1.0], [0.0]]))
    drop = Dropout(0.1)
    first = None
    for _ in range(200):
        loss = mse_loss(model(drop(x, training=False)), y)
        loss.backward()
        for p in params:
            p.data -= 0.1 * p.grad
        loss.zero_grad_all()
        first = loss.item() if first is None else first
    assert loss.item() < first
    logits = np.array([[2.0, -1.0, 0.5], [0.0, 1.0, -3.0]])
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = -(log_softmax[0, 0] + log_softmax[1, 1]) / 2
    assert cross_entropy_loss(Tensor(logits), [0, 1]).item() == pytest.approx(expected)
    p = 1 / (1 + np.exp(-logits))
    target = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    expected = -(target * np.log(p) + (1 - target) * np.log(1 - p)).mean()
    assert binary_cross_entropy_loss(Tensor(logits), target).item() == pytest.approx(expected)


# ---- layers refuse what they cannot use ---------------------------------------------


@pytest.mark.parametrize("dtype", [np.int32, "int64", "bool", "complex64"])
def test_layers_refuse_parameters_of_a_dtype_without_gradients(dtype):
    name = np.dtype(dtype).name
    with pytest.raises(ValueError, match=rf"Linear.*{name}"):
        nn.Linear(3, 2, dtype=dtype)
    with pytest.raises(ValueError, match=rf"MLP.*{name}"):
        nn.MLP([3, 4, 2], dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float16, "float16", "float128", 3])
def test_layers_refuse_a_dtype_outside_the_standard(dtype):
    with pytest.raises(TypeError, match=rf"Linear.*{dtype!r}"):
        nn.Linear(3, 2, dtype=dtype)
    with pytest.raises(TypeError, match=rf"MLP.*{dtype!r}"):
        nn.MLP([3, 4, 2], dtype=dtype)


@pytest.mark.parametrize("dtype", ["float32", np.float64, leanpass.float32])
def test_layers_take_a_float_dtype_in_any_form(device, dtype):
    leanpass.manual_seed(0)
    layer = nn.Linear(3, 2, dtype=dtype, device=device)
    assert layer.weight.dtype == dtype and layer.bias.dtype == dtype  # a DType equals its NumPy type and name
    assert nn.MLP([3, 4, 2], dtype=dtype, device=device).layers[1].weight.dtype == dtype
    assert np.abs(layer.weight.numpy()).max() > 0.3  # drawn, not zeros


@pytest.mark.parametrize("bad", [[[1.0, 2.0, 3.0]], np.ones((1, 3))], ids=["list", "ndarray"])
def test_layers_and_losses_want_tensors(bad):
    modules = [nn.Linear(3, 2), nn.MLP([3, 2]), nn.ReLU(), nn.Sigmoid(), nn.Tanh(), nn.GELU(),
               nn.LeakyReLU(), nn.Softmax(), nn.Dropout(0.5)]
    for module in modules:
        with pytest.raises(TypeError, match=rf"{type(module).__name__}: .*Tensor.*{type(bad).__name__}"):
            module(bad)
    target = Tensor(np.ones((1, 3)))
    for loss, tgt in [(nn.mse_loss, target), (nn.cross_entropy_loss, [0]), (nn.binary_cross_entropy_loss, target)]:
        with pytest.raises(TypeError, match=rf"{loss.__name__}: .*Tensor.*{type(bad).__name__}"):
            loss(bad, tgt)


def test_linear_refuses_an_input_on_another_device(device):
    other = "strict:1" if device == "cpu" else "cpu"
    layer = nn.Linear(3, 2, device=device)
    x = Tensor(np.ones((4, 3)), device=other)
    weight = layer.weight.numpy()
    with pytest.raises(ValueError, match=rf"(?=.*\b{other}\b)(?=.*\b{re.escape(device)}\b)"):
        layer(x)
    np.testing.assert_array_equal(layer.weight.numpy(), weight)
    assert not layer.weight.has_grad


# ---- the model: values, devices, state --------------------------------------------


_NUMPY_ACTIVATIONS = {
    "relu": lambda h: np.maximum(h, 0.0),
    "tanh": np.tanh,
    "sigmoid": lambda h: 1.0 / (1.0 + np.exp(-h)),
    "gelu": lambda h: 0.5 * h * (1.0 + np.vectorize(math.erf)(h / math.sqrt(2.0))),  # exact: nn.GELU()'s default
    "leaky_relu": lambda h: np.where(h > 0, h, 0.01 * h),
    "identity": lambda h: h,
}


@pytest.mark.parametrize("activation", sorted(_NUMPY_ACTIVATIONS))
def test_mlp_computes_its_named_activation(device, activation):
    leanpass.manual_seed(3)
    model = nn.MLP([3, 5, 4, 2], activation=activation, device=device)
    x = np.random.default_rng(2).normal(size=(6, 3)) * 2
    if activation == "gelu" and not get_backend(device).special.available:
        with pytest.raises(NotImplementedError, match="approximate='tanh'"):
            model(Tensor(x, device=device))
        return
    h = x
    for i, layer in enumerate(model.layers):
        h = h @ layer.weight.numpy().T + layer.bias.numpy()
        if i < len(model.layers) - 1:
            h = _NUMPY_ACTIVATIONS[activation](h)
    np.testing.assert_allclose(model(Tensor(x, device=device)).numpy(), h, rtol=1e-12, atol=1e-14)


def test_to_moves_gradients_so_a_step_without_zero_grad_works():
    leanpass.manual_seed(0)
    model = nn.MLP([3, 4, 1])
    opt = optim.SGD(model.parameters(), lr=0.5)
    nn.mse_loss(model(Tensor(np.ones((2, 3)))), np.zeros((2, 1))).backward()
    before = [(p.numpy(), host("cpu", p.grad)) for p in model.parameters()]
    model.to("strict:1")
    xp_device = get_backend("strict:1").xp_device
    for p, (_, grad) in zip(model.parameters(), before):
        assert p.grad.device == xp_device
        np.testing.assert_array_equal(host("strict:1", p.grad), grad)
    opt.step()
    for p, (value, grad) in zip(model.parameters(), before):
        assert p.device == "strict:1"
        np.testing.assert_allclose(p.numpy(), value - 0.5 * grad, rtol=1e-15)


def test_load_state_dict_not_strict_loads_what_matches_and_reports_the_rest(device):
    leanpass.manual_seed(0)
    a = nn.MLP([3, 4, 2], device=device)
    leanpass.manual_seed(1)
    b = nn.MLP([3, 4, 2], device=device)
    kept = b.layers[1].bias.numpy()
    state = {k: v for k, v in a.state_dict().items() if k != "layers.1.bias"}
    state["extra.weight"] = np.zeros(2)
    result = b.load_state_dict(state, strict=False)
    assert result.missing_keys == ["layers.1.bias"] and result.unexpected_keys == ["extra.weight"]
    missing, unexpected = result  # a pair, as PyTorch's
    assert (missing, unexpected) == (["layers.1.bias"], ["extra.weight"])
    for name in ("layers.0.weight", "layers.0.bias", "layers.1.weight"):
        np.testing.assert_array_equal(dict(b.named_parameters())[name].numpy(), host(device, state[name]))
    np.testing.assert_array_equal(b.layers[1].bias.numpy(), kept)
    full = b.load_state_dict(a.state_dict())
    assert full.missing_keys == [] and full.unexpected_keys == []


# ---- cross-entropy ------------------------------------------------------------------


def test_cross_entropy_backward_scales_softmax_by_the_target_mass(device):
    rng = np.random.default_rng(4)
    logits_np = rng.normal(size=(4, 3))
    targets = rng.uniform(0.1, 1.0, size=(4, 3))  # rows sum to about 1.6, not 1
    logits = Tensor(logits_np, requires_grad=True, device=device)
    assert gradcheck(lambda z: nn.cross_entropy_loss(z, targets), (logits,))
    nn.cross_entropy_loss(logits, targets).backward()
    softmax = np.exp(logits_np) / np.exp(logits_np).sum(axis=1, keepdims=True)
    expected = (softmax * targets.sum(axis=1, keepdims=True) - targets) / 4
    np.testing.assert_allclose(host(device, logits.grad), expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("target", [[2], [[0.0, 0.0, 1.0]]], ids=["class index", "one-hot"])
def test_cross_entropy_with_a_minus_inf_logit_is_finite(device, target):
    """PyTorch: cross_entropy([[0, -inf, 1]], [2]) = 0.3133, gradient softmax - onehot,
    0 at the -inf logit (a probability target of 0 there counts 0 * log 0 as 0)."""
    logits = Tensor([[0.0, -math.inf, 1.0]], requires_grad=True, device=device)
    loss = nn.cross_entropy_loss(logits, target)
    assert loss.item() == pytest.approx(math.log(1 + math.e) - 1, rel=1e-12)  # 0.31326...
    loss.backward()
    p = 1 / (1 + math.e)
    np.testing.assert_allclose(host(device, logits.grad), [[p, 0.0, -p]], rtol=1e-12)


@pytest.mark.parametrize("target", [[1, 0], [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]], ids=["class index", "one-hot"])
def test_cross_entropy_of_a_row_of_minus_inf_is_nan(device, target):
    """As PyTorch: a row with no finite logit has no softmax; the other rows' gradients stay."""
    logits = Tensor([[-math.inf] * 3, [0.0, 1.0, 2.0]], requires_grad=True, device=device)
    with np.errstate(invalid="ignore"):
        loss = nn.cross_entropy_loss(logits, target)
        loss.backward()
    assert math.isnan(loss.item())
    grad = host(device, logits.grad)
    assert np.isnan(grad[0]).all()
    softmax = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    np.testing.assert_allclose(grad[1], (softmax - [1.0, 0.0, 0.0]) / 2, rtol=1e-12)


@pytest.mark.parametrize("kind", ["class index", "probabilities"])
def test_cross_entropy_refuses_a_target_on_another_device(device, kind):
    other = "strict" if device == "cpu" else "cpu"
    logits = Tensor(np.zeros((2, 3)), requires_grad=True, device=device)
    target = [0, 2] if kind == "class index" else np.eye(3)[[0, 2]]
    target = leanpass.asarray(target, device=other)
    with pytest.raises(ValueError, match=rf"cross_entropy_loss: (?=.*\b{re.escape(device)}\b)(?=.*\b{other}\b)"):
        nn.cross_entropy_loss(logits, target)
    assert target.device == other and not logits.has_grad


# ---- the fused layer_norm op --------------------------------------------------------------------


@pytest.mark.parametrize("normalized_shape", [(5,), (3, 5), (2, 3, 5)])
@pytest.mark.parametrize("affine", ["none", "weight", "bias", "both"])
def test_layer_norm_is_one_node_matching_torch_twice_differentiable(device, normalized_shape, affine):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(12)
    data = rng.normal(size=(2, 3, 5)) * 2 + 1
    params = {name: rng.normal(size=normalized_shape) for name in ("weight", "bias") if affine in (name, "both")}
    x = Tensor(data, requires_grad=True, device=device)
    ps = {k: Tensor(v, requires_grad=True, device=device) for k, v in params.items()}
    tx = torch.tensor(data, requires_grad=True)
    tps = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    y = nn.functional.layer_norm(x, normalized_shape, **ps, eps=1e-3)
    ty = torch.nn.functional.layer_norm(tx, normalized_shape, **tps, eps=1e-3)
    assert y._op == "layer_norm" and y._node._prev[0] is x  # one node on the input, whatever the parameters
    g = rng.normal(size=data.shape)
    np.testing.assert_allclose(host(device, y.data), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    (y * Tensor(g, device=device)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    for ours, theirs in [(x, tx)] + [(ps[k], tps[k]) for k in ps]:
        np.testing.assert_allclose(host(device, ours.grad), theirs.grad.numpy(), rtol=1e-10, atol=1e-12)
    names = list(ps)
    fn = lambda x, *p: nn.functional.layer_norm(x, normalized_shape, **dict(zip(names, p)))  # noqa: E731
    small = (Tensor(data if len(normalized_shape) == 3 else data[:1], requires_grad=True, device=device),)
    assert gradcheck(fn, small + tuple(ps.values()))
    assert leanpass.gradgradcheck(fn, small + tuple(ps.values()))


def test_layer_norm_output_changed_in_place_leaves_the_gradient_right(device):
    """Without weight the output is the normalised input, which backward reads: it
    must be a copy, so an in-place change of the output cannot reach it."""
    data = np.random.default_rng(13).normal(size=(3, 4))
    x = Tensor(data, requires_grad=True, device=device)
    y = nn.functional.layer_norm(x, 4)
    y[:, :2].sum().backward()  # a slice saves nothing: only layer_norm's own saved arrays matter
    expected = host(device, x.grad).copy()
    x.grad = None
    y = nn.functional.layer_norm(x, 4)
    z = y[:, :2].sum()
    with leanpass.no_grad():
        y *= 100.0
    z.backward()
    np.testing.assert_allclose(host(device, x.grad), expected, rtol=1e-12)


# ---- the fused scaled_dot_product_attention op -----------------------------------------------------


@pytest.mark.parametrize("mask", [None, "bool", "float"])
def test_attention_is_one_node_matching_torch_twice_differentiable(device, mask):
    """One node for scores, mask, softmax and weights @ v; a float mask gets its
    gradient (as PyTorch's), a bool one none."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(15)
    arrays = [rng.normal(size=s) for s in ((2, 1, 4, 3), (3, 5, 3), (1, 5, 2))]
    masks = {None: None, "bool": rng.random((4, 5)) < 0.7, "float": rng.normal(size=(2, 3, 4, 5))}
    if mask == "bool":
        masks["bool"][:, 0] = True
    ours = [Tensor(a, requires_grad=True, device=device) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    if mask is not None:
        ours.append(Tensor(masks[mask], requires_grad=mask == "float", device=device,
                           dtype="bool" if mask == "bool" else "float64"))
        theirs.append(torch.tensor(masks[mask], requires_grad=mask == "float"))
    y = nn.functional.scaled_dot_product_attention(*ours[:3], attn_mask=ours[3] if mask else None)
    ty = torch.nn.functional.scaled_dot_product_attention(*theirs[:3], attn_mask=theirs[3] if mask else None)
    assert y._op == "scaled_dot_product_attention" and y._node._prev[:3] == tuple(ours[:3])
    np.testing.assert_allclose(host(device, y.data), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = rng.normal(size=y.shape)
    (y * Tensor(g, device=device)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    for a, ta in zip(ours, theirs):
        if ta.requires_grad:
            np.testing.assert_allclose(host(device, a.grad), ta.grad.numpy(), rtol=1e-10, atol=1e-12)
        else:
            assert not a.has_grad
    rest = ours[3:] if mask == "float" else []
    fixed = ours[3] if mask == "bool" else None

    def fn(q, k, v, *m):
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m[0] if m else fixed)

    assert gradcheck(fn, tuple(ours[:3]) + tuple(rest))
    assert leanpass.gradgradcheck(fn, tuple(ours[:3]) + tuple(rest))


def test_integer_and_bool_inputs_give_float_results_not_numpy_errors(device):
    """gelu, sigmoid, softplus, softmax, log_softmax, layer_norm, attention and the
    cross-entropy losses take integer and bool tensors as the default float (as relu
    and tanh promote them), instead of failing inside NumPy."""
    x = leanpass.asarray([[1, 2], [3, 4]], device=device)
    b = leanpass.asarray([[True, False], [False, True]], device=device)
    for t in (x, b):
        wide = t.astype("float64")
        for f in (lambda u: u.gelu(approximate="tanh"), lambda u: u.sigmoid(), lambda u: u.softplus(),
                  lambda u: u.softmax(-1), lambda u: u.log_softmax(-1),
                  lambda u: nn.LayerNorm(2, device=device, dtype="float64")(u),
                  lambda u: nn.functional.scaled_dot_product_attention(u, u, u),
                  lambda u: nn.cross_entropy_loss(u, [0, 1]),
                  lambda u: nn.binary_cross_entropy_loss(u, np.ones((2, 2)))):
            got = f(t)
            assert got.dtype == "float64"
            np.testing.assert_allclose(got.numpy(), f(wide).numpy())


def test_attention_refuses_an_integer_mask(device):
    q = Tensor(np.random.default_rng(0).normal(size=(1, 3, 4)), device=device)
    with pytest.raises(TypeError, match="attn_mask must be bool .* got dtype int64"):
        nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=np.tril(np.ones((3, 3), dtype=np.int64)))


def test_pytorch_constructor_arguments_and_sequential_indices():
    assert repr(nn.ReLU(inplace=True)) == "ReLU(inplace=True)" and repr(nn.ReLU()) == "ReLU()"
    assert nn.LeakyReLU(0.2, True).inplace and repr(nn.Identity(3, unused=1)) == "Identity()"
    assert repr(nn.LayerNorm(4, bias=False)).endswith("bias=False)")
    x = Tensor([-1.0, 2.0])
    np.testing.assert_array_equal(nn.ReLU(inplace=True)(x).numpy(), [0.0, 2.0])
    np.testing.assert_array_equal(x.numpy(), [-1.0, 2.0])  # computed out of place
    with pytest.raises(TypeError, match="Dropout: p must be a number"):
        nn.Dropout("0.5")
    with pytest.raises(TypeError, match="ReLU: inplace must be a bool"):
        nn.ReLU(inplace="yes")
    seq = nn.Sequential(nn.ReLU())
    with pytest.raises(IndexError, match="Sequential.insert: index 5 is out of range for 1 layers"):
        seq.insert(5, nn.Tanh())
    with pytest.raises(IndexError, match="Sequential: index 3 is out of range"):
        seq[3]
    seq.insert(1, nn.Tanh())
    seq.insert(-2, nn.Sigmoid())
    assert [type(m).__name__ for m in seq] == ["Sigmoid", "ReLU", "Tanh"]


def test_dropout_takes_a_zero_d_probability_and_sequential_names_bad_indices():
    assert nn.Dropout(np.array(0.2)).p == 0.2 and nn.Dropout(leanpass.asarray(0.25)).p == 0.25
    seq = nn.Sequential(nn.ReLU())
    with pytest.raises(IndexError, match="Sequential: index 4 is out of range"):
        seq[4] = nn.Tanh()
    with pytest.raises(IndexError, match="Sequential: index -3 is out of range"):
        del seq[-3]


# ---- Linear and MLP against torch.nn, from the same state dict (weight (out, in), as PyTorch's) ------


def _torch_grads(torch, module, x, g):
    """torch's output, input gradient and parameter gradients (name -> array) of ``module(x)``
    with the output's gradient ``g``."""
    tx = torch.tensor(x, requires_grad=True)
    out = module(tx)
    out.backward(torch.tensor(g))
    return out.detach().numpy(), tx.grad.numpy(), {k: p.grad.numpy() for k, p in module.named_parameters()}


def _our_grads(model, x, g, device, layout="leanpass"):
    lx = Tensor(x, requires_grad=True, device=device)
    out = model(lx)
    out.backward(Tensor(g, device=device))
    return out.numpy(), host(device, lx.grad), {
        k: host(device, p.grad) for k, p in zip(model.state_dict(layout=layout), model.parameters())}


@pytest.mark.parametrize(("sizes", "bias"), [((4, 4), True), ((4, 4), False), ((5, 3), True), ((2, 6), False)])
def test_linear_matches_torch_from_its_state_dict(device, sizes, bias):
    """The same function as torch.nn.Linear given its state dict as it is, square and not,
    with and without bias: output, input and parameter gradients (float64); the weight
    keeps torch's (out, in) shape, and loading copies it."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    theirs = torch.nn.Linear(*sizes, bias=bias, dtype=torch.float64)
    ours = nn.Linear(*sizes, bias=bias, device=device, dtype="float64")
    assert ours.weight.shape == tuple(theirs.weight.shape) == sizes[::-1]
    assert ours.load_state_dict(theirs.state_dict()) == ([], [])
    assert ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()}, layout="torch") \
        == ([], [])  # layout="torch": accepted, the same
    rng = np.random.default_rng(1)
    x, g = rng.normal(size=(3, 2, sizes[0])), rng.normal(size=(3, 2, sizes[1]))
    want, want_x, want_p = _torch_grads(torch, theirs, x, g)
    got, got_x, got_p = _our_grads(ours, x, g, device)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(got_x, want_x, rtol=1e-7, atol=1e-12)
    assert list(got_p) == list(want_p)
    for key in want_p:
        np.testing.assert_allclose(got_p[key], want_p[key], rtol=1e-7, atol=1e-12, err_msg=key)
    with torch.no_grad():
        theirs.weight.add_(1.0)  # the loaded weight is a copy
    assert not np.allclose(ours.weight.numpy(), theirs.weight.detach().numpy())


@pytest.mark.parametrize("sizes", [[4, 4, 4, 3], [3, 6, 2]])
def test_mlp_is_a_stack_of_torch_linears(device, sizes):
    """An MLP (one fused node) loads a torch.nn.Sequential(Linear, ReLU, ..., Linear)'s
    state dict (PyTorch's names with layout="torch") and computes its function, its
    input and parameter gradients; so does a Sequential of Linear and ReLU."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(2)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [torch.nn.Linear(a, b, dtype=torch.float64)] + ([torch.nn.ReLU()] if i < len(sizes) - 2 else [])
    theirs = torch.nn.Sequential(*layers)
    rng = np.random.default_rng(3)
    x, g = rng.normal(size=(7, sizes[0])), rng.normal(size=(7, sizes[-1]))
    want, want_x, want_p = _torch_grads(torch, theirs, x, g)
    mlp = nn.MLP(sizes, device=device, dtype="float64")
    seq = nn.Sequential(*[nn.Linear(m.in_features, m.out_features, device=device, dtype="float64")
                          if isinstance(m, torch.nn.Linear) else nn.ReLU() for m in layers])
    for ours in (mlp, seq):
        assert ours.load_state_dict(theirs.state_dict(), layout="torch") == ([], [])
        if ours is mlp:
            assert ours(Tensor(x, device=device))._op == "mlp"
        got, got_x, got_p = _our_grads(ours, x, g, device, layout="torch")
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(got_x, want_x, rtol=1e-7, atol=1e-12)
        assert list(got_p) == list(want_p)
        for key in want_p:
            np.testing.assert_allclose(got_p[key], want_p[key], rtol=1e-7, atol=1e-12, err_msg=key)


def test_a_state_dict_of_the_wrong_shape_names_key_and_shapes_and_changes_nothing(device):
    """A weight of the wrong shape (an (in, out) weight into a non-square Linear, say)
    raises ValueError naming the key and both shapes, before any parameter changes."""
    model = nn.MLP([3, 4, 2], device=device, dtype="float64")
    before = [p.numpy().copy() for p in model.parameters()]
    state = {k: np.zeros(tuple(v.shape)) for k, v in model.state_dict().items()}
    state["layers.1.weight"] = np.zeros((4, 2))  # the transpose of (2, 4)
    with pytest.raises(ValueError, match=re.escape("load_state_dict: 'layers.1.weight' has shape (4, 2) in the "
                                                   "state but (2, 4) in the model")):
        model.load_state_dict(state)
    for b, p in zip(before, model.parameters()):
        np.testing.assert_array_equal(p.numpy(), b)
