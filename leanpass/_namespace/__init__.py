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
    indexing,
    linalg,
    manipulation,
    methods,  # noqa: F401,I001 - attaches the methods (after the functions exist)
    operators,  # noqa: F401 - attaches the operators
    searching,
    sets,
    sorting,
    statistical,
    utility,
)
from .creation import *  # noqa: F401,F403
from .data_types import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .info import __array_namespace_info__  # noqa: F401
from .linalg import *  # noqa: F401,F403
from .manipulation import *  # noqa: F401,F403
from .searching import *  # noqa: F401,F403
from .sets import *  # noqa: F401,F403
from .sorting import *  # noqa: F401,F403
from .statistical import *  # noqa: F401,F403
from .utility import *  # noqa: F401,F403

# The standard's sections, in its order: the docs' table and the tests read this.
SECTIONS = {
    "creation": creation.__all__,
    "data type": data_types.__all__,
    "element-wise": elementwise.__all__,
    "indexing": indexing.__all__,
    "linear algebra": linalg.__all__,
    "manipulation": manipulation.__all__,
    "searching": searching.__all__,
    "set": sets.__all__,
    "sorting": sorting.__all__,
    "statistical": statistical.__all__,
    "utility": utility.__all__,
}
MODULES = (creation, data_types, elementwise, indexing, linalg, manipulation, searching, sets, sorting, statistical,
           utility)

__all__ = [name for names in SECTIONS.values() for name in names] + ["__array_namespace_info__"]
