"""The cpu device's large matrix products through MKL (``leanpass/backends/_mkl.py``).

The routing (which products go, in which layouts, and that the result is C-ordered)
is tested everywhere against a stand-in for ``sparse_dot_mkl.dot_product_mkl`` that
lays its result out as MKL does (as its left operand); the products themselves where
the ``mkl`` extra is installed, and skip with the reason elsewhere."""

from __future__ import annotations

import importlib.util
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
# (found without loading MKL: by default it is not loaded where the CPU is not Intel's, and the
# other tests should run in a process as a user's)
needs_mkl = pytest.mark.skipif(_mkl._library() is None or importlib.util.find_spec("sparse_dot_mkl") is None,
                               reason="the mkl extra is not installed "
                               "(pip install 'leanpass[mkl]', Linux x86-64)")


@pytest.fixture
def mkl(monkeypatch):
    """Products through MKL whatever the CPU (as ``LEANPASS_BLAS=mkl``: by default only
    Intel's multiply there)."""
    if _mkl._load() is None:
        pytest.skip(needs_mkl.kwargs["reason"])
    monkeypatch.setattr(_mkl, "_dot", _mkl._load)


@pytest.fixture
def one_thread(mkl):
    """MKL (and the other BLAS) on one thread, where MKL multiplies: loaded first, so
    that the limit reaches it."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    assert _mkl.available()
    with threadpoolctl.threadpool_limits(1):
        yield


def _standin(calls):
    def dot(a, b):  # MKL's layout rule, as sparse_dot_mkl gives it: the result is laid out as a
        calls.append((a.flags.c_contiguous, b.flags.c_contiguous))
        return np.asarray(a @ b, order="C" if a.flags.c_contiguous else "F")

    return dot


@pytest.fixture
def standin(monkeypatch):
    calls = []
    monkeypatch.setattr(_mkl, "_dot", lambda: (_standin(calls), 2**31 - 1, lambda: 1))
    return calls


def _operand(shape, order, dtype="float64"):
    a = RNG.normal(size=shape).astype(dtype)
    return a if order == "C" else np.asfortranarray(a)


@pytest.mark.parametrize("library", ["stand-in", "mkl"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("orders", ["CC", "CF", "FC"])
def test_a_large_product_goes_and_comes_back_c_ordered(request, library, orders, dtype):
    """Every layout that goes: the result C-ordered, NumPy's values (MKL's to rounding;
    the stand-in's exactly, as it multiplies with NumPy the operands it is handed: for
    an F-ordered ``a``, ``b.T @ a.T``, which OpenBLAS may round otherwise than ``a @ b``,
    as its Haswell kernels do)."""
    if library == "mkl":
        request.getfixturevalue("one_thread")
        tol = 1e-4 if dtype == "float32" else 1e-12
    else:
        calls = request.getfixturevalue("standin")
        tol = 0.0
    m, k, n = BIG
    a, b = _operand((m, k), orders[0], dtype), _operand((k, n), orders[1], dtype)
    out = _mkl.product(a, b)
    assert out is not None and out.flags.c_contiguous and out.dtype == dtype
    expected = (b.T @ a.T).T if library == "stand-in" and orders == "FC" else a @ b
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * np.abs(expected).max())
    if library == "stand-in":
        assert len(calls) == 1


def test_a_dimension_beyond_mkls_sizes_stays_with_numpy(monkeypatch):
    """MKL's sizes are 32-bit (sparse_dot_mkl's default interface): a dimension of 2**31
    or more would wrap, silently, so such a product stays NumPy's (found by review)."""
    calls = []
    monkeypatch.setattr(_mkl, "_dot", lambda: (_standin(calls), 255, lambda: 1))  # as if the widest were 255
    m, k, n = BIG
    assert _mkl.product(_operand((m, k), "C"), _operand((k, n), "C")) is None and calls == []
    assert _mkl.product(_operand((255, 255), "C"), _operand((255, 255), "C")) is not None


@pytest.mark.parametrize("case", ["small", "both transposed", "strided", "int", "mixed dtypes", "stacked",
                                  "complex", "a subclass", "byte-swapped"])
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
    elif case == "byte-swapped":  # (">f8": sparse_dot_mkl refuses it, NumPy multiplies it)
        a, b = a.astype(">f8"), b.astype(">f8")
    assert _mkl.product(a, b) is None and standin == []


def test_on_several_threads_every_product_stays_with_numpy(monkeypatch):
    """MKL's threads fought OpenBLAS's and Numba's for the cores (W6 on two threads:
    33.5 against 22.3 ms): MKL multiplies only while it runs on one thread."""
    calls = []
    monkeypatch.setattr(_mkl, "_dot", lambda: (_standin(calls), 2**31 - 1, lambda: 2))
    m, k, n = BIG
    assert _mkl.product(_operand((m, k), "C"), _operand((k, n), "C")) is None and calls == []


def test_mkl_follows_the_thread_limit(mkl):
    """threadpoolctl's limit reaches MKL once it is loaded: one thread, MKL's product;
    two, NumPy's (the product is then bit for bit NumPy's own)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    m, k, n = BIG
    a, b = _operand((m, k), "C", "float32"), _operand((k, n), "C", "float32")
    with threadpoolctl.threadpool_limits(2):
        np.testing.assert_array_equal(get_backend("cpu").matmul(a, b), a @ b)
    with threadpoolctl.threadpool_limits(1):
        assert _mkl.product(a, b) is not None


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


def test_a_compiled_mlp_step_through_mkl_equals_the_eager_one(one_thread, monkeypatch):
    """The same products eagerly and in a replay: the same values bit for bit."""
    def setup():
        lp.manual_seed(0)
        model = nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
        return model, lp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    went = []
    def product(a, b, product=_mkl.product):
        out = product(a, b)
        went.append(out is not None)
        return out

    monkeypatch.setattr(_mkl, "product", product)
    (m1, o1), (m2, o2) = setup(), setup()
    eager, compiled = training_step(m1, o1), lp.compile(training_step(m2, o2), fuse=False)
    for _ in range(3):
        x, y = Tensor(RNG.normal(size=(256, 512))), lp.asarray(RNG.integers(0, 10, 256))
        np.testing.assert_array_equal(np.asarray(compiled(x, y).data), np.asarray(eager(x, y).data))
    for p, q in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_array_equal(q.data, p.data)
    assert any(went)  # (the first layer's products: 256 * 512 * 256 multiply-adds each)


def _available_with(**env):
    code = "from leanpass.backends import _mkl; print(_mkl.available())"
    return subprocess.run([sys.executable, "-W", "error", "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True)


@pytest.mark.parametrize("value", ["numpy", "openblas", "0"])
def test_leanpass_blas_other_than_mkl_turns_mkl_off(value):
    out = _available_with(LEANPASS_BLAS=value)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


@needs_mkl
def test_leanpass_blas_mkl_turns_mkl_on_whatever_the_cpu():
    out = _available_with(LEANPASS_BLAS="mkl")
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr


@pytest.mark.parametrize(("vendor", "setting", "wanted"), [
    ("GenuineIntel", None, True), ("GenuineIntel", "auto", True), ("GenuineIntel", " MKL ", True),
    ("GenuineIntel", "numpy", False), ("GenuineIntel", "", True), ("AuthenticAMD", None, False),
    ("AuthenticAMD", "auto", False), ("AuthenticAMD", "", False),
    ("AuthenticAMD", "mkl", True), (None, None, False), (None, "mkl", True)])
def test_by_default_only_intels_cpus_multiply_through_mkl(monkeypatch, vendor, setting, wanted):
    """On an AMD EPYC MKL's products took 5 to 60% longer than OpenBLAS's (see _mkl.py):
    unless ``LEANPASS_BLAS`` says, MKL multiplies on Intel's CPUs only."""
    monkeypatch.setattr(_mkl, "_vendor", lambda: vendor)
    if setting is None:
        monkeypatch.delenv("LEANPASS_BLAS", raising=False)
    else:
        monkeypatch.setenv("LEANPASS_BLAS", setting)
    assert _mkl._wanted() is wanted


def test_the_cpus_maker_is_read_from_proc_cpuinfo():
    vendor = _mkl._vendor()
    if not os.path.exists("/proc/cpuinfo"):
        assert vendor is None
    else:
        with open("/proc/cpuinfo") as f:
            assert (vendor is None) == ("vendor_id" not in f.read())


def test_a_threading_layer_the_wheel_cannot_load_turns_mkl_off_with_a_warning():
    """``MKL_THREADING_LAYER=TBB``: the wheel's TBB layer cannot find libtbb, and MKL
    ends the process at its first product; LeanPass keeps NumPy's products and says so."""
    out = _available_with(MKL_THREADING_LAYER="TBB", LEANPASS_BLAS="mkl")
    assert out.returncode != 0 and "MKL_THREADING_LAYER=TBB" in out.stderr  # (the warning, as an error here)
    code = "from leanpass.backends import _mkl; print(_mkl.available())"
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                         env={**os.environ, "MKL_THREADING_LAYER": "TBB", "LEANPASS_BLAS": "mkl"})
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


@needs_mkl
def test_an_mkl_that_fails_to_load_leaves_numpy_products_with_one_warning():
    libm = next((p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib64/libm.so.6") if os.path.exists(p)), None)
    if libm is None:
        pytest.skip("no libm.so.6 at the usual places to stand for a broken MKL_RT")
    out = _available_with(MKL_RT=libm, LEANPASS_BLAS="mkl")
    assert out.returncode != 0 and "MKL could not be loaded" in out.stderr
