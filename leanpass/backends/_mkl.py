"""The ``cpu`` device's large matrix products through Intel's MKL, where the ``mkl``
extra is installed (``pip install "leanpass[mkl]"``: the ``mkl`` wheel, and
``sparse_dot_mkl``, which calls MKL's ``cblas_?gemm`` on NumPy arrays).

NumPy's wheels multiply with OpenBLAS. On the machine the benchmarks ran on (an
Intel Xeon with AVX-512, one thread) MKL's ``sgemm`` and ``dgemm`` took 12 to 25%
less time for the products of a training step, ``(2048, 128) @ (128, 384).T``
float32 1.22 against 1.48 ms; a GPT-2 block's compiled step (``benchmarks/run.py``'s
W6) took 0.90x PyTorch's time instead of 0.96x (float32; float64 0.89x, not 0.99x).

MKL multiplies only while it runs on one thread (``MKL_NUM_THREADS=1``,
``OMP_NUM_THREADS=1``, or ``threadpoolctl``'s limit of 1 once MKL is loaded:
``available()`` loads it): on two threads its OpenMP threads fought OpenBLAS's and
Numba's for the cores, and W6 took 33.5 ms against OpenBLAS's 22.3 (float32, two
cores), W1 1.41 against 1.03 ms. With more threads every product stays NumPy's.

What goes to MKL: 2-D products of one native floating dtype (float32, float64) of at
least :data:`MIN_VOLUME` multiply-adds (a call through ``sparse_dot_mkl`` costs about
17 microseconds, which a smaller product does not win back), no dimension beyond
MKL's 32-bit sizes, whose left operand is C-ordered (the right one C- or F-ordered: a
transposed view is F), or F-ordered with a C-ordered right one (a weight's gradient,
``g.T @ x``). The result is C-ordered, as NumPy's (the optimizers' one-pass kernels
take only those). Everything else, and everything without the extra, stays NumPy's.
Which CPUs: by default only Intel's (``vendor_id`` ``GenuineIntel`` in
``/proc/cpuinfo``). On an AMD EPYC with AVX-512 (2 cores, one thread) MKL's products
took 5 to 60% longer than OpenBLAS's for every product of W1 and W6 (float32
``(2048, 128) @ (384, 128).T`` 2.90 against 2.25 ms, float64 6.25 against 5.06), and
W1's compiled step went from 1.04x to 1.20x NumPy by hand. ``LEANPASS_BLAS=mkl`` uses
MKL on any CPU; ``LEANPASS_BLAS`` set to anything else (``numpy``) turns it off. It is
read once, at the first large product. MKL's threads follow ``MKL_NUM_THREADS`` (or ``threadpoolctl``,
which knows MKL once loaded); results differ from OpenBLAS's in the last bits, as any
two BLAS do, and an overflow in MKL's product gives inf without NumPy's warning.
"""

from __future__ import annotations

import functools
import glob
import os
import sys
import warnings

import numpy as np

MIN_VOLUME = 1 << 23  # m * k * n: about 100 microseconds of one core's product, float32
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))  # native byte order: what sparse_dot_mkl takes
_THREADING_LAYERS = ("INTEL", "SEQUENTIAL", "GNU")  # the wheel's; its TBB layer cannot find libtbb, and exits


def _library() -> str | None:
    """The ``mkl`` wheel's ``libmkl_rt``: where its installer put it (its recorded
    files: a ``--user`` or ``--target`` install too), else under ``sys.prefix/lib``."""
    try:
        from importlib.metadata import PackageNotFoundError, files
        for f in files("mkl") or ():
            if f.name.startswith("libmkl_rt.so"):
                return str(f.locate())
    except (ImportError, PackageNotFoundError):
        pass
    found = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
    return found[0] if found else None


def _vendor() -> str | None:
    """The CPU's maker as ``/proc/cpuinfo`` names it (``GenuineIntel``,
    ``AuthenticAMD``), or None where there is no such file."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("vendor_id")), None)
    except OSError:
        return None


def _wanted() -> bool:
    """Whether ``LEANPASS_BLAS`` and the CPU ask for MKL: ``mkl``, yes; unset or
    ``auto`` (or empty), on Intel's CPUs only (see above); anything else, no."""
    choice = os.environ.get("LEANPASS_BLAS", "").strip().lower() or "auto"
    if choice == "auto":
        return _vendor() == "GenuineIntel"
    return choice == "mkl"


@functools.cache
def _dot():
    """``(dot_product_mkl, the widest dimension MKL's sizes hold, MKL's thread count)``
    where this process multiplies through MKL (:func:`_wanted`), else None."""
    return _load() if _wanted() else None


@functools.cache
def _load():
    """What :func:`_dot` gives, from ``sparse_dot_mkl`` whatever the CPU, or None (no
    extra, another platform, a threading layer the wheel cannot load, or MKL failing
    to load: then once a warning). The wheel's ``libmkl_rt`` is not where the loader
    looks: it is named to ``sparse_dot_mkl`` through ``MKL_RT``, its documented
    setting, unless set."""
    layer = os.environ.get("MKL_THREADING_LAYER", "INTEL").strip().upper()
    if layer not in _THREADING_LAYERS:
        warnings.warn(f"LeanPass: MKL_THREADING_LAYER={layer} is not one of {', '.join(_THREADING_LAYERS)}: the "
                      "cpu device's matrix products stay NumPy's", RuntimeWarning, stacklevel=4)
        return None
    if "MKL_RT" not in os.environ:
        path = _library()
        if path is None:
            return None  # (no mkl wheel: sparse_dot_mkl alone finds a system MKL, if any, through the loader)
        os.environ["MKL_RT"] = path
    try:
        import sparse_dot_mkl
        widest = np.iinfo(sparse_dot_mkl.mkl_interface_integer_dtype()).max  # 32-bit MKL_INT: 2**31 - 1
    except ImportError:
        return None
    except Exception as exc:  # noqa: BLE001 - a library that fails to load: NumPy's products, said once
        warnings.warn(f"LeanPass: MKL could not be loaded ({type(exc).__name__}: {exc}): the cpu device's matrix "
                      "products stay NumPy's", RuntimeWarning, stacklevel=4)
        return None
    return sparse_dot_mkl.dot_product_mkl, widest, sparse_dot_mkl.mkl_get_max_threads


def available() -> bool:
    """Whether large products go to MKL in this process (loads it the first time)."""
    return _dot() is not None


def product(a, b):
    """``a @ b`` through MKL, C-ordered, for 2-D NumPy arrays of one native floating
    dtype; None where it declines (the caller multiplies with NumPy)."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 or b.ndim != 2 \
            or a.dtype != b.dtype or a.dtype not in _FLOATS or a.shape[0] * a.shape[1] * b.shape[1] < MIN_VOLUME:
        return None
    found = _dot()
    if found is None:
        return None
    dot, widest, threads = found
    if max(a.shape[0], a.shape[1], b.shape[1]) > widest:  # (MKL's 32-bit sizes would wrap, silently)
        return None
    if threads() != 1:  # on several threads MKL's fought OpenBLAS's and Numba's for the cores (see above)
        return None
    fa, fb = a.flags, b.flags
    if fa.c_contiguous and (fb.c_contiguous or fb.f_contiguous):
        return dot(a, b)  # MKL lays the result out as a: C
    if fa.f_contiguous and fb.c_contiguous:
        return dot(b.T, a.T).T  # (b.T @ a.T) laid out as b.T, F: its transpose is C
    return None
