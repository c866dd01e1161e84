"""``interpolate`` and ``Upsample``: PyTorch's resizing of ``(N, C, L)`` and ``(N, C,
H, W)`` inputs by nearest neighbour and (bi)linear interpolation, differentiable.

Resizing is separable: along each spatial axis the output takes the input's values
at host-computed indices (``take``), and linear modes mix two neighbours with
host-computed weights. The indices and weights are PyTorch's, computed as its CPU
kernels compute them -- in float32 for the nearest modes, in the input's float
dtype for the linear ones, ``scale_factor`` given or recomputed as PyTorch decides
-- so the values agree with ``torch.nn.functional.interpolate`` to the last bits
and the gradients too (the gradient of ``take`` adds up where an index repeats).
"""

from __future__ import annotations

import math
import numbers

from .._namespace import asarray, take
from .._namespace._util import floating
from ..backends import get_backend
from ..tensor import Tensor
from .layers import _check_input
from .module import Module

__all__ = ["interpolate", "Upsample"]

_MODES = {"nearest": (3, 4), "linear": (3,), "bilinear": (4,)}  # mode: the ranks it takes
_NOT_HERE = ("nearest-exact", "bicubic", "trilinear", "area")  # PyTorch's modes LeanPass lacks


def _spatial(value, dim: int, what: str, op: str, kind) -> list:
    """``size`` or ``scale_factor``: one number for every spatial axis, or a sequence of ``dim``."""
    values = list(value) if isinstance(value, (list, tuple)) else [value] * dim
    if len(values) != dim:
        raise ValueError(f"{op}: {what} {tuple(values)} gives {len(values)} spatial axes but the input has {dim}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, kind):
            raise TypeError(f"{op}: {what} must be {'integers' if kind is numbers.Integral else 'numbers'}, "
                            f"got {value!r}")
    return [int(v) if kind is numbers.Integral else float(v) for v in values]


# The index and weight tables are a few numbers per output position, computed on the
# host (the cpu backend's namespace) in PyTorch's precision and moved to the input's device.
def _host():
    return get_backend("cpu").xp


def _number(xp, value, dtype):
    """``value`` as a 0-d array of ``dtype``: a number rounded as PyTorch's kernels round it."""
    return xp.asarray(value, dtype=dtype)


def _nearest_index(n: int, out: int, scale, dtype, dim: int):
    """PyTorch's nearest-neighbour indices, ``min(floor(s * i), n - 1)`` with ``s = 1 /
    scale_factor`` when one is used, else ``n / out``, as its CPU kernels compute
    them: for 2-D inputs (``nearest_idx``) in float32, with ``out == n`` the identity
    and ``out == 2 n`` a halving; for 1-D ones (its ``HelperInterpNearest``) the
    product in the input's float dtype, the floor in float32, no shortcuts.
    (PyTorch's 1-D backward uses the 2-D rule, so where the two differ -- ``n = 5``,
    ``scale_factor=1.128`` -- its gradient is not its forward's; LeanPass's is.)"""
    xp = _host()
    f32 = xp.float32
    i = xp.arange(out, dtype=xp.int64)
    if dim == 1:
        s = _number(xp, 1.0 / scale, dtype) if scale else _number(xp, n, dtype) / _number(xp, out, dtype)
        real = xp.astype(s * xp.astype(i, dtype), f32)
    else:
        if out == n:
            return i
        if out == 2 * n:
            return i // 2
        s = _number(xp, 1.0 / scale, f32) if scale else _number(xp, n, f32) / _number(xp, out, f32)
        real = xp.astype(i, f32) * s
    return xp.minimum(xp.astype(xp.floor(real), xp.int64), n - 1)


def _linear_weights(n: int, out: int, scale, align_corners: bool, dtype):
    """PyTorch's ``compute_source_index_and_lambda`` in ``dtype`` (its opmath type):
    ``(i0, i1, l0, l1)``, the output at ``j`` being ``l0 * x[i0] + l1 * x[i1]``."""
    xp = _host()
    j = xp.arange(out, dtype=xp.int64)
    if out == n:
        return j, j, xp.ones(out, dtype=dtype), xp.zeros(out, dtype=dtype)
    one, half, zero = (_number(xp, v, dtype) for v in (1, 0.5, 0))
    if align_corners:
        ratio = _number(xp, n - 1, dtype) / _number(xp, out - 1, dtype) if out > 1 else zero
        real = ratio * xp.astype(j, dtype)
    else:
        ratio = _number(xp, 1.0 / scale, dtype) if scale else _number(xp, n, dtype) / _number(xp, out, dtype)
        real = xp.maximum(ratio * (xp.astype(j, dtype) + half) - half, zero)
    i0 = xp.minimum(xp.astype(xp.floor(real), xp.int64), n - 1)
    l1 = xp.astype(xp.clip(real - xp.astype(i0, dtype), zero, one), dtype)
    i1 = i0 + xp.astype(i0 < n - 1, xp.int64)
    return i0, i1, xp.astype(one - l1, dtype), l1


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",  # noqa: A002 - PyTorch's
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """PyTorch's ``F.interpolate`` for ``(N, C, L)`` and ``(N, C, H, W)`` inputs: to
    ``size`` (an int, or one per spatial axis) or by ``scale_factor`` (a number, or
    one per axis; the output size is ``floor(size * scale_factor)``), by ``mode``
    "nearest" (3-D or 4-D), "linear" (3-D) or "bilinear" (4-D), ``align_corners``
    (linear modes only; default False) as PyTorch's. Differentiable."""
    op = "interpolate"
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}: expected a Tensor as input, got {type(input).__name__}; "
                        "wrap it with leanpass.Tensor(...)")
    if not isinstance(mode, str) or mode not in _MODES:
        more = " (LeanPass has not got it)" if mode in _NOT_HERE else ""
        raise ValueError(f"{op}: unknown mode {mode!r}{more}; one of {', '.join(map(repr, _MODES))}")
    if input.ndim not in _MODES[mode]:
        ranks = " or ".join(f"{r}-D" for r in _MODES[mode])
        raise ValueError(f"{op}: mode {mode!r} needs a {ranks} input ((N, C, L) or (N, C, H, W)), got shape "
                         f"{input.shape}")
    linear = mode != "nearest"
    if not linear and align_corners is not None:
        raise ValueError(f"{op}: align_corners can only be set with the interpolating modes linear and bilinear, "
                         f"not {mode!r}")
    if align_corners is None:
        align_corners = False
    if not isinstance(align_corners, bool):
        raise TypeError(f"{op}: align_corners must be a bool, got {align_corners!r}")
    if antialias:
        raise NotImplementedError(f"{op}: antialias=True is not supported")
    dim = input.ndim - 2
    in_sizes = list(input.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError(f"{op}: give size or scale_factor, not both")
    if size is None and scale_factor is None:
        raise ValueError(f"{op}: give size or scale_factor")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError(f"{op}: recompute_scale_factor is not meaningful with an explicit size")
        out_sizes = _spatial(size, dim, "size", op, numbers.Integral)
        scales = [None] * dim
    else:
        scales = _spatial(scale_factor, dim, "scale_factor", op, numbers.Real)
        if any(not (s > 0 and math.isfinite(s)) for s in scales):
            raise ValueError(f"{op}: scale_factor must be positive and finite, got {scale_factor!r}")
        out_sizes = [int(n * s) for n, s in zip(in_sizes, scales)]
        if recompute_scale_factor:
            scales = [None] * dim
    if any(o < 1 for o in out_sizes) or any(n < 1 for n in in_sizes):
        raise ValueError(f"{op}: input and output sizes must be positive, got input of shape {input.shape} and "
                         f"output size {tuple(out_sizes)}")
    x = floating(input) if linear else input
    if linear and x.dtype.kind != "f":
        raise TypeError(f"{op}: mode {mode!r} needs real floating input, got dtype {x.dtype}")
    host = _host()
    dtype = getattr(host, str(x.dtype)) if linear else None
    index_dtype = getattr(host, str(x.dtype)) if x.dtype.kind == "f" else host.float32
    for k in range(dim - 1, -1, -1):  # the last axis first, as PyTorch's kernels mix the neighbours
        axis = 2 + k
        n, out, scale = in_sizes[k], out_sizes[k], scales[k]
        tail = (1,) * (dim - 1 - k)  # the weights broadcast along the axes after this one
        if not linear:
            x = take(x, asarray(_nearest_index(n, out, scale, index_dtype, dim), device=x.device), axis=axis)
            continue
        i0, i1, l0, l1 = _linear_weights(n, out, scale, align_corners, dtype)
        if out == n:
            continue
        w0 = asarray(host.reshape(l0, (out,) + tail), device=x.device)
        w1 = asarray(host.reshape(l1, (out,) + tail), device=x.device)
        near, far = (take(x, asarray(i, device=x.device), axis=axis) for i in (i0, i1))
        x = near * w0 + far * w1
    return x if x is not input else x * 1 if x.requires_grad else asarray(x, copy=True)


class Upsample(Module):
    """:func:`interpolate` as a module, as ``torch.nn.Upsample``: ``size`` or
    ``scale_factor`` (stored as floats), ``mode`` "nearest", "linear" or
    "bilinear", ``align_corners``."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None):
        if not isinstance(mode, str) or mode not in _MODES:
            raise ValueError(f"Upsample: unknown mode {mode!r}; one of {', '.join(map(repr, _MODES))}")
        if size is not None and scale_factor is not None:
            raise ValueError("Upsample: give size or scale_factor, not both")
        if size is None and scale_factor is None:
            raise ValueError("Upsample: give size or scale_factor")
        self.size = size
        if isinstance(scale_factor, (list, tuple)):
            self.scale_factor = tuple(float(s) for s in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, x):
        _check_input(x, self)
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                           recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return f"{info}, mode={self.mode!r}"
