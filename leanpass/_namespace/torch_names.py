"""PyTorch's names where a PyTorch user reaches first (beyond the standard):
``lp.tensor``, ``rand``, ``randn``, ``randint``, ``randperm``, ``cat``, ``topk``,
``allclose``, and the methods ``t.uniform_()``, ``t.normal_()``, ``t.repeat(*sizes)``,
``t.topk()``, ``t.norm()``, with PyTorch's signatures and values.

Random numbers are drawn on the host, from the generator :func:`leanpass.manual_seed`
seeds (the one parameter initialisation draws from), then moved to the device: one
seed gives the same numbers on every device (PyTorch's CPU and CUDA streams differ),
at the cost of a copy to the device. ``lp.rand(n)`` and ``lp.empty(n).uniform_()``
draw the same numbers from the same seed, as ``lp.randn(n)`` and ``normal_()`` do.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .._checks import broadcast_shapes, integer, is_bool, normalize_axis
from .._dtypes import as_dtype, iinfo, promote
from .._graph.trace import draw, note
from .._indexing import setitem
from .._node import leaf
from ..backends import get_backend, get_default_dtype, host_rng
from ..tensor import Tensor, apply, as_tensor
from ._util import asarray_like, flag, pair, python_number
from .creation import _shape, asarray, requiring_grad, sizes
from .indexing import take_along_axis
from .manipulation import concat, tile
from .sorting import argsort

__all__ = ["tensor", "rand", "randn", "randint", "randperm", "cat", "topk", "allclose"]


def tensor(data, *, dtype=None, device=None, requires_grad=False):
    """A new leaf tensor holding a copy of ``data``, as ``torch.tensor``: the dtype as
    :func:`leanpass.asarray` infers it (Python ints give int64, floats the default
    float dtype, bools bool; arrays keep theirs) unless ``dtype`` is given; a Tensor
    given in is copied outside its graph. ``requires_grad=True`` needs a floating dtype
    (``ValueError`` otherwise)."""
    if isinstance(data, Tensor):
        data = data.detach()
    t = asarray(data, dtype=dtype, device=device, copy=True)
    if t._node is not None:  # a list of tensors, stacked: its values, outside the graph
        t = t.detach()
    return requiring_grad(t, requires_grad, "tensor")


# ``leanpass.tensor`` is this function (``lp.tensor([1, 2])``, as ``torch.tensor``); the
# module leanpass/tensor.py keeps its place in sys.modules, so ``import leanpass.tensor``
# and ``from leanpass.tensor import apply`` work as before. The module's public names are
# attributes of the function too: ``lp.tensor.apply``, ``lp.tensor.Tensor`` still read.
tensor.Tensor, tensor.as_tensor, tensor.apply = Tensor, as_tensor, apply


# ---- random numbers ---------------------------------------------------------------------------


def _float_dtype(dtype, op):
    """The dtype name of a draw of real or complex floats (default: the default float)."""
    name = as_dtype(dtype, op).name if dtype is not None else get_default_dtype()
    if not name.startswith(("float", "complex")):
        raise TypeError(f"{op}: draws floating-point numbers; dtype {name} is not a floating-point dtype "
                        "(randint draws integers)")
    return name


def _draw(kind, shape, name):
    """Host numbers of ``shape`` in dtype ``name``: U[0, 1) or N(0, 1); a complex dtype
    takes both parts so (N: each of variance 1/2, so that E|z|^2 = 1, as PyTorch)."""
    rng = host_rng()
    real = {"complex64": "float32", "complex128": "float64"}.get(name, name)
    full = shape + (2,) if real != name else shape
    if kind == "uniform":
        host = rng.random(full, dtype=real)
    else:
        host = rng.standard_normal(full, dtype=real)
        if real != name:
            host *= host.dtype.type(math.sqrt(0.5))
    if real != name:
        host = host.view(name)[..., 0]
    return host


def _drawn(backend, kind, shape, name, op, shift=0.0, scale=1.0):
    """``_draw``'s numbers on ``backend``'s device, ``shift + scale * number`` in dtype
    ``name`` where asked."""
    host = _draw(kind, shape, name)
    if (shift, scale) != (0.0, 1.0):
        host = host * host.dtype.type(scale) + host.dtype.type(shift)  # in the tensor's dtype
    return backend.from_host(host, name, op)


def _integers(backend, low, high, shape, name, op):
    """``randint``'s numbers on ``backend``'s device."""
    if name.startswith(("int", "uint")):
        host = host_rng().integers(low, high, size=shape, dtype=name)
    else:
        host = host_rng().integers(low, high, size=shape, dtype="int64" if high <= 2**63 else "uint64").astype(name)
    return backend.from_host(host, name, op)


def _permutation(backend, n, name, op):
    """``randperm``'s numbers on ``backend``'s device."""
    return backend.from_host(host_rng().permutation(n).astype(name), name, op)


def _made_drawn(fn, *params, device, requires_grad, op):
    """A new tensor of ``fn(backend, *params)``'s numbers: a draw, which a compiled call
    makes again at each replay, from the same generator in eager's order."""
    backend = get_backend(device)
    return requiring_grad(leaf(draw(fn, backend, *params), backend), requires_grad, op)


def rand(*size, dtype=None, device=None, requires_grad=False):
    """Numbers drawn uniformly from ``[0, 1)``: ``rand(2, 3)`` or ``rand((2, 3))``, as
    ``torch.rand`` (seeded by :func:`leanpass.manual_seed`; drawn on the host)."""
    if not size:
        raise TypeError("rand: give the size, rand(2, 3) or rand((2, 3))")
    shape = sizes(size[0], size[1:], "rand")
    name = _float_dtype(dtype, "rand")
    return _made_drawn(_drawn, "uniform", shape, name, "rand", device=device, requires_grad=requires_grad, op="rand")


def randn(*size, dtype=None, device=None, requires_grad=False):
    """Numbers drawn from the standard normal distribution: ``randn(2, 3)`` or
    ``randn((2, 3))``, as ``torch.randn`` (seeded by :func:`leanpass.manual_seed`)."""
    if not size:
        raise TypeError("randn: give the size, randn(2, 3) or randn((2, 3))")
    shape = sizes(size[0], size[1:], "randn")
    name = _float_dtype(dtype, "randn")
    return _made_drawn(_drawn, "normal", shape, name, "randn", device=device, requires_grad=requires_grad,
                       op="randn")


def _bound(value, op, what):
    value = python_number(value)
    if isinstance(value, float) and value.is_integer():  # torch takes whole floats
        value = int(value)
    if is_bool(value) or not isinstance(value, int):
        raise TypeError(f"{op}: {what} must be an integer, got {value!r}")
    return value


def randint(low=0, high=None, size=None, *, dtype=None, device=None, requires_grad=False):
    """Integers drawn uniformly from ``[low, high)``, as ``torch.randint``:
    ``randint(high, size)`` or ``randint(low, high, size)`` with ``size`` a tuple
    (``size=`` by name too). int64 unless ``dtype`` says otherwise (a float dtype
    holds the integers as floats)."""
    if size is None and isinstance(high, (tuple, list)):  # randint(high, size)
        low, high, size = 0, low, high
    elif high is None:  # randint(high, size=...)
        low, high = 0, low
    if size is None:
        raise TypeError("randint: give the size as a tuple: randint(high, (n,)) or randint(low, high, (n,))")
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"randint: size must be a tuple of integers (randint(low, high, (n,))), got {size!r}")
    shape = _shape(tuple(size), "randint")
    low, high = _bound(low, "randint", "low"), _bound(high, "randint", "high")
    if low >= high:
        raise ValueError(f"randint: low must be less than high, got low={low} and high={high}")
    name = as_dtype(dtype, "randint").name if dtype is not None else "int64"
    if name == "bool" or name.startswith("complex"):
        raise TypeError(f"randint: draws integers into an integer or real floating dtype, not {name}")
    if name.startswith(("int", "uint")):
        info = iinfo(name)
        if low < info.min or high - 1 > info.max:
            raise ValueError(f"randint: [low, high) = [{low}, {high}) does not fit dtype {name} "
                             f"([{info.min}, {info.max}])")
    return _made_drawn(_integers, low, high, shape, name, "randint", device=device, requires_grad=requires_grad,
                       op="randint")


def randperm(n, *, dtype=None, device=None, requires_grad=False):
    """A random permutation of ``0 .. n-1``, as ``torch.randperm`` (int64 unless
    ``dtype`` says otherwise)."""
    n = integer(n, "randperm", "n", minimum=0, kind="a non-negative integer")
    name = as_dtype(dtype, "randperm").name if dtype is not None else "int64"
    if name == "bool" or name.startswith("complex"):
        raise TypeError(f"randperm: the permutation needs an integer or real floating dtype, not {name}")
    if name.startswith(("int", "uint")) and n - 1 > iinfo(name).max:
        raise ValueError(f"randperm: n={n} does not fit dtype {name}")
    return _made_drawn(_permutation, n, name, "randperm", device=device, requires_grad=requires_grad,
                       op="randperm")


def _fill_with(self, kind, a, b, op):
    """``self`` filled in place with ``a + b * draw`` (``t[...] = values``, so the rules
    of in-place changes hold: a leaf that requires grad only under ``no_grad``)."""
    if not isinstance(self, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(self).__name__}")
    name = self.dtype.name
    if not name.startswith("float"):
        raise TypeError(f"{op}: needs a real floating-point tensor, got dtype {name}")
    backend = self._backend
    values = leaf(draw(_drawn, backend, kind, self.shape, name, op, a, b), backend)
    with backend.context():  # as t[...] = v: on the tensor's GPU where there are several
        setitem(self, ..., values, name=op)
    return self


def _real(value, op, what):
    value = python_number(value)
    if is_bool(value) or not isinstance(value, (int, float)):
        raise TypeError(f"{op}: {what} must be a real number, got {value!r}")
    return float(value)


def uniform_(self, a=0.0, b=1.0):
    """Fill with numbers drawn uniformly from ``[a, b)``, in place (PyTorch's
    ``t.uniform_(from, to)``); returns ``t``. Seeded by :func:`leanpass.manual_seed`."""
    a, b = _real(a, "uniform_", "a"), _real(b, "uniform_", "b")
    if not a <= b:
        raise ValueError(f"uniform_: needs a <= b, got a={a} and b={b}")
    return _fill_with(self, "uniform", a, b - a, "uniform_")


def normal_(self, mean=0.0, std=1.0):
    """Fill with numbers drawn from N(mean, std**2), in place (PyTorch's
    ``t.normal_()``); returns ``t``. Seeded by :func:`leanpass.manual_seed`."""
    mean, std = _real(mean, "normal_", "mean"), _real(std, "normal_", "std")
    if not std >= 0:
        raise ValueError(f"normal_: needs std >= 0, got {std}")
    return _fill_with(self, "normal", mean, std, "normal_")


# ---- joining, selecting, comparing ------------------------------------------------------------


def cat(tensors, dim=0):
    """PyTorch's name for :func:`leanpass.concat`: ``cat(tensors, dim=0)`` joins the
    tensors along the existing axis ``dim``."""
    if dim is None:
        raise TypeError("cat: dim must be an integer (concat(tensors, axis=None) joins flattened tensors)")
    return concat(tensors, axis=dim)


class TopkResult(NamedTuple):
    """``topk``'s result, as PyTorch's: the values and the indices they came from."""

    values: Tensor
    indices: Tensor


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - PyTorch's names
    """The ``k`` largest (``largest=False``: smallest) elements along ``dim``, as
    ``torch.topk``: ``(values, indices)``, in order (largest first, or smallest first;
    ``sorted=False`` gives them in that order too). NaN counts as the largest value.
    Equal values come in their order along ``dim``. The gradient flows to the
    elements picked."""
    x = asarray_like(input, "topk")
    if x.dtype.kind == "c":
        raise TypeError(f"topk: complex numbers have no order (dtype {x.dtype})")
    k = integer(k, "topk", "k")
    largest = flag("topk", "largest", largest)
    flag("topk", "sorted", sorted)  # checked; the result is sorted either way
    zero_d = x.ndim == 0
    axis = normalize_axis(dim, max(x.ndim, 1), "topk")
    if zero_d:
        x = x.reshape((1,))
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ValueError(f"topk: k={k} is out of range for dim {dim} of size {n} (tensor of shape "
                         f"{() if zero_d else x.shape})")
    order = argsort(x, axis=axis, descending=largest)
    indices = order[(slice(None),) * axis + (slice(0, k),)]
    values = take_along_axis(x, indices, axis=axis)
    if zero_d:
        values, indices = values.reshape(()), indices.reshape(())
    return TopkResult(values, indices)


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002 - PyTorch's names
    """Whether ``|input - other| <= atol + rtol * |other|`` everywhere (broadcasting),
    as ``torch.allclose`` and ``numpy.allclose``: a Python bool. Infinities are close
    to the same infinity; NaNs to NaNs only with ``equal_nan``. Host data beside a
    Tensor goes to its device; tensors of different dtypes compare in their promoted
    dtype (PyTorch refuses them)."""
    a, b = pair("allclose", input, other)
    broadcast_shapes("allclose", a.shape, b.shape)
    rtol, atol = _real(rtol, "allclose", "rtol"), _real(atol, "allclose", "atol")
    equal_nan = flag("allclose", "equal_nan", equal_nan)
    try:
        name = promote(a.dtype, b.dtype, op="allclose").name
    except TypeError:  # kinds the standard does not mix: compare as floats
        name = "complex128" if "c" in (a.dtype.kind, b.dtype.kind) else "float64"
    if name == "bool" or name.startswith(("int", "uint")):
        name = "float64"  # no wrap-around in |a - b|
    backend = a._backend
    xp = backend.xp
    with backend.context():
        x, y = (xp.astype(t._data, backend.dtype(name)) if t.dtype.name != name else t._data for t in (a, b))
        close = x == y  # the same infinities too
        nan_x, nan_y = xp.isnan(x), xp.isnan(y)
        finite = xp.isfinite(x) & xp.isfinite(y)
        x, y = xp.where(finite, x, 0), xp.where(finite, y, 0)  # inf - inf: no NaN, no warning
        close = close | (finite & (xp.abs(x - y) <= atol + rtol * xp.abs(y)))
        if equal_nan:
            close = close | (nan_x & nan_y)
        note("allclose: a bool read on the host")  # (lp.compile: a replay would return the trace's)
        return int(xp.all(close)) == 1


# ---- Tensor methods ---------------------------------------------------------------------------


def _repeat(self, *sizes, axis=None):
    """PyTorch's ``t.repeat(*sizes)``: the tensor tiled ``sizes[i]`` times along each
    axis (``lp.tile``); ``sizes`` has at least one entry per axis (more add leading
    axes). NumPy's element-wise ``repeat`` is :func:`leanpass.repeat`."""
    if axis is not None:
        raise TypeError("repeat: t.repeat(*sizes) is PyTorch's, which tiles the tensor (lp.tile); NumPy's "
                        "t.repeat(repeats, axis=...), which repeats each element, is lp.repeat(t, repeats, axis=...)")
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    if len(sizes) < self.ndim:
        raise ValueError(f"repeat: {len(sizes)} sizes given for a tensor of shape {self.shape}; give at least "
                         f"{self.ndim}, one per axis (PyTorch's t.repeat tiles; lp.repeat repeats elements)")
    return tile(self, tuple(sizes))


def _topk(self, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    return topk(self, k, dim, largest, sorted)


def _norm(self, p="fro", dim=None, keepdim=False):
    """PyTorch's ``t.norm(p="fro", dim=None, keepdim=False)``: a number ``p`` is the
    vector ``p``-norm over ``dim`` (every element by default, as if flattened); ``"fro"``
    the 2-norm over ``dim`` (at most two axes); ``"nuc"`` the nuclear norm of the
    matrices of the two axes ``dim`` (a 2-D tensor's by default)."""
    from .. import linalg  # the norms live with the linalg extension, which imports this layer

    dims = None if dim is None else (dim,) if not isinstance(dim, (tuple, list)) else tuple(dim)
    keepdim = flag("norm", "keepdim", keepdim)
    p = python_number(p)
    if isinstance(p, str):
        if p == "fro" and (dims is None or len(dims) <= 2):
            return linalg.vector_norm(self, axis=dims, keepdims=keepdim, ord=2)
        if p not in ("fro", "nuc"):
            raise ValueError(f"norm: p must be a number, 'fro' or 'nuc', got {p!r}")
        return linalg.norm(self, ord=p, dim=tuple(range(self.ndim)) if dims is None else dims, keepdim=keepdim)
    return linalg.vector_norm(self, axis=dims, keepdims=keepdim, ord=2 if p is None else p)


# Tensor methods of this module: {method name: function}.
METHODS = {"repeat": _repeat, "topk": _topk, "norm": _norm, "uniform_": uniform_, "normal_": normal_}
for _name in ("repeat", "topk", "norm"):
    METHODS[_name].__name__ = METHODS[_name].__qualname__ = _name
del _name
_topk.__doc__ = "``lp.topk(t, k, dim, largest, sorted)``: the ``(values, indices)`` of the ``k`` largest."
