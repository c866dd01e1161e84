"""The array API namespace over Tensors, one module per section of the standard.

Each function checks its arguments (Tensors on one device, axes, shapes, dtypes)
and applies an operation of :mod:`leanpass.ops`. Importing this package also
attaches the operators (:mod:`.operators`) and the named methods (:mod:`.methods`)
to :class:`leanpass.Tensor`.
"""

from . import (
    creation,
    data_types,
    elementwise,
    linalg,
    manipulation,
    methods,  # noqa: F401 - attaches the methods
    operators,
    statistical,
)
from .creation import *  # noqa: F401,F403
from .data_types import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .info import __array_namespace_info__  # noqa: F401
from .linalg import *  # noqa: F401,F403
from .manipulation import *  # noqa: F401,F403
from .statistical import *  # noqa: F401,F403

SECTIONS = {
    "creation": creation.__all__,
    "data type": data_types.__all__,
    "element-wise": elementwise.__all__,
    "linear algebra": linalg.__all__,
    "manipulation": manipulation.__all__,
    "statistical": statistical.__all__,
}

__all__ = [name for names in SECTIONS.values() for name in names] + ["__array_namespace_info__"]
del operators
