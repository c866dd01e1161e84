"""The ``strict`` devices: ``array_api_strict``, a CPU stand-in for any array library.

It rejects everything outside the array API standard, so tests on it prove that
LeanPass's operations use the standard alone. Its simulated devices
``strict:1`` and ``strict:2`` make device-mismatch handling testable without a GPU.
"""

from __future__ import annotations

try:
    import array_api_strict
except ImportError as exc:  # pragma: no cover - depends on the machine
    raise RuntimeError(
        f"array_api_strict is not installed (import failed: {exc}); install it with "
        "pip install array-api-strict (it comes with pip install \"leanpass[test]\")"
    ) from None
import numpy as np

from ._base import Backend

_ARRAY = type(array_api_strict.asarray(0.0))
_DEVICE_NAMES = ("CPU_DEVICE", "device1", "device2")


class StrictBackend(Backend):
    device_type = "strict"
    library = "array_api_strict"
    xp = array_api_strict
    linalg = array_api_strict.linalg
    fft = array_api_strict.fft
    array_type = _ARRAY
    module = array_api_strict

    def __init__(self, index=0):
        super().__init__(index)
        self._device = array_api_strict.Device(_DEVICE_NAMES[index])

    @classmethod
    def device_indices(cls):
        return list(range(len(_DEVICE_NAMES)))

    @classmethod
    def index_of(cls, array) -> int:
        return _DEVICE_NAMES.index(str(array.device).split("'")[1])

    @property
    def xp_device(self):
        return self._device

    def _from_numpy(self, host):
        return array_api_strict.asarray(host, device=self._device, copy=True)

    def _to_numpy(self, array):
        # np.asarray refuses arrays on the simulated devices; DLPack does not.
        return np.array(np.from_dlpack(array), copy=True)

    def read_only(self, array) -> bool:
        # array_api_strict keeps a NumPy array inside, and writes into it in place
        inner = getattr(array, "_array", None)
        return inner is not None and not inner.flags.writeable

    def shares_memory(self, a, b) -> bool:
        inner_a, inner_b = getattr(a, "_array", None), getattr(b, "_array", None)
        return inner_a is None or inner_b is None or np.may_share_memory(inner_a, inner_b)

    def real_view(self, array):  # (through DLPack: the standard has no views of another dtype)
        host = np.from_dlpack(array)
        return array_api_strict.from_dlpack(host.reshape(host.shape + (1,)).view(host.real.dtype),
                                            device=self._device, copy=False)

    def complex_view(self, array):
        host = np.from_dlpack(array)
        return array_api_strict.from_dlpack(host.view(np.result_type(host.dtype, np.complex64))[..., 0],
                                            device=self._device, copy=False)

    def from_dlpack(self, x, copy=None):
        kwargs = {} if copy is None else {"copy": copy}
        return array_api_strict.from_dlpack(x, device=self._device, **kwargs)

    def _from_same_library(self, array):
        return array.to_device(self._device)

    # The standard has no integer-array assignment (array_api_strict refuses it):
    # through the host, as the test stand-in it is.
    def index_set(self, buf, kind, key, values):
        if kind != "integer":
            buf[key] = values
            return
        host = self._to_numpy(buf)
        scalar = isinstance(values, (bool, int, float, complex))
        host[self._host_key(key)] = values if scalar else self._to_numpy(values)
        buf[...] = self._from_numpy(host)

    def index_get(self, array, kind, key):
        if kind != "integer":
            return array[key]
        return self._from_numpy(np.asarray(self._to_numpy(array)[self._host_key(key)]))

    def _host_key(self, key):
        return tuple(k if isinstance(k, (int, slice)) else self._to_numpy(k) for k in key)
