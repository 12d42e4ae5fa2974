"""Tunable kernel parameters as plain data, looked up per device (most specific entry wins).

Keys go from general to specific: ``"default"``, the device type (``"cpu"``, ``"gpu"``,
``"accelerator"``), a vendor substring (``"nvidia"``, ``"amd"``, ``"intel"``), a platform substring
(``"portable computing language"``), then a device-name substring. A tuner adds rows without code
changes. Each kernel's launcher then checks the choice against the device's limits. A device posing as
another vendor (``CLNN_LIMITS=vendor=...``) is looked up by its posed keys only: its real platform, and its
real name unless that is posed too, would select rows of the runtime it really runs on.
"""

from __future__ import annotations

from typing import Any

from .device import Device

TABLE: dict[str, dict[str, dict[str, Any]]] = {
    "elementwise": {  # elementwise.cl: elements per work-item in the contiguous maps
        "default": {"EW_VEC": 4},
        "cpu": {"EW_VEC": 1},  # Intel's CPU runtime: 4 per item runs unary maps 5x slower (its own vectorizer)
        "portable computing language": {"EW_VEC": 4},  # PoCL: same-shape add 41 -> 22 ms at 8M elements
    },
    "gemm": {  # gemm.cl: C tile TM x TN, k-slice TK, WM x WN outputs per work-item in VW-wide vectors
        "default": {"TM": 64, "TN": 64, "TK": 16, "WM": 4, "WN": 4, "VW": 4, "APAD": 1},
        "cpu": {"TM": 128, "TN": 128, "TK": 64, "WM": 4, "WN": 16, "VW": 8, "APAD": 0},
        "gpu": {"TM": 64, "TN": 64, "TK": 16, "WM": 4, "WN": 4, "VW": 4, "APAD": 1},
    },
    "gemm_small": {  # the same kernel with a smaller tile, for products with few rows or columns
        "default": {"TM": 32, "TN": 32, "TK": 16, "WM": 4, "WN": 4, "VW": 4, "APAD": 1},
        "cpu": {"TM": 32, "TN": 64, "TK": 64, "WM": 4, "WN": 16, "VW": 8, "APAD": 0},
    },
}


def params(dev: Device, kernel: str) -> dict[str, Any]:
    """The merged parameters for ``kernel`` on ``dev``."""
    rows = TABLE[kernel]
    out = dict(rows["default"])
    keys = [dev.type, dev.vendor.lower(), dev.platform_name.lower(), dev.name.lower()]
    if "vendor" in dev.real:
        keys = [dev.type, dev.vendor.lower()] + ([dev.name.lower()] if "name" in dev.real else [])
    for key in keys:
        for name, row in rows.items():
            if name != "default" and name in key:
                out.update(row)
    return out
