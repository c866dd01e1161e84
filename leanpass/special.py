"""``leanpass.special``: ``torch.special``'s functions, differentiable, with PyTorch's
gradients (twice, and more: every backward rule is itself made of LeanPass functions).

- ``erf``, ``erfc``, ``erfinv``, ``ndtr``, ``log_ndtr``, ``gammaln``, ``digamma``,
  ``polygamma``, ``i0``, ``i1``: from the device's library (``scipy.special`` on
  ``cpu``, ``cupyx.scipy.special`` on ``cuda``). On a device whose library has no
  special functions (``strict``) they raise ``NotImplementedError`` naming the
  function and the device.
- ``expit``, ``logit``, ``xlogy``, ``xlog1py``, ``sinc``: written with the array API
  standard alone, so they run on every device.

Each takes a Tensor (or an array of a device's library); ``xlogy`` and ``xlog1py`` also
take a Python number for either argument (not both), as ``torch.special`` does, and
broadcast their two arguments. Integer and bool tensors are converted to the default
floating dtype first (PyTorch's rule); complex tensors are refused (``TypeError``).
float32 stays float32.

SciPy's array API dispatch (``SCIPY_ARRAY_API=1``) looks a function up in the array's
namespace: ``scipy.special.erf(t)`` on a Tensor then calls this module's ``erf``, and
is differentiable too.
"""

from __future__ import annotations

import numbers

from . import ops
from ._dtypes import DTYPES, dtype_name
from ._namespace._util import asarray_like, python_number, tensors
from ._node import as_tensor, run1, run2
from .backends import get_default_dtype

__all__ = [
    "erf", "erfc", "erfinv", "expit", "logit", "gammaln", "digamma", "psi", "polygamma", "xlogy", "xlog1py",
    "ndtr", "log_ndtr", "i0", "i1", "sinc",
]


def _input(x, name):
    """``x`` as a real floating-point Tensor (integers and bools in the default float dtype)."""
    x = asarray_like(x, f"special.{name}")
    kind = DTYPES[dtype_name(x._data.dtype)].kind
    if kind == "c":
        raise TypeError(f"special.{name}: complex tensors are not supported (got dtype {x.dtype})")
    if kind != "f":
        x = x.astype(get_default_dtype())
    return x


def _unary(op, name):
    def function(x, /):
        return run1(op, _input(x, name))

    function.__name__ = function.__qualname__ = name
    function.__doc__ = op.__doc__
    return function


erf = _unary(ops.special.erf, "erf")
erfc = _unary(ops.special.erfc, "erfc")
erfinv = _unary(ops.special.erfinv, "erfinv")
ndtr = _unary(ops.special.ndtr, "ndtr")
log_ndtr = _unary(ops.special.log_ndtr, "log_ndtr")
gammaln = _unary(ops.special.gammaln, "gammaln")
digamma = _unary(ops.special.digamma, "digamma")
psi = digamma  # torch.special.psi, scipy.special.psi: digamma's other name
i0 = _unary(ops.special.i0, "i0")
i1 = _unary(ops.special.i1, "i1")
sinc = _unary(ops.special.sinc, "sinc")


def expit(x, /):
    """The logistic sigmoid, ``1 / (1 + exp(-x))`` (``x.sigmoid()``), without overflow."""
    return run1(ops.nn.sigmoid, _input(x, "expit"))


def logit(x, /, eps=None):
    """``log(x / (1 - x))``, the inverse of ``expit``: -inf at 0, inf at 1, nan outside
    ``[0, 1]``. With ``eps`` (a number), ``x`` is clamped to ``[eps, 1 - eps]`` first,
    and the gradient is 0 where it was clamped (PyTorch's ``logit(x, eps)``)."""
    x = _input(x, "logit")
    if eps is not None:
        eps = python_number(eps)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)):
            raise TypeError(f"special.logit: eps must be a real number or None, got {type(eps).__name__}")
        eps = float(eps)
    return run1(ops.special.logit, x, eps)


def polygamma(n, x, /):
    """The ``n``-th derivative of ``digamma`` (``polygamma(0, x)`` is ``digamma(x)``);
    ``n`` a Python integer >= 0."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"special.polygamma: n must be an integer, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"special.polygamma: n must be >= 0, got {n}")
    return run1(ops.special.polygamma, _input(x, "polygamma"), int(n))


def _is_number(value) -> bool:
    return type(python_number(value)) in (bool, int, float)


def _operands(name, x, y):
    """``x, y`` as Tensors on one device; a Python number becomes a 0-d tensor of the
    other's dtype and device (as ``torch.special.xlogy(2.0, t)``)."""
    if _is_number(x) and _is_number(y):
        raise TypeError(f"special.{name}: at least one argument must be a Tensor, got two Python numbers")
    if _is_number(x):
        y = _input(y, name)
        return as_tensor(float(python_number(x)), device=y.device, dtype=y.dtype), y
    if _is_number(y):
        x = _input(x, name)
        return x, as_tensor(float(python_number(y)), device=x.device, dtype=x.dtype)
    return tensors(f"special.{name}", _input(x, name), _input(y, name))


def xlogy(x, y, /):
    """``x * log(y)``, and 0 where ``x == 0`` (unless ``y`` is nan); either argument may
    be a Python number. Gradients (PyTorch's): ``log(y)`` for ``x`` (0 where ``x == 0``
    and ``y <= 0``), ``x / y`` for ``y``."""
    return run2(ops.special.xlogy, *_operands("xlogy", x, y))


def xlog1py(x, y, /):
    """``x * log1p(y)``, and 0 where ``x == 0`` (unless ``y`` is nan); either argument
    may be a Python number. Gradients (PyTorch's): ``log1p(y)`` for ``x`` (0 where
    ``x == 0`` and ``y <= -1``), ``x / (1 + y)`` for ``y``."""
    return run2(ops.special.xlog1py, *_operands("xlog1py", x, y))
