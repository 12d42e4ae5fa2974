"""Device-side prefix sums of rows and a stable radix sort of int keys (``kernels_cl/index.cl``).

The building blocks of the ops that rearrange by index: cumsum, the sorted scatter behind every gather's
gradient, and boolean-mask compaction. Both are deterministic: integer counts and fixed orders only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import kernels
from ..device import Device
from ..kernels import defines, group_size, launch_1d
from ..tensor import Tensor
from ._core import empty
from .creation import zeros

SC_TOTALS, SC_CARRY, SC_REVERSE = (kernels.op_codes("index.cl", "SC_")[k] for k in ("totals", "carry", "reverse"))
SCAN_K = kernels.op_codes("index.cl", "SCAN_")["k"]  # elements each work-item of a scan sums serially
RADIX_BITS = kernels.op_codes("index.cl", "RADIX_")["bits"]  # key bits each radix pass sorts by
RADIX_K = kernels.op_codes("index.cl", "RADIX_")["k"]  # keys each work-item of a radix pass ranks
I32 = np.dtype(np.int32)


def kernel(dev: Device, dtype: np.dtype, name: str) -> Any:
    """``index.cl``'s kernel ``name`` for ``dtype`` on ``dev`` (one build serves every kernel of the file)."""
    return kernels.kernel(dev, "index.cl", name, defines(dtype, IDX_WG=group_size(dev)))


def launch_groups(t: Tensor, name: str, groups: int, *args: object) -> None:
    """``name`` over ``groups`` work-groups of IDX_WG, built for ``t``'s dtype and device."""
    wg = group_size(t.device)
    kernels.launch(t.device, kernel(t.device, t.dtype, name), (groups * wg,), (wg,), *args)


def scan_rows(x: Tensor, rows: int, length: int, inner: int, flags: int) -> Tensor:
    """Inclusive prefix sums of ``x``'s rows (row r starts at ``(r // inner) * length * inner + r % inner``
    and steps by ``inner``; reversed with SC_REVERSE). Rows longer than one block are scanned per block,
    the block totals scanned in turn (recursively), and each block offset by its carry."""
    out = empty(x.shape, x.dtype, x.device)
    blocks = -(-length // (group_size(x.device) * SCAN_K))
    if rows == 0 or length == 0:
        return out
    base = (np.int32(length), np.int32(inner), np.int32(blocks))
    if blocks == 1:
        launch_groups(x, "scan", rows, *base, np.int32(flags), x.data, x.data, out.data, x.data)
        return out
    totals = empty((rows, blocks), np.float32 if x.dtype == np.float16 else x.dtype, x.device)  # real
    g = rows * blocks
    launch_groups(x, "scan", g, *base, np.int32(flags | SC_TOTALS), x.data, x.data, out.data, totals.data)
    carry = scan_rows(totals, rows, blocks, 1, 0)
    launch_groups(x, "scan", g, *base, np.int32(flags | SC_CARRY), x.data, carry.data, out.data, totals.data)
    return out


def radix_sort(keys: Tensor, vals: Tensor, bound: int) -> tuple[Tensor, Tensor]:
    """``keys`` (int32, each in ``[0, bound)``) sorted ascending, and ``vals`` (int32) moved with them;
    equal keys keep their order (stable). One count, scan and scatter launch per RADIX_BITS key bits."""
    n = keys.size
    groups = -(-n // (group_size(keys.device) * RADIX_K))
    hist = empty((groups << RADIX_BITS,), I32, keys.device)
    for shift in range(0, max(bound - 1, 1).bit_length(), RADIX_BITS):
        launch_groups(keys, "radix_count", groups, np.int32(n), np.int32(shift), keys.data, hist.data)
        inc = scan_rows(hist, 1, hist.size, 1, 0)
        k2, v2 = empty((n,), I32, keys.device), empty((n,), I32, keys.device)
        launch_groups(keys, "radix_scatter", groups, np.int32(n), np.int32(shift), keys.data, vals.data, inc.data,
                k2.data, v2.data)
        keys, vals = k2, v2
    return keys, vals


def segments(keys: Tensor, bound: int) -> tuple[Tensor, Tensor]:
    """(lo, hi) of length ``bound``: sorted ``keys`` holds key k at positions ``[lo[k], hi[k])`` (empty: 0, 0)."""
    dev = keys.device
    lo, hi = zeros((bound,), dtype=I32, device=dev), zeros((bound,), dtype=I32, device=dev)
    launch_1d(dev, kernel(dev, I32, "seg_bounds"), keys.size, np.int32(keys.size), keys.data, lo.data, hi.data)
    return lo, hi
