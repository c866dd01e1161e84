"""The CPU stand-in for the `cuda` backend: what only CuPy does, on the CPU.

`Standin` is a CPU device of its own (``"standin:0"``, never ``"cuda"``) built on
array_api_strict (so only the standard passes, as on CuPy) that behaves as
leanpass/backends/cupy_backend.py where CuPy differs from NumPy:

- ``syncs_cheaply = False``: the GPU branches run (an invalid class index in a
  target on the device makes the loss NaN instead of raising);
- its own random generator, made at the first draw (``LazyGenerator``);
- scatter-add through ``add.at``; the older ``scatter_add`` spelling warns as
  ``cupyx.scatter_add`` does in CuPy 14 (a DeprecationWarning, an error under pytest);
- fused kernels with the CUDA kernels' statements (tests/test_fused.py uses them too).

Its results are compared with `strict`, the same library without the differences.
"""

from __future__ import annotations

import importlib.util
import sys
import types
import warnings
from pathlib import Path

import array_api_compat.numpy as compat_numpy
import array_api_strict as xs
import numpy as np
import pytest
from helpers import OPTIMIZERS, registered  # (tests/ is on sys.path)

import leanpass
from leanpass import Tensor, backends, nn
from leanpass.backends import get_backend
from leanpass.backends._base import FusedKernels, LazyGenerator, dtype_name
from leanpass.backends.strict_backend import StrictBackend

CALLS: dict[str, int] = {}  # kernel or generator name -> calls


def counted(name):
    def wrap(fn):
        def call(*args):
            CALLS[name] = CALLS.get(name, 0) + 1
            return fn(*args)

        return call

    return wrap


# The fused kernels, with the statements of the CUDA kernels in cupy_backend._kernels.
@counted("relu_backward")
def relu_backward(g, y):
    return xs.where(y > 0, g, xs.zeros_like(g))


@counted("sigmoid_backward")
def sigmoid_backward(g, y):
    return g * y - g * y * y


@counted("tanh_backward")
def tanh_backward(g, y):
    return g - g * y * y


@counted("sgd")
def sgd(grad, lr, wd, param):
    param -= lr * (grad + wd * param)


@counted("sgd_momentum")
def sgd_momentum(grad, lr, momentum, wd, nesterov, first, param, buf):
    g = grad + wd * param
    b = g if first else momentum * buf + g
    buf[...] = b
    param -= lr * (g + momentum * b if nesterov else b)


@counted("adam")
def adam(grad, step_size, one_minus_b1, b2, one_minus_b2, eps, bc2_sqrt, wd, decay, param, m, v):
    g = grad + wd * param
    param *= decay
    m += one_minus_b1 * (g - m)
    v[...] = b2 * v + one_minus_b2 * (g * g)
    param -= step_size * (m / (xs.sqrt(v) / bc2_sqrt + eps))


class _AddAt:
    """``lib.add.at(buf, key, values)``: NumPy's, on the host copy of ``buf``."""

    @staticmethod
    def at(host, key, values):
        np.add.at(host, key, values)


class _ScatterLib:
    """The two spellings of a scatter-add, as in CuPy 14."""

    add = _AddAt

    @staticmethod
    def scatter_add(host, key, values):
        warnings.warn("cupyx.scatter_add is deprecated. Use cupy.add.at instead.", DeprecationWarning,
                      stacklevel=2)
        np.add.at(host, key, values)


class Standin(StrictBackend):
    device_type = "standin"
    always_index = True  # "standin:0", as "cuda:0"
    syncs_cheaply = False
    fused = FusedKernels(relu_backward=relu_backward, sigmoid_backward=sigmoid_backward,
                         tanh_backward=tanh_backward, sgd=sgd, sgd_momentum=sgd_momentum, adam=adam)

    def __init__(self, index=0):
        super().__init__(index)
        self._rng = LazyGenerator(counted("make_generator")(np.random.default_rng))

    def index_add(self, buf, index, values, axis=0):  # CuPy: cupy.add.at, in place
        host = self._to_numpy(buf)
        _ScatterLib.add.at(host, (slice(None),) * axis + (self._to_numpy(index),), self._to_numpy(values))
        buf[...] = self._from_numpy(host)
        CALLS["index_add"] = CALLS.get("index_add", 0) + 1
        return buf

    # draws from the device's own generator, as CupyBackend
    def seed(self, seed):
        self._rng.seed(seed)

    def uniform(self, shape, low=0.0, high=1.0, dtype="float64"):
        return self._from_numpy(self._rng.get().random(shape, dtype=dtype_name(dtype)) * (high - low) + low)

    def normal(self, shape, mean=0.0, std=1.0, dtype="float64"):
        return self._from_numpy(self._rng.get().standard_normal(shape, dtype=dtype_name(dtype)) * std + mean)

    def bernoulli(self, shape, p, dtype="float64"):
        return self._from_numpy((self._rng.get().random(shape) < p).astype(dtype_name(dtype)))


@pytest.fixture(scope="module", autouse=True)
def standin_device():
    with registered("standin", Standin, "standin_arrays"):
        yield


@pytest.fixture(autouse=True)
def calls():
    CALLS.clear()
    return CALLS


def test_the_standin_is_a_cpu_device_of_its_own():
    backend = get_backend("standin")
    assert backend.device == "standin:0" and not backend.syncs_cheaply
    assert Tensor([1.0], device="standin").device == "standin:0"


def train(device, steps=5, dtype="float64"):
    leanpass.manual_seed(0)
    model = nn.MLP([4, 8, 3], device=device, dtype=dtype)
    opt = OPTIMIZERS["adam"](model.parameters())
    rng = np.random.default_rng(0)
    x = Tensor(rng.normal(size=(16, 4)), device=device, dtype=dtype)
    y = leanpass.asarray(rng.integers(0, 3, size=16), device=device)  # class indices on the device
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.cross_entropy_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.numpy() for p in model.parameters()]


def test_training_an_mlp_matches_strict(calls):
    losses, params = train("standin")
    assert losses[-1] < losses[0]
    assert calls["relu_backward"] == 5 and calls["adam"] == 5 * 4  # 1 activation, 4 parameters
    strict_losses, strict_params = train("strict")
    np.testing.assert_allclose(losses, strict_losses, rtol=1e-12)
    for a, b in zip(params, strict_params):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_steps_run_through_the_fused_kernels(name, calls):
    def step(device):
        p = Tensor(np.linspace(-1.0, 1.0, 6), requires_grad=True, device=device)
        opt = OPTIMIZERS[name]([p])
        for _ in range(3):
            opt.zero_grad()
            (p * p * p).sum().backward()
            opt.step()
        return p.numpy()

    fused = step("standin")
    assert calls[{"momentum": "sgd_momentum", "nesterov": "sgd_momentum"}.get(name, name.replace("w", ""))] == 3
    np.testing.assert_allclose(fused, step("strict"), rtol=1e-12, atol=1e-15)


def test_invalid_class_index_on_the_device_poisons_the_loss():
    logits = Tensor(np.zeros((2, 3)), requires_grad=True, device="standin")
    for bad in ([0, 3], [-1, 0], [0.5, 1.0]):
        loss = nn.cross_entropy_loss(logits, leanpass.asarray(bad, device="standin"))
        assert np.isnan(loss.item())
    good = nn.cross_entropy_loss(logits, leanpass.asarray([0.0, 2.0], device="standin"))
    assert good.item() == pytest.approx(np.log(3.0))
    good.backward()
    np.testing.assert_allclose(np.from_dlpack(logits.grad), [[-1 / 3, 1 / 6, 1 / 6], [1 / 6, 1 / 6, -1 / 3]])


def test_invalid_class_index_given_as_host_data_raises():
    logits = Tensor(np.zeros((2, 3)), requires_grad=True, device="standin")
    for bad in ([0, 3], np.array([0.5, 1.0])):
        with pytest.raises(ValueError, match=r"\[0, 3\)"):
            nn.cross_entropy_loss(logits, bad)  # checked on the host before it moves


def test_repeated_indices_accumulate_through_index_add(calls):
    data = np.arange(12.0).reshape(3, 4)
    weights = np.arange(1.0, 13.0).reshape(3, 4)

    def grads(device):
        out = []
        for pick in (lambda x: x[[0, 2, 0]], lambda x: leanpass.take(x, leanpass.asarray([3, 3, 1], device=device),
                                                                     axis=1)):
            x = Tensor(data, requires_grad=True, device=device)
            y = pick(x)
            (y * Tensor(weights[: y.shape[0], : y.shape[1]], device=device)).sum().backward()
            out.append(np.from_dlpack(x.grad))
        return out

    row, col = grads("standin")
    assert calls["index_add"] == 2
    expected_row = np.zeros((3, 4))
    np.add.at(expected_row, [0, 2, 0], weights)
    expected_col = np.zeros((3, 4))
    np.add.at(expected_col, (slice(None), [3, 3, 1]), weights[:, :3])
    np.testing.assert_array_equal(row, expected_row)
    np.testing.assert_array_equal(col, expected_col)


def test_the_deprecated_scatter_add_spelling_warns_as_on_cupy_14():
    host = np.zeros(3)
    with pytest.warns(DeprecationWarning, match="add.at"):
        _ScatterLib.scatter_add(host, np.array([1, 1]), np.ones(2))
    assert host.tolist() == [0.0, 2.0, 0.0]


def test_cupy_backend_scatters_with_add_at_not_the_deprecated_spelling():
    source = (Path(backends.__file__).parent / "cupy_backend.py").read_text()
    assert "cupy.add.at(" in source and "scatter_add" not in source


def test_manual_seed_makes_no_generator_until_the_first_draw(calls):
    backend = get_backend("standin")
    leanpass.manual_seed(1)
    leanpass.manual_seed(7)
    assert calls.get("make_generator", 0) == 0
    drop = nn.Dropout(0.5)
    x = Tensor(np.ones(64), device="standin")
    first = np.from_dlpack(drop(x).data)
    assert calls["make_generator"] == 1
    # the same stream as a generator made at once from the last seed
    expected = (np.random.default_rng(7).random(64) < 0.5) * 2.0
    np.testing.assert_array_equal(first, expected)
    backend.normal((2,))
    assert calls["make_generator"] == 1  # made once, drawn on
    leanpass.manual_seed(7)
    np.testing.assert_array_equal(np.from_dlpack(drop(x).data), first)
    assert calls["make_generator"] == 2


def test_cupy_backend_seeds_lazily_with_the_same_stream(monkeypatch):
    """The real CupyBackend's seeding, with just enough of a `cupy` module (NumPy's
    generator in place of CuPy's) to create it: loaded privately, never registered."""
    made = []

    class Device:
        def __init__(self, index):
            self.id = index

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    def default_rng(seed=None):
        made.append(seed)
        return np.random.default_rng(seed)

    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(Device=Device, runtime=types.SimpleNamespace(getDeviceCount=lambda: 1)),
        random=types.SimpleNamespace(default_rng=default_rng),
        ElementwiseKernel=lambda *args: None,
        ndarray=np.ndarray,
    )
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setitem(sys.modules, "array_api_compat.cupy", compat_numpy)
    spec = importlib.util.spec_from_file_location(
        "leanpass.backends._cupy_backend_under_test", Path(backends.__file__).parent / "cupy_backend.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cuda = module.CupyBackend(0)
    cuda.seed(1)
    cuda.seed(2)
    assert made == []  # seeding makes no generator
    first = cuda.uniform((3,))
    assert made == [2] and first.tolist() == np.random.default_rng(2).random(3).tolist()
    cuda.normal((2,))
    cuda.bernoulli((2,), 0.5)
    assert made == [2]  # made once, drawn on
    cuda.seed(2)
    assert cuda.uniform((3,)).tolist() == first.tolist() and made == [2, 2]
