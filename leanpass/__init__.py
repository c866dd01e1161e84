"""LeanPass: a small, fast, readable automatic differentiation library, and an array
API namespace whose arrays are differentiable Tensors.

``Tensor`` holds an array of any array-API library (NumPy on ``cpu``, CuPy on
``cuda``, ``array_api_strict`` on ``strict``) and records the operations made on
it; ``backward()`` computes gradients. ``leanpass`` itself is a namespace of the
Python array API standard (2024.12): ``lp.exp``, ``lp.concat``, ``lp.float32``...
so code written against ``array_namespace(x)`` runs on Tensors and differentiates.
"""

import math as _math

from . import backends, data, distributed, fft, func, linalg, nn, optim, special
from ._after_import import after_import as _after_import
from ._compile import compile  # noqa: A004 - PyTorch's name (lp.compile); Python's compile stays builtins.compile
from ._dtypes import DTYPES as _DTYPES
from ._namespace import *  # noqa: F401,F403 - the array API functions
from ._namespace import __all__ as _namespace_all
from ._namespace import __array_namespace_info__
from ._namespace.einsum import einsum
from ._namespace.torch_names import allclose, cat, rand, randint, randn, randperm, tensor, topk  # tensor: see there
from .autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from .backends import (
    available_devices,
    get_default_device,
    get_default_dtype,
    manual_seed,
    set_default_device,
    set_default_dtype,
)
from .func import grad, hessian, hvp, jacobian, jvp, value_and_grad, vjp
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .serialization import load, save
from .tensor import Tensor, as_tensor

__version__ = "0.3.0"
__array_api_version__ = "2024.12"

# The data types of the standard.
bool = _DTYPES["bool"]  # noqa: A001
int8 = _DTYPES["int8"]
int16 = _DTYPES["int16"]
int32 = _DTYPES["int32"]
int64 = _DTYPES["int64"]
uint8 = _DTYPES["uint8"]
uint16 = _DTYPES["uint16"]
uint32 = _DTYPES["uint32"]
uint64 = _DTYPES["uint64"]
float32 = _DTYPES["float32"]
float64 = _DTYPES["float64"]
complex64 = _DTYPES["complex64"]
complex128 = _DTYPES["complex128"]

# The constants of the standard.
e = _math.e
inf = _math.inf
nan = _math.nan
pi = _math.pi
newaxis = None

__all__ = [
    "Tensor",
    "as_tensor",
    "tensor",
    "rand",
    "randn",
    "randint",
    "randperm",
    "cat",
    "einsum",
    "topk",
    "allclose",
    "backends",
    "data",
    "distributed",
    "fft",
    "linalg",
    "nn",
    "optim",
    "special",
    "save",
    "load",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
    "gradcheck",
    "compile",
    "gradgradcheck",
    "grad",
    "value_and_grad",
    "vjp",
    "jvp",
    "jacobian",
    "hessian",
    "hvp",
    "func",
    "GradcheckError",
    "available_devices",
    "set_default_device",
    "get_default_device",
    "set_default_dtype",
    "get_default_dtype",
    "manual_seed",
    "__version__",
    "__array_api_version__",
    "__array_namespace_info__",
    *_DTYPES,
    "e", "inf", "nan", "pi", "newaxis",
    *_namespace_all,
]


def _define_the_einops_backend():
    from . import _einops  # noqa: F401 - einops' backend class for Tensors


# einops.rearrange & co. on Tensors (leanpass/_einops.py): its backend class is defined
# once einops is imported, now or later; einops itself is not imported here.
_after_import("einops", _define_the_einops_backend)
