"""Every function that reduces along axes, made from its record in
:data:`leanpass.ops.statistical.REDUCTIONS`: the statistical ones (``sum``, ``prod``,
``mean``, ``std``, ``var``, ``max``, ``min``), the running totals (``cumulative_sum``,
``cumulative_prod``), and ``argmax``, ``argmin``, ``count_nonzero`` (the searching
section's), ``all`` and ``any`` (the utility section's), each with its Tensor methods.

:func:`reduction` makes a function with the standard's signature from a record, and
:func:`leanpass._namespace._records.method` its methods, from :func:`method_line`: the
axis also positionally (as far as the record allows), and PyTorch's ``dim=`` /
``keepdim=``. Every floating-point result is
differentiable (see each function's gradient rule); integer results never require grad.
"""

from __future__ import annotations

import inspect
import math
import numbers

from .._checks import normalize_axes, normalize_axis
from .._dtypes import DTYPES, as_dtype, dtype_name
from .._node import _guarded, leaf, note_complex_mix, run1
from ..backends import GRAD_DTYPES, get_default_dtype
from ..ops.statistical import REDUCTIONS, Reduction
from ..tensor import Tensor
from ._records import method
from ._util import asarray_like, flag, orderable

__all__ = ["cumulative_prod", "cumulative_sum", "max", "mean", "min", "prod", "std", "sum", "var"]



def accumulation_dtype(in_dtype, dtype, op):
    """The result dtype of ``sum``, ``prod`` and the running totals of a tensor of
    ``in_dtype``: ``dtype`` when given; else integers (and booleans) widen to int64
    (unsigned: uint64), the others keep their dtype."""
    if dtype is not None:
        dtype = as_dtype(dtype, op)
        if dtype.kind == "b":  # the standard's sum/prod are of numeric dtypes: on every device
            raise TypeError(f"{op}: dtype={dtype.name} is not a numeric dtype")
        if in_dtype.kind == "c" and dtype.kind != "c":
            raise TypeError(
                f"{op}: dtype={dtype.name} would discard the imaginary part of a {in_dtype.name} tensor; "
                "take the real part first (lp.real)"
            )
        return dtype
    kind = in_dtype.kind
    if kind in "ib":
        return DTYPES["int64"]
    if kind == "u":
        return DTYPES["uint64"]
    return in_dtype


def reduce(op, x, name, out_dtype, *params):
    """``op`` on ``x`` with a result of ``out_dtype``; the result is a graph node only
    when it is floating point, real or complex (an integer result, e.g.
    ``sum(x, dtype=int64)``, never requires grad)."""
    try:
        if not x._rg or out_dtype.name in GRAD_DTYPES:  # (lp.compile records it either way)
            return run1(op, x, *params)
        return leaf(_guarded(op.fn, x._backend, x._data, *params)[0], x._backend, op)
    except TypeError as exc:
        raise TypeError(f"{name}: not defined for a tensor of dtype {x.dtype}: {exc}") from None


def _axes(r: Reduction, x, axis):
    """``axis`` as ``r``'s op takes it (see :class:`Reduction`); ``ValueError`` where
    ``r`` refuses an empty reduced axis and gets one."""
    name, shape = r.name, x.shape
    ndim = len(shape)
    if r.axes == "many":
        axes = normalize_axes(axis, ndim, name)
        sizes = [shape[i] for i in axes] if r.empty else ()
    elif r.axes == "one":  # None: the flattened tensor; a 0-d tensor takes axis 0 or -1, as in PyTorch
        if axis is not None and ndim == 0:
            normalize_axes(axis, 0, name)
            axis = None
        axes = None if axis is None else normalize_axis(axis, ndim, name)
        sizes = [math.prod(shape) if axes is None else shape[axes]]
    else:  # "running"
        if ndim == 0:
            raise ValueError(f"{name}: x must have at least one axis, got a tensor of shape ()")
        if axis is None:
            if ndim > 1:
                raise ValueError(f"{name}: axis is required for a tensor of {ndim} dimensions (shape {shape})")
            axis = 0
        axes = normalize_axis(axis, ndim, name)
        sizes = ()
    if r.empty and 0 in sizes:
        raise ValueError(f"{name}: the tensor of shape {shape} is empty along the reduced axes")
    return axes


def _correction(name, correction):
    if isinstance(correction, bool) or not isinstance(correction, numbers.Real):
        raise TypeError(f"{name}: correction must be a real number, got {type(correction).__name__}")
    if correction < 0:
        raise ValueError(f"{name}: correction must be non-negative, got {correction}")
    return int(correction) if isinstance(correction, numbers.Integral) else float(correction)


def _apply(r: Reduction, x, axis, keepdims, params: dict):
    """The function of the record ``r`` on ``x`` (a Tensor)."""
    name = r.name
    out_dtype = DTYPES[dtype_name(x._data.dtype)]  # x.dtype, through dtype_name's cache
    kind = out_dtype.kind
    if kind == "c" and r.refused is not None:
        raise TypeError(f"{name}: " + r.refused.format(dtype=out_dtype))
    axes = _axes(r, x, axis)
    args = [axes] if keepdims is None else [axes, flag(name, "keepdims", keepdims)]
    if r.dtype == "accumulate":
        out_dtype = accumulation_dtype(out_dtype, params["dtype"], name)
        params["dtype"] = x._backend.dtype(out_dtype.name)
        if kind != "c" and out_dtype.kind == "c":  # a real tensor summed as complex
            note_complex_mix((x,), out_dtype)
    elif r.dtype == "floating" and kind not in "fc":  # integers: the default float dtype, as the standard says
        x = x.astype(get_default_dtype())
        out_dtype = x.dtype
    elif r.dtype in ("ordered", "index") and kind == "b":  # False < True on every device (see orderable)
        x = orderable(x)
        if r.dtype == "ordered":
            return reduce(r.op, x, name, x.dtype, *args).astype("bool")
    if "correction" in params:
        params["correction"] = _correction(name, params["correction"])
    if "include_initial" in params:
        params["include_initial"] = flag(name, "include_initial", params["include_initial"])
    return reduce(r.op, x, name, out_dtype, *args, *params.values())


def _call(r: Reduction, name: str, x, kwargs: dict, defaults: dict, accepted: frozenset):
    """``r``'s function (or its method ``name``) on ``x`` with the keyword arguments ``kwargs``."""
    if type(x) is not Tensor:
        x = asarray_like(x, name)
    keeps = "keepdims" in accepted
    if not kwargs:  # x.sum(), x.mean(): the defaults
        return _apply(r, x, None, False if keeps else None, defaults.copy())
    if not accepted.issuperset(kwargs):
        raise TypeError(f"{name}() got an unexpected keyword argument {sorted(set(kwargs) - accepted)[0]!r}")
    params = {**defaults, **kwargs}
    axis = params.pop("axis", None)
    return _apply(r, x, axis, params.pop("keepdims", False) if keeps else None, params)


def _arguments(r: Reduction):
    """``(defaults, accepted)``: ``r``'s parameters after ``axis`` (and ``keepdims``) with
    their defaults, and the names of all the keyword parameters its function takes."""
    defaults = dict(r.params)
    return defaults, frozenset(("axis", *defaults, *(("keepdims",) if r.axes != "running" else ())))


def reduction(r: Reduction):
    """The namespace function of the record ``r``: ``name(x, /, *, axis=None, *params[,
    keepdims=False])``, the standard's signature (what ``inspect.signature`` shows)."""
    name = r.name
    defaults, accepted = _arguments(r)

    def function(x, /, **kwargs):
        return _call(r, name, x, kwargs, defaults, accepted)

    keyword = inspect.Parameter.KEYWORD_ONLY
    function.__signature__ = inspect.Signature([
        inspect.Parameter("x", inspect.Parameter.POSITIONAL_ONLY),
        *(inspect.Parameter(key, keyword, default=default) for key, default in
          (("axis", None), *r.params, *((("keepdims", False),) if "keepdims" in accepted else ()))),
    ])
    function.__name__ = function.__qualname__ = name
    function.__doc__ = r.doc
    return function


def method_line(r: Reduction) -> str:
    """The parameters of ``r``'s Tensor methods after ``self``: the function's, the first
    ones (``r.positional``) also by position (``t.sum(0)``), the others by name only."""
    _, accepted = _arguments(r)
    every = (("axis", None), *r.params, *((("keepdims", False),) if "keepdims" in accepted else ()))
    first = [f"{key}={default!r}" for key, default in every if key in r.positional]
    rest = [f"{key}={default!r}" for key, default in every if key not in r.positional]
    return ", ".join(first + (["*", *rest] if rest else []))


_POPULATION = ("Note: ``correction`` defaults to 0 (the population statistic), as in the standard and NumPy, "
               "unlike PyTorch's ``unbiased=True``: pass ``correction=1`` for the sample one.")


FUNCTIONS: dict = {name: reduction(r) for name, r in REDUCTIONS.items()}  # searching and utility take theirs
sum = FUNCTIONS["sum"]  # noqa: A001 - the standard's names
prod = FUNCTIONS["prod"]
mean = FUNCTIONS["mean"]
max = FUNCTIONS["max"]  # noqa: A001
min = FUNCTIONS["min"]  # noqa: A001
var = FUNCTIONS["var"]
std = FUNCTIONS["std"]
cumulative_sum = FUNCTIONS["cumulative_sum"]
cumulative_prod = FUNCTIONS["cumulative_prod"]

# Tensor methods of every reduction (argmax's, all's too): {method name: function}.
def _entry(r: Reduction):
    """``r``'s function as its methods call it: ``(self, method name, arguments by name)``."""
    defaults, accepted = _arguments(r)

    def call(x, name, values):
        return _call(r, name, x, values, defaults, accepted)

    return call


METHODS: dict = {name: method(FUNCTIONS[r.name], name, method_line(r),
                               _POPULATION if any(key == "correction" for key, _ in r.params) else "", _entry(r))
                 for r in REDUCTIONS.values() for name in r.method}
