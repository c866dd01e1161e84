"""LeanPass: a small, fast, readable automatic differentiation library.

``Tensor`` holds an array of any array-API library (NumPy on ``cpu``, CuPy on
``cuda``, ``array_api_strict`` on ``strict``) and records the operations made on
it; ``backward()`` computes gradients.
"""

from . import backends, nn, optim
from .autograd import enable_grad, is_grad_enabled, no_grad
from .backends import (
    available_devices,
    get_default_device,
    get_default_dtype,
    manual_seed,
    set_default_device,
    set_default_dtype,
)
from .gradcheck import GradcheckError, gradcheck
from .serialization import load, save
from .tensor import Tensor, as_tensor

__version__ = "0.2.0"

__all__ = [
    "Tensor",
    "as_tensor",
    "backends",
    "nn",
    "optim",
    "save",
    "load",
    "no_grad",
    "enable_grad",
    "is_grad_enabled",
    "gradcheck",
    "GradcheckError",
    "available_devices",
    "set_default_device",
    "get_default_device",
    "set_default_dtype",
    "get_default_dtype",
    "manual_seed",
    "__version__",
]
