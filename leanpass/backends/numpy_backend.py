"""The ``cpu`` device: NumPy through ``array_api_compat.numpy``."""

from __future__ import annotations

import functools
import types

import array_api_compat.numpy as xp_numpy
import numpy as np

from . import _mkl, _numba
from ._base import NO_FUSED, Backend, FusedKernels, NoSpecialFunctions, SpecialFunctions
from ._memory import keep_freed_memory

keep_freed_memory()  # the cpu device's large temporaries reused, not faulted in again (see _memory.py)


def _reduction(ufunc):
    """``ufunc.reduce`` over every axis unless ``axis=`` says otherwise (the
    standard's default; the ufunc's own is the first axis): a partial is a C-level
    callable, so a reduction on the training step's path runs no Python frame."""
    return functools.partial(ufunc.reduce, axis=None)


def _astype(x, dtype, /, *, copy=True, device=None):
    if device is not None and device != "cpu":
        return xp_numpy.astype(x, dtype, copy=copy, device=device)  # its error for a foreign device
    return x.astype(dtype, copy=copy)


def _reshape(x, /, shape, *, copy=None):
    if copy is None and type(x) is np.ndarray:
        return x.reshape(shape)  # the method: np.reshape is Python-level dispatch around it
    return xp_numpy.reshape(x, shape, copy=copy)  # the wrapper's copy= also on NumPy < 2.1


def _namespace():
    """``array_api_compat.numpy`` (which is NumPy's own functions where NumPy 2
    conforms), with the reductions on the training step's path calling NumPy's
    ufuncs directly, and ``reshape`` the array method: ``np.sum``, ``np.reshape``
    and the like pass through Python-level dispatch
    (``numpy/_core/fromnumeric.py``) that costs more than reducing a small array,
    and more again when a large product has just evicted it from the caches. Same
    results (``np.sum`` is ``np.add.reduce`` once dispatched), same dtypes."""
    ns = types.ModuleType("leanpass.backends.numpy_xp", _namespace.__doc__)
    ns.__dict__.update({k: v for k, v in vars(xp_numpy).items() if k not in ("__name__", "__doc__", "__spec__",
                                                                             "__loader__", "__package__")})
    ns.sum, ns.prod = _reduction(np.add), _reduction(np.multiply)
    ns.max, ns.min = _reduction(np.maximum), _reduction(np.minimum)
    ns.all, ns.any = _reduction(np.logical_and), _reduction(np.logical_or)
    ns.astype = _astype
    ns.reshape = _reshape
    return ns


# each signed integer dtype's unsigned twin, for range checks in one reduction
_UNSIGNED = {np.dtype(f"i{n}"): np.dtype(f"u{n}") for n in (1, 2, 4, 8)}


_ROWS: dict = {}


def _row_numbers(n: int):
    """``np.arange(n)``, read-only and kept for the next call (a batch size recurs at
    every step); at most 64 sizes are kept."""
    rows = _ROWS.get(n)
    if rows is None:
        if len(_ROWS) >= 64:
            _ROWS.clear()
        rows = np.arange(n)
        rows.flags.writeable = False
        _ROWS[n] = rows
    return rows


_BLAS_FLOATS = (np.dtype("float32"), np.dtype("float64"))
_ONES: dict = {}


def _ones(n: int, dtype):
    """A read-only vector of ``n`` ones of ``dtype``, kept for the next call (at most
    64 kept, as :func:`_row_numbers`)."""
    ones = _ONES.get((n, dtype))
    if ones is None:
        if len(_ONES) >= 64:
            _ONES.clear()
        ones = np.ones(n, dtype)
        ones.flags.writeable = False
        _ONES[n, dtype] = ones
    return ones


_FLOAT32, _FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)


class NumpyBackend(Backend):
    device_type = "cpu"
    library = "numpy"
    one_device = True
    xp = _namespace()
    linalg = xp_numpy.linalg
    fft = xp_numpy.fft
    array_type = np.ndarray
    module = np
    as_array = staticmethod(np.asarray)  # NumPy's own: a fifth of the wrapper's cost on the hot path
    # Numba's row kernels where the ``fuse`` extra is installed (LEANPASS_FUSE=0: off)
    fused = FusedKernels(**_numba.kernels()) if _numba.enabled() else NO_FUSED

    @functools.cached_property
    def special(self):
        """``scipy.special``'s functions (:class:`~leanpass.backends._base.SpecialFunctions`);
        SciPy is imported here, the first time one is used."""
        try:
            import scipy.special
        except ImportError as exc:
            return NoSpecialFunctions(self.device, f"SciPy could not be imported ({exc}); pip install scipy")
        return SpecialFunctions(scipy.special, self.quietly)

    def number(self, s, dtype):
        """A 0-d array of ``dtype`` holding ``s``, for float32 and float64: NumPy combines
        it with an array about a third faster than it converts a Python number at each
        call, with the same result, as NumPy rounds the number to the array's dtype first.
        Never for 0: ``0.0 == -0.0`` would find one for the other; nor for a number
        below 1e-30 in size (1e-50 is 0 in float32). Read-only: it is shared."""
        operand = None
        if (dtype == _FLOAT64 or dtype == _FLOAT32) and 1e-30 <= abs(s) <= 1e30:
            operand = np.asarray(s, dtype=dtype)
            operand.flags.writeable = False
        return operand

    @classmethod
    def index_of(cls, array) -> int:
        return 0

    def _from_numpy(self, host):
        return host

    def _to_numpy(self, array):
        return np.array(array, copy=True)

    def _from_same_library(self, array):
        return array

    def copy(self, array):
        return np.array(array, copy=True)

    def c_order(self, array):
        return np.ascontiguousarray(array) if array.ndim else array

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype=dtype)  # NumPy's own: the wrapper's device check costs more than a small array

    def ones(self, shape, dtype):
        ones = np.empty(shape, dtype=dtype)  # np.ones is Python code around these two calls
        ones.fill(1)
        return ones

    def matmul(self, a, b):
        """As :meth:`Backend.matmul`; a stacked right operand whose rows are not
        contiguous (a transposed view, ``k.mT``) is copied first: NumPy's batched
        matmul does not hand such an operand to BLAS and is 10-30 times slower. A
        large 2-D product goes to MKL where the ``mkl`` extra is installed
        (``_mkl.py``)."""
        if a.ndim == 2 and b.ndim == 2:  # (a stack of rows comes here too, from Backend.matmul's reshape)
            if a.shape[0] * a.shape[1] * b.shape[1] >= _mkl.MIN_VOLUME:
                out = _mkl.product(a, b)
                if out is not None:
                    return out
            return a @ b
        if b.ndim > 2 and b.strides[-1] != b.itemsize:
            b = np.ascontiguousarray(b)
        return super().matmul(a, b)

    def read_only(self, array) -> bool:
        return not array.flags.writeable

    def is_array(self, value) -> bool:
        return isinstance(value, (np.ndarray, np.generic))  # g * 2.0 of a 0-d g is a NumPy scalar

    def take_rows(self, rows, index):
        numbers = _ROWS.get(rows.shape[0])  # _row_numbers' lookup written out (the hot path)
        if numbers is None:
            numbers = _row_numbers(rows.shape[0])
        return rows[numbers, index]

    def sub_at_rows(self, buf, index, value):
        numbers = _ROWS.get(buf.shape[0])
        if numbers is None:
            numbers = _row_numbers(buf.shape[0])
        buf[numbers, index] -= value  # one (i, index[i]) per row: no repeats
        return buf

    def shares_memory(self, a, b) -> bool:
        return np.may_share_memory(a, b)

    def scale_fresh(self, x, s):
        x *= s
        return x

    def stack(self, arrays, axis=0):
        """As :meth:`Backend.stack`; each array copied into its place (NumPy's own keeps
        its inputs' layout: of transposed views, a result that is not C-contiguous, 1.6
        ms for W6's attention gradients where these copies take 0.3, and a reshape after
        it copies again)."""
        first = arrays[0]
        axis = axis % (first.ndim + 1)
        out = np.empty(first.shape[:axis] + (len(arrays),) + first.shape[axis:], dtype=first.dtype)
        for i, a in enumerate(arrays):
            out[(slice(None),) * axis + (i,)] = a
        return out

    def add_leading(self, total, part):
        total[..., :part.shape[-2], :] += part
        return total

    def relu_fresh(self, x):
        return np.maximum(x, 0, out=x)  # x is the caller's own: no second array of its size

    def sum_rows(self, g):
        """As :meth:`Backend.sum_rows`; for a float matrix, a product with a vector of
        ones (one BLAS call; NumPy's sum over the first axis is a loop over the rows,
        three times slower for a layer's gradient of 128 rows)."""
        if g.ndim == 2 and g.dtype in _BLAS_FLOATS:
            ones = _ONES.get((g.shape[0], g.dtype))  # _ones' lookup written out (the hot path)
            if ones is None:
                ones = _ones(g.shape[0], g.dtype)
            return ones @ g
        return np.add.reduce(g, axis=0)

    def all_in_range(self, index, high: int) -> bool:
        if index.size == 0:
            return True
        unsigned = _UNSIGNED.get(index.dtype)
        if unsigned is None:
            return int(index.min()) >= 0 and int(index.max()) < high
        # negative values read as unsigned are above any high
        return bool(np.maximum.reduce(index.view(unsigned), axis=None) < high)

    def from_dlpack(self, x, copy=None):
        return np.from_dlpack(x, copy=copy)

    def index_add(self, buf, index, values, axis=0):
        np.add.at(buf, (slice(None),) * axis + (index,), values)
        return buf
