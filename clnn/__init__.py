"""clnn: a portable OpenCL compute toolkit for neural networks.

Tensors with autograd on any OpenCL device (AMD, Intel, NVIDIA GPUs, or a CPU through PoCL), kernels
compiled at run time from ``kernels_cl/`` and specialized per device.
"""

import sys

try:
    import pyopencl  # noqa: F401
except ModuleNotFoundError as err:
    if err.name != "pyopencl":
        raise
    raise ModuleNotFoundError(
        f"clnn needs PyOpenCL, which {sys.executable} cannot import: run clnn from the environment it was "
        "installed into (`.venv/bin/clnn`, `.venv/bin/python`, or `source .venv/bin/activate` first), "
        "or `pip install pyopencl` here",
        name="pyopencl",
    ) from None

__version__ = "0.1.0"  # before the submodules: tuning keys its database by it

from . import amp, data, datasets, functional, nn, optim, profiler, signal
from .amp import autocast
from .device import (
    Device,
    DeviceError,
    default_device,
    device,
    device_table,
    devices,
    limit_devices,
    memory_stats,
    set_default_device,
    use_device,
)
from .graphs import Graph, GraphError, graph
from .io import load_state_dict, save_state_dict
from .kernels import KernelBuildError
from .ops import (
    arange,
    argmax,
    argmin,
    cat,
    chunk,
    cumsum,
    einsum,
    empty,
    expand,
    full,
    gather,
    gemm,
    index_select,
    logsumexp,
    manual_seed,
    masked_fill,
    matmul,
    maximum,
    minimum,
    ones,
    ones_like,
    rand,
    randn,
    repeat,
    scatter_add,
    split,
    squeeze,
    stack,
    std,
    tensor,
    topk,
    tril,
    triu,
    unsqueeze,
    var,
    where,
    zeros,
    zeros_like,
)
from .tensor import Tensor, bfloat16, enable_grad, float16, float32, float64, is_grad_enabled, no_grad

__all__ = [
    "Device",
    "DeviceError",
    "Graph",
    "GraphError",
    "KernelBuildError",
    "Tensor",
    "amp",
    "arange",
    "autocast",
    "bfloat16",
    "float16",
    "float32",
    "float64",
    "data",
    "datasets",
    "load_state_dict",
    "nn",
    "optim",
    "profiler",
    "save_state_dict",
    "argmax",
    "argmin",
    "cat",
    "default_device",
    "device",
    "device_table",
    "devices",
    "empty",
    "enable_grad",
    "full",
    "gemm",
    "graph",
    "is_grad_enabled",
    "limit_devices",
    "logsumexp",
    "manual_seed",
    "matmul",
    "maximum",
    "memory_stats",
    "minimum",
    "no_grad",
    "ones",
    "ones_like",
    "rand",
    "randn",
    "set_default_device",
    "signal",
    "tensor",
    "use_device",
    "zeros",
    "zeros_like",
    "chunk", "cumsum", "einsum", "expand", "gather", "index_select", "masked_fill", "repeat", "scatter_add",
    "split", "squeeze", "stack", "std", "topk", "tril", "triu", "unsqueeze", "var", "where",
]
