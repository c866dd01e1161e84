"""Creation functions: new tensors on a device, in a dtype.

Every function takes ``device=`` (default: :func:`leanpass.get_default_device`, or
the input's device for ``*_like``) and ``dtype=`` (default: the standard's, with
:func:`leanpass.get_default_dtype` as the default float).
"""

from __future__ import annotations

import operator

from .. import ops
from .._checks import is_bool
from .._dtypes import DTYPES, as_dtype, dtype_name
from .._node import _check_grad_dtype as check_grad_dtype
from .._node import init_tensor, leaf, run1
from ..backends import backend_of_array, get_backend, get_default_dtype
from ..tensor import Tensor
from ._records import Method, methods_of, recorded
from ._util import asarray_like, flag, python_number

__all__ = [
    "asarray", "arange", "empty", "empty_like", "eye", "from_dlpack", "full", "full_like", "linspace",
    "ones", "ones_like", "zeros", "zeros_like", "tril", "triu", "meshgrid",
]

_new = object.__new__


def _shape(shape, op):
    if is_bool(shape):
        raise TypeError(f"{op}: shape must be an integer or a tuple of integers, got bool")
    try:
        shape = (operator.index(shape),)
    except TypeError:
        try:
            shape = tuple(operator.index(n) for n in shape)
        except TypeError:
            raise TypeError(f"{op}: shape must be an integer or a tuple of integers, got {shape!r}") from None
    if any(n < 0 for n in shape):
        raise ValueError(f"{op}: negative dimensions are not allowed, got shape {shape}")
    return shape


def _default(kind: str) -> str:
    """The default dtype of a kind: "real floating", "complex floating", "integral"."""
    if kind == "integral":
        return "int64"
    if kind == "complex floating":
        return "complex64" if get_default_dtype() == "float32" else "complex128"
    return get_default_dtype()


def _dtype(backend, dtype, default_kind, op):
    name = as_dtype(dtype, op).name if dtype is not None else _default(default_kind)
    return backend.dtype(name)


def _made(backend, array):
    return leaf(array, backend)


def _copy_flag(copy, op):
    """``copy`` as the standard has it: True, False or None (a library's bool scalar,
    ``numpy.True_``, as the Python bool); anything else is a ``TypeError`` naming ``op``
    (a truthy string would otherwise be taken as True, and ``copy is False`` never)."""
    if copy is None or isinstance(copy, bool):
        return copy
    if is_bool(copy) and getattr(copy, "ndim", 0) == 0:
        return bool(copy)
    raise TypeError(f"{op}: copy must be True, False or None, got {copy!r}")


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """A Tensor from ``obj`` (a Tensor, an array of any library, a Python number or a
    nested sequence), with the standard's dtype rules: ``bool`` stays bool, Python
    ints become int64, floats the default float. A Tensor given as it is (same
    device and dtype, ``copy`` not True) is returned itself; conversions of a Tensor
    are differentiable."""
    copy = _copy_flag(copy, "asarray")
    if isinstance(obj, Tensor):
        out = obj
        copied = False  # a conversion made a new array: copy=True needs no further copy
        if dtype is not None and as_dtype(dtype, "asarray") != obj.dtype:
            if copy is False:
                raise ValueError(f"asarray: copy=False, but converting {obj.dtype} to {dtype} needs a copy")
            out, copied = out.astype(dtype), True
        if device is not None and get_backend(device) is not out._backend:
            if copy is False:
                raise ValueError(f"asarray: copy=False, but moving {out.device} to {device} needs a copy")
            out, copied = out.to(device), True
        if copy and not copied:
            out = run1(ops.copy, out)
        return out
    if isinstance(obj, (list, tuple)) and any(isinstance(x, Tensor) for x in _flat(obj)):
        from .manipulation import stack

        if copy is False:
            raise ValueError("asarray: copy=False, but a sequence of tensors is stacked into a new array")
        flat = list(_flat(obj))
        tensors = [x for x in flat if isinstance(x, Tensor)]
        if device is None:  # numbers among the tensors go where the tensors are
            devices = sorted({t.device for t in tensors})
            if len(devices) > 1:
                raise ValueError(f"asarray: the tensors in the sequence are on {', '.join(devices)}; move them to "
                                 "one device (or give device=)")
            device = devices[0]
        items = [asarray(x, dtype=dtype, device=device) for x in obj]
        return stack(items) if items else asarray([], dtype=dtype, device=device)
    t = _new(Tensor)
    init_tensor(t, obj, False, None, device, dtype, copy=copy, infer="standard")
    return t


def _flat(seq, depth=0):
    for x in seq:
        if isinstance(x, (list, tuple)) and depth < 32:
            yield from _flat(x, depth + 1)
        else:
            yield x


def sizes(shape, size, op):
    """The standard's ``shape`` (an int or a tuple of ints) or, with more integers in
    ``size``, PyTorch's ``*size`` form: ``zeros(2, 3)`` is ``zeros((2, 3))``."""
    if size:
        shape = (shape, *size)
        if any(isinstance(n, (tuple, list)) for n in shape):
            raise TypeError(f"{op}: give the size as integers, {op}(2, 3), or as one tuple, {op}((2, 3)); "
                            f"got {shape!r}")
    return _shape(shape, op)


def requiring_grad(t, requires_grad, op):
    """``t`` (a new leaf), set to require grad if ``requires_grad`` (PyTorch's keyword of
    its creation functions): ``ValueError`` naming ``op`` for a dtype that cannot."""
    if requires_grad is not False and flag(op, "requires_grad", requires_grad):
        check_grad_dtype(t.dtype.name, True, op)
        t.requires_grad = True
    return t


def zeros(shape, *size, dtype=None, device=None, requires_grad=False):
    """A tensor of zeros: ``zeros((2, 3))`` (the standard) or ``zeros(2, 3)`` (PyTorch)."""
    backend = get_backend(device)
    shape = sizes(shape, size, "zeros")
    t = _made(backend, backend.create("zeros", shape, dtype=_dtype(backend, dtype, "", "zeros")))
    return requiring_grad(t, requires_grad, "zeros")


def ones(shape, *size, dtype=None, device=None, requires_grad=False):
    """A tensor of ones: ``ones((2, 3))`` (the standard) or ``ones(2, 3)`` (PyTorch)."""
    backend = get_backend(device)
    shape = sizes(shape, size, "ones")
    t = _made(backend, backend.create("ones", shape, dtype=_dtype(backend, dtype, "", "ones")))
    return requiring_grad(t, requires_grad, "ones")


def empty(shape, *size, dtype=None, device=None, requires_grad=False):
    """A new tensor, ``empty((2, 3))`` or ``empty(2, 3)`` (its values are zeros: LeanPass
    never hands out uninitialised memory)."""
    backend = get_backend(device)
    shape = sizes(shape, size, "empty")
    t = _made(backend, backend.create("zeros", shape, dtype=_dtype(backend, dtype, "", "empty")))
    return requiring_grad(t, requires_grad, "empty")


def _fill_kind(fill_value, op):
    if isinstance(fill_value, bool):
        return "bool"
    if isinstance(fill_value, int):
        return "integral"
    if isinstance(fill_value, float):
        return "real floating"
    if isinstance(fill_value, complex):
        return "complex floating"
    raise TypeError(f"{op}: fill_value must be a Python bool, int, float or complex, got {type(fill_value).__name__}")


def _no_imaginary_loss(value, name: str, op: str) -> None:
    """A complex value into a real or integer dtype would lose its imaginary part:
    ``TypeError``, as ``asarray`` and ``astype`` refuse it."""
    if isinstance(value, complex) and not name.startswith("complex"):
        raise TypeError(f"{op}: a complex value ({value!r}) into dtype {name} would lose the imaginary part; "
                        "give a complex dtype")


def full(shape, fill_value, *, dtype=None, device=None, requires_grad=False):
    """A tensor of ``shape`` filled with ``fill_value`` (bool, int or float: the dtype of
    that kind unless ``dtype`` is given, as the standard and PyTorch)."""
    backend = get_backend(device)
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    fill_value = python_number(fill_value)
    kind = _fill_kind(fill_value, "full")
    if dtype is None:
        name = "bool" if kind == "bool" else _default(kind)
    else:
        name = as_dtype(dtype, "full").name
    _no_imaginary_loss(fill_value, name, "full")
    array = backend.create("full", _shape(shape, "full"), fill_value, dtype=backend.dtype(name))
    return requiring_grad(_made(backend, array), requires_grad, "full")


def _like(x, dtype, device, op):
    x = asarray_like(x, op)
    backend = x._backend if device is None else get_backend(device)
    dt = backend.dtype(as_dtype(dtype, op).name if dtype is not None else x.dtype.name)
    return x, backend, dt


def zeros_like(x, /, *, dtype=None, device=None):
    x, backend, dt = _like(x, dtype, device, "zeros_like")
    return _made(backend, backend.create("zeros", x.shape, dtype=dt))


def ones_like(x, /, *, dtype=None, device=None):
    x, backend, dt = _like(x, dtype, device, "ones_like")
    return _made(backend, backend.create("ones", x.shape, dtype=dt))


def empty_like(x, /, *, dtype=None, device=None):
    x, backend, dt = _like(x, dtype, device, "empty_like")
    return _made(backend, backend.create("zeros", x.shape, dtype=dt))


def full_like(x, /, fill_value, *, dtype=None, device=None):
    x, backend, dt = _like(x, dtype, device, "full_like")
    if isinstance(fill_value, Tensor):  # as full takes it
        fill_value = fill_value.item()
    fill_value = python_number(fill_value)
    _fill_kind(fill_value, "full_like")
    _no_imaginary_loss(fill_value, as_dtype(dtype, "full_like").name if dtype is not None else x.dtype.name,
                       "full_like")
    return _made(backend, backend.create("full", x.shape, fill_value, dtype=dt))


def arange(start, /, stop=None, step=1, *, dtype=None, device=None):
    """Evenly spaced values in ``[start, stop)``; integers give int64, any float the default float."""
    backend = get_backend(device)
    if stop is None:
        start, stop = 0, start
    start, stop, step = (python_number(v) for v in (start, stop, step))
    for value in (start, stop, step):
        if isinstance(value, (bool, complex)) or not isinstance(value, (int, float)):
            raise TypeError(f"arange: start, stop and step must be real numbers, got {type(value).__name__}")
    if step == 0:
        raise ValueError("arange: step must not be zero")
    if dtype is None:
        kind = "integral" if all(isinstance(v, int) for v in (start, stop, step)) else "real floating"
        dtype = _default(kind)
    dt = backend.dtype(as_dtype(dtype, "arange").name)
    return _made(backend, backend.create("arange", start, stop, step, dtype=dt))


def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True):
    """``num`` evenly spaced values from ``start`` to ``stop`` (included unless ``endpoint=False``)."""
    backend = get_backend(device)
    if is_bool(num) or operator.index(num) < 0:
        raise ValueError(f"linspace: num must be a non-negative integer, got {num!r}")
    start, stop = (v.item() if getattr(v, "shape", None) == () else python_number(v) for v in (start, stop))
    kind = "complex floating" if isinstance(start, complex) or isinstance(stop, complex) else "real floating"
    name = as_dtype(dtype, "linspace").name if dtype is not None else _default(kind)
    for value in (start, stop):
        _no_imaginary_loss(value, name, "linspace")
    return _made(backend, backend.create("linspace", start, stop, operator.index(num), dtype=backend.dtype(name),
                                         endpoint=endpoint))


def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None):
    """A 2-D tensor with ones on the ``k``-th diagonal."""
    backend = get_backend(device)
    for value in (n_rows, n_cols if n_cols is not None else 0, k):
        operator.index(value)
    return _made(backend, backend.create("eye", n_rows, n_cols, k=k, dtype=_dtype(backend, dtype, "", "eye")))


def from_dlpack(x, /, *, device=None, copy=None):
    """A Tensor sharing the memory of ``x`` (an object with ``__dlpack__``: a NumPy,
    CuPy or PyTorch array, or a Tensor), zero-copy where the libraries allow it."""
    copy = _copy_flag(copy, "from_dlpack")
    if isinstance(x, Tensor):  # a new leaf on its memory (counting in-place changes with it)
        return asarray(x.detach(), device=device, copy=copy)
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"from_dlpack: {type(x).__name__} does not support DLPack (no __dlpack__)")
    if device is None:
        kind, index = x.__dlpack_device__()
        source = backend_of_array(x)
        if source is not None:
            backend = source
        elif int(kind) == 1:  # kDLCPU
            backend = get_backend("cpu")
        elif int(kind) in (2, 3, 13):  # CUDA, CUDA host, CUDA managed
            backend = get_backend(f"cuda:{index}")
        else:
            raise BufferError(f"from_dlpack: DLPack device type {kind} has no LeanPass device")
    else:
        backend = get_backend(device)
    with backend.context():
        array = backend.from_dlpack(x, copy=copy)
    if dtype_name(array.dtype) not in DTYPES:
        raise TypeError(f"from_dlpack: dtype {dtype_name(array.dtype)} is not a data type of the array API "
                        "standard (bool, integers, float32/64, complex64/128); convert it first")
    return _made(backend, array)


def _triangle(name, op):
    def function(x, /, *, k=0):
        x = asarray_like(x, name)
        if x.ndim < 2:
            raise ValueError(f"{name}: x must have at least 2 dimensions, got shape {x.shape}")
        return run1(op, x, operator.index(k))

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"The {'lower' if name == 'tril' else 'upper'} triangle of the last two axes, from diagonal k."
    return function


_DIAGONAL = Method("diagonal=0", {"diagonal": "k"})  # PyTorch's t.tril(diagonal=0)
tril = recorded(ops.tril, "creation", methods={"tril": _DIAGONAL})(_triangle("tril", ops.tril))
triu = recorded(ops.triu, "creation", methods={"triu": _DIAGONAL})(_triangle("triu", ops.triu))


@recorded(ops.meshgrid_part, "creation")
def meshgrid(*arrays, indexing="xy"):
    """Coordinate grids from 1-D coordinate tensors, as a list of tensors of the
    grid's shape: ``(len(a0), len(a1), ...)`` for ``indexing="ij"``, the first two
    lengths swapped for the default ``"xy"`` (Cartesian). Each grid is an array of
    its own; its gradient flows back to its coordinate tensor (summed over the grid)."""
    from ._util import tensors

    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    ts = tensors("meshgrid", *arrays)
    for t in ts:
        if t.ndim != 1:
            raise ValueError(f"meshgrid: the coordinate tensors must be 1-D, got shapes {[a.shape for a in ts]}")
    shape = [t.shape[0] for t in ts]
    axes = list(range(len(ts)))
    if indexing == "xy" and len(ts) > 1:
        shape[0], shape[1] = shape[1], shape[0]
        axes[0], axes[1] = 1, 0
    return [run1(ops.meshgrid_part, t, axis, tuple(shape)) for t, axis in zip(ts, axes)]


# Tensor methods for these functions: {method name: function} (``t.tril()``, PyTorch's).
METHODS: dict = methods_of("creation")
