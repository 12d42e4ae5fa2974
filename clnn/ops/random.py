"""On-device counter-based random numbers (``kernels_cl/random.cl``) and the global generator."""

from __future__ import annotations

import threading

import numpy as np
import pyopencl.cltypes as cltypes

from .. import kernels
from ..kernels import defines, launch_1d, real_scalar
from ..tensor import Tensor

_lock = threading.Lock()
_state = {"seed": 0, "offset": 0}


def manual_seed(seed: int) -> None:
    """Seed the global generator: draws after this repeat for the same seed (rand, randn, dropout)."""
    with _lock:
        _state["seed"], _state["offset"] = int(seed) & (2**64 - 1), 0


def _next_key(seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(seed, offset) for one draw: an explicit ``seed`` starts at offset 0; else the global state advances."""
    if seed is not None:
        s, offset = int(seed) & (2**64 - 1), 0
    else:
        with _lock:
            s, offset = _state["seed"], _state["offset"]
            _state["offset"] += 1
    return (
        cltypes.make_uint2(s & 0xFFFFFFFF, s >> 32),
        cltypes.make_uint2(offset & 0xFFFFFFFF, (offset >> 32) & 0xFFFFFFFF),
    )


def draw(kind: str, out: Tensor, seed: int | None = None) -> None:
    """Fill ``out`` with ``kind`` ("uniform" or "normal") random numbers."""
    key, offset = _next_key(seed)
    k = kernels.kernel(out.device, "random.cl", kind, defines(out.dtype))
    launch_1d(out.device, k, (out.size + 3) // 4, np.int32(out.size), key, offset, out.data)


def dropout_mask(x: Tensor, p: float, y: Tensor, mask: Tensor) -> None:
    """``y = x * mask / (1 - p)`` with a fresh Bernoulli(1 - p) ``mask`` from the global generator."""
    key, offset = _next_key(None)
    k = kernels.kernel(x.device, "random.cl", "dropout", defines(x.dtype))
    launch_1d(x.device, k, (x.size + 3) // 4, np.int32(x.size), key, offset, real_scalar(x.dtype, p),
              x.data, y.data, mask.data)
