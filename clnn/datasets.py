"""Real datasets as NumPy arrays, ready for :class:`~clnn.data.DataLoader` and ``fit``.

``load_digits`` needs no download (scikit-learn bundles it; install ``clnn[examples]``); ``load_mnist``
reads the standard IDX files from a folder you provide.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

__all__ = ["load_digits", "load_mnist"]

Split = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def load_digits(test_fraction: float = 0.2) -> Split:
    """scikit-learn's 1,797 handwritten digits (8x8 grey images, classes 0-9) with a fixed split.

    The split is stratified and the same on every machine (seeded): for the default 20%, 1,438 training
    and 359 test images.

    Returns:
        ``(x_train, y_train), (x_test, y_test)``: x float32 (N, 1, 8, 8) scaled to [0, 1], y int64 (N,).

    Raises:
        ImportError: scikit-learn is not installed (``pip install 'clnn[examples]'``).

    Example:
        >>> (x_train, y_train), (x_test, y_test) = clnn.datasets.load_digits()
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"load_digits: test_fraction expects a value in (0, 1); got {test_fraction}")
    try:
        from sklearn.datasets import load_digits as sk_digits
    except ImportError:
        raise ImportError(
            "load_digits needs scikit-learn, which bundles the digits: pip install 'clnn[examples]'"
        ) from None
    digits = sk_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # (N, 1, 8, 8)
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(20240607)
    test = np.zeros(len(y), bool)
    for c in np.unique(y):  # the same fraction of every class in the test set
        members = rng.permutation(np.flatnonzero(y == c))
        test[members[: round(len(members) * test_fraction)]] = True
    train_idx = rng.permutation(np.flatnonzero(~test))
    test_idx = np.flatnonzero(test)
    return (x[train_idx], y[train_idx]), (x[test_idx], y[test_idx])


_MNIST = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def _read_idx(path: Path) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"load_mnist: {path} is not an IDX file of unsigned bytes (magic {raw[:4].hex()})")
    ndim = raw[3]
    dims = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    start = 4 + 4 * ndim
    if len(raw) - start != int(np.prod(dims)):
        raise ValueError(f"load_mnist: {path} holds {len(raw) - start} data bytes; its header says {dims} "
                         f"({int(np.prod(dims))} bytes): the file is truncated or corrupt")
    return np.frombuffer(raw, np.uint8, offset=start).reshape(dims)


def load_mnist(path: str | os.PathLike[str]) -> Split:
    """MNIST from the four standard IDX files (plain or ``.gz``) in the folder ``path``.

    Returns:
        ``(x_train, y_train), (x_test, y_test)``: x float32 (N, 1, 28, 28) scaled to [0, 1], y int64 (N,).

    Raises:
        FileNotFoundError: a file is missing; the message names the four files and where to put them.

    Example:
        >>> (x_train, y_train), (x_test, y_test) = clnn.datasets.load_mnist("~/data/mnist")
    """
    folder = Path(path).expanduser()
    found: dict[str, Path] = {}
    for key, stem in _MNIST.items():
        for name in (stem, stem + ".gz", stem.replace("-idx", ".idx")):
            if (folder / name).is_file():
                found[key] = folder / name
                break
    missing = [stem for key, stem in _MNIST.items() if key not in found]
    if missing:
        raise FileNotFoundError(
            f"load_mnist: {folder} lacks {', '.join(missing)}. Put the four MNIST files "
            f"{', '.join(_MNIST.values())} (each plain or .gz) in {folder}; they are published at "
            "https://yann.lecun.com/exdb/mnist/ and mirrors such as "
            "https://ossci-datasets.s3.amazonaws.com/mnist/"
        )
    arrays = {key: _read_idx(p) for key, p in found.items()}
    out = []
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(f"load_mnist: {split} images {images.shape} and labels {labels.shape} do not "
                             "match: expected (N, 28, 28) and (N,)")
        out.append(((images.astype(np.float32) / 255.0)[:, None], labels.astype(np.int64)))
    return out[0], out[1]
