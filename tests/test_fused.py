"""The fused-kernel interface: operations and optimizers hand the right arrays and
numbers to a backend's fused kernels.

The CPU stand-in of the cuda backend (`Standin`, tests/test_cuda_standin.py)
offers each kernel written out with the standard (the same statements as the
CUDA kernels in leanpass/backends/cupy_backend.py); training on it must match
training on `strict` without them. On a GPU, tests/test_cuda.py compares the
real kernels with the generic path.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import OPTIMIZERS, registered  # (tests/ is on sys.path)
from test_cuda_standin import CALLS, Standin

import leanpass
from leanpass import Tensor, nn
from leanpass.backends import _numba, get_backend
from leanpass.backends._base import NO_FUSED, Backend, FusedKernels
from leanpass.ops.norm import _row_maps


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


ROW_KERNELS = ["relu_backward", "gelu_tanh", "gelu_tanh_backward", "softmax_rows", "softmax_rows_backward",
               "layer_norm_rows", "layer_norm_rows_backward", "sgd", "sgd_momentum", "adam", "affine_rows",
               "affine2_rows", "centered_squares", "centered_dot", "affine_relu_rows", "masked_sums",
               "affine2_masked_rows", "patches2d", "scatter_add2d", "im2col2d", "col2im2d",
               "max_pool_2x2", "max_pool_2x2_backward", "max_pool_2x2_winners", "max_pool_2x2_scatter",
               "cross_entropy_rows", "bias_rows", "elementwise"]
needs_numba = pytest.mark.skipif(not _numba.enabled(), reason="Numba (the fuse extra) is not installed")


def test_cpu_offers_numbas_row_kernels_and_strict_none():
    assert get_backend("cpu").fused.names() == (ROW_KERNELS if _numba.enabled() else [])
    assert get_backend("strict").fused.names() == []


def _in_fresh_interpreter(code, **env):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@needs_numba
def test_numba_is_imported_at_the_first_kernel_call_not_at_import():
    assert _in_fresh_interpreter(
        "import sys, numpy as np, leanpass as lp\n"
        "print('numba' in sys.modules)\n"
        "lp.nn.functional.group_norm(lp.Tensor(np.ones((2, 4, 3))), 2)\n"
        "print('numba' in sys.modules)") == ["False", "True"]


def test_leanpass_fuse_0_turns_the_row_kernels_off():
    assert _in_fresh_interpreter("from leanpass.backends import get_backend\n"
                                 "print(len(get_backend('cpu').fused.names()))", LEANPASS_FUSE="0") == ["0"]


def _generic(dtype):
    """The row maps written with the standard (what a backend without kernels runs)."""
    return _row_maps(SimpleNamespace(fused=NO_FUSED, xp=get_backend("cpu").xp), dtype)


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_kernels_give_the_generic_arithmetic(dtype):
    rng = np.random.default_rng(0)
    fused = _row_maps(get_backend("cpu"), np.dtype(dtype))
    assert fused[0] is get_backend("cpu").fused.affine_rows
    x = (rng.normal(size=(6, 40)) * 3 + 100).astype(dtype)
    g = rng.normal(size=(6, 80)).astype(dtype)[:, ::2]  # rows with a stride: copied to C order first
    a, c, d, m = (rng.normal(size=6).astype(dtype) for _ in range(4))
    tol = {"float32": 1e-5, "float64": 1e-13}[dtype]
    dot = get_backend("cpu").fused.centered_dot
    for got, want in zip([fused[0](x, a, d), fused[1](g, a, x, c, d), fused[2](x, m), dot(g, x, m)],
                         [f(*args) for f, args in zip(_generic(dtype), [(x, a, d), (g, a, x, c, d), (x, m)])]
                         + [np.sum(g * (x - m[:, None]), axis=1)]):
        assert got.dtype == want.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want, rtol=tol)
    np.testing.assert_allclose(fused[2](x, m), ((x.astype("float64") - m[:, None]) ** 2).sum(1), rtol=tol)


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_with_the_kernels_is_batch_norm_without(dtype, affine, monkeypatch):
    """Training-mode batch norm of a (N, C, H, W) input: output, gradients and the
    running statistics alike with and without the row kernels."""
    rng = np.random.default_rng(2)
    data = rng.normal(size=(4, 3, 5, 6)) * 2 + 7
    g = rng.normal(size=data.shape).astype(dtype)

    def run():
        layer = nn.BatchNorm2d(3, affine=affine, dtype=dtype)
        if affine:
            layer.load_state_dict({**layer.state_dict(), "weight": rng_fixed(3, dtype), "bias": rng_fixed(3, dtype, 1)})
        x = Tensor(data.astype(dtype), requires_grad=True)
        y = layer(x)
        y.backward(Tensor(g))
        out = [y.numpy(), x.grad, layer.running_mean.numpy(), layer.running_var.numpy()]
        return out + ([layer.weight.grad, layer.bias.grad] if affine else [])

    fused = run()
    monkeypatch.setattr(get_backend("cpu"), "fused", NO_FUSED)
    tol = {"float32": 2e-4, "float64": 1e-11}[dtype]
    for a, b in zip(fused, run()):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_norm_relu_kernels_give_relu_then_the_row_maps(dtype):
    """BatchNorm then ReLU's three kernels: the affine map then NumPy's maximum (NaN
    kept, -0 made 0: the same bits), and the backward's sums and input gradient of
    ``where(y <= 0, 0, g)`` (0 where y is 0 even for an infinite g, g where y is NaN)."""
    be = get_backend("cpu")
    fused = be.fused
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 33)).astype(dtype)
    x[0, :4] = [np.nan, 0.0, -0.0, np.inf]
    a, b, c, d, m = (rng.normal(size=5).astype(dtype) for _ in range(5))
    a[0], b[0] = 1, 0  # row 0: x itself, so that its special values reach the ReLU
    want = np.maximum(fused.affine_rows(x, a, b), 0)
    got = fused.affine_relu_rows(x, a, b)
    assert got.dtype == np.dtype(dtype) and np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))  # (-0 * 1 + 0 is 0: no -0 reaches the max)
    g = rng.normal(size=x.shape).astype(dtype)[:, ::1]
    g[0, 1] = np.inf  # at y == 0: no NaN from inf * 0
    h = np.where(got <= 0, 0, g)
    sums, dots = fused.masked_sums(g, got, x, m)
    tol = {"float32": 1e-5, "float64": 1e-13}[dtype]
    finite = np.isfinite(x).all(axis=1)
    np.testing.assert_allclose(sums[finite], h.sum(1)[finite], rtol=tol)
    np.testing.assert_allclose(dots[finite], (h * (x - m[:, None])).sum(1)[finite], rtol=tol)
    assert sums.dtype == dots.dtype == np.dtype(dtype)
    gx = fused.affine2_masked_rows(g, got, a, x, c, d)
    assert np.array_equal(gx, fused.affine2_rows(h, a, x, c, d), equal_nan=True)


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_norm_relu_with_the_kernels_is_batch_norm_relu_without(dtype, monkeypatch):
    """A Sequential's BatchNorm then ReLU (one batch_norm_relu node) with and without the
    row kernels: output, gradients and running statistics alike."""
    rng = np.random.default_rng(4)
    data = rng.normal(size=(4, 3, 5, 6)) * 2 + 1
    g = rng.normal(size=data.shape).astype(dtype)

    def run():
        layer = nn.BatchNorm2d(3, dtype=dtype)
        layer.load_state_dict({**layer.state_dict(), "weight": rng_fixed(3, dtype), "bias": rng_fixed(3, dtype, 1)})
        x = Tensor(data.astype(dtype), requires_grad=True)
        y = nn.Sequential(layer, nn.ReLU())(x)
        assert str(y._node._op) == "batch_norm_relu"
        y.backward(Tensor(g))
        return [y.numpy(), x.grad, layer.running_mean.numpy(), layer.running_var.numpy(), layer.weight.grad,
                layer.bias.grad]

    fused = run()
    monkeypatch.setattr(get_backend("cpu"), "fused", NO_FUSED)
    tol = {"float32": 2e-4, "float64": 1e-11}[dtype]
    for a, b in zip(fused, run()):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _near_zero_batch_norm_relu():
    """A float32 batch whose BatchNorm outputs straddle 0 ulp by ulp, so that the row
    kernels and the generic path (which rounds otherwise) disagree on the sign of one,
    as found by review: ``(x, weight, bias)``."""
    from leanpass import ops
    from leanpass.autograd import graph_backend

    be = get_backend("cpu")
    rng = np.random.default_rng(0)
    for _ in range(50):
        x = (rng.standard_normal((4, 1, 200)) * rng.uniform(0.1, 10) + rng.uniform(-10, 10)).astype(np.float32)
        w, b = rng.standard_normal(1).astype(np.float32), rng.standard_normal(1).astype(np.float32)
        for _ in range(6):  # the input whose output is 0, and its neighbours, ulp by ulp
            m, sd = x.astype(np.float64).mean(), x.astype(np.float64).std()
            at = np.float32(m - b[0] * np.sqrt(sd * sd + 1e-5) / w[0])
            x[0, 0, :40] = at + np.arange(-20, 20).astype(np.float32) * np.spacing(at)
        rows, _ = ops.batch_norm_relu.fn(be, x, w, b, (0, 2), 1e-5, None, (True, True, True))
        again, _ = ops.batch_norm_relu.fn(graph_backend(be), Tensor(x), Tensor(w), Tensor(b), (0, 2), 1e-5, None,
                                          (True, True, True))
        if ((rows > 0) != (again.numpy() > 0)).any():
            return x, w, b
    raise AssertionError("no batch found whose outputs the two paths put on either side of 0")


@needs_numba
def test_batch_norm_relus_create_graph_backward_masks_with_the_forwards_output():
    """A create_graph backward runs batch_norm_relu's rule on the saved output, never
    the forward again: run again (the generic path), an output the kernels made 0 came
    out a few ulp above it and let a gradient through (0.145 off, found by review)."""
    x, w, b = _near_zero_batch_norm_relu()

    def grad(create_graph):
        bn = nn.BatchNorm1d(1)
        bn.weight, bn.bias = nn.Parameter(w), nn.Parameter(b)
        t = Tensor(x, requires_grad=True)
        y = nn.Sequential(bn, nn.ReLU())(t)
        g, = leanpass.autograd.grad(y.sum(), t, create_graph=create_graph)
        return g.detach().numpy() if isinstance(g, Tensor) else np.asarray(g)

    np.testing.assert_allclose(grad(True), grad(False), rtol=0, atol=1e-6)


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("classes", [1, 10, 37, 1000])
def test_cross_entropy_with_the_kernels_is_cross_entropy_without(dtype, classes, monkeypatch):
    """Cross-entropy of 2-D logits at class indices: one ``cross_entropy_rows`` call on
    the CPU (three passes), the generic path's loss and gradient up to rounding, NaN and
    infinities where those give them."""
    rng = np.random.default_rng(5)
    logits = (rng.normal(size=(33, classes)) * 4).astype(dtype)
    labels = rng.integers(0, classes, size=33)
    logits[1, :] = -np.inf  # a row of -inf: NaN
    logits[2, labels[2]] = -np.inf  # the class itself -inf: inf
    logits[3, 0] = np.inf  # +inf: NaN
    logits[4, -1] = np.nan
    tail = slice(5, None)  # the finite rows alone: a finite loss

    def run(rows):
        x = Tensor(logits[rows], requires_grad=True)
        loss = nn.functional.cross_entropy(x, leanpass.asarray(labels[rows]))
        loss.backward()
        return loss.numpy(), np.asarray(x.grad)

    calls = _counted(monkeypatch, "cross_entropy_rows")
    fused = [run(rows) for rows in (slice(None), tail, slice(1, 2), slice(2, 3), slice(3, 4), slice(4, 5))]
    assert calls == ["cross_entropy_rows"] * 6
    monkeypatch.setattr(get_backend("cpu"), "fused", NO_FUSED)
    with np.errstate(invalid="ignore"):  # (NumPy's -inf - -inf warns; the kernel's does not)
        generic = [run(rows) for rows in (slice(None), tail, slice(1, 2), slice(2, 3), slice(3, 4), slice(4, 5))]
    tol = {"float32": 2e-6, "float64": 1e-13}[dtype]
    for (loss, grad), (want, want_grad) in zip(fused, generic):
        assert loss.dtype == want.dtype and grad.dtype == want_grad.dtype == np.dtype(dtype)
        np.testing.assert_allclose(loss, want, rtol=tol)  # NaN and inf where the generic path has them
        np.testing.assert_allclose(grad, want_grad, rtol=tol, atol=tol)
    assert np.isfinite(fused[1][0]) and np.isnan(fused[2][0]) and np.isnan(fused[4][0])
    assert fused[3][0] == np.inf or classes == 1  # (one class: the row is all -inf, NaN)


@needs_numba
def test_cross_entropy_kernel_declines_what_it_does_not_take_and_never_reads_past_a_row():
    fused = get_backend("cpu").fused
    x = np.zeros((3, 4), "float32")
    assert fused.cross_entropy_rows(x.astype("int32"), np.zeros(3, "int64")) is None
    assert fused.cross_entropy_rows(np.zeros((2, 3, 4), "float32"), np.zeros(2, "int64")) is None
    assert fused.cross_entropy_rows(x, np.zeros(2, "int64")) is None  # not one class a row
    assert fused.cross_entropy_rows(np.zeros((0, 4), "float32"), np.zeros(0, "int64")) is None
    loss, softmax = fused.cross_entropy_rows(x, np.array([0, 4, -1]))  # outside [0, 4): NaN, never read
    assert np.isnan(loss) and loss.dtype == np.float32 and np.allclose(softmax, 0.25)


def rng_fixed(n, dtype, seed=0):
    return np.random.default_rng(seed).normal(size=n).astype(dtype)


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_group_norm_with_the_kernels_is_group_norm_without(dtype, monkeypatch):
    rng = np.random.default_rng(1)
    arrays = [rng.normal(size=(3, 8, 5, 4)) * 2 + 10, rng.normal(size=8), rng.normal(size=8)]
    g = rng.normal(size=(3, 8, 5, 4)).astype(dtype)

    def run():
        ts = [Tensor(a.astype(dtype), requires_grad=True) for a in arrays]
        y = nn.functional.group_norm(ts[0], 4, ts[1], ts[2])
        y.backward(Tensor(g))
        return [y.numpy()] + [t.grad for t in ts]

    fused = run()
    monkeypatch.setattr(get_backend("cpu"), "fused", NO_FUSED)
    tol = {"float32": 2e-4, "float64": 1e-11}[dtype]
    for a, b in zip(fused, run()):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


CONV_TRANSPOSE_CASES = [  # x shape, out channels, kernel, keywords; bias or not; gradient channels-last
    ((2, 3, 5, 4), 4, 3, dict(stride=2, padding=1, output_padding=1), True, False),
    ((2, 3, 5, 4), 4, (2, 3), dict(stride=(1, 2), padding=(0, 2), dilation=(2, 1)), False, True),
    ((4, 8, 16, 16), 64, 4, dict(stride=2, padding=1), True, True),  # several bands of rows
    ((3, 2, 7), 5, 4, dict(stride=3, padding=2, output_padding=2), True, False),  # one spatial axis
    ((2, 4, 600), 64, 8, dict(stride=2, padding=3), True, False),  # one long axis: several bands of it
]


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, out, kernel, kw, with_bias, channels_last", CONV_TRANSPOSE_CASES)
def test_conv_transpose_with_the_patch_kernels_is_conv_transpose_without(
        dtype, shape, out, kernel, kw, with_bias, channels_last, monkeypatch):
    rng = np.random.default_rng(3)
    dims = len(shape) - 2
    ks = (kernel,) * dims if isinstance(kernel, int) else kernel
    arrays = [rng.normal(size=shape), rng.normal(size=(shape[1], out, *ks))]
    arrays += [rng.normal(size=out)] if with_bias else []
    f = nn.functional.conv_transpose2d if dims == 2 else nn.functional.conv_transpose1d

    def run():
        ts = [Tensor(a.astype(dtype), requires_grad=True) for a in arrays]
        y = f(*ts, **kw)
        g = rng_fixed(y.size, dtype, 4).reshape(y.shape)
        if channels_last:  # the layout of an element-wise op's gradient on the output
            g = np.moveaxis(np.ascontiguousarray(np.moveaxis(g, 1, -1)), -1, 1)
        y.backward(Tensor(g))
        return [y.numpy()] + [t.grad for t in ts]

    calls = _counted(monkeypatch, "patches2d", "scatter_add2d")
    with_kernels = run()
    assert "patches2d" in calls and "scatter_add2d" in calls
    if shape[-1] == 600:  # the bands of a long axis keep the patches near 2**18 values
        assert calls.count("patches2d") > 1 and calls.count("scatter_add2d") > 1
    monkeypatch.setattr(get_backend("cpu"), "fused", NO_FUSED)
    tol = {"float32": 1e-5, "float64": 1e-12}[dtype]
    for a, b in zip(with_kernels, run()):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


CONV_CASES = [  # input shape, out channels, kernel, keywords
    ((4, 3, 9, 8), 5, 3, {"padding": 1}),
    ((2, 4, 11, 10), 6, (3, 2), {"stride": (2, 1), "dilation": (2, 1), "padding": (2, 0)}),
    ((2, 3, 12, 13), 4, 4, {"stride": 3, "padding": 2}),
    ((3, 4, 7, 7), 8, 1, {}),
    ((2, 6, 9, 9), 4, 3, {"groups": 2, "padding": 1, "dilation": 2}),
    ((2, 3, 8, 9), 4, (2, 4), {"padding": "same"}),  # more padding after than before
    ((2, 3, 8, 9), 4, 3, {"padding": 1, "strided": True}),  # an input seen through strides
]


def _counted(monkeypatch, *names):
    """The cpu backend's kernels ``names`` replaced, for the test, by ones that note each
    call (by name) in the list returned, then run the kernel."""
    fused, calls = get_backend("cpu").fused, []

    def counting(name):
        kernel = getattr(fused, name)
        return lambda *args: calls.append(name) or kernel(*args)

    monkeypatch.setattr(get_backend("cpu"), "fused",
                        dataclasses.replace(fused, **{name: counting(name) for name in names}))
    return calls


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, out, kernel, kw", CONV_CASES)
def test_conv2d_with_the_patch_kernels_is_conv2d_without_bit_for_bit(dtype, shape, out, kernel, kw, monkeypatch):
    """A convolution's patches and their adjoint (the input's gradient), and unfold and
    fold, through the row kernels: the generic strided loops' values, bit for bit (the
    same copies; each element's sums in the kernel offsets' order)."""
    rng = np.random.default_rng(5)
    ks = (kernel,) * 2 if isinstance(kernel, int) else kernel
    x, w = rng.normal(size=shape), rng.normal(size=(out, shape[1] // kw.get("groups", 1), *ks))
    kw = dict(kw)
    if kw.pop("strided", False):
        x = np.swapaxes(np.swapaxes(x, 1, 3).copy(), 1, 3)

    def run():
        xt, wt = Tensor(x.astype(dtype, copy=False), requires_grad=True), Tensor(w.astype(dtype), requires_grad=True)
        y = nn.functional.conv2d(xt, wt, **kw)
        y.backward(Tensor(rng_fixed(y.size, dtype, 6).reshape(y.shape)))
        plain = {k: v for k, v in kw.items() if k != "groups" and v != "same"}
        cols = nn.functional.unfold(xt.detach(), ks, **plain)
        back = nn.functional.fold(cols, shape[2:], ks, **plain)
        return [y.numpy(), xt.grad, wt.grad, cols.numpy(), back.numpy()]

    calls = _counted(monkeypatch, "im2col2d", "col2im2d")
    with_kernels = run()
    assert "im2col2d" in calls and "col2im2d" in calls
    monkeypatch.setattr(get_backend("cpu"), "fused", NO_FUSED)
    for a, b in zip(with_kernels, run()):
        np.testing.assert_array_equal(a, b)


CPU_OPTIMIZERS = {
    "momentum": lambda ps: leanpass.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3),
    "nesterov": lambda ps: leanpass.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda ps: leanpass.optim.Adam(ps, lr=1e-2, weight_decay=1e-3),
    "adamw": lambda ps: leanpass.optim.AdamW(ps, lr=1e-2),
}


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(CPU_OPTIMIZERS))
def test_cpus_optimizer_kernels_give_the_generic_updates(name, dtype, monkeypatch):
    """One pass per parameter, the generic code's operations in its order: the same
    values. A kernel that declines (False: an array not C-contiguous) leaves the
    update to the generic code."""
    calls = []

    def run():
        leanpass.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 8, dtype=dtype), nn.Tanh(), nn.Linear(8, 3, dtype=dtype))
        opt = CPU_OPTIMIZERS[name](model.parameters())
        rng = np.random.default_rng(0)
        x, y = Tensor(rng.normal(size=(6, 5)).astype(dtype)), leanpass.asarray(rng.integers(0, 3, 6))
        for _ in range(4):
            opt.zero_grad()
            nn.cross_entropy_loss(model(x), y).backward()
            opt.step()
        return [p.numpy() for p in model.parameters()]

    cpu = get_backend("cpu")
    fused = cpu.fused
    kernel = "adam" if name.startswith("adam") else "sgd_momentum"
    monkeypatch.setattr(cpu, "fused", dataclasses.replace(
        fused, **{kernel: lambda *a: calls.append(getattr(fused, kernel)(*a)) or calls[-1]}))
    with_kernels = run()
    assert calls == [True] * 4 * 4  # four parameters, four steps
    monkeypatch.setattr(cpu, "fused", dataclasses.replace(fused, **{kernel: lambda *a: False}))
    declined = run()
    monkeypatch.setattr(cpu, "fused", dataclasses.replace(fused, adam=None, sgd_momentum=None))
    generic = run()
    for a, b, c in zip(with_kernels, declined, generic):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, c)


@needs_numba
def test_cpus_optimizer_kernels_decline_strided_arrays_and_change_nothing():
    fused = get_backend("cpu").fused
    param, grad = np.linspace(-1, 1, 16)[::2], np.ones(8)
    m, v, buf = np.zeros(8), np.zeros(8), np.zeros(8)
    before = param.copy()
    assert fused.adam(grad, 0.1, 0.1, 0.999, 0.001, 1e-8, 0.5, 0.0, 1.0, param, m, v) is False
    assert fused.sgd_momentum(grad, 0.1, 0.9, 0.0, False, True, param, buf) is False
    np.testing.assert_array_equal(param, before)
    assert not m.any() and not v.any() and not buf.any()


def test_fused_kernels_are_a_typed_record():
    assert Standin.fused.names() == ["relu_backward", "sigmoid_backward", "tanh_backward", "gelu_tanh_backward",
                                     "sgd", "sgd_momentum", "adam", "elementwise"]
    with pytest.raises(TypeError):
        FusedKernels(adam_typo=Standin.fused.adam)


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cpus_relu_backward_kernel_passes_g_where_the_input_is_above_0_or_nan(dtype):
    """One pass for ReLU's gradient (NumPy's mask takes four): g where ``a`` is not <= 0
    (NaN included, as PyTorch's threshold_backward), 0 elsewhere even for an infinite g
    (as PyTorch; the generic product gives NaN there); a strided ``a`` is declined, a
    strided ``g`` (a mean's broadcast gradient) taken."""
    be = get_backend("cpu")
    a = np.array([[-1.0, 0.0, 2.0], [np.nan, 3.0, -0.0]], dtype=dtype)
    g = np.array([[np.inf, 5.0, -2.0], [7.0, np.nan, -3.0]], dtype=dtype)
    out = be.relu_mask(g, a)
    np.testing.assert_array_equal(out, np.array([[0.0, 0.0, -2.0], [7.0, np.nan, 0.0]], dtype=dtype))
    assert out.dtype == dtype
    finite = np.nan_to_num(g, posinf=9.0, nan=8.0)[:, ::2]
    assert be.fused.relu_backward(finite, a[:, ::2]) is None  # strided: the generic product
    np.testing.assert_array_equal(be.relu_mask(finite, a[:, ::2]), finite * (~(a[:, ::2] <= 0)))
    broadcast = np.broadcast_to(g[:1], a.shape)  # (stride 0 along the first axis)
    assert be.fused.relu_backward(np.array(2.0, dtype), np.array(1.0, dtype)).shape == ()  # (0-d stays 0-d)
    taken = be.fused.relu_backward(broadcast, a)
    np.testing.assert_array_equal(taken, np.array([[0.0, 0.0, -2.0], [np.inf, 5.0, 0.0]], dtype=dtype))
    assert taken.flags.c_contiguous and taken.dtype == dtype
    fresh = g.copy()  # a product's own gradient (the MLP node's): a new array, the caller's left as it was
    np.testing.assert_array_equal(be.relu_mask(fresh, a), out)
    np.testing.assert_array_equal(fresh, g)


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cpus_bias_kernel_gives_numpys_add_then_maximum_bit_for_bit(dtype):
    """A layer's bias added to its fresh product, then its ReLU, in one pass: NumPy's
    ``out += b`` and ``maximum(out, 0, out=out)`` bit for bit (0 at -0.0 and where the sum
    is -0.0, NaN kept, infinities); arrays it does not take are declined and left as they
    were."""
    rng = np.random.default_rng(0)
    be = get_backend("cpu")
    out = rng.normal(size=(9, 37)).astype(dtype)
    b = rng.normal(size=37).astype(dtype)
    out[0, :6] = [-0.0, np.nan, np.inf, -np.inf, 0.0, -b[5]]
    b[:2] = [-0.0, 1.0]
    for relu in (False, True):
        expected = out.copy()
        with np.errstate(invalid="ignore"):  # (NumPy's maximum at NaN)
            expected += b
            if relu:
                np.maximum(expected, 0, out=expected)
        got = out.copy()
        assert be.fused.bias_rows(got, b, relu) is True
        assert got.tobytes() == expected.tobytes()
        via_backend = be.add_bias(out.copy(), b, relu)
        assert via_backend.tobytes() == expected.tobytes()
    other = out.astype("float32" if dtype == "float64" else "float64")
    for args in [(out[:, ::2], b[::2]), (out, b[:5]), (out, b.astype(other.dtype)), (out[0], b),
                 (np.ones((3, 4), np.int64), np.ones(4, np.int64))]:
        before = args[0].copy()
        assert be.fused.bias_rows(*args, True) is False
        assert np.array_equal(args[0], before, equal_nan=True)
    with np.errstate(invalid="ignore"):
        mixed = be.add_bias(out.copy(), b.astype(other.dtype), True)  # (another dtype: a new array, out + b)
        assert mixed.tobytes() == np.maximum(out + b.astype(other.dtype), 0).tobytes()


@pytest.mark.parametrize("device", ["cpu", "strict"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_with_relu_is_linear_relu_forward_and_backward(device, bias):
    """``linear``'s ``relu`` (the bias's pass on the CPU) masks its own gradient: through
    ``apply`` it gives ``linear_relu``'s values and gradients (a review found the mask
    missing), with a 3-D input whose leading axes are one axis of rows."""
    from leanpass import ops
    from leanpass.tensor import apply

    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(2, 3, 4)), rng.normal(size=(5, 4))] + ([rng.normal(size=5)] if bias else [])
    g = rng.normal(size=(2, 3, 5))
    results = []
    for fn, params in ((ops.linear, {"relu": True}), (ops.linear_relu, {})):
        ts = [Tensor(a, requires_grad=True, device=device) for a in arrays]
        y = apply(fn, *ts, **params)
        y.backward(Tensor(g, device=device))
        results.append([get_backend(device).to_host(a) for a in [y._data, *[t.grad for t in ts]]])
    assert all(a.tobytes() == b.tobytes() for a, b in zip(*results))
    y, gx = results[0][:2]
    assert (y == 0).any() and (y > 0).any()
    x, w = arrays[:2]
    np.testing.assert_allclose(gx, np.where(y > 0, g, 0) @ w)  # (the mask, not g @ w)


@pytest.mark.parametrize("device", ["cpu", "strict"])
def test_relus_gradient_is_0_for_an_infinite_gradient_in_every_layout_as_torch(device):
    """0 where the input is <= 0, whatever comes in (inf, NaN): through the CPU's kernel
    and the generic ``where`` alike (strided arrays, the strict devices; a review found
    NaN there)."""
    torch = pytest.importorskip("torch")
    a = np.array([[-1.0, 0.0], [2.0, -3.0]])
    g = np.array([[np.inf, np.nan], [np.inf, -np.inf]])
    expected = torch.ops.aten.threshold_backward(torch.tensor(g), torch.tensor(a), 0.0).numpy()
    for transposed in (False, True):
        x = leanpass.Tensor(a, requires_grad=True, device=device)
        y = (x.T if transposed else x).relu()
        y.backward(leanpass.Tensor(g.T if transposed else g, device=device))
        got = get_backend(device).to_host(x.grad)
        np.testing.assert_array_equal(got, expected)  # (x.grad is x's shape either way)


_GELU_EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-40, 1e-310, 1e154, -1e154, 3e38, -3e38, 10.0, -10.0]


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "strided g", "strided input", "chunks of 7"])
def test_cpus_gelu_kernels_give_the_generic_paths_values_bit_for_bit(dtype, layout, monkeypatch):
    """GELU's tanh approximation (W6's MLP) in three passes forward and one backward:
    the generic operations in their order, so the same bits, at overflowing, infinite,
    NaN, signed-zero and subnormal inputs too, over the values a chunk at a time (215
    values in chunks of 7: the last one short); a strided input is declined (the
    generic path runs), a strided incoming gradient copied."""
    if layout == "chunks of 7":
        monkeypatch.setattr(_numba, "GELU_CHUNK", 7)
    rng = np.random.default_rng(0)
    with np.errstate(over="ignore"):  # (1e-310 and 3e38 do not fit float32: 0 and inf)
        a = np.concatenate([rng.normal(scale=4.0, size=200), _GELU_EDGES]).astype(dtype).reshape(5, -1)
    g = rng.normal(size=a.shape).astype(dtype)
    g[0, :3] = [np.inf, np.nan, -0.0]
    if layout == "strided input":
        a = np.repeat(a, 2, axis=1)[:, ::2]
    if layout == "strided g":
        g = np.repeat(g, 2, axis=1)[:, ::2]
    cpu = get_backend("cpu")
    calls = []
    fused = cpu.fused
    counted = dataclasses.replace(
        fused, gelu_tanh=lambda *args: calls.append("forward") or fused.gelu_tanh(*args),
        gelu_tanh_backward=lambda *args: calls.append("backward") or fused.gelu_tanh_backward(*args))

    def run():
        x = Tensor(a, requires_grad=True)
        y = nn.functional.gelu(x, approximate="tanh")
        y.backward(Tensor(g))
        return y.numpy(), np.asarray(x.grad)

    monkeypatch.setattr(cpu, "fused", counted)
    with_kernels = run()
    assert calls == ["forward", "backward"]
    monkeypatch.setattr(cpu, "fused", NO_FUSED)
    generic = run()
    for ours, theirs in zip(with_kernels, generic):
        assert ours.dtype == theirs.dtype == dtype
        np.testing.assert_array_equal(ours, theirs)  # (NaN where NaN)
    strided = layout == "strided input"
    assert (fused.gelu_tanh(a, 0.5, 0.25) is None) == strided


@needs_numba
def test_cpus_gelu_backward_kernel_declines_what_it_does_not_take():
    fused = get_backend("cpu").fused
    a = np.linspace(-2, 2, 6).reshape(2, 3)
    t, _ = fused.gelu_tanh(a, 0.5, 0.25)
    assert fused.gelu_tanh_backward(np.ones((2, 3), np.float32), a, t, 0.5, 0.25) is None  # dtypes differ
    assert fused.gelu_tanh_backward(np.ones(3), a[0], t[0], 0.5, 0.25).shape == (3,)
    assert fused.gelu_tanh_backward(np.ones((3, 2)), a.reshape(3, 2), t, 0.5, 0.25) is None  # shapes differ
    assert fused.gelu_tanh(a.astype(np.int64), 0.5, 0.25) is None
    zero_d = fused.gelu_tanh_backward(np.array(2.0), np.array(1.0), np.array(0.5), 0.5, 0.25)
    assert zero_d.shape == ()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cupy_backends_gelu_backward_kernel_gives_the_generic_paths_values(dtype):
    """CupyBackend's GELU gradient kernel (its CUDA run by the simulator, C's rounding of
    each statement) against the generic operations on strict: bit for bit, as no product
    and sum are contracted (``--fmad=false``); mixed dtypes are declined."""
    rng = np.random.default_rng(0)
    with np.errstate(over="ignore"):
        a = np.concatenate([rng.normal(scale=4.0, size=100), _GELU_EDGES]).astype(dtype)
    g = rng.normal(size=a.shape).astype(dtype)
    CALLS.clear()
    grads = []
    for device in ("standin", "strict"):
        x = Tensor(a, requires_grad=True, device=device)
        nn.functional.gelu(x, approximate="tanh").backward(Tensor(g, device=device))
        grads.append(get_backend(device).to_host(x.grad))
    assert CALLS.get("gelu_tanh_backward") == 1
    np.testing.assert_array_equal(grads[0], grads[1])
    fused = Standin.fused
    assert fused.gelu_tanh_backward(np.ones(3, np.float32), np.ones(3), np.ones(3), 0.5, 0.25) is None


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mask", ["causal", "none", "float", "per batch"])
def test_cpus_attention_softmax_kernels_give_the_generic_paths_values(dtype, mask, monkeypatch):
    """Attention's softmax in three passes and its gradient in two: the generic path's
    values up to rounding (the sums in float64), weights 0 for a row that may look
    nowhere, NaN along a row holding one; a float mask, or a bool one that is not of
    the last two axes' shape, is declined (the generic path runs)."""
    rng = np.random.default_rng(0)
    b, h, n, d = 2, 3, 5, 4
    q, k, v = (rng.normal(size=(b, h, n, d)).astype(dtype) for _ in range(3))
    g = rng.normal(size=(b, h, n, d)).astype(dtype)
    k[1, 2, 4] = np.nan  # key 4 of the last head: a NaN score in each row that may see it
    masks = {"causal": np.tril(np.ones((n, n), bool)), "none": None,
             "float": rng.normal(size=(n, n)).astype(dtype), "per batch": rng.random((b, 1, n, n)) > 0.3}
    if mask == "float":  # -inf along query 3: it may look nowhere
        masks["float"][3] = -np.inf
    given = masks[mask]
    if mask == "causal":
        given = given.copy()
        given[3] = False  # query 3 may look nowhere: weights 0, as PyTorch's
    cpu = get_backend("cpu")
    fused, calls = cpu.fused, []
    counted = dataclasses.replace(
        fused, softmax_rows=lambda *a: calls.append(fused.softmax_rows(*a)) or calls[-1],
        softmax_rows_backward=lambda *a: calls.append(fused.softmax_rows_backward(*a)) or calls[-1])

    def run():
        ts = [Tensor(a, requires_grad=True) for a in (q, k, v)]
        out = nn.functional.scaled_dot_product_attention(*ts, attn_mask=None if given is None else
                                                         leanpass.asarray(given))
        out.backward(Tensor(g))
        return [out.numpy(), *(np.asarray(t.grad) for t in ts)]

    monkeypatch.setattr(cpu, "fused", counted)
    with_kernels = run()
    assert [c is not None for c in calls] == [mask != "per batch", True]  # (a float mask is added to the scores)
    monkeypatch.setattr(cpu, "fused", NO_FUSED)
    generic = run()
    tol = {"float32": 2e-6, "float64": 1e-14}[dtype]
    for ours, theirs in zip(with_kernels, generic):
        assert ours.dtype == theirs.dtype == dtype
        np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol)  # (NaN where NaN)
    if mask in ("causal", "float"):
        assert not with_kernels[0][0, :, 3].any()  # the query that may look nowhere: output 0
    seeing = {"causal": [4], "none": [0, 1, 2, 3, 4], "float": [0, 1, 2, 3, 4]}.get(mask)  # (NaN - inf is NaN)
    if seeing is not None:
        nan = np.isnan(with_kernels[0][1, 2]).any(axis=-1)
        assert nan.tolist() == [i in seeing for i in range(n)]
    assert not np.isnan(with_kernels[0][0]).any()


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rows", [2, 3, 32])
@pytest.mark.parametrize("shape", [(7, 7), (9, 4), (4, 9)])
def test_cpus_causal_attention_kernels_give_the_generic_paths_values(dtype, rows, shape, monkeypatch):
    """``is_causal``, a block of ``rows`` queries at a time: with the kernels (each row's
    softmax bounded where the causal mask ends, the scale in its pass), without them,
    and as the attention under the full causal mask, the same output and gradients up
    to rounding; a NaN key reaches the outputs of the queries that may look at it and no
    other, a NaN query its own output and the values' gradients of its block's keys."""
    monkeypatch.setattr(Backend, "causal_rows", rows)
    rng = np.random.default_rng(1)
    (length, source), b, h, d = shape, 2, 3, 4
    q = rng.normal(size=(b, h, length, d)).astype(dtype)
    k, v = (rng.normal(size=(b, h, source, d)).astype(dtype) for _ in range(2))
    g = rng.normal(size=(b, h, length, d)).astype(dtype)
    k[1, 2, 2] = np.nan  # key 2 of the last head
    q[0, 1, 1] = np.nan  # query 1 of the second head: NaN along its block's keys, kernels or not
    cpu = get_backend("cpu")
    fused, calls = cpu.fused, []
    counted = dataclasses.replace(
        fused, softmax_rows=lambda *a: calls.append(fused.softmax_rows(*a)) or calls[-1],
        softmax_rows_backward=lambda *a: calls.append(fused.softmax_rows_backward(*a)) or calls[-1])

    def run(**kwargs):
        ts = [Tensor(a, requires_grad=True) for a in (q, k, v)]
        out = nn.functional.scaled_dot_product_attention(*ts, **kwargs)
        out.backward(Tensor(g))
        return [out.numpy(), *(np.asarray(t.grad) for t in ts)]

    monkeypatch.setattr(cpu, "fused", counted)
    with_kernels = run(is_causal=True)
    blocks = len(leanpass.ops.nn._causal_blocks(length, source, rows))
    assert len(calls) == 2 * blocks and all(c is not None for c in calls)
    monkeypatch.setattr(cpu, "fused", NO_FUSED)
    generic = run(is_causal=True)
    masked = run(attn_mask=leanpass.asarray(np.tril(np.ones((length, source), bool))))
    tol = {"float32": 5e-6, "float64": 1e-14}[dtype]
    for ours, theirs, whole in zip(with_kernels, generic, masked):
        assert ours.dtype == theirs.dtype == dtype
        np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol)  # (NaN where NaN)
        # (under the whole mask, 0 * NaN: q's gradient NaN in the rows before the key too, where a block skips it)
        finite = np.isfinite(whole)
        np.testing.assert_allclose(ours[finite], whole[finite], rtol=tol, atol=tol)
    nan = np.isnan(with_kernels[0][1, 2]).any(axis=-1)
    assert nan.tolist() == [i >= 2 for i in range(length)]
    assert np.isnan(with_kernels[0][0, 1]).any(axis=-1).tolist() == [i == 1 for i in range(length)]
    assert not np.isnan(with_kernels[0][0, 0]).any()


@needs_numba
def test_cpus_softmax_kernels_decline_what_they_do_not_take():
    fused = get_backend("cpu").fused
    scores = np.zeros((2, 3, 3))
    assert fused.softmax_rows(scores[:, :, ::2], None, False) is None  # strided
    assert fused.softmax_rows(scores.astype(np.int64), None, False) is None
    assert fused.softmax_rows(np.zeros((2, 0, 3)), None, False) is None  # empty: the generic path
    assert fused.softmax_rows(scores, np.ones((2, 3, 3), bool), True) is None  # not the last two axes' shape
    np.testing.assert_array_equal(fused.softmax_rows(scores, None, False), np.full((2, 3, 3), 1 / 3))
    nowhere = np.full((1, 2, 2), -np.inf)
    assert np.isnan(fused.softmax_rows(nowhere, None, False)).all()  # without a mask: NaN, as NumPy's
    assert not fused.softmax_rows(nowhere, None, True).any()  # with one: weights 0, as PyTorch's
    assert fused.softmax_rows_backward(np.ones((2, 3)), np.ones((2, 3), np.float32)) is None
    read_only = np.ones((2, 3))
    read_only.flags.writeable = False
    assert fused.softmax_rows_backward(read_only, np.ones((2, 3))) is None


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("form", ["weight and bias", "weight", "none", "strided g", "two axes"])
def test_cpus_layer_norm_kernels_give_the_generic_paths_values(dtype, form, monkeypatch):
    """LayerNorm over the last axis in three passes over each row (in the cache), its
    gradients in two: the generic path's values up to rounding (the sums in float64), a
    constant row exactly 0 (shifted by its first value, as the generic path), NaN along
    a row holding one; over two axes (``count=2``) the generic path runs."""
    rng = np.random.default_rng(0)
    shape = (3, 4, 8)
    x = (rng.normal(size=shape) * 3 + 1).astype(dtype)
    x[0, 0] = 5.0  # a constant row
    x[1, 2, 3] = np.nan
    g = rng.normal(size=(3, 4, 16) if form == "strided g" else shape).astype(dtype)
    if form == "strided g":
        g = g[:, :, ::2]
    normalized = (4, 8) if form == "two axes" else (8,)
    weight = rng.normal(size=normalized).astype(dtype)
    bias = rng.normal(size=normalized).astype(dtype)
    cpu = get_backend("cpu")
    fused, calls = cpu.fused, []
    counted = dataclasses.replace(
        fused, layer_norm_rows=lambda *a: calls.append("forward") or fused.layer_norm_rows(*a),
        layer_norm_rows_backward=lambda *a: calls.append("backward") or fused.layer_norm_rows_backward(*a))

    def run():
        xt = Tensor(x, requires_grad=True)
        w = None if form == "none" else Tensor(weight, requires_grad=True)
        b = None if form in ("none", "weight") else Tensor(bias, requires_grad=True)
        y = nn.functional.layer_norm(xt, normalized, w, b)
        y.backward(Tensor(g))
        return [y.numpy(), np.asarray(xt.grad)] + [np.asarray(p.grad) for p in (w, b) if p is not None]

    monkeypatch.setattr(cpu, "fused", counted)
    with_kernels = run()
    assert calls == ([] if form == "two axes" else ["forward", "backward"])
    monkeypatch.setattr(cpu, "fused", NO_FUSED)
    generic = run()
    tol = {"float32": 1e-5, "float64": 1e-13}[dtype]
    for ours, theirs in zip(with_kernels, generic):
        assert ours.dtype == theirs.dtype == dtype and ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol)  # (NaN where NaN)
    out = with_kernels[0]
    if form == "none":
        assert not out[0, 0].any()  # the constant row: exactly 0
    assert np.isnan(out[1, 2]).all() and (form == "two axes" or not np.isnan(out[1, 1]).any())  # (two: a sample)


@needs_numba
def test_cpus_layer_norm_kernels_decline_what_they_do_not_take():
    fused = get_backend("cpu").fused
    x = np.ones((4, 6))
    assert fused.layer_norm_rows(x[:, ::2], None, None, 1e-5) is None  # strided
    assert fused.layer_norm_rows(x.astype(np.int64), None, None, 1e-5) is None
    assert fused.layer_norm_rows(x, np.ones(6, np.float32), None, 1e-5) is None  # another dtype
    assert fused.layer_norm_rows(x, np.ones(5), None, 1e-5) is None  # another shape
    assert fused.layer_norm_rows(np.ones((0, 6)), None, None, 1e-5) is None  # empty: the generic path
    xhat, out, inv_std = fused.layer_norm_rows(x, None, None, 1e-5)
    assert fused.layer_norm_rows_backward(np.ones((4, 6), np.float32), xhat, inv_std, None) is None
    assert out is not xhat and inv_std.dtype == np.float64 and inv_std.shape == (4,)


@needs_numba
def test_layer_norms_backward_takes_the_generic_rule_where_the_kernel_declines_the_gradient(monkeypatch):
    """A gradient the backward kernel declines (another dtype) goes through the generic
    rule, on the forward kernel's values: the generic path's gradients, up to rounding."""
    from leanpass.ops.nn import layer_norm

    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(3, 5)), rng.normal(size=5), rng.normal(size=5)
    g = rng.normal(size=(3, 5)).astype(np.float32)
    cpu = get_backend("cpu")
    _, backward = layer_norm.fn(cpu, x, w, b, needs=(True, True, True))
    with_kernel = backward(g)
    monkeypatch.setattr(cpu, "fused", NO_FUSED)
    _, backward = layer_norm.fn(cpu, x, w, b, needs=(True, True, True))
    for ours, theirs in zip(with_kernel, backward(g)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


@needs_numba
@pytest.mark.parametrize("shape", [(2, 3), (4, 1)])
def test_layer_norm_kernels_row_of_variance_0_with_eps_0_is_nan_as_the_generic_path(shape, monkeypatch):
    """eps 0 and a row of variance 0 (a constant row; every row of length 1): NaN in that
    row, as the generic path and PyTorch, and the other rows as usual (a review found the
    kernel raising ZeroDivisionError, Numba's Python error model)."""
    x = np.zeros(shape, np.float32)
    if shape[1] > 1:
        x[1] = [1.0, 2.0, 3.0]
    results = []
    for fused in (get_backend("cpu").fused, NO_FUSED):
        monkeypatch.setattr(get_backend("cpu"), "fused", fused)
        xt = Tensor(x, requires_grad=True)
        y = nn.functional.layer_norm(xt, (shape[1],), eps=0.0)
        y.sum().backward()
        results.append((y.numpy(), np.asarray(xt.grad)))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)  # (NaN where NaN)
    assert np.isnan(results[0][0][0]).all()
    if shape[1] > 1:
        assert not np.isnan(results[0][0][1]).any()


MAX_POOL_CASES = [  # input shape, MaxPool2d's arguments, whether the 2 x 2 kernel takes it
    ((3, 4, 8, 6), {}, True),
    ((2, 3, 7, 5), {}, True),  # odd sizes: the last row and column are in no window (0)
    ((3, 6, 4), {}, True),  # no batch axis
    ((2, 3, 7, 5), {"ceil_mode": True}, False),  # windows past the edge: padded, the generic path
    ((2, 3, 8, 8), {"padding": 1}, False),
    ((2, 3, 8, 8), {"stride": 1}, False),
    ((2, 3, 9, 9), {"kernel_size": 3}, False),
]


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "strided g", "strided input"])
@pytest.mark.parametrize("nan", [True, False])
@pytest.mark.parametrize("shape, kw, taken", MAX_POOL_CASES)
def test_cpus_max_pool_kernels_give_the_generic_paths_values_bit_for_bit(dtype, layout, nan, shape, kw, taken,
                                                                         monkeypatch):
    """With the gradient needed, the forward keeps each window's winner and the backward
    reads those (``max_pool_2x2_winners``, ``max_pool_2x2_scatter``); where the output holds
    a NaN, the backward finds the maxima again from the input (``max_pool_2x2_backward``)."""
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 3, size=shape).astype(dtype)  # ties: the first maximum takes the gradient
    x.reshape(-1)[::7] = -np.inf
    if nan:
        x.reshape(-1)[5:9] = np.nan  # windows with one NaN, and with two: the last takes it
    x.reshape(-1)[-4:] = -np.inf  # a window of -inf alone
    plane = x.reshape(-1, *x.shape[-2:])[0]
    plane[2:4, 0:2] = [[-0.0, -0.0], [0.0, -1.0]]  # windows of -0 and 0: NumPy's maximum gives 0 here,
    plane[2:4, 2:4] = [[0.0, 0.0], [-0.0, -1.0]]  # and -0 here (the second operand where neither is larger)
    if layout == "strided input":
        x = np.swapaxes(np.swapaxes(x, -1, -2).copy(), -1, -2)
    cpu = get_backend("cpu")
    fused = cpu.fused

    def run():
        xt = Tensor(x, requires_grad=True)
        y = nn.functional.max_pool2d(xt, **{"kernel_size": 2, **kw})
        g = rng_fixed(y.numel(), dtype).reshape(y.shape)
        if layout == "strided g":
            g = np.swapaxes(np.swapaxes(g, -1, -2).copy(), -1, -2)
        out = y.numpy()
        y.backward(Tensor(g))
        return out, np.asarray(xt.grad)

    calls = _counted(monkeypatch, "max_pool_2x2", "max_pool_2x2_backward", "max_pool_2x2_winners",
                     "max_pool_2x2_scatter")
    with_kernels = run()
    assert calls == (["max_pool_2x2_winners", "max_pool_2x2_backward" if nan else "max_pool_2x2_scatter"] if taken
                     else [])
    calls.clear()
    nn.functional.max_pool2d(Tensor(x), **{"kernel_size": 2, **kw})  # no gradient: the maxima alone
    assert calls == (["max_pool_2x2"] if taken else [])
    monkeypatch.setattr(cpu, "fused", NO_FUSED)
    generic = run()
    for ours, theirs in zip(with_kernels, generic):
        assert ours.dtype == theirs.dtype == dtype and ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)  # NaN where NaN
        assert (np.signbit(ours) == np.signbit(theirs)).all()  # g * 0 is -0 for a negative g, as the product's
    if taken:  # the gradient kernels decline: the input's, then the generic rule finds the maxima again
        monkeypatch.setattr(cpu, "fused", dataclasses.replace(fused, max_pool_2x2_scatter=lambda w, g, shape: None))
        for ours, theirs in zip(run(), generic):
            np.testing.assert_array_equal(ours, theirs)
        monkeypatch.setattr(cpu, "fused", dataclasses.replace(fused, max_pool_2x2_backward=lambda x, g: None,
                                                              max_pool_2x2_scatter=lambda w, g, shape: None))
        for ours, theirs in zip(run(), generic):
            np.testing.assert_array_equal(ours, theirs)


@needs_numba
def test_cpus_max_pool_kernels_decline_what_they_do_not_take(monkeypatch):
    fused = get_backend("cpu").fused
    x = np.zeros((2, 4, 4), "float32")
    assert fused.max_pool_2x2_backward(x, np.zeros((2, 2, 2), "float64")) is None  # dtypes differ
    assert fused.max_pool_2x2_backward(x, np.zeros((2, 2, 3), "float32")) is None  # not its windows
    assert fused.max_pool_2x2(x.astype("int32")) is None and fused.max_pool_2x2(np.zeros(4, "float32")) is None
    assert fused.max_pool_2x2_backward(x.astype("int32"), np.zeros((2, 2, 2), "int32")) is None
    assert fused.max_pool_2x2_winners(x.astype("int32")) is None and fused.max_pool_2x2_winners(np.zeros(4)) is None
    out, winners = fused.max_pool_2x2_winners(x)
    assert fused.max_pool_2x2_scatter(winners, np.zeros((2, 2, 2), "float64"), x.shape) is None  # dtypes differ
    assert fused.max_pool_2x2_scatter(winners, np.zeros((2, 2, 3), "float32"), x.shape) is None  # not its windows
    x[0, 0, 0] = np.inf
    x[1] = -np.inf
    assert fused.max_pool_2x2_winners(x)[1] is None  # maxima of both infinities: taken for a NaN (the input's way)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # large finite maxima sum past float32's range: no warning, winners kept
        assert fused.max_pool_2x2_winners(np.full((1, 4, 4), 1e38, "float32"))[1] is not None
    calls = _counted(monkeypatch, "max_pool_2x2", "max_pool_2x2_winners")
    with leanpass.no_grad():  # no gradient can be asked: no winners kept
        nn.functional.max_pool2d(Tensor(x, requires_grad=True), 2)
    assert calls == ["max_pool_2x2"]
    monkeypatch.setattr(get_backend("cpu"), "fused", dataclasses.replace(fused, max_pool_2x2_scatter=None))
    xt = Tensor(np.ones((2, 4, 4), "float32"), requires_grad=True)  # winners without the scatter: the input's way
    nn.functional.max_pool2d(xt, 2).sum().backward()
    assert np.asarray(xt.grad).sum() == 8
