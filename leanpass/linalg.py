"""``leanpass.linalg``: the array API standard's linear algebra extension (2024.12),
differentiable, on every device (NumPy's ``linalg`` on ``cpu``, CuPy's on ``cuda``,
``array_api_strict.linalg`` on ``strict``).

``lp.linalg.inv(a)``, ``lp.linalg.solve(a, b)``, ``lp.linalg.eigh(a)``... take
Tensors and return Tensors; decompositions with several results return named
tuples with the standard's field names (``EighResult(eigenvalues, eigenvectors)``,
``QRResult(Q, R)``, ``SlogdetResult(sign, logabsdet)``, ``SVDResult(U, S, Vh)``).

Gradients follow PyTorch (only real floating-point tensors carry them):

- ``inv``, ``solve`` (both operands, batched, a 1-D right-hand side too), ``det``
  (its cofactor matrix, right for singular matrices too), ``slogdet`` (through
  ``logabsdet``; ``sign`` passes none), ``pinv`` (matrices of constant rank),
  ``cholesky``, ``trace``, ``diagonal``, ``cross``, ``outer``, ``matmul``,
  ``tensordot``, ``vecdot``, ``vector_norm`` (every ``ord``; none for ``ord=0``,
  shared among ties for ``ord=+-inf``).
- ``eigh``/``eigvalsh`` and ``svd``/``svdvals`` for distinct eigenvalues /
  singular values (the gradient of ``eigh`` is symmetric, as PyTorch's: give it a
  symmetric input such as ``(a + a.mT) / 2``); ``svd(full_matrices=True)`` gives the
  singular vectors past ``min(M, N)`` no gradient. ``qr`` with ``mode="reduced"``
  (and ``"complete"`` when ``M <= N``).
- ``matrix_norm`` and ``matrix_power`` are composites of the functions above (the
  2-norms and the nuclear norm through ``svdvals``; negative powers through ``inv``).
- ``matrix_rank`` returns int64 and carries no gradient.
"""

from __future__ import annotations

import math
import operator
from typing import NamedTuple

from . import ops, tensor  # tensor before the graph layer (_node), which imports it
from ._checks import broadcast_shapes, integer, is_bool, normalize_axes, normalize_axis
from ._dtypes import as_dtype
from ._graph.modes import is_grad_enabled
from ._namespace import elementwise, statistical
from ._namespace._records import attach, methods_of, recorded
from ._namespace._util import flag, pair, python_number, tensors
from ._namespace.linalg import call as _apply
from ._namespace.linalg import matrix_transpose, tensordot, vecdot
from ._namespace.manipulation import moveaxis, reshape
from ._namespace.operators import matmul
from ._node import run, several

Tensor = tensor.Tensor

__all__ = [
    "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm",
    "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve", "svd",
    "svdvals", "tensordot", "trace", "vecdot", "vector_norm", "norm",
]


class EighResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


class QRResult(NamedTuple):
    Q: Tensor
    R: Tensor


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


# ---- checks and application ------------------------------------------------------------------


def _recording(*xs) -> bool:
    return is_grad_enabled() and any(t._rg for t in xs)


def _floating(x, name):
    if not x.dtype.is_floating:
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {x.dtype} (shape {x.shape}); "
                        "convert it first, e.g. x.astype(leanpass.float64)")


def _numeric(x, name):
    if x.dtype.kind == "b":
        raise TypeError(f"{name}: expected a numeric tensor, got dtype bool (shape {x.shape})")


def _matrix(x, name, *, square=False, floating=True):
    """``x`` as a Tensor holding a matrix or a stack of matrices."""
    (x,) = tensors(name, x)
    if x.ndim < 2:
        raise ValueError(f"{name}: x must be a matrix or a stack of matrices (at least 2 dimensions), "
                         f"got shape {x.shape}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{name}: x must be a square matrix or a stack of square matrices, got shape {x.shape}")
    if floating:
        _floating(x, name)
    return x


def _several(name, op, x, *params):
    """The outputs of the decomposition ``op`` of ``x`` (:func:`leanpass._node.several`),
    with a bad matrix's error naming ``name``."""
    try:
        return several(op, x, *params)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: {exc} (tensor of shape and dtype {x.shape} {x.dtype})") from None


def _rtol(x, rtol, name):
    """``rtol`` as a number or a Tensor on ``x``'s device (None: the library's default)."""
    if rtol is None or isinstance(rtol, Tensor):
        return rtol
    rtol = python_number(rtol)  # NumPy's scalars are numbers
    if isinstance(rtol, bool) or isinstance(rtol, complex):
        raise TypeError(f"{name}: rtol must be a real number or a tensor, got {type(rtol).__name__}")
    if isinstance(rtol, (int, float)):
        return float(rtol)
    return pair(name, x, rtol)[1]  # host data (a NumPy array) on x's device


# ---- products and parts of matrices -----------------------------------------------------------


@recorded(ops.cross, "linalg", dtype="promote", axes="last")
def cross(x1, x2, /, *, axis=-1):
    """Cross products of the 3-element vectors along ``axis`` (negative, counted from
    the end; that axis must have size 3 in both and does not broadcast, the others do)."""
    x1, x2 = pair("cross", x1, x2)
    _numeric(x1, "cross")
    _numeric(x2, "cross")
    ndim = min(x1.ndim, x2.ndim)
    if ndim == 0:
        raise ValueError(f"cross: operands must have at least one axis, got shapes {x1.shape} and {x2.shape}")
    axis = normalize_axis(axis, ndim, "cross") - ndim
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ValueError(f"cross: axis {axis} must have size 3 in both operands, got shapes {x1.shape} and "
                         f"{x2.shape}")
    broadcast_shapes("cross", x1.shape, x2.shape)
    return _apply("cross", ops.cross, [x1, x2], axis)


@recorded(ops.outer, "linalg", dtype="promote")
def outer(x1, x2, /):
    """The outer product ``x1[:, None] * x2[None, :]`` of two 1-D tensors."""
    x1, x2 = pair("outer", x1, x2)
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError(f"outer: operands must be 1-D, got shapes {x1.shape} and {x2.shape}")
    _numeric(x1, "outer")
    _numeric(x2, "outer")
    return _apply("outer", ops.outer, [x1, x2])


@recorded(ops.diagonal, "linalg")
def diagonal(x, /, *, offset=0):
    """The diagonal ``offset`` (above the main one if positive, below if negative) of
    each matrix of the last two axes: shape ``(..., size of that diagonal)``."""
    x = _matrix(x, "diagonal", floating=False)
    return _apply("diagonal", ops.diagonal, [x], integer(offset, "diagonal", "offset"))


@recorded(ops.trace, "linalg", dtype="own", methods={"trace": "*, offset=0, dtype=None"})
def trace(x, /, *, offset=0, dtype=None):
    """The sum of diagonal ``offset`` of each matrix of the last two axes. Integers sum
    in int64 (unsigned ones in uint64) unless ``dtype`` says otherwise."""
    x = _matrix(x, "trace", floating=False)
    _numeric(x, "trace")
    if dtype is None:
        name = {"i": "int64", "u": "uint64"}.get(x.dtype.kind, x.dtype.name)
    else:
        name = as_dtype(dtype, "trace").name
        if x.dtype.kind == "c" and not name.startswith("complex"):
            raise TypeError(f"trace: dtype={name} would discard the imaginary part of a {x.dtype} tensor; "
                            "take the real part first (lp.real)")
    if not name.startswith(("float", "complex")):  # an integer result never requires grad (as lp.sum's)
        x = x.detach()
    return _apply("trace", ops.trace, [x], integer(offset, "trace", "offset"), x._backend.dtype(name))


# ---- inverses, solves and determinants --------------------------------------------------------


@recorded(ops.inv, "linalg", dtype="floating")
def inv(x, /):
    """The inverse of a square matrix (or of each in a stack); ``gA = -Y^T g Y^T``.
    A singular matrix raises ``LinAlgError`` (a ``ValueError``) on every device; on
    ``cuda`` the check waits for the GPU (docs/devices.md)."""
    x = _matrix(x, "inv", square=True)
    return _apply("inv", ops.inv, [x])


@recorded(ops.solve, "linalg", dtype="promote")
def solve(x1, x2, /):
    """``X`` with ``x1 @ X == x2``: ``x1`` of shape ``(..., M, M)``; ``x2`` of shape
    ``(M,)`` (one right-hand side for every matrix; result ``(..., M)``) or
    ``(..., M, K)`` (stack shapes broadcast; result ``(..., M, K)``). A singular
    ``x1`` raises ``LinAlgError`` (a ``ValueError``) on every device, as :func:`inv`."""
    x1, x2 = pair("solve", x1, x2)
    x1 = _matrix(x1, "solve", square=True)
    _floating(x2, "solve")
    m = x1.shape[-1]
    if x2.ndim == 1:
        if x2.shape[0] != m:
            raise ValueError(f"solve: x2 of shape {x2.shape} does not match the {m}x{m} matrices of x1 "
                             f"(shape {x1.shape})")
        batch = x1.shape[:-2]
    else:
        if x2.ndim < 1 or x2.shape[-2] != m:
            raise ValueError(f"solve: x2 of shape {x2.shape} does not match the {m}x{m} matrices of x1 "
                             f"(shape {x1.shape}); give x2 of shape ({m},) or (..., {m}, K)")
        batch = broadcast_shapes("solve", x1.shape[:-2], x2.shape[:-2])
    return _apply("solve", ops.solve, [x1, x2], batch)


@recorded(ops.pinv, "linalg", dtype="floating")
def pinv(x, /, *, rtol=None):
    """The Moore-Penrose pseudo-inverse, shape ``(..., N, M)``; singular values up to
    ``rtol`` times the largest count as zero (default ``max(M, N) * eps``)."""
    x = _matrix(x, "pinv")
    return _apply("pinv", ops.pinv, [x, _rtol(x, rtol, "pinv")])


@recorded(ops.det, "linalg", dtype="floating", methods={"det": ""})
def det(x, /):
    """The determinant of each square matrix."""
    x = _matrix(x, "det", square=True)
    return _apply("det", ops.det, [x])


@recorded(ops.slogdet, "linalg", dtype="floating")
def slogdet(x, /):
    """``SlogdetResult(sign, logabsdet)``: the sign and the log of the absolute value of
    each determinant (``sign`` 0 and ``logabsdet`` -inf for singular matrices)."""
    x = _matrix(x, "slogdet", square=True)
    return SlogdetResult(*_several("slogdet", ops.slogdet, x))


@recorded(None, "linalg", dtype="floating", methods={"matrix_power": "n"})
def matrix_power(x, n, /):
    """``x`` raised to the integer power ``n`` (matrix products; ``n < 0`` inverts
    first; ``n == 0`` gives identity matrices)."""
    x = _matrix(x, "matrix_power", square=True)
    if is_bool(n):
        raise TypeError("matrix_power: n must be an integer, got bool")
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"matrix_power: n must be an integer, got {type(n).__name__}") from None
    if n == 0:
        return run(ops.identity_power, [x])
    if n < 0:
        x, n = _apply("matrix_power", ops.inv, [x]), -n  # a singular matrix: an error naming matrix_power
    result = None
    while True:  # square-and-multiply
        if n & 1:
            result = x if result is None else result @ x
        n >>= 1
        if not n:
            return elementwise.positive(result) if result is x else result  # a new tensor, as PyTorch
        x = x @ x


@recorded(ops.matrix_rank, "linalg", dtype="index")
def matrix_rank(x, /, *, rtol=None):
    """The rank of each matrix (int64): the number of singular values above ``rtol``
    times the largest (default ``max(M, N) * eps``)."""
    x = _matrix(x, "matrix_rank")
    return _apply("matrix_rank", ops.matrix_rank, [x, _rtol(x, rtol, "matrix_rank")])


# ---- decompositions ---------------------------------------------------------------------------


@recorded(ops.cholesky, "linalg", dtype="floating", methods={"cholesky": "upper=False"})
def cholesky(x, /, *, upper=False):
    """The lower Cholesky factor ``L`` of each symmetric positive-definite matrix
    (``x = L L^T``), or the upper one ``U = L^T`` when ``upper``. A matrix that is not
    positive-definite raises ``LinAlgError`` (a ``ValueError``) on every device, as :func:`inv`."""
    x = _matrix(x, "cholesky", square=True)
    return _apply("cholesky", ops.cholesky, [x], flag("cholesky", "upper", upper))


@recorded(ops.eigh, "linalg", dtype="floating")
def eigh(x, /):
    """``EighResult(eigenvalues, eigenvectors)`` of symmetric (Hermitian) matrices:
    eigenvalues in ascending order, eigenvectors in the columns."""
    x = _matrix(x, "eigh", square=True)
    return EighResult(*_several("eigh", ops.eigh, x))


@recorded(ops.eigvalsh, "linalg", dtype="floating")
def eigvalsh(x, /):
    """The eigenvalues of symmetric (Hermitian) matrices, ascending."""
    x = _matrix(x, "eigvalsh", square=True)
    return _apply("eigvalsh", ops.eigvalsh, [x], _recording(x))


@recorded(ops.qr, "linalg", dtype="floating")
def qr(x, /, *, mode="reduced"):
    """``QRResult(Q, R)``: ``Q`` with orthonormal columns, ``R`` upper triangular;
    ``mode="reduced"`` gives shapes ``(..., M, K)`` and ``(..., K, N)`` (``K = min(M, N)``),
    ``"complete"`` ``(..., M, M)`` and ``(..., M, N)``."""
    x = _matrix(x, "qr")
    if mode not in ("reduced", "complete"):
        raise ValueError(f"qr: mode must be 'reduced' or 'complete', got {mode!r}")
    return QRResult(*_several("qr", ops.qr, x, mode))


@recorded(ops.svd, "linalg", dtype="floating")
def svd(x, /, *, full_matrices=True):
    """``SVDResult(U, S, Vh)`` with ``x = U diag(S) Vh`` and ``S`` descending;
    ``full_matrices=False`` keeps only ``K = min(M, N)`` singular vectors."""
    x = _matrix(x, "svd")
    return SVDResult(*_several("svd", ops.svd, x, flag("svd", "full_matrices", full_matrices)))


@recorded(ops.svdvals, "linalg", dtype="floating")
def svdvals(x, /):
    """The singular values of each matrix, descending (shape ``(..., min(M, N))``)."""
    x = _matrix(x, "svdvals")
    return _apply("svdvals", ops.svdvals, [x], _recording(x))


# ---- norms ------------------------------------------------------------------------------------


def _real_number(ord, name):  # noqa: A002
    ord = python_number(ord)  # a library's integer or float scalar is a number, as NumPy and PyTorch take it
    if isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise TypeError(f"{name}: ord must be a real number, got {ord!r}")
    return ord


@recorded(ops.vector_norm, "linalg", dtype="floating", axes="many")
def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):  # noqa: A002 - the standard's name
    """The ``ord``-norm over ``axis`` (an int, a tuple, or None: all values):
    ``sum(abs(x) ** ord) ** (1 / ord)``; ``inf``/``-inf`` the largest/smallest
    ``abs(x)``; ``0`` the number of non-zero values."""
    (x,) = tensors("vector_norm", x)
    _floating(x, "vector_norm")
    ord = _real_number(ord, "vector_norm")
    axes = None if axis is None else normalize_axes(axis, x.ndim, "vector_norm")
    return _apply("vector_norm", ops.vector_norm, [x], axes, flag("vector_norm", "keepdims", keepdims), ord)


@recorded(None, "linalg", dtype="floating")
def matrix_norm(x, /, *, keepdims=False, ord="fro"):  # noqa: A002 - the standard's name
    """The matrix norm of each matrix: ``"fro"`` (Frobenius), ``"nuc"`` (the sum of the
    singular values), ``2``/``-2`` (the largest/smallest singular value), ``1``/``-1``
    (the largest/smallest column sum of ``abs(x)``), ``inf``/``-inf`` (row sums).
    ``keepdims`` keeps the last two axes as size 1."""
    x = _matrix(x, "matrix_norm")
    keepdims = flag("matrix_norm", "keepdims", keepdims)
    ord = python_number(ord)  # noqa: A001 - NumPy's scalars are numbers
    if isinstance(ord, str):
        valid = ord in ("fro", "nuc")
    else:
        valid = not isinstance(ord, bool) and isinstance(ord, (int, float)) and ord in (1, -1, 2, -2, math.inf,
                                                                                         -math.inf)
    if not valid:
        raise ValueError(f"matrix_norm: ord must be one of 'fro', 'nuc', 1, -1, 2, -2, inf, -inf; got {ord!r}")
    m, n = x.shape[-2:]
    if ord == "fro" or (not m * n and ord in ("nuc", 2, 1, math.inf)):  # the largest of nothing: 0, as NumPy
        return vector_norm(x, axis=(-2, -1), keepdims=keepdims)
    if (ord == -2 and not m * n) or (ord == -1 and not n) or (ord == -math.inf and not m):
        raise ValueError(f"matrix_norm: ord={ord} is the smallest of no values for matrices of shape {(m, n)} "
                         f"(tensor shape {x.shape})")
    if ord in ("nuc", 2, -2):
        s = svdvals(x)
        out = statistical.sum(s, axis=-1) if ord == "nuc" else s[..., 0] if ord == 2 else s[..., -1]
        return reshape(out, out.shape + (1, 1)) if keepdims else out
    summed, across = (-2, -1) if ord in (1, -1) else (-1, -2)  # column sums, their extremum across columns
    sums = statistical.sum(elementwise.abs(x), axis=summed, keepdims=True)
    out = (statistical.max if ord > 0 else statistical.min)(sums, axis=across, keepdims=True)
    return out if keepdims else reshape(out, x.shape[:-2])


@recorded(None, "linalg", dtype="floating")
def norm(x, /, ord=None, dim=None, keepdim=False):  # noqa: A002 - PyTorch's names
    """PyTorch's ``torch.linalg.norm``: a vector or a matrix norm, as ``ord`` and ``dim``
    say. ``dim`` an int (or one axis): :func:`vector_norm` of order ``ord`` (2 by
    default); two axes: :func:`matrix_norm` of those axes (``"fro"`` by default).
    Without ``dim``: the 2-norm of every element (``ord=None``), or, given an ``ord``,
    the vector norm of a 1-D tensor or the matrix norm of a 2-D one."""
    (x,) = tensors("linalg.norm", x)
    keepdim = flag("linalg.norm", "keepdim", keepdim)
    if dim is None:
        if ord is None:
            return vector_norm(x, keepdims=keepdim)
        if x.ndim not in (1, 2):
            raise ValueError(f"linalg.norm: with ord={ord!r} and no dim, the input must be 1-D or 2-D, got shape "
                             f"{x.shape}; give dim")
        dims = tuple(range(x.ndim))
    else:
        dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
        dims = tuple(normalize_axis(integer(a, "linalg.norm", "dim"), x.ndim, "linalg.norm") for a in dims)
    if len(dims) == 1:
        if isinstance(ord, str):
            raise ValueError(f"linalg.norm: ord={ord!r} is a matrix norm; it needs two axes in dim, got {dim!r} "
                             f"(tensor of shape {x.shape})")
        return vector_norm(x, axis=dims, keepdims=keepdim, ord=2 if ord is None else ord)
    if len(dims) != 2 or dims[0] == dims[1]:
        raise ValueError(f"linalg.norm: dim must be one axis or two different axes, got {dim!r} (tensor of shape "
                         f"{x.shape})")
    out = matrix_norm(moveaxis(x, dims, (-2, -1)), keepdims=keepdim, ord="fro" if ord is None else ord)
    return moveaxis(out, (-2, -1), dims) if keepdim else out


attach(methods_of("linalg"))  # t.det(), t.matrix_power(n), t.cholesky(), t.trace(), as PyTorch's
