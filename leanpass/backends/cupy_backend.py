"""The ``cuda`` devices: CuPy. Imported only when a ``cuda`` device is asked for."""

from __future__ import annotations

import contextlib

try:
    import cupy
except ImportError as exc:  # pragma: no cover - depends on the machine
    raise RuntimeError(
        "CuPy is not installed (import failed: "
        f"{exc}); install it with pip install \"leanpass[cuda12]\" (CUDA 12) or "
        "pip install \"leanpass[cuda13]\" (CUDA 13)"
    ) from None

import array_api_compat.cupy as xp_cupy
import cupyx

from ._base import Backend, dtype_name


class CupyBackend(Backend):
    device_type = "cuda"
    library = "cupy"
    always_index = True
    syncs_cheaply = False  # a host read waits for the GPU's queue: checks that need one are skipped
    xp = xp_cupy
    array_type = cupy.ndarray

    def __init__(self, index=0):
        super().__init__(index)
        self._cuda_device = cupy.cuda.Device(index)
        self._rng = None

    @classmethod
    def device_indices(cls):
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CUDARuntimeError: no driver, no device
            raise RuntimeError(
                f"CuPy is installed but sees no CUDA GPU ({type(exc).__name__}: {exc}); "
                "check the NVIDIA driver and CUDA_VISIBLE_DEVICES, or use device='cpu'"
            ) from None
        if count == 0:
            raise RuntimeError(
                "CuPy is installed but sees no CUDA GPU; check the NVIDIA driver and "
                "CUDA_VISIBLE_DEVICES, or use device='cpu'"
            )
        return list(range(count))

    @classmethod
    def index_of(cls, array) -> int:
        return array.device.id

    @property
    def xp_device(self):
        return self._cuda_device

    def _from_numpy(self, host):
        with self._cuda_device:
            return cupy.asarray(host)

    def _to_numpy(self, array):
        return cupy.asnumpy(array)

    def _from_same_library(self, array):
        with self._cuda_device:
            return cupy.array(array, copy=True)

    def copy(self, array):
        with self._cuda_device:
            return array.copy()

    def index_add(self, buf, index, values, axis=0):
        with self._cuda_device:
            cupyx.scatter_add(buf, (slice(None),) * axis + (index,), values)
        return buf

    # Random numbers are drawn on the GPU from CuPy's generator, seeded by
    # leanpass.manual_seed, so a training step never waits on the host.
    def _generator(self):
        if self._rng is None:
            with self._cuda_device:
                self._rng = cupy.random.default_rng()
        return self._rng

    def seed(self, seed):
        with self._cuda_device:
            self._rng = cupy.random.default_rng(seed)

    def uniform(self, shape, low=0.0, high=1.0, dtype="float64"):
        with self._cuda_device:
            out = self._generator().random(shape, dtype=dtype_name(dtype))
            return out * (high - low) + low

    def normal(self, shape, mean=0.0, std=1.0, dtype="float64"):
        with self._cuda_device:
            return self._generator().standard_normal(shape, dtype=dtype_name(dtype)) * std + mean

    def bernoulli(self, shape, p, dtype="float64"):
        with self._cuda_device:
            return (self._generator().random(shape) < p).astype(dtype_name(dtype))

    def synchronize(self):
        self._cuda_device.synchronize()

    def quiet(self):
        return contextlib.nullcontext()
