"""einops' main API on Tensors: ``einops.rearrange``, ``reduce``, ``repeat``, ``pack``,
``unpack``, ``einsum``, ``parse_shape``, ``asnumpy``, with gradients.

einops gives a tensor to the first subclass of its ``AbstractBackend`` whose
``framework_name`` is an imported module and that recognises the tensor's type. This
module defines LeanPass's, on the namespace's functions, so every step einops takes is
an operation of the graph and ``backward()`` goes through it, on every device.

It imports einops, so nothing imports it until einops is imported: leanpass/__init__.py
hands it to ``after_import("einops", ...)`` (leanpass/_after_import.py), which imports it
at once when einops came first, and right after ``import einops`` otherwise.
(``einops.array_api`` needs none of this: it calls ``t.__array_namespace__()``.)
"""

from __future__ import annotations

from einops._backends import AbstractBackend

from . import _namespace as xp
from ._dtypes import DTYPES
from .tensor import Tensor


class LeanPassBackend(AbstractBackend):
    framework_name = "leanpass"

    def is_appropriate_type(self, tensor):
        return isinstance(tensor, Tensor)

    def from_numpy(self, x):
        return xp.asarray(x)

    def to_numpy(self, x):
        return x.numpy()  # a host copy of the values, as einops' torch backend detaches

    def arange(self, start, stop):
        return xp.arange(start, stop, dtype=DTYPES["int64"])

    def reshape(self, x, shape):
        return xp.reshape(x, tuple(shape))

    def transpose(self, x, axes):
        return xp.permute_dims(x, tuple(axes))

    def reduce(self, x, operation, axes):
        if operation not in ("sum", "mean", "max", "min", "prod", "any", "all"):
            raise NotImplementedError(f"einops on leanpass: unknown reduction {operation!r}")
        return getattr(xp, operation)(x, axis=tuple(axes))

    def stack_on_zeroth_dimension(self, tensors: list):
        return xp.stack(tensors)

    def add_axis(self, x, new_position):
        return xp.expand_dims(x, new_position)

    def add_axes(self, x, n_axes, pos2len):
        """New axes, repeated: a broadcast (as torch's ``expand``), whose gradient sums."""
        for position in sorted(pos2len):
            x = xp.expand_dims(x, position)
        return xp.broadcast_to(x, tuple(pos2len.get(i, size) for i, size in enumerate(x.shape)))

    def tile(self, x, repeats):
        return xp.tile(x, tuple(repeats))

    def concat(self, tensors, axis: int):
        return xp.concat(tensors, axis=axis)

    def is_float_type(self, x):
        return xp.isdtype(x.dtype, ("real floating", "complex floating"))

    def einsum(self, pattern, *x):
        try:
            from ._namespace.einsum import einsum
        except ImportError:
            raise NotImplementedError("einops.einsum on leanpass needs leanpass.einsum, which this version of "
                                      "LeanPass does not have") from None
        return einsum(pattern, *x)
