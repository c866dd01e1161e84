"""Plain SGD's update on ``cpu``: one Numba pass (``FusedKernels.sgd``), in place and
without a temporary, bit for bit NumPy's ``p -= lr * (g + wd * p)``; declined (the
parameter left as it was, the generic code run) for arrays it does not take. It
replaced SciPy's BLAS ``axpy``: a second OpenBLAS in the process, whose threads and
NumPy's spun against each other after every matrix product (W1's step took 11 ms
where 1.2 would do on two cores, unless a thread limit was set)."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest
from helpers import host
from test_optim import ref_adagrad, ref_adam, ref_rmsprop, ref_sgd, run_steps  # (tests/ is on sys.path)

import leanpass
from leanpass import optim
from leanpass.backends import _numba, get_backend

needs_numba = pytest.mark.skipif(not _numba.enabled(), reason="Numba (the fuse extra) is not installed")
N = 40_000


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_the_kernel_is_numpys_update_bit_for_bit_and_in_place(dtype, wd):
    rng = np.random.default_rng(0)
    buffer = rng.normal(size=N + 2).astype(dtype)
    param = buffer[1:-1]
    grad = rng.normal(size=N).astype(dtype)
    edges = buffer[[0, -1]].copy()
    expected = param.copy()
    g = grad + np.asarray(wd, dtype) * expected if wd else grad
    expected += np.asarray(-0.05, dtype) * g
    assert get_backend("cpu").fused.sgd(grad, 0.05, wd, param) is not False
    np.testing.assert_array_equal(param, expected)
    np.testing.assert_array_equal(buffer[[0, -1]], edges)  # nothing beside it written


@needs_numba
def test_the_kernel_declines_what_it_does_not_take_and_leaves_the_parameter():
    sgd = get_backend("cpu").fused.sgd
    rng = np.random.default_rng(1)
    for grad, param in [(rng.normal(size=2 * N)[::2], rng.normal(size=N)),  # strided
                        (rng.normal(size=N).astype(np.float32), rng.normal(size=N)),  # dtypes differ
                        (rng.normal(size=N), np.asfortranarray(rng.normal(size=(200, 200))))]:  # not C order
        before = param.copy()
        assert sgd(grad, 0.1, 0.0, param) is False
        np.testing.assert_array_equal(param, before)


def test_a_weight_decay_that_is_0_in_float32_still_decays_as_numpy():
    """``weight_decay=1e-46`` is 0 in float32, but the generic code adds ``0 * p``
    (NaN at an infinite weight), as PyTorch: the kernel decides by the Python number
    (a review found it skipping the term)."""
    p = leanpass.Tensor(np.array([np.inf, 1.0], np.float32), requires_grad=True)
    p.grad = np.ones(2, np.float32)
    with np.errstate(invalid="ignore"):
        optim.SGD([p], lr=0.1, weight_decay=1e-46).step()
    assert np.isnan(p.numpy()[0]) and p.numpy()[1] == np.float32(1.0) - np.float32(0.1)


@pytest.mark.parametrize("wd", [0.0, 0.01])  # plain SGD takes a path of its own
def test_a_declined_update_runs_the_generic_code(wd):
    """A parameter the kernel does not take (in Fortran order) is updated by NumPy."""
    rng = np.random.default_rng(2)
    w0, grads = rng.normal(size=(200, 300)), [rng.normal(size=(200, 300)) for _ in range(2)]
    p = leanpass.Tensor(np.asfortranarray(w0), requires_grad=True)
    opt = optim.SGD([p], lr=0.1, weight_decay=wd)
    for g in grads:
        p.grad = np.asfortranarray(g)
        opt.step()
    np.testing.assert_allclose(p.numpy(), ref_sgd(w0, grads, 0.1, weight_decay=wd), rtol=1e-13)


@pytest.mark.parametrize("make", [lambda p: optim.SGD(p, lr=0.0), lambda p: optim.Adam(p, lr=0.0),
                                  lambda p: optim.SGD(p, lr=0.1, momentum=0.9, dampening=1.0)])
def test_a_zero_step_with_inf_and_nan_gradients_gives_nan_at_any_size(make):
    """As NumPy's ``p -= 0.0 * g`` and PyTorch's ``add_(g, alpha=0)``: 0 * inf is NaN."""
    results = []
    for n in (100, N):
        g = np.ones(n)
        g[0], g[1] = np.inf, np.nan
        with np.errstate(invalid="ignore"):  # NumPy's code warns of the NaN it makes
            w, _ = run_steps("cpu", make, grads=[g, g], w0=np.ones(n))
        results.append(w.numpy()[:3])
    np.testing.assert_array_equal(results[0], results[1])
    assert np.isnan(results[1][0]) and np.isnan(results[1][1])


@pytest.mark.parametrize("cls", ["Adam", "AdamW"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adam_without_eps_at_a_zero_gradient_gives_nan_as_torch(device, cls, dtype):
    """``eps=0`` and a gradient of 0: the update is 0 / 0, NaN in PyTorch and in NumPy's
    code; the CPU's kernel raised ZeroDivisionError (Numba's Python error model)."""
    w = leanpass.Tensor(np.ones(5, dtype), requires_grad=True, device=device)
    opt = getattr(optim, cls)([w], lr=0.1, eps=0.0)
    (w * 0.0).sum().backward()
    with np.errstate(invalid="ignore"):
        opt.step()
    assert np.isnan(host(w)).all()
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    tw = torch.ones(5, dtype=getattr(torch, dtype), requires_grad=True)
    topt = getattr(torch.optim, cls)([tw], lr=0.1, eps=0.0)
    (tw * 0.0).sum().backward()
    topt.step()
    assert torch.isnan(tw).all()


LARGE = [
    ("sgd", lambda p: optim.SGD(p, lr=0.1), lambda w, g: ref_sgd(w, g, 0.1)),
    ("sgd_momentum_dampening", lambda p: optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.4),
     lambda w, g: ref_sgd(w, g, 0.1, 0.9, dampening=0.4)),
    ("adam", lambda p: optim.Adam(p, lr=0.01), lambda w, g: ref_adam(w, g, 0.01)),
    ("rmsprop", lambda p: optim.RMSprop(p, lr=0.01), lambda w, g: ref_rmsprop(w, g, 0.01)),
    ("rmsprop_momentum", lambda p: optim.RMSprop(p, lr=0.01, momentum=0.5),
     lambda w, g: ref_rmsprop(w, g, 0.01, momentum=0.5)),
    ("adagrad", lambda p: optim.Adagrad(p, lr=0.1), lambda w, g: ref_adagrad(w, g, 0.1)),
]


@pytest.mark.parametrize("name, make, reference", LARGE, ids=[case[0] for case in LARGE])
def test_optimizers_on_large_parameters_match_the_written_out_rules(name, make, reference):
    rng = np.random.default_rng(2)
    w0 = rng.normal(size=(N // 128 + 1, 128))
    grads = [rng.normal(size=w0.shape) for _ in range(4)]
    w, _ = run_steps("cpu", make, grads=grads, w0=w0)
    np.testing.assert_allclose(w.numpy(), reference(w0, grads), rtol=1e-12, atol=1e-14)


def test_a_large_sgd_step_matches_torch_in_float32():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed; the written-out rules still run")
    rng = np.random.default_rng(3)
    w0 = rng.normal(size=(784, 256)).astype(np.float32)
    grads = [rng.normal(size=w0.shape).astype(np.float32) for _ in range(3)]
    tw = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.05)
    for g in grads:
        tw.grad = torch.tensor(g)
        topt.step()
    w, _ = run_steps("cpu", lambda p: optim.SGD(p, lr=0.05), grads=grads, w0=w0, dtype="float32")
    # three steps, each rounded once or twice: within a few units of the weights' last place
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=0, atol=4 * np.spacing(np.float32(4)))


def test_no_module_calls_scipys_blas():
    """SciPy's BLAS (``scipy.linalg``) is a second OpenBLAS, with threads of its own: called
    between NumPy's matrix products, the two pools spin against each other. (Numba loads
    it to check for BLAS, and leaves it idle; only a call wakes its threads.) So no
    module of the library imports ``scipy.linalg``; SciPy serves ``lp.special`` alone."""
    root = pathlib.Path(leanpass.__file__).parent
    users = [str(path.relative_to(root)) for path in root.rglob("*.py")
             if re.search(r"scipy\.linalg|from scipy import linalg", path.read_text())]
    assert users == []
