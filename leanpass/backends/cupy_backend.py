"""The ``cuda`` devices: CuPy. Imported only when a ``cuda`` device is asked for."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import math
import re
import warnings

try:
    import cupy
except ImportError as exc:  # pragma: no cover - depends on the machine
    raise RuntimeError(
        "CuPy is not installed (import failed: "
        f"{exc}); install it with pip install \"leanpass[cuda12]\" (CUDA 12) or "
        "pip install \"leanpass[cuda13]\" (CUDA 13)"
    ) from None

import array_api_compat.cupy as xp_cupy
import cupyx

from ._base import (
    INFIX,
    Backend,
    CheckedLinalg,
    FusedKernels,
    LazyGenerator,
    SpecialFunctions,
    broadcast_axis,
    broadcast_write_error,
    dlpack_on_host,
    dtype_name,
)
from ._layout import flat_where_strided


def _version(text) -> tuple:
    """``(major, minor)`` of a version string such as ``"14.1.0"`` or ``"14.0.0rc1"``."""
    found = re.match(r"(\d+)\.(\d+)", str(text))
    return (int(found[1]), int(found[2])) if found else (0, 0)


# The dtypes cupy.add.at takes (its atomicAdd kernels; others raise TypeError): int64
# from CuPy 14.1. index_add runs the generic one-hot product for the rest (complex,
# bool, 8- and 16-bit integers).
ADD_AT_DTYPES = frozenset(
    ("int32", "uint32", "uint64", "float16", "float32", "float64")
    + (("int64",) if _version(getattr(cupy, "__version__", "0")) >= (14, 1) else ())
)


def _raising():
    """CuPy's linalg reads cuSOLVER's status back and raises LinAlgError for a
    singular matrix only inside this context (by default it returns inf/NaN)."""
    return cupyx.errstate(linalg="raise")


def _kernels() -> FusedKernels:
    """Fused element-wise kernels: each replaces several generic kernel launches (and
    their temporaries) with one. Each computes what the generic path computes."""
    grad_kernel = lambda name, expr: cupy.ElementwiseKernel(  # noqa: E731
        "T g, U y", "T r", f"r = {expr}", f"leanpass_{name}"
    )
    # GELU's gradient (tanh approximation) from a and tanh's value t, the generic path's
    # operations in its order (leanpass/ops/nn.py's gelu), none contracted into an FMA
    gelu_backward = cupy.ElementwiseKernel(
        "T g, T a, T t, T uc, T k3",
        "T r",
        """
        T u = t * t;
        u = u - (T)1;
        u = u * uc;
        T s = a * k3;
        s = s * u;
        s = s * a;
        s = s + u;
        s = s * a;
        T v = t + (T)1;
        v = v * (T)0.5;
        v = v - s;
        r = v * g;
        """,
        "leanpass_gelu_tanh_backward",
        options=("--fmad=false",),
    )

    def gelu_tanh_backward(g, a, t, c, k):
        if not (g.dtype == a.dtype == t.dtype) or g.shape != a.shape or t.shape != a.shape:
            return None
        return gelu_backward(g, a, t, 0.5 * c, 3.0 * k)  # (the numbers in T, as NumPy rounds them)

    return FusedKernels(
        # gradient of relu at a (y = a), of sigmoid and tanh from their outputs (y = out)
        relu_backward=grad_kernel("relu_backward", "y <= (U)0 ? (T)0 : g"),  # g at NaN, as PyTorch
        # the same operations, in the same order, as the generic path in leanpass/ops/nn.py
        sigmoid_backward=grad_kernel("sigmoid_backward", "g * (T)y - g * (T)y * (T)y"),
        tanh_backward=grad_kernel("tanh_backward", "g - g * (T)y * (T)y"),
        gelu_tanh_backward=gelu_tanh_backward,
        # optimizer updates, in place on param (and state), PyTorch's rules
        sgd=cupy.ElementwiseKernel(
            "T grad, T lr, T wd", "T param", "param -= lr * (grad + wd * param)", "leanpass_sgd"
        ),
        sgd_momentum=cupy.ElementwiseKernel(
            "T grad, T lr, T momentum, T wd, bool nesterov, bool first",
            "T param, T buf",
            """
            T g = grad + wd * param;
            T b = first ? g : momentum * buf + g;
            buf = b;
            param -= lr * (nesterov ? g + momentum * b : b);
            """,
            "leanpass_sgd_momentum",
        ),
        adam=cupy.ElementwiseKernel(
            "T grad, T step_size, T one_minus_b1, T b2, T one_minus_b2, T eps, T bc2_sqrt, T wd, T decay",
            "T param, T m, T v",
            """
            T g = grad + wd * param;
            param = param * decay;
            m += one_minus_b1 * (g - m);
            v = b2 * v + one_minus_b2 * (g * g);
            param -= step_size * (m / (sqrt(v) / bc2_sqrt + eps));
            """,
            "leanpass_adam",
        ),
    )


# ---- element-wise programs (lp.compile's fused runs), as generated CUDA kernels ----------

# How each function of a program (leanpass._fusion.Program's lines) is spelled in the
# kernel's C++, its arguments {0}, {1}, {2} (variables, or constants of the kernel's
# type T), each as NumPy computes it: maximum/minimum propagate NaN (fmax would not)
# and give the second value on a tie (NumPy's signed zero), sign is NumPy's (+0 at -0,
# NaN at NaN), logaddexp NumPy's algorithm.
_C_SPELLINGS = {
    **{fn: "{0} " + op + " {1}" for fn, op in INFIX.items() if fn != "pow"},
    "pow": "pow({0}, {1})", "neg": "-{0}", "negative": "-{0}", "positive": "+{0}", "not": "!{0}",
    "where": "{0} ? {1} : {2}", "abs": "fabs({0})", "square": "{0} * {0}", "reciprocal": "(T)1 / {0}",
    "round": "rint({0})",
    "sign": "{0} > (T)0 ? (T)1 : ({0} < (T)0 ? (T)-1 : ({0} != {0} ? {0} : (T)0))",
    "maximum": "({0} > {1} || {0} != {0}) ? {0} : {1}", "minimum": "({0} < {1} || {0} != {0}) ? {0} : {1}",
    "logaddexp": "{0} == {1} ? {0} + (T)0.6931471805599453 : ({0} > {1} ? {0} + log1p(exp({1} - {0})) : "
                 "({0} <= {1} ? {1} + log1p(exp({0} - {1})) : {0} - {1}))",
    **{fn: fn + "({0})" for fn in (
        "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "exp", "expm1", "floor", "log",
        "log1p", "log2", "log10", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "erf", "erfc", "isnan", "isinf",
        "isfinite", "signbit")},
    **{fn: fn + "({0}, {1})" for fn in ("atan2", "copysign", "hypot")},
}
_C_BOOLEAN = frozenset({"lt", "le", "gt", "ge", "eq", "ne", "and_", "or_", "xor", "not", "isnan", "isinf",
                        "isfinite", "signbit"})
_INF_BITS, _NAN_BITS = "0x7ff0000000000000LL", "0x7ff8000000000000LL"  # IEEE doubles, cast to T


def _c_constant(value) -> str:
    """A Python number as a constant of the kernel's type ``T``: a double literal cast
    to T rounds as NumPy rounds a Python float to the array's dtype (inf and NaN by
    their bits, which need no header)."""
    if type(value) is bool:
        return "true" if value else "false"
    value = float(value)
    if value != value:
        return f"((T)__longlong_as_double({_NAN_BITS}))"
    if math.isinf(value):
        return f"((T){'-' if value < 0 else ''}__longlong_as_double({_INF_BITS}))"
    return f"((T){value!r})"


def kernel_source(program):
    """``program`` as ``cupy.ElementwiseKernel``'s three texts ``(in_params,
    out_params, operation)``: a statement per line, every input and output of type
    ``T``; or None where a function has no spelling here or nothing is computed."""
    if not program.n_inputs:
        return None

    def arg(a):
        return f"i{a[1]}" if isinstance(a, tuple) else a if isinstance(a, str) else _c_constant(a)

    def boolean(a):
        return boolean_names.get(a, False) if isinstance(a, str) else type(a) is bool

    body, boolean_names = [], {}
    for name, fn, args in program.lines:
        if fn == "full":
            if type(args[0]) is bool:
                return None  # (a boolean constant array: no line says its type)
            expr = _c_constant(args[0])
        elif fn in _C_SPELLINGS:
            expr = _C_SPELLINGS[fn].format(*map(arg, args))
        else:
            return None
        # a comparison's or a predicate's value is a bool, and so is a where between two
        boolean_names[name] = fn in _C_BOOLEAN or (fn == "where" and boolean(args[1]) and boolean(args[2]))
        body.append(f"{'bool' if boolean_names[name] else 'T'} {name} = {expr};")
    outs = [o for o in program.outputs if not isinstance(o, tuple)]
    if not outs:
        return None
    body += [f"o{k} = {o};" for k, o in enumerate(outs)]
    return (", ".join(f"T i{k}" for k in range(program.n_inputs)), ", ".join(f"T o{k}" for k in range(len(outs))),
            "\n".join(body))


def elementwise(program, device=None):
    """``program`` (a fused run of :mod:`leanpass._fusion`, float32 or float64) as one
    generated ``cupy.ElementwiseKernel``: a function of its input arrays (all of the
    program's shape, in a list) giving its outputs, one kernel launch for the whole run. None
    where a function has no spelling, or where NVRTC refuses the kernel (with a
    warning: the run stays flat)."""
    dtype = dtype_name(program.dtype)
    source = kernel_source(program) if dtype in ("float32", "float64") else None
    if source is None:
        return None
    digest = hashlib.sha1("\n".join(source).encode()).hexdigest()[:16]
    # no contraction of a product and a sum into one FMA: each rounds, as eager's kernels do
    kernel = cupy.ElementwiseKernel(*source, f"leanpass_fused_{digest}", options=("--fmad=false",))
    outputs = program.outputs
    computed = [k for k, o in enumerate(outputs) if not isinstance(o, tuple)]
    context = device if device is not None else contextlib.nullcontext()
    try:  # CuPy compiles at the first call: on one element now, not midway through a replay
        with context:
            kernel(*(cupy.zeros(1, dtype=dtype) for _ in range(program.n_inputs)))
    except Exception as exc:  # noqa: BLE001 - CuPy's CompileException, or a driver's error
        warnings.warn(f"lp.compile: the CUDA kernel of a fused run of {len(program.lines)} operations did not "
                      f"compile ({type(exc).__name__}: {exc}); the run stays unfused", RuntimeWarning, stacklevel=2)
        return None

    @flat_where_strided(program, computed)
    def run(arrays):
        with context:
            made = kernel(*arrays)
        if len(computed) == 1:
            made = (made,)
        out = [arrays[o[1]] if isinstance(o, tuple) else None for o in outputs]
        for k, array in zip(computed, made):
            out[k] = array
        return tuple(out)

    run.source = "\n".join(source)
    return run


class CupyBackend(Backend):
    device_type = "cuda"
    library = "cupy"
    always_index = True
    syncs_cheaply = False  # a host read waits for the GPU's queue: checks that need one are skipped
    causal_rows = 256  # each block's kernels are launches: only a long sequence splits (not measured on a GPU)
    xp = xp_cupy
    # inv, solve and cholesky of a singular matrix raise LinAlgError, as on the CPU (and
    # as torch.linalg.inv on CUDA): each such call waits for the GPU to read the status
    linalg = CheckedLinalg(xp_cupy.linalg, _raising)
    fft = xp_cupy.fft
    array_type = cupy.ndarray
    module = cupy

    def __init__(self, index=0):
        super().__init__(index)
        self._cuda_device = cupy.cuda.Device(index)
        self._rng = LazyGenerator(self._make_generator)
        # CuPy launches kernels on the *current* device: with several GPUs, every
        # operation on cuda:N runs inside `with Device(N)` (one GPU: no cost at all).
        self.guard = self._cuda_device if len(self.device_indices()) > 1 else None
        self.fused = dataclasses.replace(
            _kernels(), elementwise=functools.partial(elementwise, device=self.guard))

    @classmethod
    def device_indices(cls):
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CUDARuntimeError: no driver, no device
            raise RuntimeError(
                f"CuPy is installed but sees no CUDA GPU ({type(exc).__name__}: {exc}); "
                "check the NVIDIA driver and CUDA_VISIBLE_DEVICES, or use device='cpu'"
            ) from None
        if count == 0:
            raise RuntimeError(
                "CuPy is installed but sees no CUDA GPU; check the NVIDIA driver and "
                "CUDA_VISIBLE_DEVICES, or use device='cpu'"
            )
        return list(range(count))

    @classmethod
    def index_of(cls, array) -> int:
        return array.device.id

    @property
    def xp_device(self):
        return self._cuda_device

    def _from_numpy(self, host):
        with self._cuda_device:
            return cupy.asarray(host)

    def _to_numpy(self, array):
        return cupy.asnumpy(array)

    def _from_same_library(self, array):
        with self._cuda_device:
            return cupy.array(array, copy=True)

    def copy(self, array):
        with self._cuda_device:
            return array.copy()

    def c_order(self, array):
        if array.flags.c_contiguous:
            return array
        with self._cuda_device:
            return cupy.ascontiguousarray(array)

    # array_api_compat drops device= for CuPy: allocate inside the device's context
    def zeros(self, shape, dtype):
        with self._cuda_device:
            return cupy.zeros(shape, dtype=dtype)

    def ones(self, shape, dtype):
        with self._cuda_device:
            return cupy.ones(shape, dtype=dtype)

    def arange(self, n, dtype):
        with self._cuda_device:
            return cupy.arange(n, dtype=dtype)

    def create(self, name, *args, **kwargs):
        with self._cuda_device:
            return getattr(cupy, name)(*args, **kwargs)

    def from_dlpack(self, x, copy=None):
        if dlpack_on_host(x):  # cupy.from_dlpack refuses host memory ("CPU arrays cannot be directly imported")
            with self._cuda_device:
                return self.from_host_dlpack(x, copy)  # checked, then copied host to device
        with self._cuda_device:
            array = cupy.from_dlpack(x)
            return array.copy() if copy else array

    def read_only(self, array) -> bool:
        """A broadcast view (a zero stride, ``cupy.broadcast_to``'s): CuPy arrays have no
        writeable flag, and writes into one would race on the GPU."""
        strides = array.strides
        return 0 in strides and broadcast_axis(array.shape, strides) is not None

    def index_set(self, buf, kind, key, values):
        axis = broadcast_axis(buf.shape, buf.strides)
        if axis is not None:
            raise broadcast_write_error(self.device, "CuPy", buf.shape, axis)
        with self._cuda_device:
            buf[key] = values

    def scale_fresh(self, x, s):
        x *= s  # one kernel, no second array
        return x

    def add_leading(self, total, part):
        with self._cuda_device:
            total[..., :part.shape[-2], :] += part
        return total

    def shares_memory(self, a, b) -> bool:
        return bool(cupy.may_share_memory(a, b))  # by the arrays' bounds, on the host

    def index_add(self, buf, index, values, axis=0):
        with self._cuda_device:
            if dtype_name(buf.dtype) not in ADD_AT_DTYPES:  # cupy.add.at would raise TypeError
                return super().index_add(buf, index, values, axis)
            cupy.add.at(buf, (slice(None),) * axis + (index,), values)
        return buf

    # Random numbers are drawn on the GPU from CuPy's generator, seeded by
    # leanpass.manual_seed, so a training step never waits on the host. The
    # generator is made at the first draw, not at every manual_seed.
    def _make_generator(self, seed):
        with self._cuda_device:
            return cupy.random.default_rng(seed)

    def seed(self, seed):
        self._rng.seed(seed)

    def uniform(self, shape, low=0.0, high=1.0, dtype="float64"):
        with self._cuda_device:
            out = self._rng.get().random(shape, dtype=dtype_name(dtype))
            return out * (high - low) + low

    def normal(self, shape, mean=0.0, std=1.0, dtype="float64"):
        with self._cuda_device:
            return self._rng.get().standard_normal(shape, dtype=dtype_name(dtype)) * std + mean

    def bernoulli(self, shape, p, dtype="float64"):
        with self._cuda_device:
            return (self._rng.get().random(shape) < p).astype(dtype_name(dtype))

    def synchronize(self):
        self._cuda_device.synchronize()

    def quiet(self):
        return contextlib.nullcontext()

    @staticmethod
    def quietly(fn, *args):
        return fn(*args)  # CuPy raises no floating-point warnings

    @functools.cached_property
    def special(self):
        """``cupyx.scipy.special``'s functions, imported the first time one is used."""
        import cupyx.scipy.special

        return SpecialFunctions(cupyx.scipy.special, self.quietly)
