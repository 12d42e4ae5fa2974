"""Weights on disk in the safetensors format, read and written with NumPy alone.

A safetensors file is an 8-byte little-endian header length, a JSON header mapping each tensor's name to
``{"dtype", "shape", "data_offsets"}`` (plus an optional ``"__metadata__"`` of strings), then the raw
little-endian bytes. PyTorch (``safetensors.torch``) reads and writes the same files, so weights move
between clnn and PyTorch models of the same architecture in both directions.

Writes go to a temporary file in the target's folder, which is then renamed over the target: a crash
never leaves a half-written file under the real name. Whole models (architecture and training state
beside the weights) are :mod:`clnn.nn.saving`'s business; this module knows only tensors.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from .files import atomic_write
from .tensor import Tensor

__all__ = ["save_state_dict", "load_state_dict", "read_metadata", "to_numpy"]

_CODES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "I64": np.int64,
    "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "U16": np.uint16, "U32": np.uint32,
    "U64": np.uint64, "BOOL": np.bool_,
}
_NAMES = {np.dtype(t): code for code, t in _CODES.items()}


def to_numpy(value: Any) -> np.ndarray:
    """A clnn Tensor, a torch tensor or anything array-like, as a NumPy array (``torch.bfloat16`` becomes
    ``ml_dtypes.bfloat16``, bit for bit)."""
    if isinstance(value, Tensor):
        return value.numpy()
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # torch has no NumPy bfloat16: move the 16-bit words
            import torch

            return value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        value = value.numpy()
    return np.asarray(value)


def _host(name: str, value: Any) -> np.ndarray:
    arr = to_numpy(value)
    if arr.dtype not in _NAMES:
        raise TypeError(f"save_state_dict: {name} expects a numeric tensor ({sorted(_CODES)}); got dtype {arr.dtype}")
    return arr


def save_state_dict(state_dict: Mapping[str, Any], path: str | os.PathLike[str],
                    metadata: Mapping[str, str] | None = None) -> None:
    """Write ``state_dict`` (clnn tensors, NumPy arrays or torch tensors) to ``path`` as safetensors.

    Args:
        state_dict: name -> tensor, e.g. ``model.state_dict()``.
        path: the file to write (replaced atomically).
        metadata: optional string -> string pairs stored in the header.

    Example:
        >>> clnn.save_state_dict(model.state_dict(), "model.safetensors")
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"save_state_dict: state_dict expects a mapping; got {type(state_dict).__name__}")
    header: dict[str, Any] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("save_state_dict: metadata expects str keys and str values")
        header["__metadata__"] = dict(metadata)
    arrays, offset = [], 0
    for name, value in state_dict.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"save_state_dict: keys expect str names other than '__metadata__'; got {name!r}")
        arr = np.asarray(_host(name, value), order="C")
        arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        header[name] = {"dtype": _NAMES[arr.dtype.newbyteorder("=")], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        arrays.append(arr)
        offset += arr.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with atomic_write(path) as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        for arr in arrays:
            f.write(arr.tobytes())


def _read(path: str | os.PathLike[str]) -> tuple[dict[str, Any], memoryview]:
    """The parsed header and the data section of a safetensors file, checked for consistency."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"load_state_dict: no file at {path}")
    raw = path.read_bytes()

    def corrupt(why: str) -> ValueError:
        return ValueError(f"load_state_dict: {path} is not a valid safetensors file: {why}")

    if len(raw) < 8:
        raise corrupt(f"it has {len(raw)} bytes, fewer than the 8-byte header length")
    n = int.from_bytes(raw[:8], "little")
    if n > len(raw) - 8:
        raise corrupt(f"the header claims {n} bytes but only {len(raw) - 8} follow")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise corrupt(f"the header is not JSON ({err})") from None
    if not isinstance(header, dict):
        raise corrupt(f"the header is a JSON {type(header).__name__}, not an object")
    data = memoryview(raw)[8 + n:]
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict):
                raise corrupt("__metadata__ is not an object")
            continue
        if not isinstance(info, dict) or set(info) < {"dtype", "shape", "data_offsets"}:
            raise corrupt(f"entry {name!r} lacks dtype, shape or data_offsets")
        if info["dtype"] not in _CODES:
            raise corrupt(f"entry {name!r} has dtype {info['dtype']!r}; clnn reads {sorted(_CODES)}")
        shape, offs = info["shape"], info["data_offsets"]
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise corrupt(f"entry {name!r} has shape {shape!r}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs)
                and 0 <= offs[0] <= offs[1] <= len(data)):
            raise corrupt(f"entry {name!r} has data_offsets {offs!r} outside the {len(data)} data bytes")
        need = int(np.prod(shape, dtype=np.int64)) * np.dtype(_CODES[info["dtype"]]).itemsize
        if offs[1] - offs[0] != need:
            raise corrupt(f"entry {name!r} of shape {tuple(shape)} and dtype {info['dtype']} needs {need} bytes; "
                          f"data_offsets give {offs[1] - offs[0]}")
    return header, data


def load_state_dict(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read a safetensors file (from clnn or PyTorch) as ``{name: NumPy array}``.

    Pass the result to ``model.load_state_dict``, which checks names and shapes before changing anything.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is truncated or its header is malformed (the message says how).

    Example:
        >>> model.load_state_dict(clnn.load_state_dict("model.safetensors"))
    """
    header, data = _read(path)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = np.dtype(_CODES[info["dtype"]]).newbyteorder("<")
        begin, end = info["data_offsets"]
        arr = np.frombuffer(data[begin:end], dtype=dt).reshape(info["shape"])
        out[name] = arr.astype(dt.newbyteorder("="), copy=True)
    return out


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The ``__metadata__`` strings of a safetensors file (empty when it has none)."""
    return dict(_read(path)[0].get("__metadata__", {}))
