"""The CPU stand-in for the `cuda` backend: what only CuPy does, on the CPU.

`Standin` is a CPU device of its own (``"standin:0"``, never ``"cuda"``) built on
array_api_strict (so only the standard passes, as on CuPy) that behaves as
leanpass/backends/cupy_backend.py where CuPy differs from NumPy:

- ``syncs_cheaply = False``: the GPU branches run (an invalid class index in a
  target on the device makes the loss NaN instead of raising);
- its own random generator, made at the first draw (``LazyGenerator``);
- scatter-add through ``add.at``, which takes CuPy's dtypes only (int32/64,
  uint32/64, float16/32/64; it raises TypeError for complex, bool and 8/16-bit
  integers, which take the generic one-hot product); the older ``scatter_add``
  spelling warns as ``cupyx.scatter_add`` does in CuPy 14 (a DeprecationWarning, an
  error under pytest);
- CupyBackend's own fused kernels, their CUDA statements run by tests/cuda_sim.py
  (tests/test_fused.py uses them too), and its CUDA kernels for lp.compile's fused
  runs, run the same way;
- its library's ``from_dlpack`` refuses host producers (kDLCPU: NumPy, PyTorch CPU)
  as ``cupy.from_dlpack`` does, so host data goes through ``from_host_dlpack``;
- its library's ``inv``, ``solve`` and ``cholesky`` give NaN for a singular matrix
  unless ``errstate(linalg="raise")`` is on, as CuPy's (cuSOLVER's status is read
  only then); the backend's ``linalg`` turns it on, as CupyBackend's does;
- no writeable flag: ``broadcast_to`` gives a writable view with zero strides, as
  ``cupy.broadcast_to`` does, so only the backend's stride check refuses a write.

The real ``CupyBackend`` is also loaded here with a fake ``cupy`` module that has
those refusals (``load_cupy_backend``), to check its own code on the CPU.

Its results are compared with `strict`, the same library without the differences.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading
import types
import warnings
from pathlib import Path
from unittest import mock

import array_api_compat.numpy as compat_numpy
import array_api_strict as xs
import cuda_sim
import numpy as np
import pytest
from helpers import OPTIMIZERS, registered  # (tests/ is on sys.path)

import leanpass
from leanpass import Tensor, backends, nn
from leanpass.backends import get_backend
from leanpass.backends._base import (
    CheckedLinalg,
    FusedKernels,
    LazyGenerator,
    broadcast_axis,
    broadcast_write_error,
    dlpack_on_host,
    dtype_name,
)
from leanpass.backends.strict_backend import StrictBackend

CALLS: dict[str, int] = {}  # kernel or generator name -> calls


def counted(name):
    def wrap(fn):
        def call(*args):
            CALLS[name] = CALLS.get(name, 0) + 1
            return fn(*args)

        return call

    return wrap


# The dtypes cupy.add.at takes (CuPy 14.1 and later; 14.0 refuses int64 too): cupy/_core/_routines_indexing.pyx
ADD_AT_DTYPES = ("int32", "int64", "uint32", "uint64", "float16", "float32", "float64")
FALLBACK_DTYPES = ("complex64", "complex128", "bool", "int8", "int16", "uint8", "uint16")


def cupy_add_at(buf, key, values, dtypes=ADD_AT_DTYPES):
    """``cupy.add.at`` on a NumPy ``buf``: its dtype check (on ``buf``'s dtype, into
    which CuPy casts the values), then NumPy's ``add.at``."""
    if buf.dtype.name not in dtypes:
        raise TypeError("cupy.add.at only supports int32, int64, float16, float32, float64, uint32, uint64 as "
                        "data type")
    np.add.at(buf, key, values)


class _AddAt:
    """``lib.add.at(buf, key, values)``: CuPy's, on the host copy of ``buf``."""

    at = staticmethod(cupy_add_at)


def cupy_from_dlpack(x, device=None):
    """``cupy.from_dlpack``'s refusal of host memory (cupy/_core/dlpack.pyx)."""
    kind, _ = x.__dlpack_device__()
    if int(kind) == 1:  # kDLCPU
        raise TypeError("CPU arrays cannot be directly imported to CuPy. Use `cupy.array(numpy.from_dlpack(input))` "
                        "instead.")
    return xs.from_dlpack(x, device=device)


class _LinalgConfig(threading.local):
    linalg = "ignore"  # CuPy's default: cuSOLVER's status is not read


_CONFIG = _LinalgConfig()


@contextlib.contextmanager
def errstate(*, linalg=None):
    """``cupyx.errstate(linalg=...)``: per thread, restored on exit."""
    old = _CONFIG.linalg
    if linalg is not None:
        _CONFIG.linalg = linalg
        CALLS["errstate_" + linalg] = CALLS.get("errstate_" + linalg, 0) + 1
    try:
        yield
    finally:
        _CONFIG.linalg = old


def _unchecked(name, routine):
    """``array_api_strict.linalg.<name>`` as CuPy's: a singular matrix gives NaN, or, under
    ``errstate(linalg="raise")``, LinAlgError naming the cuSOLVER routine."""
    function = getattr(xs.linalg, name)

    def call(x, *args, **kwargs):
        try:
            return function(x, *args, **kwargs)
        except np.linalg.LinAlgError:
            if _CONFIG.linalg == "raise":
                raise np.linalg.LinAlgError(f"Error reported by {routine} in cuSOLVER. devInfo = [1]. Please refer "
                                            "to the cuSOLVER documentation.") from None
            eye = xs.broadcast_to(xs.eye(x.shape[-1], dtype=x.dtype, device=x.device), x.shape)
            like = function(eye, *args, **kwargs)  # the result's shape and dtype
            return xs.full(like.shape, xs.nan, dtype=like.dtype, device=x.device)

    call.__name__ = name
    return call


class _UncheckedLinalg:
    """``array_api_strict.linalg`` with CuPy's unchecked ``inv``, ``solve``, ``cholesky``."""

    inv = staticmethod(_unchecked("inv", "getrf"))
    solve = staticmethod(_unchecked("solve", "getrf"))
    cholesky = staticmethod(_unchecked("cholesky", "potrf"))

    def __getattr__(self, name):
        return getattr(xs.linalg, name)


def cupy_broadcast_to(x, /, shape):
    """``cupy.broadcast_to``: a view with zero strides that nothing marks read-only."""
    inner = np.broadcast_to(x._array, shape)  # the shape checked, the strides computed
    view = np.lib.stride_tricks.as_strided(x._array, inner.shape, inner.strides, writeable=True)
    return type(x)._new(view, device=x.device)


def _namespace():
    ns = types.ModuleType("standin_xp", "array_api_strict, with CuPy's broadcast_to")
    ns.__dict__.update({k: v for k, v in vars(xs).items() if not k.startswith("__")})
    ns.broadcast_to = cupy_broadcast_to
    return ns


class _CupyLike:
    """The stand-in's library where it differs from array_api_strict, as CuPy 14: the two
    spellings of a scatter-add, ``from_dlpack``, ``errstate`` and unchecked ``linalg``."""

    add = _AddAt
    from_dlpack = staticmethod(cupy_from_dlpack)
    errstate = staticmethod(errstate)
    linalg = _UncheckedLinalg()

    @staticmethod
    def scatter_add(host, key, values):
        warnings.warn("cupyx.scatter_add is deprecated. Use cupy.add.at instead.", DeprecationWarning,
                      stacklevel=2)
        np.add.at(host, key, values)


class FakeDevice(str):
    """``cupy.cuda.Device(index)`` on the CPU: a context manager with ``.id``, and the
    device ``"cpu"`` to array_api_compat.numpy (which stands for array_api_compat.cupy)."""

    def __new__(cls, index=0):
        device = super().__new__(cls, "cpu")
        device.id = index
        return device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def synchronize(self):
        return None


def load_cupy_backend(monkeypatch=None, version="14.2.0", default_rng=np.random.default_rng):
    """The real cupy_backend module, loaded privately (never registered), with just enough
    of ``cupy`` and ``cupyx`` to run on the CPU: NumPy arrays stand for CuPy arrays, with
    CuPy's refusals (``add.at``'s dtypes, ``from_dlpack`` of host memory), and its kernels
    run by tests/cuda_sim.py. Returns the module and a record of host-to-device copies,
    ``add.at`` calls and ``errstate``s. Without ``monkeypatch`` the fake modules are in
    ``sys.modules`` only while the module loads."""
    seen = types.SimpleNamespace(transfers=[], add_at=[], errstate=[])
    dtypes = ADD_AT_DTYPES if tuple(map(int, version.split(".")[:2])) >= (14, 1) else \
        tuple(d for d in ADD_AT_DTYPES if d != "int64")

    def add_at(buf, key, values):
        cupy_add_at(buf, key, values, dtypes)
        seen.add_at.append(buf.dtype.name)

    def asarray(host):  # a host-to-device copy
        seen.transfers.append(host.dtype.name)
        return np.array(host, copy=True)

    def from_dlpack(x):
        cupy_from_dlpack(x)  # raises for host memory, the only kind here
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def errstate(*, linalg=None):
        seen.errstate.append(linalg)
        yield

    fake = types.SimpleNamespace(
        __version__=version,
        cuda=types.SimpleNamespace(Device=FakeDevice, runtime=types.SimpleNamespace(getDeviceCount=lambda: 1)),
        random=types.SimpleNamespace(default_rng=default_rng),
        ElementwiseKernel=cuda_sim.ElementwiseKernel,
        zeros=np.zeros,
        ndarray=np.ndarray,
        add=types.SimpleNamespace(at=add_at),
        asarray=asarray,
        from_dlpack=from_dlpack,
    )
    fakes = {"cupy": fake, "cupyx": types.SimpleNamespace(errstate=errstate), "array_api_compat.cupy": compat_numpy}
    if monkeypatch is not None:
        for name, value in fakes.items():
            monkeypatch.setitem(sys.modules, name, value)
    spec = importlib.util.spec_from_file_location(
        "leanpass.backends._cupy_backend_under_test", Path(backends.__file__).parent / "cupy_backend.py"
    )
    module = importlib.util.module_from_spec(spec)
    with mock.patch.dict(sys.modules, fakes):
        spec.loader.exec_module(module)
    return module, seen


def _standin_kernels() -> FusedKernels:
    """CupyBackend's fused kernels, their CUDA run by the simulator, each call counted;
    and its generator of lp.compile's fused runs."""
    module, _ = load_cupy_backend()
    real = module._kernels()
    counted_kernels = {name: counted(name)(getattr(real, name)) for name in real.names()}
    return FusedKernels(**counted_kernels, elementwise=counted("elementwise")(module.elementwise))




class Standin(StrictBackend):
    device_type = "standin"
    always_index = True  # "standin:0", as "cuda:0"
    syncs_cheaply = False
    xp = _namespace()
    linalg = CheckedLinalg(_CupyLike.linalg, lambda: _CupyLike.errstate(linalg="raise"))  # as CupyBackend's
    fused = _standin_kernels()

    def __init__(self, index=0):
        super().__init__(index)
        self._rng = LazyGenerator(counted("make_generator")(np.random.default_rng))

    def index_add(self, buf, index, values, axis=0):  # CuPy: cupy.add.at, in place, for the dtypes it takes
        if dtype_name(buf.dtype) not in ADD_AT_DTYPES:
            CALLS["index_add_generic"] = CALLS.get("index_add_generic", 0) + 1
            return super().index_add(buf, index, values, axis)
        host = self._to_numpy(buf)
        _CupyLike.add.at(host, (slice(None),) * axis + (self._to_numpy(index),), self._to_numpy(values))
        buf[...] = self._from_numpy(host)
        CALLS["index_add"] = CALLS.get("index_add", 0) + 1
        return buf

    def from_dlpack(self, x, copy=None):  # as CupyBackend's
        if dlpack_on_host(x):
            return self.from_host_dlpack(x, copy)
        return _CupyLike.from_dlpack(x, device=self._device)

    # CuPy arrays have no writeable flag: a broadcast view is found by its strides alone
    def read_only(self, array) -> bool:
        return broadcast_axis(array.shape, array._array.strides) is not None

    def index_set(self, buf, kind, key, values):
        axis = broadcast_axis(buf.shape, buf._array.strides)
        if axis is not None:
            raise broadcast_write_error(self.device, "CuPy", buf.shape, axis)
        super().index_set(buf, kind, key, values)

    # draws from the device's own generator, as CupyBackend
    def seed(self, seed):
        self._rng.seed(seed)

    def uniform(self, shape, low=0.0, high=1.0, dtype="float64"):
        return self._from_numpy(self._rng.get().random(shape, dtype=dtype_name(dtype)) * (high - low) + low)

    def normal(self, shape, mean=0.0, std=1.0, dtype="float64"):
        return self._from_numpy(self._rng.get().standard_normal(shape, dtype=dtype_name(dtype)) * std + mean)

    def bernoulli(self, shape, p, dtype="float64"):
        return self._from_numpy((self._rng.get().random(shape) < p).astype(dtype_name(dtype)))


@pytest.fixture(scope="module", autouse=True)
def standin_device():
    with registered("standin", Standin, "standin_arrays"):
        yield


@pytest.fixture(autouse=True)
def calls():
    CALLS.clear()
    return CALLS


def test_the_standin_is_a_cpu_device_of_its_own():
    backend = get_backend("standin")
    assert backend.device == "standin:0" and not backend.syncs_cheaply
    assert Tensor([1.0], device="standin").device == "standin:0"


def train(device, steps=5, dtype="float64"):
    leanpass.manual_seed(0)
    model = nn.MLP([4, 8, 3], device=device, dtype=dtype)
    opt = OPTIMIZERS["adam"](model.parameters())
    rng = np.random.default_rng(0)
    x = Tensor(rng.normal(size=(16, 4)), device=device, dtype=dtype)
    y = leanpass.asarray(rng.integers(0, 3, size=16), device=device)  # class indices on the device
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.cross_entropy_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.numpy() for p in model.parameters()]


def test_training_an_mlp_matches_strict(calls):
    losses, params = train("standin")
    assert losses[-1] < losses[0]
    assert calls["relu_backward"] == 5 and calls["adam"] == 5 * 4  # 1 activation, 4 parameters
    strict_losses, strict_params = train("strict")
    np.testing.assert_allclose(losses, strict_losses, rtol=1e-12)
    for a, b in zip(params, strict_params):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_steps_run_through_the_fused_kernels(name, calls):
    def step(device):
        p = Tensor(np.linspace(-1.0, 1.0, 6), requires_grad=True, device=device)
        opt = OPTIMIZERS[name]([p])
        for _ in range(3):
            opt.zero_grad()
            (p * p * p).sum().backward()
            opt.step()
        return p.numpy()

    fused = step("standin")
    assert calls[{"momentum": "sgd_momentum", "nesterov": "sgd_momentum"}.get(name, name.replace("w", ""))] == 3
    np.testing.assert_allclose(fused, step("strict"), rtol=1e-12, atol=1e-15)


def test_invalid_class_index_on_the_device_poisons_the_loss():
    logits = Tensor(np.zeros((2, 3)), requires_grad=True, device="standin")
    for bad in ([0, 3], [-1, 0], [0.5, 1.0]):
        loss = nn.cross_entropy_loss(logits, leanpass.asarray(bad, device="standin"))
        assert np.isnan(loss.item())
    good = nn.cross_entropy_loss(logits, leanpass.asarray([0.0, 2.0], device="standin"))
    assert good.item() == pytest.approx(np.log(3.0))
    good.backward()
    np.testing.assert_allclose(np.from_dlpack(logits.grad), [[-1 / 3, 1 / 6, 1 / 6], [1 / 6, 1 / 6, -1 / 3]])


def test_invalid_class_index_given_as_host_data_raises():
    logits = Tensor(np.zeros((2, 3)), requires_grad=True, device="standin")
    for bad in ([0, 3], np.array([0.5, 1.0])):
        with pytest.raises(ValueError, match=r"\[0, 3\)"):
            nn.cross_entropy_loss(logits, bad)  # checked on the host before it moves


def test_repeated_indices_accumulate_through_index_add(calls):
    data = np.arange(12.0).reshape(3, 4)
    weights = np.arange(1.0, 13.0).reshape(3, 4)

    def grads(device):
        out = []
        for pick in (lambda x: x[[0, 2, 0]], lambda x: leanpass.take(x, leanpass.asarray([3, 3, 1], device=device),
                                                                     axis=1)):
            x = Tensor(data, requires_grad=True, device=device)
            y = pick(x)
            (y * Tensor(weights[: y.shape[0], : y.shape[1]], device=device)).sum().backward()
            out.append(np.from_dlpack(x.grad))
        return out

    row, col = grads("standin")
    assert calls["index_add"] == 2
    expected_row = np.zeros((3, 4))
    np.add.at(expected_row, [0, 2, 0], weights)
    expected_col = np.zeros((3, 4))
    np.add.at(expected_col, (slice(None), [3, 3, 1]), weights[:, :3])
    np.testing.assert_array_equal(row, expected_row)
    np.testing.assert_array_equal(col, expected_col)


def test_the_deprecated_scatter_add_spelling_warns_as_on_cupy_14():
    host = np.zeros(3)
    with pytest.warns(DeprecationWarning, match="add.at"):
        _CupyLike.scatter_add(host, np.array([1, 1]), np.ones(2))
    assert host.tolist() == [0.0, 2.0, 0.0]


def test_cupy_backend_scatters_with_add_at_not_the_deprecated_spelling():
    source = (Path(backends.__file__).parent / "cupy_backend.py").read_text()
    assert "cupy.add.at(" in source and "scatter_add" not in source


def test_manual_seed_makes_no_generator_until_the_first_draw(calls):
    backend = get_backend("standin")
    leanpass.manual_seed(1)
    leanpass.manual_seed(7)
    assert calls.get("make_generator", 0) == 0
    drop = nn.Dropout(0.5)
    x = Tensor(np.ones(64), device="standin")
    first = np.from_dlpack(drop(x).data)
    assert calls["make_generator"] == 1
    # the same stream as a generator made at once from the last seed
    expected = (np.random.default_rng(7).random(64) < 0.5) * 2.0
    np.testing.assert_array_equal(first, expected)
    backend.normal((2,))
    assert calls["make_generator"] == 1  # made once, drawn on
    leanpass.manual_seed(7)
    np.testing.assert_array_equal(np.from_dlpack(drop(x).data), first)
    assert calls["make_generator"] == 2


def test_cupy_backend_seeds_lazily_with_the_same_stream(monkeypatch):
    """The real CupyBackend's seeding (NumPy's generator in place of CuPy's)."""
    made = []

    def default_rng(seed=None):
        made.append(seed)
        return np.random.default_rng(seed)

    module, _ = load_cupy_backend(monkeypatch, default_rng=default_rng)
    cuda = module.CupyBackend(0)
    cuda.seed(1)
    cuda.seed(2)
    assert made == []  # seeding makes no generator
    first = cuda.uniform((3,))
    assert made == [2] and first.tolist() == np.random.default_rng(2).random(3).tolist()
    cuda.normal((2,))
    cuda.bernoulli((2,), 0.5)
    assert made == [2]  # made once, drawn on
    cuda.seed(2)
    assert cuda.uniform((3,)).tolist() == first.tolist() and made == [2, 2]


# ---- from_dlpack of host memory: CuPy refuses it, the backend copies it ---------------------------


def test_the_standin_library_refuses_host_producers_as_cupy_does():
    sources = [np.arange(3.0), xs.asarray([1.0])]
    if importlib.util.find_spec("torch") is not None:
        import torch

        sources.append(torch.arange(3.0))
    for source in sources:
        assert dlpack_on_host(source)
        with pytest.raises(TypeError, match="CPU arrays cannot be directly imported"):
            _CupyLike.from_dlpack(source)
    assert not dlpack_on_host([1.0])


@pytest.mark.parametrize("producer", ["numpy", "torch"])
@pytest.mark.parametrize("copy", [None, True])
def test_from_dlpack_copies_a_host_producer_to_the_device(producer, copy):
    if producer == "torch":
        torch = pytest.importorskip("torch")
        source = torch.arange(4, dtype=torch.float32)
    else:
        source = np.arange(4, dtype=np.float32)
    backend = get_backend("standin")
    before = backend.host_transfers
    t = leanpass.from_dlpack(source, device="standin", copy=copy)
    assert backend.host_transfers == before + 1  # one host-to-device copy
    assert t.device == "standin:0" and t.dtype == leanpass.float32 and t.tolist() == [0.0, 1.0, 2.0, 3.0]
    source[0] = 100.0
    assert t.tolist()[0] == 0.0  # a copy on the device, not the producer's memory


def test_from_dlpack_refuses_copy_false_for_a_host_producer():
    backend = get_backend("standin")
    before = backend.host_transfers
    with pytest.raises(BufferError, match=r"^from_dlpack: the ndarray is on cpu .*standin:0 .*copy=False"):
        leanpass.from_dlpack(np.arange(3.0), device="standin", copy=False)
    assert backend.host_transfers == before  # nothing copied


@pytest.mark.parametrize("copy", [None, False])
def test_from_dlpack_checks_the_dtype_before_anything_else(copy):
    backend = get_backend("standin")
    before = backend.host_transfers
    with pytest.raises(TypeError, match="^from_dlpack: dtype float16 is not a data type"):
        leanpass.from_dlpack(np.ones(2, dtype=np.float16), device="standin", copy=copy)
    assert backend.host_transfers == before


def test_cupy_backend_copies_host_producers_and_refuses_copy_false(monkeypatch):
    module, seen = load_cupy_backend(monkeypatch)
    cuda = module.CupyBackend(0)
    source = np.arange(3.0)
    with pytest.raises(TypeError, match="CPU arrays cannot be directly imported"):
        sys.modules["cupy"].from_dlpack(source)  # what the backend must not call for host memory
    out = cuda.from_dlpack(source)
    assert out.tolist() == [0.0, 1.0, 2.0] and not np.shares_memory(out, source) and seen.transfers == ["float64"]
    assert cuda.from_dlpack(source, copy=True).tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(BufferError, match=r"^from_dlpack: the ndarray is on cpu .*cuda:0 .*copy=False"):
        cuda.from_dlpack(source, copy=False)
    for copy in (None, False):
        with pytest.raises(TypeError, match="^from_dlpack: dtype float16"):
            cuda.from_dlpack(np.ones(2, dtype=np.float16), copy=copy)
    assert seen.transfers == ["float64"] * 2  # nothing moved for a refusal


# ---- singular matrices: LinAlgError on every device ---------------------------------------------


SINGULAR = np.array([[1.0, 2.0], [2.0, 4.0]])


def test_the_standin_library_gives_nan_for_a_singular_matrix_as_cupy_does():
    lib = _CupyLike.linalg
    a = xs.asarray(SINGULAR)
    for out in (lib.inv(a), lib.solve(a, xs.ones((2, 1), dtype=xs.float64)), lib.cholesky(a)):
        assert out.shape[-2:] in ((2, 2), (2, 1)) and np.all(np.isnan(np.from_dlpack(out)))
    for call in (lambda: lib.inv(a), lambda: lib.cholesky(a)):
        with errstate(linalg="raise"), pytest.raises(np.linalg.LinAlgError, match="cuSOLVER"):
            call()
    assert _CONFIG.linalg == "ignore"  # restored


SINGULAR_CALLS = {
    "inv": lambda x: leanpass.linalg.inv(x),
    "solve": lambda x: leanpass.linalg.solve(x, leanpass.ones(2, device=x.device)),
    "solve batch": lambda x: leanpass.linalg.solve(leanpass.stack([leanpass.eye(2, device=x.device), x]),
                                                   leanpass.ones((2, 2, 1), device=x.device)),
    "cholesky": lambda x: leanpass.linalg.cholesky(x),
    "matrix_power": lambda x: leanpass.linalg.matrix_power(x, -1),
}


@pytest.mark.parametrize("device", ["cpu", "strict", "standin"])
@pytest.mark.parametrize("name", list(SINGULAR_CALLS))
def test_singular_matrices_raise_on_every_device(device, name, calls):
    """The contract: inv, solve and cholesky raise LinAlgError (a ValueError) naming the
    function for a singular matrix on every device, changing nothing; on the stand-in
    (and CuPy) only because the backend turns the library's check on."""
    x = Tensor(SINGULAR, requires_grad=True, device=device)
    with pytest.raises(np.linalg.LinAlgError, match=f"^{name.split()[0]}: "):
        SINGULAR_CALLS[name](x)
    assert x._grad is None and x.numpy().tolist() == SINGULAR.tolist()
    if device == "standin":
        assert calls["errstate_raise"] == 1


@pytest.mark.parametrize("device", ["cpu", "standin"])
def test_slogdet_gradient_at_a_singular_matrix_raises_on_every_device(device):
    x = Tensor(SINGULAR, requires_grad=True, device=device)
    sign, logabsdet = leanpass.linalg.slogdet(x)  # forward: sign 0, logabsdet -inf, no error
    assert sign.item() == 0.0 and logabsdet.item() == -np.inf
    with pytest.raises(ValueError, match="slogdet: the gradient of logabsdet at a singular matrix"):
        logabsdet.backward()
    assert x._grad is None  # nothing written


def test_det_and_other_unchecked_functions_keep_their_values_at_a_singular_matrix(calls):
    x = Tensor(SINGULAR, requires_grad=True, device="standin")
    d = leanpass.linalg.det(x)
    assert d.item() == 0.0
    d.backward()  # the cofactor matrix, right at singular matrices too
    np.testing.assert_allclose(np.from_dlpack(x.grad), [[4.0, -2.0], [-2.0, 1.0]], atol=1e-12)
    assert leanpass.linalg.matrix_rank(x).item() == 1


def test_checked_linalg_matches_strict_for_invertible_matrices(calls):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    spd = a @ a.T
    b = rng.normal(size=(3, 2))

    def run(device):
        x, y, s = (Tensor(v, requires_grad=True, device=device) for v in (a, b, spd))
        outs = [leanpass.linalg.inv(x), leanpass.linalg.solve(x, y), leanpass.linalg.cholesky(s)]
        sum(o.sum() for o in outs).backward()
        return [o.numpy() for o in outs] + [np.from_dlpack(t.grad) for t in (x, y, s)]

    for mine, theirs in zip(run("standin"), run("strict")):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-14)
    # each checked call (forward and backward) turned the check on; nothing else did
    assert calls["errstate_raise"] == 1 + 2 + 3  # inv; solve, its backward's; cholesky, its backward's two


def test_cupy_backend_checks_inv_solve_and_cholesky_with_errstate_raise(monkeypatch):
    module, seen = load_cupy_backend(monkeypatch)
    cuda = module.CupyBackend(0)
    eye = np.eye(2)
    cuda.linalg.inv(eye)
    cuda.linalg.solve(eye, np.ones((2, 1)))
    cuda.linalg.cholesky(eye, upper=True)
    assert seen.errstate == ["raise"] * 3
    cuda.linalg.det(eye)
    cuda.linalg.eigh(eye)
    assert seen.errstate == ["raise"] * 3  # the rest of linalg unchanged: no check, no sync


# ---- scatter-add: cupy.add.at's dtypes, the generic product for the rest ---------------------------


@pytest.mark.parametrize("dtype", ADD_AT_DTYPES + FALLBACK_DTYPES)
def test_the_standin_add_at_takes_cupys_dtypes_only(dtype):
    buf = np.zeros(3, dtype=dtype)
    if dtype in FALLBACK_DTYPES:
        with pytest.raises(TypeError, match="cupy.add.at only supports"):
            _CupyLike.add.at(buf, np.array([1, 1]), np.ones(2, dtype=dtype))
        assert not buf.any()
    else:
        _CupyLike.add.at(buf, np.array([1, 1]), np.ones(2, dtype=dtype))
        assert buf.tolist() == [0, 2, 0]


def _scatter_case(dtype):
    """A buffer, repeated indices and values of ``dtype`` (two axes), and NumPy's answer."""
    rng = np.random.default_rng(0)
    if dtype == "bool":
        buf, values = rng.random((3, 4)) < 0.3, rng.random((3, 5)) < 0.5
    else:
        buf, values = rng.integers(-3, 4, size=(3, 4)), rng.integers(-3, 4, size=(3, 5))
        if dtype.startswith("uint"):
            buf, values = np.abs(buf), np.abs(values)
        if dtype.startswith("complex"):
            buf, values = buf + 1j * buf[::-1], values - 2j
        buf, values = buf.astype(dtype), values.astype(dtype)
    index = np.array([3, 0, 3, 3, 1])
    expected = buf.copy()
    np.add.at(expected, (slice(None), index), values)
    return buf, index, values, expected


@pytest.mark.parametrize("dtype", FALLBACK_DTYPES + ("float32", "int64"))
def test_index_add_falls_back_to_the_generic_product_where_add_at_refuses(dtype, calls):
    backend = get_backend("standin")
    buf, index, values, expected = _scatter_case(dtype)
    out = backend.index_add(backend.from_host(buf), backend.from_host(index), backend.from_host(values), axis=1)
    np.testing.assert_array_equal(np.from_dlpack(out), expected)
    assert np.from_dlpack(out).dtype == np.dtype(dtype)
    generic = dtype in FALLBACK_DTYPES
    assert calls.get("index_add_generic", 0) == generic and calls.get("index_add", 0) == (not generic)
    # and along the first axis, where the rows repeat
    rows = backend.index_add(backend.from_host(buf[:2]), backend.from_host(np.array([1, 1, 0])),
                             backend.from_host(values[:, :4]), axis=0)
    want = buf[:2].copy()
    np.add.at(want, [1, 1, 0], values[:, :4])
    np.testing.assert_array_equal(np.from_dlpack(rows), want)


@pytest.mark.parametrize("version", ["14.0.1", "14.2.0"])
def test_cupy_backend_scatters_with_add_at_only_for_the_dtypes_it_takes(monkeypatch, version):
    module, seen = load_cupy_backend(monkeypatch, version=version)
    cuda = module.CupyBackend(0)
    int64_at = version >= "14.1"
    assert ("int64" in module.ADD_AT_DTYPES) == int64_at
    for dtype in ADD_AT_DTYPES + FALLBACK_DTYPES:
        buf, index, values, expected = _scatter_case(dtype)
        seen.add_at.clear()
        out = cuda.index_add(buf.copy(), index, values, axis=1)
        np.testing.assert_array_equal(out, expected)
        assert out.dtype == np.dtype(dtype)
        assert seen.add_at == ([dtype] if dtype in module.ADD_AT_DTYPES else []), dtype


def test_the_backward_of_indexing_scatters_float_gradients_with_add_at(calls):
    """The gradients indexing scatters are float64 and float32: cupy.add.at's own."""
    for dtype in ("float64", "float32"):
        x = Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True, device="standin", dtype=dtype)
        x[[1, 1, 0]].sum().backward()
        np.testing.assert_array_equal(np.from_dlpack(x.grad), [[1, 1, 1], [2, 2, 2]])
    assert calls["index_add"] == 2 and "index_add_generic" not in calls


# ---- no writeable flag: a write into a broadcast view is refused by its strides --------------------


def test_standin_arrays_have_no_writeable_flag():
    backend = get_backend("standin")
    x = backend.from_host(np.array([1.0, 2.0]))
    assert not hasattr(x, "flags")  # array_api_strict arrays have none, as CuPy's have no writeable field
    view = backend.xp.broadcast_to(x, (3, 2))
    assert view._array.flags.writeable  # nothing marks it read-only, as with cupy.broadcast_to
    assert backend.read_only(view) and not backend.read_only(x)
    assert not backend.read_only(backend.xp.broadcast_to(x, (1, 2)))  # one row: no element shared
    assert not backend.read_only(backend.xp.broadcast_to(backend.from_host(np.ones((0, 1))), (0, 3)))  # empty
    assert broadcast_axis((3, 2), (0, 8)) == 0 and broadcast_axis((2, 3, 4), (8, 0, 0)) == 1
    assert broadcast_axis((3, 2), (16, 8)) is None and broadcast_axis((0, 2), (0, 0)) is None


@pytest.mark.parametrize("device", ["cpu", "standin"])
@pytest.mark.parametrize("key", ["basic", "integer", "mask"])
def test_setitem_into_a_broadcast_view_is_refused(device, key):
    base = leanpass.asarray([1.0, 2.0], device=device)
    t = leanpass.broadcast_to(base, (3, 2))
    index = {"basic": 0, "integer": leanpass.asarray([0, 2], device=device),
             "mask": leanpass.asarray([True, False, True], device=device)}[key]
    with pytest.raises(ValueError, match="^setitem: cannot change the tensor of shape") as info:
        t[index] = 5.0
    assert f"on {t.device} in place: its array is read-only (a broadcast view" in str(info.value)
    assert base.tolist() == [1.0, 2.0] and t.tolist() == [[1.0, 2.0]] * 3  # nothing written


@pytest.mark.parametrize("device", ["cpu", "standin"])
def test_an_optimizer_refuses_a_parameter_whose_data_is_a_broadcast_view(device):
    backend = get_backend(device)
    p = Tensor(np.zeros((3, 2)), requires_grad=True, device=device)
    # p.data = would move a stand-in array (an array_api_strict one) to strict
    p._data = backend.xp.broadcast_to(backend.from_host(np.array([1.0, 2.0])), (3, 2))
    (p * p).sum().backward()
    opt = leanpass.optim.SGD([p], lr=0.1)
    assert backend.read_only(p.data)
    # (on the stand-in the message names the gradient's device, as strict's: its arrays are array_api_strict's)
    with pytest.raises(ValueError, match=r"SGD.step: parameter 0 \(shape \(3, 2\)\) is (read-only|on standin:0)"):
        opt.step()
    assert p.tolist() == [[1.0, 2.0]] * 3


def test_an_in_place_operator_into_a_broadcast_view_is_refused():
    t = leanpass.broadcast_to(leanpass.asarray([1.0, 2.0], device="standin"), (3, 2))
    for change in (lambda: t.__iadd__(1.0), lambda: t.__imul__(t), lambda: t.copy_(t + 1.0)):
        with pytest.raises(ValueError, match=r"standin:0 in place: its array is read-only \(a broadcast view"):
            change()
        assert t.numpy().tolist() == [[1.0, 2.0]] * 3 and t._version == 0


def test_cupy_backend_refuses_writes_into_broadcast_views(monkeypatch):
    module, _ = load_cupy_backend(monkeypatch)
    cuda = module.CupyBackend(0)
    base = np.array([1.0, 2.0])
    view = np.lib.stride_tricks.as_strided(base, (3, 2), (0, 8), writeable=True)  # as cupy.broadcast_to's
    assert cuda.read_only(view) and not cuda.read_only(np.zeros((3, 2))) and not cuda.read_only(np.float64(1.0))
    for kind, key in (("basic", 0), ("integer", (np.array([0, 2]),)), ("mask", np.array([True, False, True]))):
        with pytest.raises(ValueError, match=r"cuda:0 is a broadcast view \(stride 0 along axis 0\).*CuPy"):
            cuda.index_set(view, kind, key, 5.0)
    assert base.tolist() == [1.0, 2.0]
    fresh = np.zeros((3, 2))
    cuda.index_set(fresh, "basic", 0, 5.0)
    assert fresh[0].tolist() == [5.0, 5.0]
    assert str(broadcast_write_error("cuda:0", "CuPy", (3, 2), 0)).startswith("the array of shape (3, 2) on cuda:0")
