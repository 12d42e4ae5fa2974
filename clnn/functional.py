"""``clnn.functional`` (imported as ``F``): the differentiable ops layers are built from.

Each function validates its arguments, then launches kernels from ``kernels_cl/``.
"""

from .ops.elementwise import relu, sigmoid, tanh

__all__ = ["relu", "sigmoid", "tanh"]
