"""``clnn.functional`` (imported as ``F``): the differentiable ops layers are built from.

Each function validates its arguments, then launches kernels from ``kernels_cl/``.
"""

from .ops.activation import (
    elu,
    gelu,
    hardswish,
    leaky_relu,
    log_softmax,
    relu,
    sigmoid,
    silu,
    softmax,
    softplus,
    tanh,
)
from .ops.attention import scaled_dot_product_attention
from .ops.conv import conv1d, conv2d, conv_transpose2d
from .ops.index import embedding
from .ops.loss import (
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from .ops.norm import batch_norm, dropout, layer_norm
from .ops.pool import adaptive_avg_pool2d, avg_pool2d, max_pool2d

__all__ = [
    "conv1d", "conv2d", "conv_transpose2d", "embedding",
    "elu", "gelu", "hardswish", "leaky_relu", "log_softmax", "relu", "sigmoid", "silu", "softmax", "softplus", "tanh",
    "batch_norm", "dropout", "layer_norm",
    "binary_cross_entropy_with_logits", "cross_entropy", "huber_loss", "l1_loss", "mse_loss", "nll_loss",
    "smooth_l1_loss",
    "adaptive_avg_pool2d", "avg_pool2d", "max_pool2d",
    "scaled_dot_product_attention"]
