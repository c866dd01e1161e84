"""Statistical functions: reductions along axes (``sum``, ``prod``, ``mean``, ``std``,
``var``, ``max``, ``min``) and running totals (``cumulative_sum``, ``cumulative_prod``).

Every floating-point result is differentiable (see each function's gradient rule);
integer results never require grad.
"""

from __future__ import annotations

import numbers

from .. import ops
from .._checks import normalize_axes, normalize_axis
from .._dtypes import DTYPES, as_dtype
from .._node import _guarded, leaf, run1
from ..backends import get_default_dtype
from ._util import asarray_like, flag, orderable, torch_axis

__all__ = ["cumulative_prod", "cumulative_sum", "max", "mean", "min", "prod", "std", "sum", "var"]

_FLOATING = ("float32", "float64")


def accumulation_dtype(x, dtype, op):
    """The result dtype of ``sum``, ``prod`` and the running totals: ``dtype`` when
    given; else integers (and booleans) widen to int64 (unsigned: uint64), the
    others keep their dtype."""
    if dtype is not None:
        dtype = as_dtype(dtype, op)
        if dtype.kind == "b":  # the standard's sum/prod are of numeric dtypes: on every device
            raise TypeError(f"{op}: dtype={dtype.name} is not a numeric dtype")
        if x.dtype.kind == "c" and dtype.kind != "c":
            raise TypeError(
                f"{op}: dtype={dtype.name} would discard the imaginary part of a {x.dtype.name} tensor; "
                "take the real part first (lp.real)"
            )
        return dtype
    kind = x.dtype.kind
    if kind in "ib":
        return DTYPES["int64"]
    if kind == "u":
        return DTYPES["uint64"]
    return x.dtype


def reduce(op, x, name, out_dtype, *params):
    """``op`` on ``x`` with a result of ``out_dtype``; the result is a graph node only
    when it is real floating point (an integer or complex result, e.g.
    ``sum(x, dtype=int64)``, never requires grad)."""
    try:
        if x._rg and out_dtype.name in _FLOATING:
            return run1(op, x, *params)
        return leaf(_guarded(op.fn, x._backend, x._data, *params)[0], x._backend, op)
    except TypeError as exc:
        raise TypeError(f"{name}: not defined for a tensor of dtype {x.dtype}: {exc}") from None


def _library_dtype(x, dtype):
    return x._backend.dtype(dtype.name)


def sum(x, /, *, axis=None, dtype=None, keepdims=False):  # noqa: A001
    """Sum over ``axis`` (an int, a tuple, or ``None`` for all axes).

    Integers (and booleans) sum in int64 (unsigned: uint64), as the standard says;
    ``dtype`` casts ``x`` before summing. Gradient: ``g`` broadcast back."""
    x = asarray_like(x, "sum")
    axes = normalize_axes(axis, x.ndim, "sum")
    dtype, keepdims = accumulation_dtype(x, dtype, "sum"), flag("sum", "keepdims", keepdims)
    return reduce(ops.sum, x, "sum", dtype, axes, keepdims, _library_dtype(x, dtype))


def prod(x, /, *, axis=None, dtype=None, keepdims=False):
    """Product over ``axis`` (an int, a tuple, or ``None`` for all axes); the empty product is 1.

    Integers (and booleans) multiply in int64 (unsigned: uint64); ``dtype`` casts
    ``x`` first. Gradient: ``g`` times the product of the *other* elements of each
    group, computed from running products on both sides, so it is right where some
    elements are zero (as in PyTorch); nothing is divided by ``x``."""
    x = asarray_like(x, "prod")
    axes = normalize_axes(axis, x.ndim, "prod")
    dtype, keepdims = accumulation_dtype(x, dtype, "prod"), flag("prod", "keepdims", keepdims)
    return reduce(ops.prod, x, "prod", dtype, axes, keepdims, _library_dtype(x, dtype))


def mean(x, /, *, axis=None, keepdims=False):
    """Arithmetic mean over ``axis`` (all axes by default); the mean of nothing is nan.
    Integers and booleans give the default float dtype (as NumPy: ``(a == b).mean()``
    is a fraction). Gradient: ``g / N`` broadcast back."""
    x = asarray_like(x, "mean")
    axes = normalize_axes(axis, x.ndim, "mean")
    if x.dtype.kind not in "fc":
        x = x.astype(get_default_dtype())
    return run1(ops.mean, x, axes, flag("mean", "keepdims", keepdims))


def _extremum(name, op):
    def function(x, /, *, axis=None, keepdims=False):
        x = asarray_like(x, name)
        axes = normalize_axes(axis, x.ndim, name)
        keepdims = flag(name, "keepdims", keepdims)
        if any(x.shape[i] == 0 for i in axes):  # axis=() reduces nothing: an empty tensor is fine
            raise ValueError(f"{name}: the tensor of shape {x.shape} is empty along the reduced axes")
        if x.dtype.kind == "c":
            raise TypeError(f"{name}: complex numbers have no order (dtype {x.dtype})")
        if x.dtype.kind == "b":
            return reduce(op, orderable(x), name, DTYPES["uint8"], axes, keepdims).astype("bool")
        return reduce(op, x, name, x.dtype, axes, keepdims)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = (f"The {'largest' if name == 'max' else 'smallest'} value over ``axis`` (all axes by default); "
                        "the gradient is shared equally among ties (``torch.amax``).")
    return function


max = _extremum("max", ops.max)  # noqa: A001
min = _extremum("min", ops.min)  # noqa: A001


def _spread(name, op):
    def function(x, /, *, axis=None, correction=0.0, keepdims=False):
        x = asarray_like(x, name)
        axes = normalize_axes(axis, x.ndim, name)
        if isinstance(correction, bool) or not isinstance(correction, numbers.Real):
            raise TypeError(f"{name}: correction must be a real number, got {type(correction).__name__}")
        if correction < 0:
            raise ValueError(f"{name}: correction must be non-negative, got {correction}")
        correction = int(correction) if isinstance(correction, numbers.Integral) else float(correction)
        if x.dtype.kind == "c":
            raise TypeError(f"{name}: x must have a real dtype, got {x.dtype}")
        if x.dtype.kind != "f":  # integers: in the default float dtype, as the standard says
            x = x.astype(get_default_dtype())
        return run1(op, x, axes, correction, flag(name, "keepdims", keepdims))

    function.__name__ = function.__qualname__ = name
    return function


var = _spread("var", ops.var)
var.__doc__ = """Variance over ``axis`` (all axes by default): ``sum((x - mean)**2) / (N - correction)``.

``correction`` (an int or a float, default 0 as in the standard and NumPy; PyTorch's
``unbiased=True`` is ``correction=1``) adjusts the divisor; where ``N - correction <= 0``
the variance is nan. Integer input gives the default float dtype.
Gradient: ``2 (x - mean) / (N - correction)`` times ``g``."""
std = _spread("std", ops.std)
std.__doc__ = """Standard deviation over ``axis`` (all axes by default): ``sqrt(var(x, ...))``.

``correction`` as for :func:`var` (default 0, as in the standard and NumPy; PyTorch's
``unbiased=True`` is ``correction=1``); where ``N - correction <= 0`` the result is nan.
Gradient: ``(x - mean) / ((N - correction) std)`` times ``g``, and 0 where the standard
deviation is 0 (as in PyTorch)."""


def _running(name, op):
    def function(x, /, *, axis=None, dtype=None, include_initial=False):
        x = asarray_like(x, name)
        if x.ndim == 0:
            raise ValueError(f"{name}: x must have at least one axis, got a tensor of shape ()")
        if axis is None:
            if x.ndim > 1:
                raise ValueError(f"{name}: axis is required for a tensor of {x.ndim} dimensions (shape {x.shape})")
            axis = 0
        axis = normalize_axis(axis, x.ndim, name)
        dtype, initial = accumulation_dtype(x, dtype, name), flag(name, "include_initial", include_initial)
        return reduce(op, x, name, dtype, axis, _library_dtype(x, dtype), initial)

    function.__name__ = function.__qualname__ = name
    return function


cumulative_sum = _running("cumulative_sum", ops.cumulative_sum)
cumulative_sum.__doc__ = """Running sum along ``axis`` (which may be omitted for a 1-D tensor).

``include_initial=True`` puts the sum of nothing (0) first, so that axis grows by one.
Integers (and booleans) add up in int64 (unsigned: uint64); ``dtype`` casts ``x`` first.
Gradient: the reverse running sum of ``g``."""
cumulative_prod = _running("cumulative_prod", ops.cumulative_prod)
cumulative_prod.__doc__ = """Running product along ``axis`` (which may be omitted for a 1-D tensor).

``include_initial=True`` puts the product of nothing (1) first, so that axis grows by one.
Integers (and booleans) multiply in int64 (unsigned: uint64); ``dtype`` casts ``x`` first.
Gradient as ``torch.cumprod``'s, right where some elements are zero."""


# ---- Tensor methods ----------------------------------------------------------------------------


def _prod_method(self, axis=None, keepdims=False, *, dtype=None, dim=None, keepdim=None):
    if dim is not None or keepdim is not None:
        axis, keepdims = torch_axis("prod", axis, dim, keepdims, keepdim)
    return prod(self, axis=axis, keepdims=keepdims, dtype=dtype)


def _spread_method(function):
    def method(self, axis=None, *, correction=0.0, keepdims=False, dim=None, keepdim=None):
        if dim is not None or keepdim is not None:
            axis, keepdims = torch_axis(function.__name__, axis, dim, keepdims, keepdim)
        return function(self, axis=axis, correction=correction, keepdims=keepdims)

    method.__name__ = method.__qualname__ = function.__name__
    method.__doc__ = (
        f"``{function.__name__}(t, axis=axis, correction=correction, keepdims=keepdims)``; ``axis`` may be "
        "given positionally. Note: ``correction`` defaults to 0 (the population statistic), as in the "
        "standard and NumPy, unlike PyTorch's ``unbiased=True``: pass ``correction=1`` for the sample one."
    )
    return method


def _running_method(function, name):
    def method(self, axis=None, *, dtype=None, include_initial=False, dim=None):
        if dim is not None:
            axis = torch_axis(name, axis, dim)[0]
        return function(self, axis=axis, dtype=dtype, include_initial=include_initial)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (
        f"NumPy's name for :func:`leanpass.{function.__name__}`: ``t.{name}(axis)``; the axis is needed "
        "for a tensor of more than one dimension, as in the standard."
    )
    return method


_prod_method.__name__ = _prod_method.__qualname__ = "prod"
_prod_method.__doc__ = "``prod(t, axis=axis, keepdims=keepdims, dtype=dtype)``; ``axis`` may be given positionally."

# Tensor methods for these functions: {method name: function}. (t.sum, t.mean, t.max
# and t.min are in methods.py.)
METHODS: dict = {
    "prod": _prod_method,
    "std": _spread_method(std),
    "var": _spread_method(var),
    "cumsum": _running_method(cumulative_sum, "cumsum"),
    "cumprod": _running_method(cumulative_prod, "cumprod"),
}

