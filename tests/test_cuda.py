"""What only a CUDA GPU can show: CuPy's fused kernels against the generic path,
a flat memory pool over 1,000 steps, host copies through cupy.asnumpy, and
cuda:N with device N current. Skipped, with the reason, without CuPy and a GPU."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import leanpass
from leanpass import Tensor, nn, optim
from leanpass.backends import get_backend
from leanpass.backends._base import NO_FUSED

try:
    CUDA = get_backend("cuda")
except RuntimeError as exc:
    pytest.skip(f"needs a CUDA GPU: {exc}", allow_module_level=True)

import cupy  # noqa: E402  (present when the cuda backend loaded)
from helpers import OPTIMIZERS  # noqa: E402  (tests/ is on sys.path)


@pytest.fixture
def generic():
    """The CUDA backend with its fused kernels switched off, restored afterwards."""
    fused = CUDA.fused
    CUDA.fused = NO_FUSED
    yield CUDA
    CUDA.fused = fused


def test_fused_kernels_exist():
    assert {"relu_backward", "sigmoid_backward", "tanh_backward", "sgd", "sgd_momentum", "adam"} <= set(
        CUDA.fused.names()
    )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("activation", ["relu", "sigmoid", "tanh"])
def test_fused_activation_gradients_match_generic(activation, dtype, request):
    rng = np.random.default_rng(0)
    data = rng.normal(size=(64, 33))

    def grad():
        x = Tensor(data, requires_grad=True, device="cuda", dtype=dtype)
        (getattr(x, activation)() * 1.5).sum().backward()
        return cupy.asnumpy(x.grad)

    fused = grad()
    request.getfixturevalue("generic")
    # The kernels compute the generic path's operations in its order; the compiler may
    # still contract a multiply-add, so allow a few units in the last place of |g| = 1.5.
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(fused, grad(), rtol=1e-6 if dtype == "float32" else 1e-14, atol=4 * eps * 1.5)


def _train(make, dtype, steps=20):
    leanpass.manual_seed(0)
    model = nn.MLP([16, 32, 4], device="cuda", dtype=dtype)
    opt = make(model.parameters())
    rng = np.random.default_rng(1)
    x = Tensor(rng.normal(size=(64, 16)), device="cuda", dtype=dtype)
    y = Tensor(rng.integers(0, 4, size=64), device="cuda", dtype=dtype)
    for _ in range(steps):
        opt.zero_grad()
        nn.cross_entropy_loss(model(x), y).backward()
        opt.step()
    return [p.numpy() for p in model.parameters()]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_fused_optimizer_updates_match_generic(name, dtype, request):
    fused = _train(OPTIMIZERS[name], dtype)
    request.getfixturevalue("generic")
    generic = _train(OPTIMIZERS[name], dtype)
    for a, b in zip(fused, generic):
        np.testing.assert_allclose(a, b, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-6)


def test_memory_pool_is_flat_over_1000_steps():
    pool = cupy.get_default_memory_pool()
    leanpass.manual_seed(0)
    model = nn.MLP([64, 128, 128, 10], device="cuda", dtype="float32")
    opt = optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = Tensor(rng.normal(size=(256, 64)), device="cuda", dtype="float32")
    y = Tensor(rng.integers(0, 10, size=256), device="cuda", dtype="float32")

    def step():
        opt.zero_grad()
        loss = nn.cross_entropy_loss(model(x), y)
        loss.backward()
        opt.step()

    def used_bytes():
        # garbage of earlier tests may hold GPU arrays: collected before each reading,
        # not by chance during the steps
        gc.collect()
        CUDA.synchronize()
        return pool.used_bytes()

    for _ in range(20):
        step()
    early = used_bytes()
    for _ in range(1000):
        step()
    assert used_bytes() == early


def test_manual_seed_makes_the_generator_at_the_first_draw():
    leanpass.manual_seed(11)
    leanpass.manual_seed(12)
    assert CUDA._rng._rng is None  # seeding made no generator
    first = cupy.asnumpy(CUDA.uniform((5,)))
    with cupy.cuda.Device(CUDA.index):
        expected = cupy.asnumpy(cupy.random.default_rng(12).random((5,)))
    np.testing.assert_array_equal(first, expected)  # the stream of a generator made at once


def test_host_copies_go_through_asnumpy():
    t = Tensor([1.0, 2.0], device="cuda")
    host = t.numpy()
    assert type(host) is np.ndarray and host.tolist() == [1.0, 2.0]
    assert isinstance(t.data, cupy.ndarray) and t.device == "cuda:0"


def test_out_of_range_index_raises_on_cuda():
    t = Tensor(np.arange(6.0), device="cuda")
    with pytest.raises(IndexError, match="getitem"):
        t[[0, 6]]


def test_invalid_class_index_on_the_gpu_poisons_the_loss_instead_of_syncing():
    logits = Tensor(np.zeros((2, 3)), requires_grad=True, device="cuda")
    for bad in ([0, 3], [0.5, 1.0]):
        assert np.isnan(nn.cross_entropy_loss(logits, leanpass.asarray(bad, device="cuda")).item())
    good = nn.cross_entropy_loss(logits, leanpass.asarray([0, 2], device="cuda"))
    assert good.item() == pytest.approx(np.log(3.0))


def test_invalid_class_index_given_as_host_data_raises_on_the_gpu_too():
    logits = Tensor(np.zeros((2, 3)), requires_grad=True, device="cuda")
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        nn.cross_entropy_loss(logits, [0, 3])  # checked on the host before it moves


def test_each_gpu_runs_its_own_work():
    indices = CUDA.device_indices()
    if len(indices) < 2:
        pytest.skip("needs two GPUs")
    x = Tensor(np.ones(8), requires_grad=True, device=f"cuda:{indices[-1]}")
    (x.tanh() * 2.0).sum().backward()
    assert x.data.device.id == indices[-1] and x.grad.device.id == indices[-1]
