"""``clnn.functional`` (imported as ``F``): the differentiable ops layers are built from.

Each function validates its arguments, then launches kernels from ``kernels_cl/``.
"""

from .ops.conv import conv1d, conv2d, conv_transpose2d
from .ops.elementwise import relu, sigmoid, tanh
from .ops.pool import adaptive_avg_pool2d, avg_pool2d, max_pool2d

__all__ = [
    "conv1d", "conv2d", "conv_transpose2d",
    "relu", "sigmoid", "tanh",
    "adaptive_avg_pool2d", "avg_pool2d", "max_pool2d"]
