"""The fused-kernel interface: operations and optimizers hand the right arrays and
numbers to a backend's fused kernels.

The CPU stand-in of the cuda backend (`Standin`, tests/test_cuda_standin.py)
offers each kernel written out with the standard (the same statements as the
CUDA kernels in leanpass/backends/cupy_backend.py); training on it must match
training on `strict` without them. On a GPU, tests/test_cuda.py compares the
real kernels with the generic path.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import OPTIMIZERS, registered  # (tests/ is on sys.path)
from test_cuda_standin import CALLS, Standin, adam

import leanpass
from leanpass import Tensor, nn
from leanpass.backends import get_backend
from leanpass.backends._base import FusedKernels


@pytest.fixture(scope="module", autouse=True)
def standin_device():
    with registered("standin", Standin, "standin_arrays"):
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
    fused = train("standin", activation, OPTIMIZERS[name])
    generic = train("strict", activation, OPTIMIZERS[name])
    kernel = {"sgd": "sgd", "momentum": "sgd_momentum", "nesterov": "sgd_momentum"}.get(name, "adam")
    assert CALLS[f"{activation}_backward"] == 5 * 2 and CALLS[kernel] == 5 * 6  # 2 activations, 6 parameters
    for a, b in zip(fused, generic):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_generic_backends_offer_no_fused_kernels():
    assert get_backend("cpu").fused.names() == [] and get_backend("strict").fused.names() == []


def test_fused_kernels_are_a_typed_record():
    assert Standin.fused.names() == ["relu_backward", "sigmoid_backward", "tanh_backward", "sgd",
                                     "sgd_momentum", "adam"]
    with pytest.raises(TypeError):
        FusedKernels(adam_typo=adam)
