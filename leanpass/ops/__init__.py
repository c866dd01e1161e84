"""Every operation: forward with ``xp`` on raw arrays, backward rule beside it, one
module per section of the array API standard (creation, elementwise, statistical,
manipulation, searching, sorting, sets, indexing, linalg) plus ``conversion``
(devices, dtypes), ``nn`` (activations, the fused layer and loss) and ``special``
(``lp.special``).

See :mod:`leanpass.ops._op` for what an operation is. Every :class:`Op` of the
modules is also reachable here by its Python name: ``ops.exp``, ``ops.linear``.
"""

from . import (
    conv,
    conversion,
    creation,
    elementwise,
    fft,
    indexing,
    linalg,
    manipulation,
    nn,
    norm,
    pool,
    rnn,
    searching,
    sets,
    sorting,
    special,
    statistical,
)
from ._op import ALL, Op, op

MODULES = (conv, conversion, creation, elementwise, fft, indexing, linalg, manipulation, nn, norm, pool, rnn,
           searching, sets, sorting, special, statistical)

__all__ = ["Op", "op", "ALL", "MODULES", *(m.__name__.rsplit(".", 1)[1] for m in MODULES)]
for _module in MODULES:
    for _name, _value in vars(_module).items():
        if isinstance(_value, Op) and not _name.startswith("_"):
            globals()[_name] = _value
            __all__.append(_name)
del _module, _name, _value
