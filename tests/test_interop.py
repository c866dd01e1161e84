"""Interop (SPEC.md, "Interop" and the array object): NumPy's view of a Tensor,
DLPack with NumPy and PyTorch, the array API namespace, dtype comparisons,
hashing, formatting, Python scalars and the standard's attributes."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import array_api_compat
import numpy as np
import pytest
from helpers import SCIPY_DISPATCH, other_device, skip_below

import leanpass as lp
from leanpass import Tensor
from leanpass.backends import get_backend

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (pip install torch)")


def host(array, device):
    return get_backend(device).to_host(array)


DLPACK_CPU, DLPACK_CUDA = 1, 2  # DLPack's device types kDLCPU (host memory) and kDLCUDA


def in_host_memory(device) -> bool:
    """Whether the arrays of ``device`` live in host memory: NumPy's, and array_api_strict's
    on every one of its (simulated) devices; not CuPy's, which live on a GPU."""
    return get_backend(device).device_type != "cuda"


# ---- NumPy's view of a Tensor ---------------------------------------------------------------------


def test_numpy_asarray_gives_the_numbers(device):
    t = lp.asarray([[1.0, 2.0], [3.0, 4.0]], device=device)
    if device != "cpu":
        with pytest.raises(TypeError, match=r"\.numpy\(\).*\.cpu\(\)"):
            np.asarray(t)
        return
    a = np.asarray(t)
    assert type(a) is np.ndarray and a.dtype == np.float64 and a.shape == (2, 2)
    assert np.shares_memory(a, t.data)  # no copy
    np.testing.assert_array_equal(a, [[1.0, 2.0], [3.0, 4.0]])
    assert np.asarray(t, dtype=np.float32).dtype == np.float32
    c = np.array(t)  # np.array copies
    assert not np.shares_memory(c, t.data)
    assert np.asarray(lp.asarray(3, device=device)).dtype == np.int64
    assert np.asarray(Tensor([1.0], requires_grad=True).detach()).dtype == np.float64


# ---- nothing silently lost between libraries: a tensor in a graph is not turned into NumPy ----


def _graph_tensors(device):
    leaf = Tensor([0.3, -0.5, 1.2], requires_grad=True, device=device)
    return {"leaf that requires grad": leaf, "result in a graph": leaf * 2.0, "view in a graph": leaf[1:]}


@pytest.mark.parametrize("convert", ["asarray", "array", "__array__", "from_dlpack", "memoryview"])
def test_implicit_conversion_of_a_tensor_in_a_graph_raises(device, convert):
    """PyTorch's rule: NumPy would compute outside the graph and the term would be lost from
    the gradient without a word (issue 28: scipy.special.erf(x) dropped its term)."""
    how = {
        "asarray": np.asarray,
        "array": np.array,
        "__array__": lambda t: t.__array__(),
        "from_dlpack": np.from_dlpack,
        "memoryview": memoryview,
    }[convert]
    for what, t in _graph_tensors(device).items():
        version, data = t._version, t.numpy()
        with pytest.raises((TypeError, BufferError), match=r"detach\(\)|bytes-like"):
            how(t)
        assert t._version == version and t.requires_grad, what
        np.testing.assert_array_equal(t.numpy(), data)


def test_explicit_conversions_of_a_tensor_in_a_graph_keep_working(device):
    for what, t in _graph_tensors(device).items():
        host = t.numpy()
        assert type(host) is np.ndarray, what
        assert not t.detach().requires_grad
        if device == "cpu":
            np.testing.assert_array_equal(np.asarray(t.detach()), host)
            np.testing.assert_array_equal(np.from_dlpack(t.detach()), host)
            assert np.shares_memory(np.asarray(t.detach()), t.data)


def test_scipy_special_on_a_tensor_in_a_graph_raises_rather_than_dropping_its_term():
    """The issue's example: ((x ** 2).sum() + scipy.special.erf(x).sum()).backward() gave
    x.grad = 2x, the erf term silently lost."""
    special = pytest.importorskip("scipy.special")
    x = Tensor([0.3, -0.5, 1.2], requires_grad=True)
    with pytest.raises(TypeError, match=r"detach\(\)|ufunc"):  # SciPy's ufunc path refuses Tensors itself
        ((x ** 2).sum() + special.erf(x).sum()).backward()
    assert x.grad is None or not np.any(x.grad)
    # a plain tensor (no graph) converts as before
    np.testing.assert_allclose(np.asarray(special.erf(np.asarray(x.detach()))), special.erf(x.numpy()))


def test_scipy_array_api_dispatch_on_a_tensor_in_a_graph_keeps_the_term_or_raises():
    """With SCIPY_ARRAY_API=1 SciPy takes the tensor's namespace. A function that namespace
    has (``xp.special.erf``: lp.special's) is called on the tensor itself, so the term keeps
    its gradient; any other is computed through NumPy and wrapped back with xp.asarray: the
    path that dropped the term, which must raise naming detach()."""
    skip_below("scipy", *SCIPY_DISPATCH)
    code = (
        "import numpy as np, leanpass as lp, scipy.special as sp\n"
        "x = lp.Tensor([0.3, -0.5, 1.2], requires_grad=True)\n"
        "y = sp.erf(x)\n"
        "((x ** 2).sum() + y.sum()).backward()\n"
        "assert np.allclose(x.grad, 2 * x.numpy() + 2 / np.sqrt(np.pi) * np.exp(-x.numpy() ** 2)), x.grad\n"
        "print(type(y).__name__)\n"
        "try:\n"
        "    sp.gamma(x)\n"  # not in lp.special (nor in torch.special)
        "except TypeError as exc:\n"
        "    assert 'detach()' in str(exc), exc\n"
        "    print('refused')\n"
        "print(type(sp.gamma(x.detach())).__name__)\n"
    )
    env = {**os.environ, "SCIPY_ARRAY_API": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Tensor", "refused", "Tensor"]


def test_numpy_functions_never_build_object_arrays(device):
    a = lp.asarray([1.0, 2.0], device=device)
    b = lp.asarray([3.0], device=device)
    calls = {
        "concatenate": lambda: np.concatenate([a, b]),
        "stack": lambda: np.stack([a, a]),
        "array of tensors": lambda: np.array([a, a]),
        "array of 0-d tensors": lambda: np.array([lp.asarray(1.0, device=device), lp.asarray(2.0, device=device)]),
    }
    for what, call in calls.items():
        if device != "cpu":
            with pytest.raises(TypeError, match=r"\.numpy\(\)"):
                call()
            continue
        out = call()
        assert out.dtype == np.float64, f"{what} gave dtype {out.dtype}"
    if device == "cpu":
        np.testing.assert_array_equal(np.concatenate([a, b]), [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(np.stack([a, a]), [[1.0, 2.0], [1.0, 2.0]])
    with pytest.raises(TypeError):  # ufuncs defer to the Tensor, they do not loop over objects
        np.add(a, 1.0)


def test_numpy_array_on_the_left_gives_a_tensor(device):
    t = lp.asarray([1.0, 2.0], device=device)
    for out in (np.ones(2) * t, np.ones(2) + t, np.ones(2) - t, np.ones(2) / t, np.ones(2) == t):
        assert isinstance(out, Tensor) and out.device == t.device


def test_host_data_takes_the_tensor_dtype_but_is_never_truncated(device):
    f32 = lp.asarray([1.0, 2.0], dtype=lp.float32, device=device)
    assert (f32 * np.array([2.0, 2.0])).dtype == lp.float32  # float64 host data: float32 stays float32
    assert (np.ones(2) + f32).dtype == lp.float32 and (f32 + [1, 2]).dtype == lp.float32
    ints = lp.asarray([1, 2], device=device)
    assert (ints + [3, 4]).dtype == lp.int64
    if get_backend(device).library == "array_api_strict":
        # the standard does not mix integer and float arrays, and array_api_strict refuses
        # what the standard leaves undefined: an error, not a truncation
        with pytest.raises(TypeError, match="int64 and float64"):
            ints + np.array([0.5, 0.5])
    else:  # NumPy and CuPy promote int64 with float64 to float64
        out = ints + np.array([0.5, 0.5])
        assert out.dtype == lp.float64 and out.numpy().tolist() == [1.5, 2.5]
    assert ints.numpy().tolist() == [1, 2]


# ---- DLPack ------------------------------------------------------------------------------------------


def test_dlpack_device(device):
    t = lp.asarray([1.0, 2.0], device=device)
    kind, index = t.__dlpack_device__()
    if in_host_memory(device):  # kDLCPU: cpu and strict (every strict:N) live in host memory
        assert int(kind) == DLPACK_CPU and index == 0
    else:  # kDLCUDA, and the GPU's own number
        assert int(kind) == DLPACK_CUDA and index == get_backend(device).index


def test_from_dlpack_numpy_is_zero_copy(device):
    source = np.arange(4.0)
    t = lp.from_dlpack(source, device=device)
    assert t.device == device and t.dtype == lp.float64
    np.testing.assert_array_equal(t.numpy(), source)
    if device == "cpu":
        source[0] = 100.0
        assert t.numpy()[0] == 100.0  # the tensor sees the change: no copy
    t2 = lp.from_dlpack(np.arange(3, dtype=np.int32))
    assert t2.dtype == lp.int32 and t2.device == "cpu"


def test_numpy_from_tensor_dlpack_is_zero_copy(device):
    """A consumer that can address the tensor's memory gets a view of it: NumPy for host
    memory, the device's own library (CuPy) for a GPU's, which NumPy cannot view."""
    t = lp.asarray([1.0, 2.0, 3.0], device=device)
    consumer = np.from_dlpack if in_host_memory(device) else get_backend(device).module.from_dlpack
    view = consumer(t)
    read = (lambda v: v) if in_host_memory(device) else (lambda v: host(v, device))
    np.testing.assert_array_equal(read(view), [1.0, 2.0, 3.0])
    t += 1.0  # in place: the consumer's view sees it
    np.testing.assert_array_equal(read(view), [2.0, 3.0, 4.0])
    capsule = t.__dlpack__()
    assert type(capsule).__name__ == "PyCapsule"


@needs_torch
def test_dlpack_with_pytorch(device):
    source = torch.arange(4, dtype=torch.float64)
    t = lp.from_dlpack(source, device=device)
    assert t.dtype == lp.float64 and t.device == device
    np.testing.assert_array_equal(t.numpy(), [0.0, 1.0, 2.0, 3.0])
    if device == "cpu":
        source[1] = 50.0
        assert t.numpy()[1] == 50.0  # zero-copy
    assert lp.from_dlpack(torch.ones(2, dtype=torch.float32)).dtype == lp.float32
    if not (in_host_memory(device) or torch.cuda.is_available()):
        return  # the export below needs a PyTorch that can address the GPU's memory (this one is CPU-only)
    t = lp.asarray([1.0, 2.0, 3.0], dtype=lp.float32, device=device)
    theirs = torch.from_dlpack(t)
    assert theirs.dtype == torch.float32 and theirs.tolist() == [1.0, 2.0, 3.0]
    t *= 2.0
    assert theirs.tolist() == [2.0, 4.0, 6.0]  # zero-copy the other way
    w = Tensor([1.0, 2.0], requires_grad=True, device=device)
    assert torch.from_dlpack(w.detach()).tolist() == [1.0, 2.0]


def test_from_dlpack_of_a_tensor_and_of_nonsense(device):
    t = lp.asarray([1.0, 2.0], device=device)
    same = lp.from_dlpack(t)
    assert same.device == device and same.numpy().tolist() == [1.0, 2.0]
    with pytest.raises(TypeError, match="DLPack"):
        lp.from_dlpack([1.0, 2.0])


# ---- the array API namespace ----------------------------------------------------------------------------


def test_array_namespace_is_leanpass(device):
    t = lp.asarray([1.0], device=device)
    assert array_api_compat.array_namespace(t) is lp
    assert t.__array_namespace__() is lp and t.__array_namespace__(api_version="2024.12") is lp
    assert array_api_compat.array_namespace(t, lp.asarray([2.0], device=device)) is lp
    with pytest.raises(ValueError, match="2024.12"):
        t.__array_namespace__(api_version="1999.01")


def _generic_loss(x):
    """Array-API-generic code, as written for NumPy or CuPy."""
    xp = array_api_compat.array_namespace(x)
    return xp.sum(xp.exp(x) * x) + xp.sum(xp.sin(x) ** 2) / xp.asarray(2.0, device=x.device)


def test_generic_array_api_code_records_a_graph_and_differentiates(device):
    values = np.array([0.5, -1.0, 1.5])
    x = Tensor(values, requires_grad=True, device=device)
    loss = _generic_loss(x)
    assert isinstance(loss, Tensor) and loss.requires_grad and loss.shape == ()
    loss.backward()
    expected = np.exp(values) * (1 + values) + np.sin(values) * np.cos(values)
    np.testing.assert_allclose(host(x.grad, device), expected, rtol=1e-12)
    np.testing.assert_allclose(loss.item(), float(np.sum(np.exp(values) * values) + np.sum(np.sin(values) ** 2) / 2))
    assert lp.gradcheck(_generic_loss, [x])
    reference = _generic_loss(np.asarray(values))  # the same code on NumPy
    np.testing.assert_allclose(loss.item(), float(reference))


def test_array_api_version():
    assert lp.__array_api_version__ == "2024.12"


# ---- dtypes, hashing, formatting ---------------------------------------------------------------------------


def test_dtype_compares_with_leanpass_numpy_and_names(device):
    t = lp.asarray([1.0], dtype=lp.float32, device=device)
    assert t.dtype == lp.float32
    assert t.dtype == np.float32 and t.dtype == np.dtype("float32")
    assert t.dtype == "float32"
    assert lp.float32 == np.float32 and np.dtype("float32") == t.dtype
    assert t.dtype != lp.float64 and t.dtype != np.float64 and t.dtype != "float64"
    assert {lp.float32: 1}[t.dtype] == 1
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float32", "float64", "complex64", "complex128"):
        u = lp.zeros((1,), dtype=getattr(lp, name), device=device)
        assert u.dtype == getattr(lp, name) == name == np.dtype(name)


def test_tensors_hash_by_identity_while_eq_is_elementwise(device):
    a = lp.asarray([1.0, 2.0], device=device)
    b = lp.asarray([1.0, 2.0], device=device)
    assert len({a, b}) == 2 and a in {a} and b not in {a}
    d = {a: "a", b: "b"}
    assert d[a] == "a" and d[b] == "b"
    eq = a == b
    assert isinstance(eq, Tensor) and eq.dtype == lp.bool and eq.numpy().tolist() == [True, True]
    assert hash(a) == hash(a) and hash(a) != hash(b)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(a == b)


def test_format_of_a_scalar_tensor(device):
    loss = lp.asarray(0.123456, device=device)
    assert f"{loss:.3f}" == "0.123"
    assert f"{loss}" == format(0.123456)
    assert f"{lp.asarray([2.5], device=device):.1f}" == "2.5"
    assert f"{lp.asarray(7, device=device):03d}" == "007"
    w = Tensor([1.0, 2.0], device=device)
    assert f"{w}" == repr(w)
    with pytest.raises(TypeError, match="spec"):
        f"{w:.2f}"


# ---- Python scalars from 0-d tensors ---------------------------------------------------------------------------


def test_python_scalars(device):
    f = lp.asarray(2.75, device=device)
    i = lp.asarray(3, device=device)
    b = lp.asarray(True, device=device)
    z = lp.asarray(1 + 2j, device=device)
    assert float(f) == 2.75 and int(f) == 2 and bool(f) is True and complex(f) == 2.75 + 0j
    assert int(i) == 3 and float(i) == 3.0 and i.__index__() == 3
    assert [10, 20, 30, 40][i] == 40 and list(range(i)) == [0, 1, 2]
    assert bool(b) is True and bool(lp.asarray(0.0, device=device)) is False and int(b) == 1
    assert complex(z) == 1 + 2j
    assert type(float(f)) is float and type(int(i)) is int and type(complex(z)) is complex
    with pytest.raises(TypeError):
        f.__index__()  # a float is not an index
    with pytest.raises(TypeError):
        float(z)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(lp.asarray([1.0, 2.0], device=device))
    with pytest.raises(TypeError):
        float(lp.asarray([1.0, 2.0], device=device))
    with pytest.raises(OverflowError):
        int(lp.asarray(math.inf, device=device))
    with pytest.raises(ValueError):
        int(lp.asarray(math.nan, device=device))
    assert math.isnan(float(lp.asarray(math.nan, device=device)))
    assert bool(lp.asarray(math.nan, device=device)) is True
    assert float(Tensor(2.0, requires_grad=True, device=device)) == 2.0


# ---- the standard's attributes ---------------------------------------------------------------------------------


def test_attributes(device):
    t = lp.asarray(np.arange(24.0).reshape(2, 3, 4), device=device)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.size == 24 and t.device == device
    assert lp.asarray(1.0, device=device).size == 1 and lp.zeros((0, 3), device=device).size == 0
    mt = t.mT
    assert mt.shape == (2, 4, 3)
    np.testing.assert_array_equal(mt.numpy(), np.swapaxes(np.arange(24.0).reshape(2, 3, 4), -1, -2))
    m = lp.asarray(np.arange(6.0).reshape(2, 3), device=device)
    np.testing.assert_array_equal(m.T.numpy(), np.arange(6.0).reshape(2, 3).T)
    np.testing.assert_array_equal(m.mT.numpy(), np.arange(6.0).reshape(2, 3).T)


def test_mT_differentiates(device):
    x = Tensor(np.arange(6.0).reshape(1, 2, 3), requires_grad=True, device=device)
    assert lp.gradcheck(lambda a: a.mT * lp.asarray(np.arange(6.0).reshape(1, 3, 2), device=device), [x])


def test_to_device(device):
    t = Tensor([1.0, 2.0], requires_grad=True, device=device)
    for target in ("cpu", "strict", "strict:1"):
        moved = t.to_device(target)
        assert moved.device == target and moved.numpy().tolist() == [1.0, 2.0]
        (moved * 2.0).sum().backward()
    assert host(t.grad, device).tolist() == [6.0, 6.0]  # the gradient came back, three times
    assert t.to_device(device) is t
    with pytest.raises(RuntimeError, match="nowhere"):
        t.to_device("nowhere")


# ---- copies, shares and dtypes of host data (found by review) -----------------------------------


def test_the_constructor_and_copy_true_copy_every_kind_of_host_data():
    """A Tensor owns a copy: also of a torch tensor, a memoryview, any __array__ object."""
    buf = np.array([1.0, 2.0])
    sources = [lambda: memoryview(buf), lambda: buf[::1], lambda: buf]
    if torch is not None:
        shared = torch.tensor([1.0, 2.0])
        sources.append(lambda: shared)
    for make in sources:
        for build in (lambda d: Tensor(d), lambda d: lp.asarray(d, copy=True)):
            t = build(make())
            buf[0] = 100.0
            if torch is not None:
                shared[0] = 100.0
            assert t.tolist() == [1.0, 2.0]
            buf[0] = 1.0
            if torch is not None:
                shared[0] = 1.0


def test_copy_false_raises_where_a_copy_is_needed_and_shares_otherwise():
    a = np.array([1.0, 2.0])
    shared = lp.asarray(a, copy=False)
    a[0] = 9.0
    assert shared.tolist() == [9.0, 2.0]
    for data, device in ((np.array([1.0]), "strict"), (np.array([1, 2], dtype=">i4"), "cpu"),
                         (np.float64(1.0), "cpu")):
        with pytest.raises(ValueError, match="copy=False"):
            lp.asarray(data, device=device, copy=False)


def test_as_tensor_of_a_tensor_without_conversion_is_the_tensor():
    """As torch.as_tensor: a second leaf on the same array would count in-place changes
    apart, and a backward that saved it would give a wrong gradient silently."""
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    assert lp.as_tensor(x, device="cpu") is x and lp.as_tensor(x, dtype="float64") is x
    assert lp.as_tensor(x, dtype="float32") is not x


def test_buffers_and_numpy_scalars_keep_their_dtype():
    import array

    assert lp.asarray(memoryview(np.array([1, 2], dtype=np.uint8))).dtype == lp.uint8
    assert lp.asarray(memoryview(np.array([1.0], dtype=np.float32))).dtype == lp.float32
    assert lp.asarray(array.array("i", [1, 2])).dtype == lp.int32
    assert lp.asarray([np.int32(1), np.int32(2)]).dtype == lp.int32
    assert Tensor(np.array([1, 2], dtype=object)).tolist() == [1.0, 2.0]
    with pytest.raises(OverflowError, match="too large"):
        lp.asarray(np.array([1, 2**70], dtype=object))


def test_numbers_among_tensors_go_to_the_tensors_device():
    t = lp.asarray([lp.asarray(1.0, device="strict"), 2.0])
    assert t.device == "strict" and t.tolist() == [1.0, 2.0]


def test_from_dlpack_of_a_tensor_is_a_new_leaf_sharing_its_memory():
    x = Tensor([1.0], requires_grad=True)
    y = x * 2
    u = lp.from_dlpack(y)
    assert u is not y and u.is_leaf and not u.requires_grad
    with lp.no_grad():
        y += 1.0
    assert u.tolist() == [3.0]


def test_numpy_scalars_where_the_standard_says_python_scalars():
    assert lp.arange(np.int64(3)).tolist() == [0, 1, 2] and lp.arange(np.int64(3)).dtype == lp.int64
    assert lp.full(2, np.int64(1)).dtype == lp.int64
    assert lp.full_like(lp.ones(2), np.int64(4)).tolist() == [4.0, 4.0]
    assert lp.full(2, np.bool_(True)).dtype == lp.bool


def test_an_array_object_handing_over_its_own_memory_is_copied():
    """NumPy-2-style __array__ may return the object's own array (base None): the
    constructor and copy=True still copy it."""
    class Wrap:
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None, copy=None):
            return self.a.copy() if copy else self.a

    a = np.array([1.0, 2.0])
    w = Wrap(a)
    t, u, p = Tensor(w), lp.asarray(w, copy=True), lp.nn.Parameter(w)
    shared = lp.asarray(w)
    a[0] = 99.0
    assert t.tolist() == u.tolist() == p.tolist() == [1.0, 2.0]
    assert shared.tolist() == [99.0, 2.0]


def test_tensors_from_pytorch_tensors_in_a_graph(device):
    """A PyTorch tensor that requires grad (a parameter, an output) gives its values,
    as torch.tensor(param) does: a copy, outside any graph."""
    torch = pytest.importorskip("torch")
    w = torch.nn.Linear(3, 2).weight
    want = w.detach().numpy()
    for make, scale in ((lambda: lp.Tensor(w, device=device), 1), (lambda: lp.as_tensor(w * 2, device=device), 2),
                        (lambda: lp.nn.Parameter(w, device=device), 1)):
        t = make()
        assert t.shape == (2, 3) and t._node is None
        np.testing.assert_allclose(t.numpy(), want * scale, rtol=1e-6)


def test_asarray_changes_dtype_and_device_in_one_call(device):
    other = "strict" if device != "strict" else "cpu"
    t = lp.Tensor([1.0, 2.0], device=device, requires_grad=True)
    for copy in (None, True):
        u = lp.asarray(t, device=other, dtype=lp.float32, copy=copy)
        assert u.device == other and u.dtype == lp.float32 and u.requires_grad
    u.sum().backward()
    assert lp.asarray(t.grad).numpy().tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="copy=False"):
        lp.asarray(t, device=other, dtype=lp.float32, copy=False)


def test_as_tensor_converting_a_tensor_keeps_the_graph(device):
    w = lp.Tensor([1.0, 2.0], requires_grad=True, device=device)
    assert lp.as_tensor(w) is w
    for converted in (lp.as_tensor(w, dtype="float32"), lp.as_tensor(w, device=other_device(device))):
        assert converted.requires_grad  # as torch.as_tensor: a conversion in the graph, not a new leaf
        (converted * converted).sum().backward()
    np.testing.assert_allclose(get_backend(device).to_host(w.grad), [4.0, 8.0])


def test_in_looks_for_an_element(device):
    assert 2.0 in lp.Tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    assert 2.0 in lp.Tensor(2.0, device=device) and 5 not in lp.asarray([1, 2], device=device)
    with pytest.raises(TypeError, match="cannot look for a str"):
        lp.asarray([1.0], device=device).__contains__("a")


def test_creation_refuses_what_asarray_refuses(device):
    with pytest.raises(TypeError, match="float16"):  # strict: its own from_dlpack refuses it first
        lp.from_dlpack(np.ones(2, dtype=np.float16), device=device)
    for make in (lambda: lp.full((2,), 1j, dtype="float64", device=device),
                 lambda: lp.full_like(lp.ones(2, device=device), 1j),
                 lambda: lp.linspace(0, 1j, 3, dtype="float64", device=device),
                 lambda: lp.linspace(np.array(1 + 1j), 2, 3, dtype="float64", device=device)):
        with pytest.raises(TypeError, match="would lose the imaginary part"):
            make()
    assert lp.full_like(lp.ones(2, device=device), lp.Tensor(3.0, device=device)).tolist() == [3.0, 3.0]


def test_asarray_of_a_sequence_of_tensors(device):
    with pytest.raises(ValueError, match="the tensors in the sequence are on"):
        lp.asarray([lp.Tensor(1.0, device=device), lp.Tensor(2.0, device=other_device(device))])
    with pytest.raises(ValueError, match="copy=False"):
        lp.asarray([lp.Tensor(1.0, device=device)], copy=False)


def test_linspace_takes_zero_d_bounds(device):
    assert lp.linspace(lp.asarray(1 + 1j), 2, 3, device=device).dtype == lp.complex128
    assert lp.linspace(np.complex64(1 + 1j), 2, 3, device=device).dtype == lp.complex128
    assert lp.linspace(lp.asarray(0.0), np.float32(1), 3, device=device).tolist() == [0.0, 0.5, 1.0]
