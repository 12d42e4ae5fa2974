"""On-device counter-based random numbers (``kernels_cl/random.cl``) and the global generator."""

from __future__ import annotations

import threading

import numpy as np
import pyopencl.cltypes as cltypes

from .. import graphs, kernels
from ..kernels import defines, launch_1d, real_scalar
from ..tensor import Tensor

_lock = threading.Lock()
_state = {"seed": 0, "offset": 0}


def manual_seed(seed: int) -> None:
    """Seed the global generator: what follows repeats for the same seed (initialization, rand, randn,
    dropout, and the shuffling of unseeded DataLoaders and ``fit``)."""
    with _lock:
        _state["seed"], _state["offset"] = int(seed) & (2**64 - 1), 0


def get_state() -> tuple[int, int]:
    """The global generator's ``(seed, offset)``: restoring it with :func:`set_state` repeats later draws."""
    with _lock:
        return _state["seed"], _state["offset"]


def set_state(state: tuple[int, int]) -> None:
    """Restore a ``(seed, offset)`` taken with :func:`get_state`."""
    seed, offset = state
    with _lock:
        _state["seed"], _state["offset"] = int(seed) & (2**64 - 1), int(offset)


def advance() -> tuple[int, int]:
    """The ``(seed, offset)`` of the next draw from the global generator, which moves one step on.

    Host-side randomness (the DataLoader's shuffling) takes its keys here too, so one ``manual_seed``
    fixes initialization, shuffling and dropout alike.
    """
    with _lock:
        key = _state["seed"], _state["offset"]
        _state["offset"] += 1
    return key


def next_key(seed: int | None) -> tuple[np.void, np.void]:
    """(seed, offset) for one draw: an explicit ``seed`` starts at offset 0; else the global state advances
    (while a graph is captured, again at each of its replays: the pair is rewritten in place)."""
    if seed is None and graphs.capturing() is not None:  # the draws are the replays': capture takes none
        pair = tuple(_halves(v) for v in get_state())
        graphs.each_replay(None, lambda: _rewrite(pair, *advance()))
        return pair
    s, offset = (int(seed) & (2**64 - 1), 0) if seed is not None else advance()
    return _halves(s), _halves(offset)


def _halves(value: int) -> np.void:
    return kernels.cl_vector(cltypes.uint2, value & 0xFFFFFFFF, (value >> 32) & 0xFFFFFFFF)


def _rewrite(pair: tuple[np.void, np.void], *values: int) -> None:
    for vector, value in zip(pair, values):
        vector["s0"], vector["s1"] = value & 0xFFFFFFFF, (value >> 32) & 0xFFFFFFFF


def draw(kind: str, out: Tensor, seed: int | None = None) -> None:
    """Fill ``out`` with ``kind`` ("uniform" or "normal") random numbers."""
    key, offset = next_key(seed)
    k = kernels.kernel(out.device, "random.cl", kind, defines(out.dtype))
    launch_1d(out.device, k, (out.size + 3) // 4, np.int32(out.size), key, offset, out.data)


def dropout_mask(x: Tensor, p: float, y: Tensor, mask: Tensor) -> None:
    """``y = x * mask / (1 - p)`` with a fresh Bernoulli(1 - p) ``mask`` from the global generator."""
    key, offset = next_key(None)
    k = kernels.kernel(x.device, "random.cl", "dropout", defines(x.dtype))
    launch_1d(x.device, k, (x.size + 3) // 4, np.int32(x.size), key, offset, real_scalar(x.dtype, p),
              x.data, y.data, mask.data)
