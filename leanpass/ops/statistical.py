"""Reductions, statistics and running totals along axes; ``diff``, their inverse.

Every function that reduces along axes (here, ``argmax``/``argmin``/``count_nonzero``
of the searching section and ``all``/``any`` of the utility section) is a
:class:`Reduction` record of :data:`REDUCTIONS`: its op, how its result's dtype
follows the input's, what its axis argument is, its other parameters and its Tensor
methods. The namespace function and the methods are made from the record
(:mod:`leanpass._namespace.statistical`), as the element-wise ones are from their table.
Each op takes ``(a, axes, keepdims, *params)`` (a running total: ``(a, axis, *params)``),
the parameters in the record's order.

``axes`` is always a tuple of non-negative axes and ``axis`` a non-negative int,
normalised by the caller. ``dtype`` (where taken) is the library's dtype of the
result, or ``None`` to keep the input's: the input is cast to it first, as the
standard says, and the gradient is cast back to the input's dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._op import Op, op
from .conversion import gradient_as
from .searching import argmax, argmin, count_nonzero


def kept_shape(shape, axes):
    """``shape`` with the reduced ``axes`` kept as 1 (the ``keepdims=True`` shape)."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def reduced_shape(shape, axes):
    """``shape`` without the reduced ``axes`` (the ``keepdims=False`` shape)."""
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def along(axis, index):
    """The key that applies ``index`` (a slice) along ``axis`` only."""
    return (slice(None),) * axis + (index, ...)


def _cast(xp, a, dtype):
    return a if dtype is None or a.dtype == dtype else xp.astype(a, dtype)


def _as(xp, grad, dtype):
    """``grad`` in the input's ``dtype`` (a ``dtype=`` argument may have changed it): the
    real part of a complex gradient for a real input."""
    return grad if grad.dtype == dtype else gradient_as(xp, grad, dtype)


def _reverse_cumsum(xp, g, axis):
    """``out[i] = sum(g[i:])`` along ``axis``: the adjoint of a running sum."""
    return xp.flip(xp.cumulative_sum(xp.flip(g, axis=axis), axis=axis), axis=axis)


# ---- reductions ---------------------------------------------------------------------------


@op("sum", saves=(), saves_out=False, fresh=False, complex="holomorphic")
def sum(be, a, axes, keepdims, dtype=None):
    xp = be.xp
    shape, in_dtype = a.shape, a.dtype

    def backward(g):
        if not keepdims:
            g = xp.reshape(g, kept_shape(shape, axes))
        return (xp.broadcast_to(_as(xp, g, in_dtype), shape),)

    return be.quietly(_total, xp, a, axes, keepdims, dtype), backward  # overflow, inf - inf: no warning


def _total(xp, a, axes, keepdims, dtype):
    return xp.sum(_cast(xp, a, dtype), axis=axes, keepdims=keepdims, dtype=dtype)


@op("mean", saves=(), saves_out=False, fresh=False, complex="holomorphic")
def mean(be, a, axes, keepdims):
    xp = be.xp
    shape = a.shape
    count = math.prod(shape[i] for i in axes)

    def backward(g):
        if not keepdims:
            g = xp.reshape(g, kept_shape(shape, axes))
        # nothing reduced: an empty gradient (no 0-division and its warning)
        return (xp.broadcast_to(g / count if count else g, shape),)

    if count == 0:  # the mean of nothing is nan (0 / 0), without a warning
        with be.quiet():
            return xp.sum(a, axis=axes, keepdims=keepdims) / 0.0, backward
    return be.quietly(_average, xp, a, axes, keepdims), backward  # overflow, inf - inf: no warning


def _average(xp, a, axes, keepdims):
    return xp.mean(a, axis=axes, keepdims=keepdims)


def _others_product(xp, a, axes):
    """For each element, the product of the *other* elements of its reduced group,
    from exclusive running products from both sides: exact with zeros, no division."""
    nd = a.ndim
    keep = [i for i in range(nd) if i not in axes]
    perm = (*keep, *axes)
    moved = xp.permute_dims(a, perm)
    lead = moved.shape[:len(keep)]
    flat = xp.reshape(moved, (*lead, math.prod(a.shape[i] for i in axes)))
    last = len(lead)
    left = xp.cumulative_prod(flat, axis=last, include_initial=True)[..., :-1]
    right = xp.flip(
        xp.cumulative_prod(xp.flip(flat, axis=last), axis=last, include_initial=True)[..., :-1], axis=last
    )
    others = xp.reshape(left * right, moved.shape)
    return xp.permute_dims(others, tuple(sorted(range(nd), key=perm.__getitem__)))


@op("prod", saves=(0,), saves_out=False, complex="holomorphic")
def prod(be, a, axes, keepdims, dtype=None):
    """Product over ``axes``. Gradient: ``g`` times the product of the other elements
    of the group (exclusive running products from both sides), so it is exact where
    some elements are zero (PyTorch's rule); nothing is divided by ``x``."""
    xp = be.xp
    shape, in_dtype = a.shape, a.dtype
    a = _cast(xp, a, dtype)

    def backward(g):
        if not keepdims:
            g = xp.reshape(g, kept_shape(shape, axes))
        if math.prod(shape) == 0:
            return (be.zeros(shape, in_dtype),)
        with be.quiet():
            return (_as(xp, g * _others_product(xp, a, axes), in_dtype),)

    with be.quiet():  # overflow gives inf, as multiply would
        return xp.prod(a, axis=axes, keepdims=keepdims, dtype=dtype), backward


def _extremum(name, reduce):
    @op(name, saves=(0,), saves_out=True)
    def extremum(be, a, axes, keepdims):
        """The largest (smallest) value; the gradient is shared equally between ties (``torch.amax``)."""
        xp = be.xp
        kept = getattr(xp, reduce)(a, axis=axes, keepdims=True)
        out = kept if keepdims else xp.reshape(kept, reduced_shape(a.shape, axes))

        def backward(g):
            if not keepdims:
                g = xp.reshape(g, kept.shape)
            winners = xp.astype(a == kept, g.dtype)
            with be.quiet():  # a row with NaN has no winner: NaN, as torch.amax, without warnings
                return (winners * (g / xp.sum(winners, axis=axes, keepdims=True)),)

        return out, backward

    return extremum


max = _extremum("max", "max")
min = _extremum("min", "min")


def _moments(be, a, axes, correction):
    """``(variance with keepdims, deviations from the mean, divisor N - correction)``;
    the divisor is nan where ``N - correction <= 0`` (the variance is then nan)."""
    xp = be.xp
    count = math.prod(a.shape[i] for i in axes)
    divisor = count - correction
    if divisor <= 0:
        divisor = math.nan
    with be.quiet():  # the mean of nothing is nan (0 / 0), without a warning
        d = a - xp.sum(a, axis=axes, keepdims=True) / float(count)
        return xp.sum(d * d, axis=axes, keepdims=True) / divisor, d, divisor


@op("var", saves=(), saves_out=False)
def var(be, a, axes, keepdims, correction):
    """Variance ``sum((x - mean)**2) / (N - correction)``; gradient ``2 (x - mean) / (N - correction)``."""
    xp = be.xp
    kept, d, divisor = _moments(be, a, axes, correction)
    out = kept if keepdims else xp.reshape(kept, reduced_shape(a.shape, axes))

    def backward(g):
        if not keepdims:
            g = xp.reshape(g, kept.shape)
        return ((g * (2.0 / divisor)) * d,)

    return out, backward


@op("std", saves=(), saves_out=True)
def std(be, a, axes, keepdims, correction):
    """Standard deviation ``sqrt(var)``; gradient ``(x - mean) / ((N - correction) std)``,
    and 0 where the standard deviation is 0 (PyTorch's rule)."""
    xp = be.xp
    kept, d, divisor = _moments(be, a, axes, correction)
    kept = xp.sqrt(kept)
    out = kept if keepdims else xp.reshape(kept, reduced_shape(a.shape, axes))

    def backward(g):
        if not keepdims:
            g = xp.reshape(g, kept.shape)
        zero = kept == 0
        scale = xp.where(zero, 0.0, g / xp.where(zero, 1.0, kept)) / divisor
        return (scale * d,)

    return out, backward


# ---- running totals and differences --------------------------------------------------------


def _running_total(xp, a, axis, dtype, include_initial):
    return xp.cumulative_sum(a, axis=axis, dtype=dtype, include_initial=include_initial)


def _running_product(xp, a, axis, dtype, include_initial):
    return xp.cumulative_prod(a, axis=axis, dtype=dtype, include_initial=include_initial)


@op("cumulative_sum", saves=(), saves_out=False, complex="holomorphic")
def cumulative_sum(be, a, axis, dtype, include_initial):
    """Running sum along ``axis``; gradient: the reverse running sum of ``g``."""
    xp = be.xp
    in_dtype = a.dtype

    def backward(g):
        if include_initial:
            g = g[along(axis, slice(1, None))]
        return (_as(xp, _reverse_cumsum(xp, g, axis), in_dtype),)

    out = be.quietly(_running_total, xp, _cast(xp, a, dtype), axis, dtype, include_initial)  # overflow: inf
    return out, backward


@op("cumulative_prod", saves=(0,), saves_out=True, complex="holomorphic")
def cumulative_prod(be, a, axis, dtype, include_initial):
    """Running product along ``axis``. Gradient as ``torch.cumprod``'s, exact with zeros:
    before the first zero ``z`` of a line, ``revcumsum(g * out) / x``; at ``z``, the sum
    of ``g * out`` over the rest of the line with that zero taken as 1; after it,
    ``x[z] * B`` -- zero, but written so that the rule, run again on Tensors (double
    backward), has the right derivative ``B`` with respect to ``x[z]``: ``B[j]`` is the
    gradient ``x[j]`` would have with ``x[z]`` taken as 1 (the same three cases, one
    zero further on). Along an axis of length 1 the output is the input: the gradient
    is ``g`` itself (PyTorch's shortcut), also where ``revcumsum(g * out) / x`` would
    overflow, underflow or be ``inf / inf``."""
    xp = be.xp
    in_dtype = a.dtype
    a = _cast(xp, a, dtype)
    out = be.quietly(_running_product, xp, a, axis, dtype, include_initial)  # overflow, inf * 0: no warning

    def backward(g):
        y = out
        if include_initial:
            rest = along(axis, slice(1, None))
            g, y = g[rest], y[rest]
        if a.shape[axis] == 1:  # a copy: this op's gradients are fresh arrays, never g
            return (be.copy(g) if g.dtype == in_dtype else xp.astype(g, in_dtype),)
        zero = a == 0
        zeros_so_far = xp.cumulative_sum(xp.astype(zero, xp.int64), axis=axis)
        before = zeros_so_far == 0  # before the line's first zero
        first = zero & (zeros_so_far == 1)  # the first zero itself
        between = (zeros_so_far == 1) & ~first  # after it, before a second zero
        second = zero & (zeros_so_far == 2)
        with be.quiet():
            grad = _reverse_cumsum(xp, g * y, axis) / xp.where(before, a, 1.0)
            skipped = xp.cumulative_prod(xp.where(first, 1.0, a), axis=axis)  # the first zero as 1
            at_zero = xp.sum(xp.where(before, 0.0, g * skipped), axis=axis, keepdims=True)
            later = _reverse_cumsum(xp, g * skipped, axis) / xp.where(between, a, 1.0)
            twice = xp.cumulative_prod(xp.where(first | second, 1.0, a), axis=axis)  # both zeros as 1
            at_second = xp.sum(xp.where(zeros_so_far >= 2, g * twice, 0.0), axis=axis, keepdims=True)
            b = xp.where(between, later, xp.where(second, at_second, 0.0))
            a_first = xp.sum(xp.where(first, a, 0.0), axis=axis, keepdims=True)  # 0, for its derivative
        grad = xp.where(before, grad, xp.where(first, at_zero, a_first * b))
        return (_as(xp, grad, in_dtype),)

    return out, backward


@op("diff", saves=(), saves_out=False, fresh=False, complex="holomorphic")
def diff(be, a, prepend, append, axis, n):
    """The ``n``-th forward difference along ``axis`` of ``concat([prepend, a, append])``
    (``prepend``/``append`` may be ``None``). Gradient: the adjoint of one difference,
    ``h[j] = g[j-1] - g[j]``, applied ``n`` times, then split between the three inputs."""
    xp = be.xp
    parts = [p for p in (prepend, a, append) if p is not None]
    full = xp.concat(parts, axis=axis) if len(parts) > 1 else a
    sizes = [0 if p is None else p.shape[axis] for p in (prepend, a, append)]
    length = full.shape[axis]
    if n == 0:
        out = be.copy(full) if full is a else full
    elif n >= length:  # nothing left (NumPy and PyTorch give an empty result)
        out = be.zeros(tuple(0 if i == axis else s for i, s in enumerate(full.shape)), full.dtype)
    else:
        out = xp.diff(full, axis=axis, n=n)

    def backward(g):
        if n >= length:
            h = be.zeros(full.shape, g.dtype)
        else:
            h = g
            edge = be.zeros(tuple(1 if i == axis else s for i, s in enumerate(g.shape)), g.dtype)
            for _ in range(n):
                h = xp.concat([edge, h], axis=axis) - xp.concat([h, edge], axis=axis)
        before, middle = sizes[0], sizes[0] + sizes[1]
        return (
            h[along(axis, slice(before, middle))],
            None if prepend is None else h[along(axis, slice(0, before))],
            None if append is None else h[along(axis, slice(middle, None))],
        )

    return out, backward


# ---- logical reductions (utility section) ---------------------------------------------------


@op("all", differentiable=False)
def all(be, a, axes, keepdims):
    return be.xp.all(a, axis=axes, keepdims=keepdims), None


@op("any", differentiable=False)
def any(be, a, axes, keepdims):
    return be.xp.any(a, axis=axes, keepdims=keepdims), None


# ---- the records the namespace layer makes the functions and methods from -------------------


@dataclass(frozen=True)
class Reduction:
    """One function that reduces a tensor along axes, or runs along one axis."""

    name: str  # the namespace name (``lp.sum``)
    op: Op
    # How the result's dtype follows the input's: "accumulate" (``dtype=``; else integers
    # and bools widen to int64, unsigned ones to uint64: sum, prod, the running totals),
    # "floating" (integers and bools give the default float dtype: mean, var, std),
    # "ordered" (bools compare as False < True, and stay bool: max, min), "index" (int64
    # indices of an ordering, bools as for "ordered": argmax) or "any" (the op's own).
    dtype: str
    # What ``axis`` is: "many" (an int, a tuple, or None for all axes), "one" (an int, or
    # None for the flattened tensor: argmax) or "running" (an int, which only a 1-D tensor
    # may omit: the running totals, which take no ``keepdims``).
    axes: str
    params: tuple = ()  # the keyword parameters after ``axis`` (and ``keepdims``): (name, default)
    refused: str | None = None  # what a complex input gets told ("{dtype}" is its dtype); None: taken
    empty: bool = False  # an empty reduced axis raises (an extremum of nothing has no value)
    method: tuple = ()  # Tensor method names: ``t.cumsum(...)`` for ``cumulative_sum``
    # The method's parameters that may be given positionally, in order (``t.sum(0, True)``):
    # ``t.var(0, True)`` would be PyTorch's ``unbiased=True``, and ``t.max(1)`` PyTorch's
    # (values, indices), so those take fewer, and a surplus is refused rather than misread.
    positional: tuple = ("axis", "keepdims")
    doc: str = ""


_NO_ORDER = "complex numbers have no order (dtype {dtype})"
_EXTREMUM = ("The {} value over ``axis`` (all axes by default); the gradient is shared equally among ties "
             "(``torch.amax``).")
_ARG = ("The index of the {} value along ``axis`` (``None``: of the flattened tensor, a 0-d result); ties give "
        "the first index. int64, never requires grad.")
_SPREAD = """{} over ``axis`` (all axes by default): {}.

``correction`` (an int or a float, default 0 as in the standard and NumPy; PyTorch's
``unbiased=True`` is ``correction=1``) adjusts the divisor; where ``N - correction <= 0``
the result is nan. Integer input gives the default float dtype.
Gradient: {}."""
_RUNNING = """Running {0} along ``axis`` (which may be omitted for a 1-D tensor).

``include_initial=True`` puts the {0} of nothing ({1}) first, so that axis grows by one.
Integers (and booleans) {2} in int64 (unsigned: uint64); ``dtype`` casts ``x`` first.
Gradient: {3}."""
_LOGICAL = """Whether {} element over ``axis`` (an int, a tuple, or ``None`` for all axes) is
true (non-zero; NaN counts as true). ``{}`` over nothing. A bool tensor."""

REDUCTIONS: dict[str, Reduction] = {r.name: r for r in (
    Reduction("sum", sum, "accumulate", "many", (("dtype", None),), method=("sum",), doc="""\
Sum over ``axis`` (an int, a tuple, or ``None`` for all axes).

Integers (and booleans) sum in int64 (unsigned: uint64), as the standard says;
``dtype`` casts ``x`` before summing. Gradient: ``g`` broadcast back."""),
    Reduction("prod", prod, "accumulate", "many", (("dtype", None),), method=("prod",), doc="""\
Product over ``axis`` (an int, a tuple, or ``None`` for all axes); the empty product is 1.

Integers (and booleans) multiply in int64 (unsigned: uint64); ``dtype`` casts
``x`` first. Gradient: ``g`` times the product of the *other* elements of each
group, computed from running products on both sides, so it is right where some
elements are zero (as in PyTorch); nothing is divided by ``x``."""),
    Reduction("mean", mean, "floating", "many", method=("mean",), doc="""\
Arithmetic mean over ``axis`` (all axes by default); the mean of nothing is nan.
Integers and booleans give the default float dtype (as NumPy: ``(a == b).mean()``
is a fraction). Gradient: ``g / N`` broadcast back."""),
    Reduction("max", max, "ordered", "many", refused=_NO_ORDER, empty=True, method=("max",), positional=(),
              doc=_EXTREMUM.format("largest")),
    Reduction("min", min, "ordered", "many", refused=_NO_ORDER, empty=True, method=("min",), positional=(),
              doc=_EXTREMUM.format("smallest")),
    Reduction("var", var, "floating", "many", (("correction", 0.0),), refused="x must have a real dtype, got {dtype}",
              method=("var",), positional=("axis",),
              doc=_SPREAD.format("Variance", "``sum((x - mean)**2) / (N - correction)``",
                                 "``2 (x - mean) / (N - correction)`` times ``g``")),
    Reduction("std", std, "floating", "many", (("correction", 0.0),), refused="x must have a real dtype, got {dtype}",
              method=("std",), positional=("axis",),
              doc=_SPREAD.format("Standard deviation", "``sqrt(var(x, ...))``",
                                 "``(x - mean) / ((N - correction) std)`` times ``g``, and 0 where the standard "
                                 "deviation is 0 (as in PyTorch)")),
    Reduction("cumulative_sum", cumulative_sum, "accumulate", "running", (("dtype", None), ("include_initial", False)),
              method=("cumsum",), positional=("axis",),
              doc=_RUNNING.format("sum", 0, "add up", "the reverse running sum of ``g``")),
    Reduction("cumulative_prod", cumulative_prod, "accumulate", "running",
              (("dtype", None), ("include_initial", False)), method=("cumprod",), positional=("axis",),
              doc=_RUNNING.format("product", 1, "multiply", "as ``torch.cumprod``'s, right where some elements "
                                                               "are zero")),
    Reduction("argmax", argmax, "index", "one", refused=_NO_ORDER, empty=True, method=("argmax",),
              doc=_ARG.format("largest")),
    Reduction("argmin", argmin, "index", "one", refused=_NO_ORDER, empty=True, method=("argmin",),
              doc=_ARG.format("smallest")),
    Reduction("count_nonzero", count_nonzero, "any", "many", method=("count_nonzero",), doc="""\
How many elements over ``axis`` (an int, a tuple, or ``None`` for all axes) are
non-zero (``True`` for booleans; either part for complex numbers). int64, never
requires grad."""),
    Reduction("all", all, "any", "many", method=("all",), doc=_LOGICAL.format("every", True)),
    Reduction("any", any, "any", "many", method=("any",), doc=_LOGICAL.format("some", False)),
)}
