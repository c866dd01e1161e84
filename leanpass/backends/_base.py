"""The backend base class: what every array library must provide.

A backend is bound to one device (``"cpu"``, ``"strict:1"``, ``"cuda:0"``) and
carries that device's array namespace ``xp``. Everything the array API standard
lacks -- host transfer, random numbers, scatter-add, synchronisation,
suppressing floating-point warnings -- is a method here, written once per
library. This is the only layer of LeanPass (with serialization) that may
speak NumPy directly.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import threading
from dataclasses import dataclass, fields

import numpy as np

from .._dtypes import DTYPES, as_dtype, dtype_name

FLOAT_DTYPES = ("float32", "float64")
GRAD_DTYPES = (*FLOAT_DTYPES, "complex64", "complex128")  # the dtypes whose tensors may carry gradients
_COMPLEX_OF = {"float32": "complex64", "float64": "complex128"}

# Parameter initialisation and dropout draw from this host generator (on CPU
# backends) so that one seed gives the same numbers on every device.
_host_rng = np.random.default_rng()


def host_rng() -> np.random.Generator:
    return _host_rng


def host_generator(seed) -> np.random.Generator:
    """A host generator of its own, seeded by ``seed`` (an int >= 0, or a sequence of
    them): shuffles that one seed makes repeatable on every device."""
    return np.random.default_rng(seed)


def reseed_host(seed: int) -> None:
    global _host_rng
    _host_rng = np.random.default_rng(seed)


def float_dtype_name(dtype, op: str = "Tensor") -> str:
    name = as_dtype(dtype, op).name  # TypeError for what is no dtype at all (an array, a list)
    if name not in FLOAT_DTYPES:
        raise ValueError(
            f"{op}: dtype {name!r} is not supported; LeanPass tensors are "
            f"{' or '.join(FLOAT_DTYPES)}"
        )
    return name


def host_array(data, op: str = "Tensor", dtype=None) -> np.ndarray:
    """Turn host data (numbers, nested lists, NumPy arrays) into a numeric NumPy array;
    Python data is read straight into ``dtype`` when one is given (so integers beyond
    float64's precision stay exact).

    Raises ``TypeError`` for non-numeric data, ``ValueError`` for ragged lists and
    ``OverflowError`` for Python integers that fit no dtype (or not ``dtype``).
    """
    if isinstance(data, np.ma.MaskedArray):
        raise TypeError(
            f"{op}: masked arrays (numpy.ma) are not supported: their mask would be lost; "
            "fill the masked values first, e.g. a.filled(0.0)"
        )
    if isinstance(data, (str, bytes)) or data is None:
        raise TypeError(
            f"{op}: data of type {type(data).__name__} is not numeric; expected a "
            "number, a (nested) list of numbers or an array"
        )
    if type(data).__module__.partition(".")[0] == "torch" and getattr(data, "requires_grad", False):
        data = data.detach()  # a PyTorch tensor in its graph: its values (LeanPass copies them; no graph crosses)
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"{op}: cannot make an array from {type(data).__name__} data: {exc}"
        ) from None
    big = arr.dtype.kind == "O" and arr.size and all(type(x) is int for x in arr.flat)
    if dtype is not None and not hasattr(data, "dtype") and (big or arr.dtype.kind in "iuf") and \
            dtype_name(dtype).startswith(("int", "uint")):
        try:  # Python integers read straight into the dtype: exact, or an OverflowError
            arr = np.asarray(data, dtype=dtype_name(dtype))
        except OverflowError as exc:
            raise OverflowError(f"{op}: {exc}") from None
        except ValueError as exc:  # NaN
            raise ValueError(f"{op}: {exc}") from None
    elif big:  # Python integers in an object array (or a list with one beyond int64)
        for candidate in ("int64", "uint64"):
            try:
                arr = arr.astype(candidate)
                break
            except OverflowError:
                continue
        else:
            raise OverflowError(f"{op}: a Python integer is too large for any integer dtype (int64, uint64)")
    if arr.dtype.kind == "c" and dtype is not None and not dtype_name(dtype).startswith("complex"):
        raise TypeError(  # the array API standard forbids it; NumPy would warn and drop the imaginary part
            f"{op}: cannot cast complex data to {dtype_name(dtype)}: the imaginary part would be lost; "
            "take the real part first"
        )
    if arr.dtype.kind not in "biufc":
        raise TypeError(
            f"{op}: data of type {type(data).__name__} with dtype {arr.dtype} is not "
            "numeric; expected a number, a (nested) list of numbers or an array"
        )
    return arr


class LazyGenerator:
    """A device's random generator, made on its first draw: seeding only records the
    seed (``manual_seed`` seeds every backend, and a GPU generator is megabytes of
    states and a kernel launch). ``factory(seed)`` makes the generator; ``seed`` is
    ``None`` until seeded, then the last seed given. The first draw after
    ``seed(s)`` comes from ``factory(s)``, as if it had been made at once."""

    __slots__ = ("_factory", "_seed", "_rng", "_lock")

    def __init__(self, factory):
        self._factory = factory
        self._seed = None
        self._rng = None
        self._lock = threading.Lock()

    def seed(self, seed) -> None:
        with self._lock:
            self._seed = seed
            self._rng = None  # made again, from this seed, at the next draw

    def get(self):
        """The generator, made now if this is the first draw since the last seed
        (once: threads drawing first at the same time share it)."""
        rng = self._rng
        if rng is None:
            with self._lock:
                rng = self._rng
                if rng is None:
                    rng = self._rng = self._factory(self._seed)
        return rng


@dataclass(frozen=True)
class FusedKernels:
    """Kernels a backend may offer in place of several generic launches. Each field is
    a callable or ``None`` (then operations and optimizers run their generic ``xp``
    code). Every kernel computes exactly what the generic path computes.

    - ``relu_backward(g, a) -> where(a <= 0, 0, g)`` (0 at 0 even for an infinite ``g``,
      ``g`` at NaN, as PyTorch), or None for arrays it declines (the generic ``where``
      then)
    - ``sigmoid_backward(g, y) -> g * y * (1 - y)`` (``y`` the sigmoid's output)
    - ``tanh_backward(g, y) -> g * (1 - y * y)`` (``y`` the tanh's output)
    - ``gelu_tanh(a, c, k) -> (t, out)``: GELU's tanh approximation, ``t = tanh(c (a + k
      a^3))`` and ``out = 0.5 a (1 + t)`` (leanpass/ops/nn.py's ``gelu``, its operations
      in its order), or None for an array it declines
    - ``gelu_tanh_backward(g, a, t, c, k) -> grad``: its gradient from ``a`` and the
      forward's ``t`` (the same), or None for arrays it declines
    - ``softmax_rows(scores, mask, safe, scale=1.0, causal=None) -> weights``: attention's
      softmax of ``scores * scale`` along the last axis, ``mask`` None or bool of the last
      two axes' shape (True: may look), ``causal`` None or an offset (row ``i`` may look
      at keys ``j <= i + causal`` only: a block of a causal attention's queries); with
      ``safe``, a row that may look nowhere gets weights 0 (PyTorch's, where a mask was
      given); up to rounding; None for arrays it declines
    - ``softmax_rows_backward(gw, w, scale=1.0, causal=None) -> (gw - sum(gw * w)) * w *
      scale`` along the last axis (0 where ``causal`` says a row may not look), into
      ``gw`` (the caller's own), up to rounding; None for arrays it declines
    - ``layer_norm_rows(x, weight, bias, eps) -> (xhat, out, inv_std)``: LayerNorm over
      the last axis (leanpass/ops/nn.py's ``layer_norm`` with ``count=1``), up to
      rounding, ``inv_std`` one float64 per row; None for arrays it declines
    - ``layer_norm_rows_backward(g, xhat, inv_std, weight) -> (gx, gweight, gbias)``:
      its gradients (None for the weight's and bias's without ``weight``), up to
      rounding; None for arrays it declines
    - ``sgd(grad, lr, wd, param)``: ``param -= lr * (grad + wd * param)``, in place
    - ``sgd_momentum(grad, lr, momentum, wd, nesterov, first, param, buf)``: PyTorch's
      SGD with momentum (dampening 0), ``param`` and ``buf`` in place
    - ``adam(grad, step_size, one_minus_b1, b2, one_minus_b2, eps, bc2_sqrt, wd, decay,
      param, m, v)``: one Adam/AdamW step, ``param``, ``m`` and ``v`` in place

    An optimizer kernel may return False for arrays it does not take (the CPU's: one
    not C-contiguous): nothing is done, and the optimizer runs its generic code. The
    CPU's make the generic code's operations in its order: the same values, bit for bit.

    Row kernels, on a 2-D array ``x`` of rows and vectors of one value per row, each
    one pass (GroupNorm's forward and backward are made of them); they take arrays of
    the dtypes in ``row_dtypes``, all of one dtype, and give the generic arithmetic's
    values up to rounding:

    - ``affine_rows(x, a, b) -> x * a[:, None] + b[:, None]``
    - ``affine2_rows(g, a, x, c, d) -> g * a[:, None] + (x * c[:, None] + d[:, None])``
    - ``centered_squares(x, m) -> sum((x - m[:, None]) ** 2, axis=1)``
    - ``centered_dot(g, x, m) -> sum(g * (x - m[:, None]), axis=1)``
    - ``affine_relu_rows(x, a, b) -> maximum(x * a[:, None] + b[:, None], 0)`` (NaN kept)
    - ``masked_sums(g, y, x, m) -> (sum(h, axis=1), sum(h * (x - m[:, None]), axis=1))``
      and ``affine2_masked_rows(g, y, a, x, c, d)``, ``affine2_rows`` of ``h``, with ``h =
      where(y <= 0, 0, g)``, the gradient through a ReLU of output ``y`` (BatchNorm then
      ReLU in one node)

    Patch kernels of a two-dimensional convolution (a transposed convolution's
    forward and backward are made of them), ``stride``, ``padding`` and ``dilation``
    pairs, arrays of one of ``row_dtypes``:

    - ``patches2d(g, start, (rows, width, k0, k1), stride, padding, dilation)``: the
      patches of ``g`` (``(N, C, H, W)``) for the output rows from ``start``,
      pixel-major, ``(rows, width, N, k0, k1, C)``, zeros outside ``g``
    - ``scatter_add2d(cols, start, stride, padding, dilation, out)``: its adjoint, added
      into ``out`` (``(H, W, N, C)``) in place

    A convolution's patches, channel-major (a convolution's forward and backward, and
    ``unfold``/``fold``, are made of them), arrays of one of ``row_dtypes``:

    - ``im2col2d(x, kernel, stride, dilation, out_shape, padding)``: the patches of ``x``
      (``(A, B, H, W)``) padded with zeros by ``padding`` (a ``(before, after)`` pair per
      axis), ``(A, B, K0 * K1, *out_shape)``
    - ``col2im2d(cols, size, kernel, stride, dilation, padding)``: their adjoint, into
      zeros of ``(A, B, *size)`` padded by ``padding``, the contributions to each element
      added in the kernel offsets' order (the generic loop's values, bit for bit), the
      padding cut off: ``(A, B, *size)``

    ``max_pool_2x2(x)``: max_pool2d of ``x`` (``(..., H, W)``) over 2 x 2 windows at
    stride 2 without padding, NumPy's chain of ``maximum`` (NaN where a window holds one);
    ``max_pool_2x2_backward(x, g)``: its input gradient from ``x`` and ``g`` alone, each
    window's first maximum in row-major order (its last NaN where it holds one) given
    ``g``, every other element ``g * 0``. Each is None for arrays it declines.
    ``max_pool_2x2_winners(x) -> (out, winners)``: the same maxima, and each window's
    winner (the offset, 0 to 3 in row-major order, of its first maximum; in ``x``'s
    dtype), ``winners`` None where the output holds a NaN;
    ``max_pool_2x2_scatter(winners, g, shape)``: the gradient from the winners alone,
    ``max_pool_2x2_backward``'s values.

    ``bias_rows(out, b, relu) -> bool``: ``out += b`` on each row of a layer's fresh 2-D
    product ``out`` (``b`` one value per column, of its dtype), then ``maximum(out, 0)``
    with ``relu`` (0 at ``-0.0``, NaN kept), in place, the generic path's values; False
    (nothing done) for arrays it does not take.

    ``cross_entropy_rows(logits, index) -> (loss, softmax)``: the cross-entropy of the
    rows of 2-D ``logits`` at the classes ``index`` (in range), its mean over the rows
    (a 0-d array of the logits' dtype), and each row's softmax, up to rounding; None for
    arrays it declines.

    ``elementwise(program)``: a run of element-wise operations that ``lp.compile``
    fused (:class:`leanpass._fusion.Program`) compiled into one loop over the
    elements, a function of its input arrays giving its outputs, or None where the
    backend cannot spell one of its functions (the run then stays flat); the rounding
    may differ from the operations' by a few ulp. ``scalar_calls``: its loops call
    ``tanh``, ``exp``... one element at a time (Numba), slower on a long array than
    the library's vectorised kernels, so lp.compile forms no long run that calls them
    (a GPU kernel calls them on every element at once: runs of any length).
    """

    relu_backward: object = None
    sigmoid_backward: object = None
    tanh_backward: object = None
    gelu_tanh: object = None
    gelu_tanh_backward: object = None
    softmax_rows: object = None
    softmax_rows_backward: object = None
    layer_norm_rows: object = None
    layer_norm_rows_backward: object = None
    sgd: object = None
    sgd_momentum: object = None
    adam: object = None
    affine_rows: object = None
    affine2_rows: object = None
    centered_squares: object = None
    centered_dot: object = None
    affine_relu_rows: object = None
    masked_sums: object = None
    affine2_masked_rows: object = None
    patches2d: object = None
    scatter_add2d: object = None
    im2col2d: object = None
    col2im2d: object = None
    max_pool_2x2: object = None
    max_pool_2x2_backward: object = None
    max_pool_2x2_winners: object = None
    max_pool_2x2_scatter: object = None
    cross_entropy_rows: object = None
    bias_rows: object = None
    elementwise: object = None
    scalar_calls: bool = False
    row_dtypes: tuple = ()

    def names(self) -> list[str]:
        """The kernels offered (not ``None``)."""
        return [f.name for f in fields(self) if callable(getattr(self, f.name))]


NO_FUSED = FusedKernels()

# The operators of an element-wise program (``leanpass._fusion.Program``'s lines), by
# the name of their Python method, and how Python spells each: what a backend's
# ``fused.elementwise`` compiles, and what lp.compile's flat programs call.
INFIX = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "pow": "**",  # arithmetic
         "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",  # comparisons
         "and_": "&", "or_": "|", "xor": "^"}  # of booleans

# The linalg functions that raise numpy.linalg.LinAlgError (a ValueError) for a
# singular matrix (cholesky: one that is not positive-definite) on every device.
CHECKED_LINALG = ("inv", "solve", "cholesky")


class CheckedLinalg:
    """A ``linalg`` namespace: ``namespace``'s functions, with those named in
    :data:`CHECKED_LINALG` called inside ``checking()``, a context in which the library
    reports a singular matrix by raising rather than returning inf/NaN (CuPy's
    ``cupyx.errstate(linalg="raise")``, which reads the solver's status back to the
    host: one synchronisation per call)."""

    def __init__(self, namespace, checking):
        self._namespace = namespace
        for name in CHECKED_LINALG:
            setattr(self, name, _checked(getattr(namespace, name), checking))

    def __getattr__(self, name):  # everything else: the namespace's own
        namespace = self.__dict__.get("_namespace")
        if namespace is None:  # not made yet (a copy being built)
            raise AttributeError(name)
        return getattr(namespace, name)

    def __repr__(self) -> str:
        return f"<CheckedLinalg {', '.join(CHECKED_LINALG)} of {self._namespace!r}>"


def _checked(function, checking):
    @functools.wraps(function)
    def call(*args, **kwargs):
        with checking():
            return function(*args, **kwargs)

    return call


# The functions of ``scipy.special`` (``cupyx.scipy.special`` has them by the same names)
# that ``lp.special`` takes from a device's library: those the standard cannot express.
SPECIAL_FUNCTIONS = ("erf", "erfc", "erfinv", "gammaln", "digamma", "polygamma", "ndtr", "log_ndtr", "i0", "i1")


class SpecialFunctions:
    """A device's special functions, ``special.erf(x)``..., on arrays of its library:
    those of ``module`` named in :data:`SPECIAL_FUNCTIONS` (``polygamma(n, x)``, the others
    ``f(x)``), each giving ``x``'s dtype (SciPy computes some of float32 in float64) and
    run under ``quietly`` (a backend's :meth:`Backend.quietly`: no floating-point warnings)."""

    available = True

    def __init__(self, module, quietly):
        self._module = module
        for name in SPECIAL_FUNCTIONS:
            setattr(self, name, _keeping_dtype(getattr(module, name), quietly))

    def __repr__(self) -> str:
        return f"<SpecialFunctions of {self._module.__name__}>"


def _keeping_dtype(function, quietly):
    @functools.wraps(function)
    def call(*args):
        out = quietly(function, *args)
        x = args[-1]
        return out if out.dtype == x.dtype else out.astype(x.dtype)

    return call


class NoSpecialFunctions:
    """The special functions of a device whose library has none: each one raises
    ``NotImplementedError`` naming itself, the device and why (``lp.special.erf is not
    available on strict: array_api_strict has no special functions``)."""

    available = False

    def __init__(self, device: str, why: str):
        self._device = device
        self.why = why

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise NotImplementedError(
            f"lp.special.{name} is not available on {self._device}: {self.why} (LeanPass takes special "
            "functions from scipy.special on cpu and cupyx.scipy.special on cuda)"
        )

    def __repr__(self) -> str:
        return f"<NoSpecialFunctions on {self._device}: {self.why}>"


DLPACK_CPU = 1  # kDLCPU, DLPack's device type for host memory


def dlpack_on_host(x) -> bool:
    """Whether the DLPack producer ``x`` holds host memory (its ``__dlpack_device__()``
    is kDLCPU: a NumPy array, a PyTorch CPU tensor)."""
    device = getattr(x, "__dlpack_device__", None)
    return device is not None and int(device()[0]) == DLPACK_CPU


def broadcast_axis(shape, strides):
    """The first axis along which an array of ``shape`` and ``strides`` repeats one
    element (stride 0, length > 1): a broadcast view, whose elements share memory.
    ``None`` when there is none (an empty array has no element to share)."""
    if 0 not in strides or 0 in shape:
        return None
    for axis, (size, stride) in enumerate(zip(shape, strides)):
        if stride == 0 and size > 1:
            return axis
    return None


def broadcast_write_error(device: str, library: str, shape, axis: int) -> ValueError:
    """The refusal of an in-place write into a broadcast view on a library that has no
    read-only flag to refuse it itself (CuPy: on a GPU the writes would race)."""
    return ValueError(
        f"the array of shape {tuple(shape)} on {device} is a broadcast view (stride 0 along axis {axis}): "
        f"its elements share memory, and {library} arrays have no read-only flag to refuse the write "
        "(on a GPU the writes would race); nothing was written: write into a copy (t = t.copy())"
    )


@np.errstate(all="ignore")
def _quietly_errstate(fn, *args):
    """``fn(*args)`` under ``np.errstate(all="ignore")``: :func:`_quietly` where NumPy
    keeps its floating-point error state outside ``contextvars`` (NumPy 1.x)."""
    return fn(*args)


_QUIET = contextvars.ContextVar("leanpass_quiet", default=False)  # True inside a quiet context


def _quiet_context():
    """A fresh ``contextvars.Context`` in which NumPy ignores floating-point errors:
    NumPy 2 keeps its error state (what ``np.errstate`` sets) in a context variable,
    so ``np.seterr`` run inside the context changes it there only. None where NumPy
    keeps it elsewhere (1.x, where ``seterr`` changed this thread's state: undone)."""
    before = np.geterr()
    context = contextvars.Context()
    context.run(np.seterr, all="ignore")
    if np.geterr() != before:
        np.seterr(**before)
        return None
    context.run(_QUIET.set, True)
    return context


class _QuietContexts(threading.local):
    """One quiet context per thread: a context cannot be entered by two threads at once."""

    def __init__(self):
        self.context = _quiet_context()


_contexts = _QuietContexts()


def _quietly(fn, *args):
    """``fn(*args)`` with NumPy's floating-point warnings silent (IEEE results: inf, nan),
    as under :meth:`Backend.quiet`, for one call: run in this thread's quiet context
    (about 0.1 µs, against 0.7 µs for ``np.errstate``'s decorator, which builds its
    state anew at every call). Called within a quiet context (a nested call), it just
    calls ``fn``."""
    if _QUIET.get():
        return fn(*args)
    context = _contexts.context
    if context is None:
        return _quietly_errstate(fn, *args)
    if len(args) == 2:  # the binary operators: Context.run handed *args costs a fifth of a small op more
        return context.run(fn, args[0], args[1])
    return context.run(fn, *args)


class Numbers(dict):
    """``(number, dtype) -> operand``: what ``make(number, dtype)`` (``Backend.number``)
    gives, made the first time a key is asked and kept, at most 1024 (a learning rate that
    decays is a new number at each step)."""

    __slots__ = ("make",)

    def __init__(self, make):
        super().__init__()
        self.make = make

    def __missing__(self, key):
        if len(self) >= 1024:
            self.clear()
        operand = self[key] = self.make(*key)
        return operand


class Backend:
    """One device of one array library.

    Subclasses set the class attributes and implement the ``_`` hooks; the
    registry (``leanpass.backends``) creates one instance per device.
    """

    device_type: str = ""  # device type, the part before ":" ("cpu", "cuda", "strict")
    library: str = ""  # import name of the array library ("numpy", "cupy", ...)
    always_index = False  # canonical device strings always carry ":N" (cuda)
    syncs_cheaply = True  # reading a value to the host costs little (no queue to drain)
    col2im = None  # a convolution's scatter of patches as one operation (the graph backend's: a fold node)
    one_device = False  # the library has one device: an array of its type is on it
    causal_rows = 32  # a causal attention's block of queries (leanpass/ops/nn.py's _causal_blocks)
    guard = None  # a context manager that makes this device current, where work needs that
    # Optional fused kernels: operations and optimizers use one when it is offered
    # and their generic xp code when it is not.
    fused: FusedKernels = NO_FUSED
    xp = None  # the array namespace (array-API compatible)
    array_type: type = object  # the library's array class
    module = None  # the library itself, for code that handles its buffers (the process groups)

    def as_array(self, value):
        """A library scalar (NumPy returns one for 0-d results) as a 0-d array."""
        return self.xp.asarray(value)

    def is_array(self, value) -> bool:
        """Whether ``value`` is an array of this library (what a custom op's backward
        must return; a library scalar counts)."""
        return self.array_type is object or isinstance(value, self.array_type)

    def __init__(self, index: int = 0):
        self.index = index
        self.device = canonical_name(self.device_type, index, self.always_index)
        self.host_transfers = 0  # counts to_host/from_host calls (tests use it)
        self.numbers = Numbers(self.number)  # (number, dtype) -> :meth:`number`'s operand, made at the first ask

    def __repr__(self) -> str:
        return f"<{type(self).__name__} device={self.device!r} library={self.library!r}>"

    def number(self, s, dtype):
        """An operand that stands for the Python number ``s`` with an array of ``dtype``
        in ``+``, ``-``, ``*`` and ``/``, faster and with the same result, or None where
        the number itself is best (here, always). The scalar operations read it through
        :attr:`numbers`, which keeps it; a backend that gives an operand gives it only for
        a real ``s`` of 1e-30 to 1e30 in size (calm for a sum: see ``ops.elementwise``),
        and read-only (it is shared)."""
        return None

    # ---- what a subclass provides -------------------------------------------
    @classmethod
    def device_indices(cls) -> list[int]:
        """The device indices usable on this machine (raises RuntimeError if none)."""
        return [0]

    @classmethod
    def index_of(cls, array) -> int:
        """The device index an array of this library lives on."""
        return 0

    def _from_numpy(self, host: np.ndarray):
        raise NotImplementedError

    def _to_numpy(self, array) -> np.ndarray:
        raise NotImplementedError

    def _from_same_library(self, array):
        """Move an array of this library (maybe on another index) to this device."""
        raise NotImplementedError

    # ---- conversions ---------------------------------------------------------
    def dtype(self, name):
        """The library's dtype for a name such as ``"float32"``."""
        return getattr(self.xp, dtype_name(name))

    def from_host(self, data, dtype=None, op: str = "Tensor"):
        """Host data -> array on this device; non-float data becomes ``dtype``."""
        host = host_array(data, op, dtype)  # complex data to a real dtype: TypeError
        if dtype is not None:
            with np.errstate(invalid="ignore", over="ignore"):  # NaN, inf to an integer: as PyTorch, no warning
                host = host.astype(dtype_name(dtype), copy=False)
        self.host_transfers += 1
        return self._from_numpy(host)

    def to_host(self, array) -> np.ndarray:
        """A NumPy copy of an array of this device."""
        self.host_transfers += 1
        return self._to_numpy(array)

    def copy(self, array):
        return self.xp.asarray(array, copy=True)

    def c_order(self, array):
        """``array`` laid out in C order: itself where it is, else a copy (the standard has
        no layouts: a flat reshape copies in C order where a view cannot be had)."""
        xp = self.xp
        return xp.reshape(xp.reshape(array, (-1,)), array.shape) if array.ndim > 1 else array

    def real_view(self, array):
        """The C-ordered complex ``array`` as a real array of shape ``shape + (2,)``
        (the real and imaginary parts side by side) sharing its memory, as PyTorch's
        ``view_as_real``: an optimizer updates complex parameters through it, each part
        as a real number. Generic version: NumPy's ``view``, which CuPy has too (the
        standard has none)."""
        return array.reshape(array.shape + (1,)).view(array.real.dtype)

    def complex_view(self, array):
        """The inverse of :meth:`real_view`: a C-ordered real array of shape
        ``shape + (2,)`` as the complex array of shape ``shape`` sharing its memory."""
        return array.view(_COMPLEX_OF[dtype_name(array.dtype)])[..., 0]

    def zeros(self, shape, dtype):
        return self.xp.zeros(shape, dtype=dtype, device=self.xp_device)

    def ones(self, shape, dtype):
        return self.xp.ones(shape, dtype=dtype, device=self.xp_device)

    def arange(self, n, dtype):
        return self.xp.arange(n, dtype=dtype, device=self.xp_device)

    def matmul(self, a, b):
        """``a @ b``, with a stack of rows times one matrix, ``(..., m, k) @ (k, n)``,
        done as one 2-D product of the rows (a reshape): BLAS libraries run that far
        faster than the same product broadcast over the stack (through ``self.matmul``, so
        that a backend's own 2-D products take it too)."""
        if b.ndim == 2 and a.ndim > 2:
            rows = self.matmul(self.xp.reshape(a, (math.prod(a.shape[:-1]), a.shape[-1])), b)  # not -1: a may be empty
            return self.xp.reshape(rows, a.shape[:-1] + (b.shape[1],))
        return a @ b

    def create(self, name: str, *args, **kwargs):
        """``xp.<name>(*args, **kwargs)`` (a creation function) making its array on this device."""
        with self.context():
            return getattr(self.xp, name)(*args, device=self.xp_device, **kwargs)

    def from_dlpack(self, x, copy=None):
        """An array of this device from an object with ``__dlpack__`` (zero-copy where possible)."""
        kwargs = {} if copy is None else {"copy": copy}
        return self.xp.from_dlpack(x, **kwargs)

    def from_host_dlpack(self, x, copy=None):
        """An array of this device copied from ``x``, a DLPack producer in host memory
        (:func:`dlpack_on_host`), for a library that imports only its own device's
        memory (CuPy refuses host producers). In order: the dtype is checked
        (``TypeError``), ``copy=False`` is refused (``BufferError``: the data must
        cross from the host to this device), then the data is copied; nothing is
        copied before a refusal."""
        try:
            host = np.from_dlpack(x)  # a view of the producer's memory: nothing copied yet
        except (BufferError, TypeError, ValueError, RuntimeError) as exc:
            raise type(exc)(f"from_dlpack: cannot read the {type(x).__name__} in host memory: {exc}") from None
        name = dtype_name(host.dtype)
        if name not in DTYPES:
            raise TypeError(f"from_dlpack: dtype {name} is not a data type of the array API standard (bool, "
                            "integers, float32/64, complex64/128); convert it first")
        if copy is not None and not copy:  # False (or a library's False)
            raise BufferError(
                f"from_dlpack: the {type(x).__name__} is on cpu (host memory) and {self.device} cannot use it "
                f"without a copy, which copy=False forbids; pass copy=None or copy=True to copy it to {self.device}"
            )
        self.host_transfers += 1
        return self._from_numpy(host)

    def context(self):
        """``with backend.context():`` runs array code on this device: the guard where
        one is needed, else nothing."""
        return self.guard if self.guard is not None else _NO_GUARD

    @property
    def xp_device(self):
        """The library's own device object (for ``xp.zeros(..., device=...)``)."""
        return None

    # ---- the standard's extensions --------------------------------------------
    @property
    def linalg(self):
        """The device's ``linalg`` extension namespace (``inv``, ``eigh``, ``svd``...)."""
        return self.xp.linalg

    @property
    def fft(self):
        """The device's ``fft`` extension namespace (``fft``, ``rfft``, ``fftshift``...)."""
        return self.xp.fft

    @functools.cached_property
    def special(self):
        """The device's special functions (:class:`SpecialFunctions`: ``erf``, ``gammaln``...
        of ``scipy.special`` on ``cpu``, ``cupyx.scipy.special`` on ``cuda``), which the
        standard lacks. Generic version: none (:class:`NoSpecialFunctions`, whose every
        function raises naming itself and the device)."""
        return NoSpecialFunctions(self.device, f"{self.library or type(self).__name__} has no special functions")

    # ---- what the standard lacks ---------------------------------------------
    def take_rows(self, rows, index):
        """``rows[i, index[i]]`` for every row ``i`` of the 2-D ``rows`` (``index``: one
        integer per row, in range): a class's value in each row of logits.

        Generic version: one ``take`` from the flat rows."""
        xp = self.xp
        n, width = rows.shape
        return xp.take(xp.reshape(rows, (-1,)), index + self.arange(n, index.dtype) * width)

    def sub_at_rows(self, buf, index, value):
        """``buf[i, index[i]] -= value`` for every row ``i`` of the 2-D ``buf`` (a fresh
        array the caller owns; ``index`` as in :meth:`take_rows`); returns the result
        (``buf`` itself where the library writes in place).

        Generic version: subtract a one-hot mask made by comparison."""
        xp = self.xp
        hot = xp.reshape(index, (-1, 1)) == xp.reshape(self.arange(buf.shape[1], index.dtype), (1, -1))
        return buf - xp.astype(hot, buf.dtype) * value

    def shares_memory(self, a, b) -> bool:
        """Whether arrays ``a`` and ``b`` may share memory (one a view of the other):
        whether a ``reshape``, which copies where the data does not allow a view, made a
        view. Generic version: True, the cautious answer."""
        return True

    def scale_fresh(self, x, s):
        """``x * s`` (``s`` a Python number) of a fresh array ``x`` the caller owns (a
        product), in place where the library writes in place; returns the result.

        Generic version: a new array (graph replays, where the product may be a view)."""
        return x * s

    def stack(self, arrays, axis: int = 0):
        """``xp.stack(arrays, axis)``: arrays of one shape and dtype, joined along a new
        axis, a new array in C order where the library has layouts."""
        return self.xp.stack(arrays, axis=axis)

    def add_leading(self, total, part):
        """``total`` with ``part`` added to its leading rows along the last-but-one axis
        (``part`` has as many rows or fewer, its other axes ``total``'s): in place where
        the library writes in place (``total`` is the caller's own, a product).

        Generic version: a new array."""
        rows = part.shape[-2]
        if rows == total.shape[-2]:
            return total + part
        return self.xp.concat([total[..., :rows, :] + part, total[..., rows:, :]], axis=-2)

    def relu_fresh(self, x):
        """``maximum(x, 0)`` of a fresh array ``x`` the caller owns (a layer's product),
        in place where the library writes in place; returns the result.

        Generic version: a new array."""
        return self.xp.maximum(x, 0.0)

    def add_bias(self, out, b, relu: bool = False):
        """``out + b`` (then ``maximum(.., 0)`` with ``relu``) of a layer's fresh 2-D
        product ``out`` (the caller's own) and its bias ``b`` (one value per column);
        returns the result. One pass, in place, where the backend's ``bias_rows`` kernel
        takes the arrays.

        Generic version: ``out += b`` where the dtypes agree (else ``out + b``), then
        :meth:`relu_fresh` with ``relu``."""
        if b.dtype != out.dtype:
            out = out + b
        elif (fused := self.fused.bias_rows) is None or fused(out, b, relu) is False:
            out += b
        else:
            return out
        return self.relu_fresh(out) if relu else out

    def relu_mask(self, g, out):
        """``g`` where ``out`` is not ``<= 0``, else 0: the gradient through a ReLU whose
        input or output is ``out`` (0 where ``out`` is 0, even for an infinite ``g``, and
        ``g`` where ``out`` is NaN, as PyTorch's ``threshold_backward``): the fused
        kernel where one is offered, else ``where`` (a product with the mask would make
        NaN of an infinite ``g``)."""
        fused = self.fused.relu_backward
        if fused is not None:
            result = fused(g, out)
            if result is not None:  # (a kernel may decline arrays it does not take: Numba's strided ones)
                return result
        return self.xp.where(out <= 0, 0.0, g)

    def add_scaled(self, y, a: float, x) -> None:
        """``y += a * x`` in place (``a`` a Python number, ``y`` an array the caller may
        write): an optimizer's update. Generic version: the library's operators."""
        y += a * x

    def sum_rows(self, g):
        """``sum(g, axis=0)`` of the 2-D ``g``, a new array: the gradient of a bias
        added to every row of a product. Generic version: the library's sum."""
        return self.xp.sum(g, axis=0)

    def all_in_range(self, index, high: int) -> bool:
        """Whether every value of the integer array ``index`` lies in ``[0, high)``
        (reads one value back to the host)."""
        xp = self.xp
        return bool(xp.all((index >= 0) & (index < high)))

    def index_add(self, buf, index, values, axis: int = 0):
        """``buf[..., index[j], ...] += values[..., j, ...]`` along ``axis``, with
        repeated indices accumulating; returns the result (in place where the
        library allows it).

        Generic version in the standard alone: a one-hot matrix product (for bool,
        NumPy's ``add.at``: a logical or, through counts in int64, since the standard
        has no bool ``matmul``).
        """
        xp = self.xp
        n = buf.shape[axis]
        boolean = buf.dtype == xp.bool
        dtype = xp.int64 if boolean else buf.dtype
        onehot = xp.astype(
            xp.reshape(index, (-1, 1)) == xp.reshape(
                xp.arange(n, device=self.xp_device, dtype=index.dtype), (1, -1)
            ),
            dtype,
        )
        moved = xp.moveaxis(values, axis, -1)  # (..., m)
        if boolean:
            moved = xp.astype(moved, dtype)
        added = xp.moveaxis(xp.matmul(moved, onehot), -1, axis)  # (..., n) back in place
        return (buf | (added != 0)) if boolean else buf + added

    def index_set(self, buf, kind: str, key, values) -> None:
        """``buf[key] = values`` in place; ``kind`` says what ``key`` is: ``"basic"``
        (integers, slices, ``...``), ``"mask"`` (a boolean array) or ``"integer"``
        (a tuple of in-range integer arrays, integers and slices)."""
        buf[key] = values

    def index_get(self, array, kind: str, key):
        """``array[key]`` for a key as :meth:`index_set` takes it."""
        return array[key]

    def read_only(self, array) -> bool:
        """Whether in-place writes into ``array`` fail (NumPy's ``writeable`` flag off:
        a broadcast view, a shared read-only buffer). Arrays without flags are writable."""
        flags = getattr(array, "flags", None)
        return flags is not None and not getattr(flags, "writeable", True)

    def dlpack(self, array, **kwargs):
        """``array.__dlpack__(**kwargs)``: the data as a DLPack capsule."""
        return array.__dlpack__(**kwargs)

    # Parameter initialisation: always drawn on the host and moved, so that one
    # seed gives the same initial weights on every device.
    def init_uniform(self, shape, low, high, dtype):
        return self.from_host(_host_rng.uniform(low, high, size=shape), dtype)

    def init_normal(self, shape, mean, std, dtype):
        return self.from_host(_host_rng.normal(mean, std, size=shape), dtype)

    # Per-step randomness (dropout): drawn from this device's generator. CPU
    # backends use the host generator; CUDA overrides these with its own.
    def uniform(self, shape, low=0.0, high=1.0, dtype="float64"):
        return self._from_numpy(_host_rng.uniform(low, high, size=shape).astype(dtype_name(dtype)))

    def normal(self, shape, mean=0.0, std=1.0, dtype="float64"):
        return self._from_numpy(_host_rng.normal(mean, std, size=shape).astype(dtype_name(dtype)))

    def bernoulli(self, shape, p, dtype="float64"):
        """1 with probability ``p``, else 0."""
        return self._from_numpy((_host_rng.random(size=shape) < p).astype(dtype_name(dtype)))

    def seed(self, seed: int) -> None:
        """Seed this device's own generator, if it has one (CPU backends use the host's)."""

    def synchronize(self) -> None:
        """Wait until queued work on this device is done (a no-op on the CPU)."""

    def quiet(self):
        """A context in which floating-point warnings (log(0), sqrt(-1)) are silent."""
        return np.errstate(all="ignore")

    quietly = staticmethod(_quietly)  # quietly(fn, *args): fn(*args) without floating-point warnings


_NO_GUARD = contextlib.nullcontext()


def canonical_name(type_: str, index: int, always_index: bool) -> str:
    if always_index or index:
        return f"{type_}:{index}"
    return type_
