"""leanpass.nn.init: exact values for a seed on every device, PyTorch's fans and gains,
statistics, in-place semantics and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import leanpass
from leanpass import Tensor, nn
from leanpass.nn import init
from leanpass.nn.init import _calculate_fan_in_and_fan_out

SHAPES = [(4, 3), (5, 2, 3), (6, 4, 3, 2)]


def torch_or_skip():
    return pytest.importorskip("torch", reason="the comparison with PyTorch needs torch")


def drawn(seed, kind, a, b, shape):
    """What the host generator seeded with ``seed`` draws (manual_seed's generator)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(a, b, size=shape) if kind == "uniform" else rng.normal(a, b, size=shape)


@pytest.mark.parametrize("shape", SHAPES)
def test_fans_and_gains_are_pytorchs(shape):
    torch = torch_or_skip()
    assert _calculate_fan_in_and_fan_out(Tensor(np.zeros(shape))) == \
        torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    for name in ["linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu", "selu"]:
        assert init.calculate_gain(name) == torch.nn.init.calculate_gain(name)
    assert init.calculate_gain("leaky_relu", 0.2) == torch.nn.init.calculate_gain("leaky_relu", 0.2)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
def test_kaiming_and_xavier_draw_pytorchs_distributions_exactly_for_a_seed(device, shape, mode):
    torch = torch_or_skip()
    probe = torch.empty(shape)
    fan = torch.nn.init._calculate_correct_fan(probe, mode)
    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(probe)
    # torch.nn.init's formulas, as it rounds them
    kaiming = math.sqrt(3.0) * (torch.nn.init.calculate_gain("leaky_relu", math.sqrt(5)) / math.sqrt(fan))
    xavier = math.sqrt(3.0) * (2.0 * math.sqrt(2.0 / float(fan_in + fan_out)))
    cases = [
        (lambda t: init.kaiming_uniform_(t, a=math.sqrt(5), mode=mode), "uniform", -kaiming, kaiming),
        (lambda t: init.kaiming_normal_(t, mode=mode, nonlinearity="relu"), "normal", 0.0,
         math.sqrt(2.0) / math.sqrt(fan)),
        (lambda t: init.xavier_uniform_(t, gain=2.0), "uniform", -xavier, xavier),
        (lambda t: init.xavier_normal_(t), "normal", 0.0, 1.0 * math.sqrt(2.0 / float(fan_in + fan_out))),
        (lambda t: init.uniform_(t, -0.5, 2.0), "uniform", -0.5, 2.0),
        (lambda t: init.normal_(t, 1.0, 0.25), "normal", 1.0, 0.25),
    ]
    for seed, (fill, kind, a, b) in enumerate(cases):
        t = Tensor(np.zeros(shape), device=device)
        leanpass.manual_seed(seed)
        assert fill(t) is t and t.device == device
        np.testing.assert_array_equal(t.numpy(), drawn(seed, kind, a, b, shape))


def test_one_seed_gives_the_same_float32_values_on_every_device(device):
    t = Tensor(np.zeros((3, 4), dtype=np.float32), device=device)
    leanpass.manual_seed(7)
    init.kaiming_uniform_(t)
    assert t.dtype == "float32"
    bound = math.sqrt(3.0) * (math.sqrt(2.0) / math.sqrt(4))
    np.testing.assert_array_equal(t.numpy(), drawn(7, "uniform", -bound, bound, (3, 4)).astype(np.float32))


def test_linear_weights_take_pytorchs_fan_in():
    """Linear.weight is (out, in), as PyTorch's: the default mode="fan_in" is over
    in_features, and kaiming_uniform_(a=sqrt(5)) gives torch.nn.Linear's bound."""
    torch = torch_or_skip()
    layer = nn.Linear(50, 7)  # weight (out, in) = (7, 50), as torch.nn.Linear(50, 7)'s
    leanpass.manual_seed(3)
    init.kaiming_uniform_(layer.weight, a=math.sqrt(5))
    gain = torch.nn.init.calculate_gain("leaky_relu", math.sqrt(5))
    bound = math.sqrt(3.0) * (gain / math.sqrt(50))  # 1 / sqrt(50): torch.nn.Linear(50, 7)'s
    assert _calculate_fan_in_and_fan_out(layer.weight) == torch.nn.init._calculate_fan_in_and_fan_out(
        torch.nn.Linear(50, 7).weight) == (50, 7)
    assert bound == pytest.approx(1 / math.sqrt(50), rel=1e-15)
    np.testing.assert_array_equal(layer.weight.numpy(), drawn(3, "uniform", -bound, bound, (7, 50)))
    assert np.abs(layer.weight.numpy()).max() <= bound


def test_linear_draws_the_weights_of_0_3_transposed(device):
    """A seed gives the function it gave in 0.3: the (in, out) draw of 0.3, stored
    transposed, C-ordered as its gradients are."""
    leanpass.manual_seed(5)
    layer = nn.Linear(6, 4, device=device)
    bound = 1 / math.sqrt(6)
    np.testing.assert_array_equal(layer.weight.numpy(), drawn(5, "uniform", -bound, bound, (6, 4)).T)
    if device == "cpu":
        assert layer.weight.data.flags.c_contiguous


def test_statistics_of_large_draws():
    t = Tensor(np.zeros((400, 500)))
    leanpass.manual_seed(0)
    init.kaiming_normal_(t, mode="fan_out")  # fan_out = 400
    assert abs(t.numpy().std() - math.sqrt(2 / 400)) < 0.01 * math.sqrt(2 / 400)
    assert abs(t.numpy().mean()) < 1e-3
    init.xavier_uniform_(t)
    bound = math.sqrt(6 / 900)
    assert np.abs(t.numpy()).max() <= bound and abs(t.numpy().std() - bound / math.sqrt(3)) < 0.01 * bound


def test_constants(device):
    t = Tensor(np.ones((2, 3)), requires_grad=True, device=device)
    assert init.zeros_(t) is t and not t.numpy().any()
    init.ones_(t)
    np.testing.assert_array_equal(t.numpy(), np.ones((2, 3)))
    init.constant_(t, 0.25)
    np.testing.assert_array_equal(t.numpy(), np.full((2, 3), 0.25))
    ints = Tensor(np.arange(3), dtype="int64", device=device)
    init.zeros_(ints)
    assert ints.dtype == "int64" and not ints.numpy().any()


def test_in_place_outside_the_graph_bumping_the_version(device):
    p = nn.Parameter(np.ones((3, 2)), device=device)
    view = p[0]
    saved = (p * p).sum()  # saves p's values
    version = p._version
    init.normal_(p)  # grad mode is on: it still works (no_grad inside) on a leaf that requires grad
    assert p._version > version and p.is_leaf and p.requires_grad and type(p) is nn.Parameter
    np.testing.assert_array_equal(view.numpy(), p.numpy()[0])  # written into the same memory
    with pytest.raises(RuntimeError):
        saved.backward()


def test_errors_change_nothing():
    t = Tensor(np.ones(3))
    for call, error, message in [
        (lambda: init.xavier_uniform_(t), ValueError, r"xavier_uniform_: fan in and fan out need a tensor of at "
                                                      r"least 2 axes, got shape \(3,\)"),
        (lambda: init.kaiming_normal_(Tensor(np.ones((2, 2))), mode="fan"), ValueError, "mode 'fan' not supported"),
        (lambda: init.kaiming_uniform_(Tensor(np.ones((2, 2))), nonlinearity="swish"), ValueError,
         "unsupported nonlinearity 'swish'"),
        (lambda: init.calculate_gain("leaky_relu", "0.1"), ValueError, "negative_slope '0.1' is not a valid number"),
        (lambda: init.uniform_(t, 1.0, 0.0), ValueError, "needs a <= b"),
        (lambda: init.normal_(t, 0.0, -1.0), ValueError, "needs std >= 0"),
        (lambda: init.uniform_(Tensor(np.arange(3), dtype="int64")), TypeError, "real floating-point"),
        (lambda: init.normal_(np.ones(3)), TypeError, "normal_: expected a Tensor, got ndarray"),
    ]:
        with pytest.raises(error, match=message):
            call()
    np.testing.assert_array_equal(t.numpy(), np.ones(3))


def test_kaiming_of_a_zero_element_tensor_warns_and_does_nothing():
    t = Tensor(np.zeros((0, 3)))
    with pytest.warns(UserWarning, match="zero-element tensor is a no-op"):
        assert init.kaiming_uniform_(t) is t
