"""The fused-kernel interface: operations and optimizers hand the right arrays and
numbers to a backend's fused kernels.

A test backend offers each kernel written out with the standard (the same
statements as the CUDA kernels in leanpass/backends/cupy_backend.py); training
on it must match training on `strict` without them. On a GPU, tests/test_cuda.py
compares the real kernels with the generic path.
"""

from __future__ import annotations

import array_api_strict as xs
import numpy as np
import pytest
from helpers import OPTIMIZERS, registered  # (tests/ is on sys.path)

import leanpass
from leanpass import Tensor, nn
from leanpass.backends import Backend, get_backend
from leanpass.backends._base import FusedKernels

CALLS: dict[str, int] = {}


def counted(name):
    def wrap(fn):
        def call(*args):
            CALLS[name] = CALLS.get(name, 0) + 1
            return fn(*args)

        return call

    return wrap


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


class FusedStrict(Backend):
    device_type = "fused"
    library = "array_api_strict"
    xp = xs
    array_type = type(xs.asarray(0.0))
    fused = FusedKernels(relu_backward=relu_backward, sigmoid_backward=sigmoid_backward,
                         tanh_backward=tanh_backward, sgd=sgd, sgd_momentum=sgd_momentum, adam=adam)

    def _from_numpy(self, host):
        return xs.asarray(host, copy=True)

    def _to_numpy(self, array):
        return np.array(np.from_dlpack(array), copy=True)

    def _from_same_library(self, array):
        return array.to_device(xs.Device("CPU_DEVICE"))


@pytest.fixture(scope="module", autouse=True)
def fused_device():
    with registered("fused", FusedStrict, "fused_test_arrays"):
        yield


def train(device, activation, make, steps=5):
    leanpass.manual_seed(0)
    model = nn.MLP([4, 8, 8, 3], activation=activation, device=device)
    opt = make(model.parameters())
    rng = np.random.default_rng(0)
    x = Tensor(rng.normal(size=(16, 4)), device=device)
    y = Tensor(rng.integers(0, 3, size=16), device=device)
    for _ in range(steps):
        opt.zero_grad()
        nn.cross_entropy_loss(model(x), y).backward()
        opt.step()
    return [p.numpy() for p in model.parameters()]


@pytest.mark.parametrize("activation", ["relu", "sigmoid", "tanh"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_fused_path_matches_the_generic_path(activation, name):
    CALLS.clear()
    fused = train("fused", activation, OPTIMIZERS[name])
    generic = train("strict", activation, OPTIMIZERS[name])
    kernel = {"sgd": "sgd", "momentum": "sgd_momentum", "nesterov": "sgd_momentum"}.get(name, "adam")
    assert CALLS[f"{activation}_backward"] == 5 * 2 and CALLS[kernel] == 5 * 6  # 2 activations, 6 parameters
    for a, b in zip(fused, generic):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_generic_backends_offer_no_fused_kernels():
    assert get_backend("cpu").fused.names() == [] and get_backend("strict").fused.names() == []


def test_fused_kernels_are_a_typed_record():
    assert FusedStrict.fused.names() == ["relu_backward", "sigmoid_backward", "tanh_backward", "sgd",
                                         "sgd_momentum", "adam"]
    with pytest.raises(TypeError):
        FusedKernels(adam_typo=adam)
