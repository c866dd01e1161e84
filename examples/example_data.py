"""Data for the example scripts: scikit-learn's digits (no download) and MNIST
from files the user downloaded (IDX files, gzipped or not, or ``mnist.npz``)."""

from __future__ import annotations

import gzip
import os
import zipfile
from dataclasses import dataclass

import numpy as np

# IDX type codes -> big-endian NumPy dtypes (http://yann.lecun.com/exdb/mnist/)
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_MNIST_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


@dataclass
class Dataset:
    """Features as float arrays in [0, 1] of shape (n, features); labels as int64 (n,)."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def features(self) -> int:
        return self.x_train.shape[1]

    @property
    def classes(self) -> int:
        return int(max(self.y_train.max(), self.y_test.max())) + 1


def read_idx(path: str) -> np.ndarray:
    """Read one IDX file (gzipped or not: the gzip magic bytes decide)."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic number {raw[:4].hex()})")
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    count = int(np.prod(shape)) if shape else 1
    if len(raw) - header != count * dtype.itemsize:
        raise ValueError(
            f"{path}: IDX header promises shape {shape} ({count * dtype.itemsize} bytes) "
            f"but {len(raw) - header} bytes follow"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _find(folder: str, stem: str) -> str:
    for candidate in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        path = os.path.join(folder, candidate)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"MNIST: {stem}[.gz] not found in {folder}")


def load_mnist(path: str) -> Dataset:
    """MNIST from a folder of the four IDX files (gzipped or not) or from ``mnist.npz``
    (keys x_train, y_train, x_test, y_test)."""
    if os.path.isdir(path):
        arrays = {key: read_idx(_find(path, stem)) for key, stem in _MNIST_FILES.items()}
    elif os.path.isfile(path):
        if not zipfile.is_zipfile(path):  # np.load would take it for a pickle and say so
            raise ValueError(f"{path}: not MNIST data: neither an .npz archive (keys {', '.join(_MNIST_FILES)}) "
                             "nor a folder of the four IDX files")
        try:
            with np.load(path, allow_pickle=False) as archive:
                missing = [k for k in _MNIST_FILES if k not in archive.files]
                if missing:
                    raise ValueError(f"{path}: an MNIST .npz needs the keys {list(_MNIST_FILES)}; missing {missing}")
                arrays = {key: archive[key] for key in _MNIST_FILES}
        except (zipfile.BadZipFile, EOFError) as exc:
            raise ValueError(f"{path}: not a readable .npz archive ({exc})") from None
    else:
        raise FileNotFoundError(f"MNIST: no such file or folder: {path}")
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.dtype.kind not in "biuf" or y.dtype.kind not in "biu" or x.ndim < 2 or y.ndim != 1:
            raise ValueError(f"MNIST: the {split} images must be numbers of shape (n, rows, columns) and the labels "
                             f"integers of shape (n,), got {x.dtype} {x.shape} and {y.dtype} {y.shape}")
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"MNIST: {x.shape[0]} {split} images but {y.shape[0]} labels")
        if y.size and y.min() < 0:
            raise ValueError(f"MNIST: the {split} labels must be >= 0, got {y.min()}")
    scale = 255.0 if arrays["x_train"].dtype == np.uint8 else 1.0

    def flat(x):
        return (x.reshape(x.shape[0], -1) / scale).astype(np.float64)

    return Dataset("mnist", flat(arrays["x_train"]), arrays["y_train"].astype(np.int64),
                   flat(arrays["x_test"]), arrays["y_test"].astype(np.int64))


def load_digits(seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's 8x8 digits (1,797 images, shipped inside scikit-learn), split at random."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        raise SystemExit(
            "the default data set is scikit-learn's digits: pip install \"leanpass[examples]\" "
            "(or pass --data PATH to MNIST files)"
        ) from None
    digits = sklearn_digits()
    x = digits.data / 16.0
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Dataset("digits", x[train], y[train], x[test], y[test])
