"""The cpu device's large matrix products through MKL (``leanpass/backends/_mkl.py``).

The routing (which products go, in which layouts, and that the result is C-ordered)
is tested everywhere against a stand-in for ``sparse_dot_mkl.dot_product_mkl`` that
lays its result out as MKL does (as its left operand); the products themselves where
the ``mkl`` extra is installed, and skip with the reason elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import training_step

import leanpass as lp
from leanpass import Tensor, nn
from leanpass.backends import _mkl, get_backend

RNG = np.random.default_rng(23)
BIG = (256, 256, 128)  # m, k, n: 2^23 multiply-adds, the smallest product that goes
needs_mkl = pytest.mark.skipif(not _mkl.available(), reason="the mkl extra is not installed "
                               "(pip install 'leanpass[mkl]', Linux x86-64) or LEANPASS_BLAS=numpy")


def _standin(calls):
    def dot(a, b):  # MKL's layout rule, as sparse_dot_mkl gives it: the result is laid out as a
        calls.append((a.flags.c_contiguous, b.flags.c_contiguous))
        return np.asarray(a @ b, order="C" if a.flags.c_contiguous else "F")

    return dot


@pytest.fixture
def standin(monkeypatch):
    calls = []
    monkeypatch.setattr(_mkl, "_dot", lambda: _standin(calls))
    return calls


def _operand(shape, order, dtype="float64"):
    a = RNG.normal(size=shape).astype(dtype)
    return a if order == "C" else np.asfortranarray(a)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("orders", ["CC", "CF", "FC"])
def test_a_large_product_goes_and_comes_back_c_ordered(standin, orders, dtype):
    m, k, n = BIG
    a, b = _operand((m, k), orders[0], dtype), _operand((k, n), orders[1], dtype)
    out = _mkl.product(a, b)
    assert out is not None and out.flags.c_contiguous and out.dtype == dtype
    np.testing.assert_array_equal(out, a @ b)  # (the stand-in multiplies with NumPy)
    assert len(standin) == 1


@pytest.mark.parametrize("case", ["small", "both transposed", "strided", "int", "mixed dtypes", "stacked",
                                  "complex", "a subclass"])
def test_everything_else_stays_with_numpy(standin, case):
    m, k, n = BIG
    a, b = _operand((m, k), "C"), _operand((k, n), "C")
    if case == "small":
        a = a[: m // 2]
    elif case == "both transposed":
        a, b = np.asfortranarray(a), np.asfortranarray(b)
    elif case == "strided":
        a = _operand((m, 2 * k), "C")[:, ::2]
    elif case == "int":
        a, b = a.astype(np.int64), b.astype(np.int64)
    elif case == "mixed dtypes":
        a = a.astype(np.float32)
    elif case == "stacked":
        a = a.reshape(2, m // 2, k)
    elif case == "complex":
        a, b = a.astype(np.complex128), b.astype(np.complex128)
    elif case == "a subclass":
        a = a.view(np.ma.MaskedArray)
    assert _mkl.product(a, b) is None and standin == []


def test_the_cpu_backend_routes_rows_of_a_stack_and_linear_layers(standin):
    """``be.matmul`` takes a stack of rows times a matrix as one 2-D product, which
    goes; a Linear layer's forward and both gradients go, and its gradients stay
    C-ordered (the optimizers' one-pass kernels take only those)."""
    be = get_backend("cpu")
    m, k, n = BIG
    a, b = RNG.normal(size=(4, m // 4, k)), RNG.normal(size=(k, n))
    out = be.matmul(a, b)
    assert out.shape == (4, m // 4, n) and len(standin) == 1
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    x = Tensor(RNG.normal(size=(m, k)), requires_grad=True)
    layer = nn.Linear(k, n, dtype="float64")
    (layer(x) ** 2).sum().backward()
    assert len(standin) == 4  # the forward, the input's gradient, the weight's gradient
    assert x.grad.flags.c_contiguous and layer.weight.grad.flags.c_contiguous
    y = x.data @ layer.weight.data.T + layer.bias.data
    np.testing.assert_allclose(layer.weight.grad, 2 * y.T @ x.data, rtol=1e-10)
    np.testing.assert_allclose(x.grad, 2 * y @ layer.weight.data, rtol=1e-10)


@needs_mkl
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("orders", ["CC", "CF", "FC"])
def test_mkl_multiplies_as_numpy_does(orders, dtype):
    m, k, n = BIG
    a, b = _operand((m, k), orders[0], dtype), _operand((k, n), orders[1], dtype)
    out = _mkl.product(a, b)
    assert out is not None and out.flags.c_contiguous and out.dtype == dtype
    tol = 1e-4 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out, a @ b, rtol=tol, atol=tol * np.abs(a @ b).max())


@needs_mkl
def test_a_compiled_mlp_step_through_mkl_equals_the_eager_one():
    """The same products eagerly and in a replay: the same values bit for bit."""
    def setup():
        lp.manual_seed(0)
        model = nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
        return model, lp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    (m1, o1), (m2, o2) = setup(), setup()
    eager, compiled = training_step(m1, o1), lp.compile(training_step(m2, o2), fuse=False)
    for _ in range(3):
        x, y = Tensor(RNG.normal(size=(256, 512)).astype("float32")), lp.asarray(RNG.integers(0, 10, 256))
        np.testing.assert_array_equal(np.asarray(compiled(x, y).data), np.asarray(eager(x, y).data))
    for p, q in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_array_equal(q.data, p.data)


def test_leanpass_blas_numpy_turns_mkl_off():
    env = {**os.environ, "LEANPASS_BLAS": "numpy"}
    code = "from leanpass.backends import _mkl; print(_mkl.available())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
