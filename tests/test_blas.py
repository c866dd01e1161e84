"""The NumPy backend's BLAS ``axpy`` (``y += a * x`` in place, leanpass/backends/_blas.py):
SciPy's BLAS wrapper, right to the last rounding, in place, used by the optimizers for
large parameters, and declined (leaving ``y`` as it was) wherever it would be unsafe."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from test_optim import ref_adagrad, ref_adam, ref_rmsprop, ref_sgd, run_steps  # (tests/ is on sys.path)

from leanpass import optim
from leanpass.backends import _blas, _numba, numpy_backend

N = _blas.MIN_SIZE  # the smallest length that goes to BLAS


def _need_kernels():
    if not _blas.routines():
        pytest.skip("SciPy is not installed: the optimizers run NumPy's code")


def test_scipys_axpy_is_used_and_writes_in_place():
    """SciPy (a dependency) gives both routines, and the wrapper writes into ``y``'s own
    memory: no copy of ``y``, and its neighbours in a larger buffer are untouched."""
    pytest.importorskip("scipy")
    assert set(_blas.routines()) == {np.dtype(np.float32), np.dtype(np.float64)}
    buffer = np.zeros(N + 2)
    y = buffer[1:-1]
    assert _blas.axpy(0.5, np.full(N, 2.0), y)
    assert buffer[0] == 0.0 and buffer[-1] == 0.0 and np.all(y == 1.0)


def test_without_scipy_the_update_goes_to_numpy(monkeypatch):
    monkeypatch.setattr(_blas, "_routines", {})
    y = np.ones(N)
    assert not _blas.axpy(0.5, np.ones(N), y)
    assert np.all(y == 1.0)


def _within_roundings(actual, expected, y0, ax):
    """``actual`` is ``y0 + ax`` rounded once or twice: within a unit in the last place
    of the operands' magnitude (where they nearly cancel, the result's own last place
    is far smaller than what one rounding of ``ax`` may move it)."""
    scale = np.spacing((np.abs(y0) + np.abs(ax)).astype(actual.dtype))
    assert np.all(np.abs(actual.astype(np.longdouble) - expected) <= scale)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_axpy_is_the_scaled_add_to_the_last_rounding(dtype):
    _need_kernels()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N // 64 + 3, 64)).astype(dtype)
    y = rng.normal(size=x.shape).astype(dtype)
    y0, ax = y.copy(), np.longdouble(np.asarray(-0.01, dtype)) * x.astype(np.longdouble)
    assert _blas.axpy(-0.01, x, y)
    _within_roundings(y, y0.astype(np.longdouble) + ax, y0, ax)
    # and what NumPy's two operations give, within that
    _within_roundings(y, y0 - np.asarray(0.01, dtype) * x, y0, ax)


def _declined(x, y, a=2.0):
    before = y.copy()
    done = _blas.axpy(a, x, y)
    np.testing.assert_array_equal(y, before)
    return not done


def test_axpy_declines_what_it_must_not_touch_and_leaves_y_as_it_was(monkeypatch):
    _need_kernels()
    rng = np.random.default_rng(1)
    y = rng.normal(size=N)
    assert _declined(rng.normal(size=N - 1)[: N // 2], y[: N // 2])  # too small: NumPy is faster
    assert _declined(rng.normal(size=N).astype(np.float32), y)  # dtypes differ
    assert _declined(rng.normal(size=2 * N)[::2], y)  # x not contiguous
    shape = (64, N // 64)
    assert _declined(rng.normal(size=shape), np.asfortranarray(rng.normal(size=shape)))  # y in Fortran order
    big = rng.normal(size=(64, 2 * (N // 64)))
    rest = big[:, N // 64:].copy()
    assert _declined(rng.normal(size=shape), big[:, : N // 64])  # y a strided view
    np.testing.assert_array_equal(big[:, N // 64:], rest)  # and nothing beside it written
    assert _declined(rng.normal(size=N).reshape(64, -1), y)  # shapes differ
    assert _declined(rng.integers(0, 9, size=N), rng.integers(0, 9, size=N))  # integers
    read_only = rng.normal(size=N)
    read_only.flags.writeable = False
    assert _declined(rng.normal(size=N), read_only)
    unaligned = np.frombuffer(bytearray(8 * N + 1), np.float64, N, 1)
    assert not unaligned.flags.aligned
    assert _declined(rng.normal(size=N), unaligned)
    both = rng.normal(size=N + 1)
    assert _declined(both[1:], both[:-1])  # overlapping: NumPy buffers, BLAS would not
    swapped = rng.normal(size=N).astype(">f8")
    assert _declined(swapped.copy(), swapped)  # not the machine's byte order
    monkeypatch.setattr(_blas, "LARGEST", N - 1)  # beyond the wrappers' 32-bit length
    assert _declined(rng.normal(size=N), y)


@pytest.mark.parametrize("a", [0.0, -0.0, Fraction(1, 2), np.float64(0.5), 1])
def test_axpy_takes_only_a_python_float_that_is_not_zero(a):
    """BLAS returns at once for an alpha of 0, where ``y + 0 * inf`` must be NaN; and
    the wrapper would convert what NumPy refuses or computes in another precision."""
    _need_kernels()
    x = np.full(N, np.inf)
    assert _declined(x, np.ones(N), a)
    assert _declined(x.astype(np.float32), np.ones(N, np.float32), a)


def test_an_alpha_that_rounds_to_zero_in_float32_goes_to_numpy():
    _need_kernels()
    x = np.full(N, np.inf, np.float32)
    assert _declined(x, np.ones(N, np.float32), 1e-50)
    assert _blas.axpy(1e-40, x, np.ones(N, np.float32))  # a subnormal float32 alpha is not 0


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
def test_optimizers_on_large_parameters_use_blas_and_match_the_written_out_rules(monkeypatch, name, make,
                                                                                   reference):
    _need_kernels()
    calls = []

    def counted(a, x, y):
        done = _blas.axpy(a, x, y)
        calls.append(done)
        return done

    monkeypatch.setattr(numpy_backend, "axpy", counted)
    rng = np.random.default_rng(2)
    w0 = rng.normal(size=(N // 128 + 1, 128))
    grads = [rng.normal(size=w0.shape) for _ in range(4)]
    w, _ = run_steps("cpu", make, grads=grads, w0=w0)
    if name == "adam" and _numba.enabled():  # one Numba pass for the whole update (tests/test_fused.py)
        assert not calls
    else:
        assert calls and all(calls)  # every update went to BLAS
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
