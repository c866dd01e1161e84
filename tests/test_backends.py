"""The backend registry, devices, defaults and conversions."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
import time

import array_api_strict as xs
import numpy as np
import pytest
from helpers import registered  # noqa: E402  (tests/ is on sys.path)

import leanpass
from leanpass import Tensor, backends, nn, optim
from leanpass.backends import Backend, available_devices, canonical_device, get_backend, register_backend
from leanpass.backends._base import LazyGenerator


def test_registry_maps_devices_to_libraries():
    assert get_backend("cpu").library == "numpy"
    assert get_backend("strict").library == "array_api_strict"
    assert get_backend("strict:1").device == "strict:1"
    assert get_backend("strict:0") is get_backend("strict")
    assert get_backend("cpu:0") is get_backend("cpu")
    assert canonical_device("cuda") == "cuda:0"  # without importing CuPy
    assert canonical_device("strict:0") == "strict"


def test_available_devices():
    devices = available_devices()
    assert devices[:1] == ["cpu"]
    assert {"strict", "strict:1", "strict:2"} <= set(devices)
    if importlib.util.find_spec("cupy") is None:
        assert not any(d.startswith("cuda") for d in devices)


def test_import_needs_neither_cupy_nor_strict():
    code = (
        "import sys, leanpass; t = leanpass.Tensor([1.0], requires_grad=True); (t * 2.0).sum().backward(); "
        "assert 'cupy' not in sys.modules and 'array_api_strict' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cuda_without_cupy_names_the_fix():
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here; this checks the message when it is missing")
    with pytest.raises(RuntimeError, match=r"cuda:0.*CuPy is not installed.*leanpass\[cuda12\]"):
        get_backend("cuda")
    with pytest.raises(RuntimeError, match="cuda:1"):
        Tensor([1.0], device="cuda:1")


def test_unknown_and_malformed_devices():
    with pytest.raises(RuntimeError, match="unknown device 'tpu'.*device type at start of device string: tpu"):
        get_backend("tpu")
    with pytest.raises(RuntimeError, match="'cpu:x'"):
        get_backend("cpu:x")
    with pytest.raises(RuntimeError, match="'strict:3' does not exist"):
        get_backend("strict:3")
    with pytest.raises(TypeError):
        get_backend(3)


def test_default_device_and_dtype(monkeypatch):
    assert leanpass.get_default_device() == "cpu"
    assert leanpass.get_default_dtype() == "float64"
    try:
        leanpass.set_default_device("strict:2")
        leanpass.set_default_dtype("float32")
        t = Tensor([1, 2])
        assert t.device == "strict:2" and t.dtype == xs.float32
        with pytest.raises(ValueError):
            leanpass.set_default_dtype("int32")
        with pytest.raises(RuntimeError, match="gpu"):
            leanpass.set_default_device("gpu")
        assert leanpass.get_default_device() == "strict:2"
    finally:
        leanpass.set_default_device("cpu")
        leanpass.set_default_dtype("float64")


def test_environment_variable_sets_the_default_device():
    code = "import leanpass; print(leanpass.get_default_device(), leanpass.Tensor([1.0]).device)"
    env = {"LEANPASS_DEVICE": "strict:1", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["strict:1", "strict:1"]
    env["LEANPASS_DEVICE"] = "gpu"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "LEANPASS_DEVICE" in bad.stderr


def test_tensor_keeps_the_library_and_device_of_its_array():
    a = xs.asarray([1.0, 2.0], device=xs.Device("device1"))
    t = Tensor(a)
    assert t.device == "strict:1" and t.data is not a  # Tensor() owns a copy
    assert leanpass.as_tensor(a).data is a  # as_tensor shares
    moved = Tensor(a, device="cpu")
    assert moved.device == "cpu" and isinstance(moved.data, np.ndarray)
    ints = Tensor(xs.asarray([1, 2]))
    assert ints.device == "strict" and ints.dtype == xs.float64


def test_host_data_goes_to_the_requested_device():
    for data in (1.5, [1.0, 2.0], np.array([1, 2]), np.float32(2.0)):
        t = Tensor(data, device="strict:2")
        assert t.device == "strict:2"
        assert type(t.data) is get_backend("strict").array_type


def test_dtypes_of_new_tensors():
    assert Tensor(np.ones(2, dtype=np.float32)).dtype == np.float32
    assert Tensor(np.ones(2, dtype=np.int32)).dtype == np.float64
    assert Tensor([True, False]).dtype == np.float64
    assert Tensor(np.ones(2, dtype=np.float32), dtype="float64").dtype == np.float64
    assert Tensor([1.0], dtype=np.float32).dtype == np.float32
    assert Tensor(xs.ones(2, dtype=xs.float32)).dtype == xs.float32


def test_tensor_copies_and_as_tensor_shares_host_data():
    arr = np.array([1.0, 2.0])
    t = Tensor(arr, requires_grad=True)
    t.data -= 1.0  # as an optimizer would, in place
    assert arr.tolist() == [1.0, 2.0]
    shared = leanpass.as_tensor(arr)
    assert shared.data is arr and not shared.requires_grad
    assert leanpass.as_tensor(arr, dtype="float32").dtype == np.float32


def test_cpu_data_is_a_plain_ndarray():
    t = Tensor([1.0, 2.0])
    assert type(t.data) is np.ndarray
    assert t.device == "cpu"


def test_conversions(device):
    t = Tensor([[1.0, 2.0]], requires_grad=True, device=device)
    host = t.numpy()
    assert type(host) is np.ndarray and host.tolist() == [[1.0, 2.0]]
    host[0, 0] = 99.0  # a copy
    assert t.numpy()[0, 0] == 1.0
    assert t.sum().item() == 3.0 and isinstance(t.sum().item(), float)
    assert Tensor([5.0], device=device).item() == 5.0
    cpu = t.cpu()
    assert cpu.device == "cpu" and cpu.numpy().tolist() == [[1.0, 2.0]]
    assert t.to(device) is t
    assert t.astype("float64") is t
    assert t.astype("float32").dtype == get_backend(device).dtype("float32")
    assert t.to("float32").dtype == get_backend(device).dtype("float32")
    assert t.tolist() == [[1.0, 2.0]]
    assert len(t) == 1 and [row.shape for row in t] == [(2,)]


def test_item_of_many_elements_is_an_error(device):
    with pytest.raises(ValueError, match=r"item.*\(2,\)"):
        Tensor([1.0, 2.0], device=device).item()


def test_moving_between_devices_keeps_values_and_gradient_flow():
    x = Tensor([1.0, 2.0], requires_grad=True, device="strict:1")
    y = x.to("strict:2")
    assert y.device == "strict:2" and y._op == "to"
    (y * y).sum().backward()
    assert x.grad.device == xs.Device("device1")
    assert x.numpy().tolist() == [1.0, 2.0]
    np.testing.assert_array_equal(np.from_dlpack(x.grad), [2.0, 4.0])


def test_mixed_devices_raise_value_error_naming_both():
    a = Tensor([1.0, 2.0], device="strict")
    b = Tensor([1.0, 2.0], device="strict:1")
    for op in (lambda: a + b, lambda: a * b, lambda: b - a, lambda: a @ b, lambda: a / b, lambda: a**b):
        with pytest.raises(ValueError, match=r"strict.*strict:1|strict:1.*strict"):
            op()


def test_raw_array_on_the_left_gives_a_tensor():
    t = Tensor([1.0, 2.0], requires_grad=True)
    out = np.ones(2) * t
    assert isinstance(out, Tensor) and out.requires_grad
    out = np.ones(2) - t
    assert isinstance(out, Tensor) and out.numpy().tolist() == [0.0, -1.0]
    assert isinstance(np.ones((3, 2)) @ t, Tensor)
    f32 = Tensor(np.ones(2, dtype=np.float32))
    assert (np.ones(2) + f32).dtype == np.float32  # host data takes the tensor's dtype


def test_python_scalars_and_numpy_scalars_do_not_promote():
    t = Tensor(np.ones(2, dtype=np.float32))
    for s in (2, 2.5, np.float64(2.5), np.int64(3), True):
        assert (t * s).dtype == np.float32
        assert (s * t).dtype == np.float32


def test_backend_methods_the_standard_lacks(device):
    backend = get_backend(device)
    xp = backend.xp
    buf = backend.zeros((3, 2), backend.dtype("float64"))
    index = xp.asarray([0, 2, 0], device=backend.xp_device)
    values = backend.ones((3, 2), backend.dtype("float64"))
    out = backend.index_add(buf, index, values, axis=0)
    assert backend.to_host(out).tolist() == [[2.0, 2.0], [0.0, 0.0], [1.0, 1.0]]
    rows = backend.ones((2, 3), backend.dtype("float64"))
    col = backend.index_add(backend.zeros((2, 3), backend.dtype("float64")), index, rows, axis=1)
    assert backend.to_host(col).tolist() == [[2.0, 0.0, 1.0], [2.0, 0.0, 1.0]]
    before = backend.host_transfers
    backend.to_host(out)
    assert backend.host_transfers == before + 1
    backend.synchronize()
    mask = backend.to_host(backend.bernoulli((1000,), 0.25, "float64"))
    assert set(np.unique(mask)) <= {0.0, 1.0} and 150 < mask.sum() < 350


def test_lazy_generator_is_made_at_the_first_draw_from_the_last_seed():
    made = []

    def factory(seed):
        made.append(seed)
        return np.random.default_rng(seed)

    rng = LazyGenerator(factory)
    rng.seed(1)
    rng.seed(2)
    assert made == []  # seeding makes nothing
    first = rng.get().random(3)
    assert made == [2] and rng.get().random(3).tolist() != first.tolist()
    assert made == [2]  # one generator, drawn on
    rng.seed(2)
    assert rng.get().random(3).tolist() == first.tolist() == np.random.default_rng(2).random(3).tolist()
    assert made == [2, 2]
    assert LazyGenerator(factory).get() is not None and made[-1] is None  # unseeded: the factory's default


def test_lazy_generator_is_made_once_when_threads_draw_first_together():
    made = []

    def factory(seed):
        made.append(seed)
        time.sleep(0.02)  # widen the window in which another thread finds no generator
        return object()

    rng = LazyGenerator(factory)
    rng.seed(3)
    start = threading.Barrier(8)
    got = []

    def draw():
        start.wait()
        got.append(rng.get())

    threads = [threading.Thread(target=draw) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == [3] and len(got) == 8 and all(g is got[0] for g in got)


def test_manual_seed_repeats_the_device_draws(device):
    backend = get_backend(device)
    leanpass.manual_seed(5)
    first = backend.to_host(backend.uniform((4,)))
    second = backend.to_host(backend.normal((4,)))
    leanpass.manual_seed(4)
    leanpass.manual_seed(5)
    assert backend.to_host(backend.uniform((4,))).tolist() == first.tolist()
    assert backend.to_host(backend.normal((4,))).tolist() == second.tolist()


def test_strict_index_add_is_the_standard_one_hot_version():
    strict = get_backend("strict")
    assert type(strict).index_add is Backend.index_add


class _ListBackend(Backend):
    """A toy third-party backend: strict's library under another device type."""

    device_type = "toy"
    library = "array_api_strict"
    xp = xs
    array_type = type(xs.asarray(0.0))

    def _from_numpy(self, host):
        return xs.asarray(host)

    def _to_numpy(self, array):
        return np.array(np.from_dlpack(array), copy=True)

    def _from_same_library(self, array):
        return array


class _Guard:
    """Counts how often work entered the device (a stand-in for `with cupy.cuda.Device(N)`)."""

    def __init__(self):
        self.entered = 0
        self.depth = 0

    def __enter__(self):
        self.entered += 1
        self.depth += 1

    def __exit__(self, *exc):
        self.depth -= 1


class _GuardedBackend(_ListBackend):
    device_type = "guarded"

    def __init__(self, index=0):
        super().__init__(index)
        self.guard = _Guard()


def test_operations_backward_and_updates_run_inside_the_device_guard():
    with registered("guarded", _GuardedBackend, "guarded_arrays"):
        guard = get_backend("guarded").guard
        model = nn.Linear(3, 2, device="guarded")
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = Tensor(np.ones((4, 3)), device="guarded")
        before = guard.entered
        loss = nn.cross_entropy_loss((model(x) * 2.0).tanh(), [0, 1, 1, 0])
        forward = guard.entered - before  # linear, *, tanh, cross_entropy (host targets: checked on the host)
        loss.backward()
        backward = guard.entered - before - forward  # cross_entropy, tanh, *, linear
        opt.step()
        assert forward == 4 and backward == 4 and guard.entered - before == 10  # + 2 parameter updates
        assert guard.depth == 0


def test_register_backend_adds_a_device_type():
    with registered("toy", _ListBackend, "toy_arrays"):
        t = Tensor([1.0, 2.0], requires_grad=True, device="toy")
        assert t.device == "toy" and "toy" in available_devices()
        (t * t).sum().backward()
        assert np.from_dlpack(t.grad).tolist() == [2.0, 4.0]
        with pytest.raises(RuntimeError, match="register_backend"):
            get_backend("toy2")
        with pytest.raises(TypeError):
            register_backend("bad", 42)


def test_the_registry_names_the_device_a_backend_reports():
    """A class registered with always_index=True, or under another type name, reports
    the registry's canonical device string (it reported its class's defaults: "toy"
    for "toy:0", "toy" for tensors made on "alias")."""
    register_backend("toy", _ListBackend, library="toy_arrays", always_index=True)
    try:
        assert canonical_device("toy") == "toy:0"
        assert Tensor([1.0], device="toy").device == "toy:0"
    finally:
        backends._TYPES.pop("toy")
        backends._LIBRARIES.pop("toy_arrays")
        for key in [k for k, b in backends._INSTANCES.items() if b.device_type == "toy"]:
            del backends._INSTANCES[key]
    with registered("alias", lambda: _ListBackend, "alias_arrays"):
        assert Tensor([1.0], device="alias").device == "alias"


def test_a_device_index_of_other_digits_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="must be a number"):
        get_backend("strict:\u00b2")


def test_a_library_belongs_to_one_device_type():
    class MyNumpy(_ListBackend):
        device_type = "mine"
        library = "numpy"

    with pytest.raises(ValueError, match="already belong"):
        register_backend("mine", MyNumpy)
    assert "mine" not in backends._TYPES
    assert Tensor(np.ones(2)).device == "cpu"


def test_reregistering_drops_cached_backends_of_any_spelling():
    old = get_backend(" strict:1")
    entry = backends._TYPES["strict"]
    register_backend("strict", entry.loader, library="array_api_strict")
    try:
        assert get_backend(" strict:1") is not old
    finally:
        backends._TYPES["strict"] = entry


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "all", "any"])
@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int32", "int64", "float32", "float64", "complex64"])
def test_numpy_namespace_reductions_are_numpys(name, dtype):
    """The cpu namespace calls ufunc.reduce directly for its reductions: same values and
    result dtypes as array_api_compat.numpy's (NumPy's own) for every axis form, and
    the same error for an empty max/min."""
    import array_api_compat.numpy as compat

    if name in ("max", "min") and dtype.startswith("complex"):
        pytest.skip("the standard has no max/min of complex numbers")
    fast, slow = getattr(get_backend("cpu").xp, name), getattr(compat, name)
    x = np.random.default_rng(3).normal(size=(2, 3, 4)) * 3
    x = (x > 0) if dtype == "bool" else np.abs(x).astype(dtype) if dtype.startswith("uint") else x.astype(dtype)
    x[0, 0, 0] = 0
    for axis in (None, 0, -1, (0, 2), ()):
        for keepdims in (False, True):
            got, want = fast(x, axis=axis, keepdims=keepdims), slow(x, axis=axis, keepdims=keepdims)
            assert np.asarray(got).dtype == np.asarray(want).dtype, (axis, keepdims)
            np.testing.assert_array_equal(got, want)
    assert np.asarray(fast(x[0, 0, :1])).shape == ()
    if name in ("max", "min"):
        with pytest.raises(ValueError, match="zero-size array"):
            fast(np.zeros((0, 3), dtype=dtype))
    if name in ("sum", "prod") and not dtype.startswith("complex"):
        np.testing.assert_array_equal(fast(x, dtype=np.float64), slow(x, dtype=np.float64))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "complex64"])
def test_sum_rows_is_the_sum_over_rows_on_every_device(device, dtype):
    """A bias's gradient (``Backend.sum_rows``; on NumPy a product with ones for float
    matrices): the sum over the first axis, a new array of the sum's dtype, for
    empty, transposed and non-finite rows too."""
    be = get_backend(device)
    rng = np.random.default_rng(4)
    cases = [rng.normal(size=(128, 33)) * 10, rng.normal(size=(7, 5)).T, np.zeros((0, 4)), np.zeros((3, 0)),
             np.array([[np.inf, np.nan, 1.0, -2.0], [-np.inf, 1.0, np.inf, 2.0]])]
    for host in cases:
        if dtype == "int64" and not np.isfinite(host).all():
            continue
        host = host.astype(dtype)
        x = be.as_array(np.ascontiguousarray(host)) if host.flags.c_contiguous else be.xp.matrix_transpose(
            be.as_array(np.ascontiguousarray(host.T)))
        with np.errstate(invalid="ignore"):
            got = be.sum_rows(x)
            want = host.astype("complex128").sum(axis=0)
        got_host = np.asarray(leanpass.Tensor(got, device=device, dtype=dtype).cpu().data)
        assert got_host.shape == want.shape and got_host.dtype == np.dtype(dtype), host.shape
        np.testing.assert_allclose(got_host, want, rtol=1e-5, atol=1e-3, equal_nan=True)
        if host.size:
            assert not be.shares_memory(got, x) or device == "strict"  # strict's shares_memory is cautious


def test_numpy_namespace_astype_copies_unless_told_not_to():
    xp = get_backend("cpu").xp
    x = np.arange(4.0)
    assert xp.astype(x, np.float64) is not x and xp.astype(x, np.float64, copy=False) is x
    assert xp.astype(x, np.float32).dtype == np.float32
    assert xp.astype(x, np.float64, device="cpu") is not x
    with pytest.raises(ValueError):
        xp.astype(x, np.float64, device="cuda:0")


def test_numpy_namespace_reshape_is_numpys():
    """The cpu namespace's reshape calls the array method when no copy is asked for:
    a view where NumPy's is one, and NumPy's own copy rules and errors otherwise."""
    import array_api_compat.numpy as compat

    xp = get_backend("cpu").xp
    x = np.arange(12.0).reshape(3, 4)
    for shape in ((12,), (4, 3), (-1, 2), (2, 2, 3), (1, 12, 1)):
        got = xp.reshape(x, shape)
        np.testing.assert_array_equal(got, compat.reshape(x, shape))
        assert np.shares_memory(got, x)
    assert not np.shares_memory(xp.reshape(x, (12,), copy=True), x)
    assert np.shares_memory(xp.reshape(x, (12,), copy=False), x)
    transposed = x.T  # not contiguous: flattening it needs a copy
    assert not np.shares_memory(xp.reshape(transposed, (12,)), x)
    with pytest.raises(ValueError):
        xp.reshape(transposed, (12,), copy=False)
    with pytest.raises(ValueError):
        xp.reshape(x, (5,))
    assert xp.reshape(np.float64(2.0), (1,)).shape == (1,)  # a NumPy scalar, as np.reshape takes it


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint64"])
def test_all_in_range_reads_every_index(device, dtype):
    """Backend.all_in_range over 1-D and 2-D index arrays (a sequence model's class
    indices) agrees with NumPy's own comparison on every device, wherever the bad
    value sits, and for empty ones."""
    be = get_backend(device)
    rng = np.random.default_rng(0)
    for shape in ((7,), (3, 5), (2, 1, 4), (0,), (2, 0)):
        base = rng.integers(0, 5, size=shape).astype(dtype)
        cases = [base]
        if base.size:
            for bad in ([5, 100] + ([-1] if dtype.startswith("int") else [])):
                changed = base.copy()
                changed.reshape(-1)[-1] = bad  # in the last row: a check of the first axis alone misses it
                cases.append(changed)
        for host in cases:
            want = bool(np.all((host.astype(np.int64) >= 0) & (host.astype(np.int64) < 5)))
            assert be.all_in_range(be.from_host(host), 5) is want, (shape, host.ravel().tolist())


def test_manual_seed_takes_pytorchs_range_and_checks_before_changing(device):
    """Any integer in [-2**63, 2**64) (negative as seed + 2**64, as PyTorch); out of
    range raises ValueError and keeps the current seed."""
    be = get_backend(device)
    draws = []
    for seed in (-1, 2**64 - 1):
        leanpass.manual_seed(seed)
        draws.append(np.asarray(be.to_host(nn.Linear(3, 2, device=device).weight.data)))
    np.testing.assert_array_equal(draws[0], draws[1])
    leanpass.manual_seed(5)
    want = np.asarray(be.to_host(nn.Linear(3, 2, device=device).weight.data))
    for bad in (2**64, -2**63 - 1):
        leanpass.manual_seed(5)
        with pytest.raises(ValueError, match="manual_seed"):
            leanpass.manual_seed(bad)
        np.testing.assert_array_equal(np.asarray(be.to_host(nn.Linear(3, 2, device=device).weight.data)), want)
