"""The ``cpu`` device's large matrix products through Intel's MKL, where the ``mkl``
extra is installed (``pip install "leanpass[mkl]"``: the ``mkl`` wheel, and
``sparse_dot_mkl``, which calls MKL's ``cblas_?gemm`` on NumPy arrays).

NumPy's wheels multiply with OpenBLAS. On the machine the benchmarks ran on (an
Intel Xeon with AVX-512, one thread) MKL's ``sgemm`` and ``dgemm`` took 12 to 25%
less time for the products of a training step, ``(2048, 128) @ (128, 384)`` float32
1.23 against 1.48 ms; a GPT-2 block's step (``benchmarks/run.py``'s W6) 0.85x
PyTorch's time instead of 0.94x (float32; float64 0.84x instead of 0.99x).

Only 2-D products of one floating dtype go to MKL, each operand C- or F-ordered (a
transposed view is one), at least :data:`MIN_VOLUME` multiply-adds (a call through
``sparse_dot_mkl`` costs about 17 microseconds, which a smaller product does not win
back), and with a C-ordered result (what NumPy gives, and what the optimizers' one-
pass kernels take). Everything else, and everything without the extra, stays
NumPy's. ``LEANPASS_BLAS=numpy`` turns MKL off; it is read once, at the first large
product. MKL's own threads follow ``MKL_NUM_THREADS`` (or ``threadpoolctl``, which
knows MKL); results differ from OpenBLAS's in the last bits, as any two BLAS do.
"""

from __future__ import annotations

import functools
import glob
import os
import sys

import numpy as np

MIN_VOLUME = 1 << 23  # m * k * n: about 100 microseconds of one core's product, float32


@functools.cache
def _dot():
    """``sparse_dot_mkl.dot_product_mkl``, or None (no extra, another platform, or
    ``LEANPASS_BLAS=numpy``). The ``mkl`` wheel puts ``libmkl_rt`` under
    ``sys.prefix/lib``, where the loader does not look: it is named to
    ``sparse_dot_mkl`` through ``MKL_RT``, its documented setting, unless set."""
    if os.environ.get("LEANPASS_BLAS", "mkl").strip().lower() == "numpy":
        return None
    if "MKL_RT" not in os.environ:
        found = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
        if found:
            os.environ["MKL_RT"] = found[0]
    try:
        from sparse_dot_mkl import dot_product_mkl
    except (ImportError, OSError):
        return None
    return dot_product_mkl


def available() -> bool:
    """Whether large products go to MKL in this process."""
    return _dot() is not None


def product(a, b):
    """``a @ b`` through MKL, C-ordered, for 2-D NumPy arrays of one floating dtype;
    None where it declines (the caller multiplies with NumPy)."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 or b.ndim != 2 \
            or a.dtype != b.dtype or a.dtype.char not in "fd" or a.shape[0] * a.shape[1] * b.shape[1] < MIN_VOLUME:
        return None
    dot = _dot()
    if dot is None:
        return None
    fa, fb = a.flags, b.flags
    if fa.c_contiguous and (fb.c_contiguous or fb.f_contiguous):
        return dot(a, b)  # MKL lays the result out as a: C
    if fa.f_contiguous and fb.c_contiguous:
        return dot(b.T, a.T).T  # (b.T @ a.T) laid out as b.T, F: its transpose is C
    return None
