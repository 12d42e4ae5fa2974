"""Layers with PyTorch's constructor arguments, parameter names, shapes and default initializations.

Weights start as PyTorch's do (``kaiming_uniform_(a=sqrt(5))``, i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
for weights and biases of Linear and convolutions; ones and zeros for normalization), drawn on the
device from the global generator (:func:`clnn.manual_seed`). Each ``forward`` is one call into
:mod:`clnn.functional`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import functional as F
from .. import graphs
from ..device import Device
from ..ops import creation
from ..ops.conv import conv_act
from ..ops.matmul import linear_act
from ..tensor import Tensor
from ..validation import require_choice, require_int, require_ints, require_number
from .module import Module, Parameter

__all__ = [
    "Linear", "Conv1d", "Conv2d", "ConvTranspose2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "BatchNorm1d", "BatchNorm2d", "LayerNorm", "Dropout", "Flatten", "Identity", "ReLU", "LeakyReLU", "GELU",
    "SiLU", "Sigmoid", "Tanh", "Softmax",
]


def _uniform(shape: tuple[int, ...], bound: float, device: Any, dtype: Any) -> Parameter:
    """A parameter drawn from U(-bound, bound) on the device."""
    u = creation.rand(*shape, device=device, dtype=dtype or np.float32)
    return Parameter(u * (2 * bound) - bound)


def _filled(shape: tuple[int, ...], value: float, device: Any, dtype: Any) -> Tensor:
    return creation.full(shape, value, dtype=dtype or np.float32, device=device)


class Identity(Module):
    """Returns its input."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


class Linear(Module):
    """``y = x @ weight.T + bias``: weight (out_features, in_features), bias (out_features,).

    Shapes: x (*, in_features) -> (*, out_features).

    Example:
        >>> fc = nn.Linear(784, 10)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device: str | int | Device | None = None, dtype: Any = None) -> None:
        super().__init__()
        self.in_features = require_int("Linear: in_features", in_features, 1)
        self.out_features = require_int("Linear: out_features", out_features, 1)
        bound = 1 / math.sqrt(in_features)
        self.weight = _uniform((out_features, in_features), bound, device, dtype)
        self.bias = _uniform((out_features,), bound, device, dtype) if bias else None
        if not bias:
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_fused(x, "none")

    def forward_fused(self, x: Tensor, activation: str) -> Tensor:
        """``activation(self(x))`` as one GEMM launch (``nn.Sequential`` calls it for a following activation)."""
        if not isinstance(x, Tensor):
            raise TypeError(f"Linear: x expects a clnn.Tensor; got {type(x).__name__}")
        if x.ndim < 1 or x.shape[-1] != self.in_features:
            raise ValueError(f"Linear: x expects shape (*, {self.in_features}); got {x.shape}")
        return linear_act(x, self.weight, self.bias, activation)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class _ConvNd(Module):
    _nd = 2
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any, padding: Any,
                 dilation: Any, groups: int, bias: bool, padding_mode: str, device: Any, dtype: Any,
                 output_padding: Any = 0) -> None:
        super().__init__()
        name, nd = type(self).__name__, self._nd
        self.in_channels = require_int(f"{name}: in_channels", in_channels, 1)
        self.out_channels = require_int(f"{name}: out_channels", out_channels, 1)
        self.groups = require_int(f"{name}: groups", groups, 1)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) expect to be "
                             f"divisible by groups; got groups={groups}")
        if padding_mode != "zeros":
            raise ValueError(f"{name}: padding_mode expects 'zeros' (the only mode clnn has); got {padding_mode!r}")
        self.kernel_size = require_ints(f"{name}: kernel_size", kernel_size, nd, 1)
        self.stride = require_ints(f"{name}: stride", stride, nd, 1)
        self.dilation = require_ints(f"{name}: dilation", dilation, nd, 1)
        self.padding = padding if isinstance(padding, str) else require_ints(f"{name}: padding", padding, nd, 0)
        if isinstance(padding, str) and (padding not in ("same", "valid") or self._transposed):
            raise ValueError(f"{name}: padding expects an int, a tuple or 'same'/'valid'; got {padding!r}")
        self.output_padding = require_ints(f"{name}: output_padding", output_padding, nd, 0)
        self.padding_mode = padding_mode
        if self._transposed:
            shape = (in_channels, out_channels // groups, *self.kernel_size)
        else:
            shape = (out_channels, in_channels // groups, *self.kernel_size)
        fan_in = shape[1] * math.prod(self.kernel_size)  # torch computes it from weight.shape[1]
        bound = 1 / math.sqrt(fan_in)
        self.weight = _uniform(shape, bound, device, dtype)
        self.bias = _uniform((out_channels,), bound, device, dtype) if bias else None
        if not bias:
            self.register_parameter("bias", None)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding!r}" if isinstance(self.padding, str) else f", padding={self.padding}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")


class Conv1d(_ConvNd):
    """1-D convolution over (N, C_in, L): weight (out_channels, in_channels/groups, kernel_size)."""

    _nd = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int], stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def forward_fused(self, x: Tensor, activation: str) -> Tensor:
        """``activation(self(x))`` as one kernel (``nn.Sequential`` calls it for a following activation)."""
        return conv_act(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups, activation)


class Conv2d(_ConvNd):
    """2-D convolution over (N, C_in, H, W): weight (out_channels, in_channels/groups, kH, kW).

    Example:
        >>> conv = nn.Conv2d(1, 16, 3, padding=1)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int], stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    forward_fused = Conv1d.forward_fused


class ConvTranspose2d(_ConvNd):
    """2-D transposed convolution: weight (in_channels, out_channels/groups, kH, kW)."""

    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int], stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True,
                 dilation: Any = 1, padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype, output_padding)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                  self.groups, self.dilation)


class MaxPool2d(Module):
    """Max over ``kernel_size`` windows of (N, C, H, W); ``stride`` defaults to ``kernel_size``."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        if return_indices:
            raise ValueError("MaxPool2d: return_indices expects False (clnn does not return indices); got True")
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.ceil_mode = ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """Mean over ``kernel_size`` windows of (N, C, H, W); ``stride`` defaults to ``kernel_size``."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                            self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Mean pooling of (N, C, H, W) to ``output_size`` (an int, a pair, None keeps that dimension)."""

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class _BatchNorm(Module):
    _dims: tuple[int, ...] = (2, 3)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        name = type(self).__name__
        self.num_features = require_int(f"{name}: num_features", num_features, 1)
        if momentum is not None:
            require_number(f"{name}: momentum", momentum, 0, 1)
        self.eps, self.momentum, self.affine = eps, momentum, affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(_filled((num_features,), 1.0, device, dtype))
            self.bias = Parameter(_filled((num_features,), 0.0, device, dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self._batches = 0  # num_batches_tracked, counted on the host (clnn has no integer arithmetic kernels)
        if track_running_stats:
            self.register_buffer("running_mean", _filled((num_features,), 0.0, device, dtype))
            self.register_buffer("running_var", _filled((num_features,), 1.0, device, dtype))
            self.register_buffer("num_batches_tracked", creation.zeros((), dtype=np.int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def _sync_state(self) -> None:
        nbt = self._buffers.get("num_batches_tracked")
        if nbt is not None:
            self._buffers["num_batches_tracked"] = creation.tensor(np.int64(self._batches), device=nbt.device)

    def _state_loaded(self) -> None:
        nbt = self._buffers.get("num_batches_tracked")
        if nbt is not None:
            self._batches = int(nbt.item())

    def _count_batch(self) -> None:
        self._batches += 1

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        if not isinstance(x, Tensor):
            raise TypeError(f"{name}: x expects a clnn.Tensor; got {type(x).__name__}")
        if x.ndim not in self._dims:
            dims = " or ".join(f"{d}-D" for d in self._dims)
            raise ValueError(f"{name}: x expects {dims} input; got shape {x.shape}")
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            if self.momentum is None and graphs.capturing(x.device) is not None:
                raise graphs.GraphError(f"{name}: momentum=None (a cumulative average) weighs each batch by a count "
                                        "kept on the host, which a captured step cannot update; give momentum a value")
            graphs.each_replay(x.device, self._count_batch)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / self._batches
        use_batch = self.training or not self.track_running_stats
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_batch, momentum,
                            self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L) per channel, with running statistics for eval."""

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (N, C, H, W) per channel, with running statistics for eval.

    Example:
        >>> bn = nn.BatchNorm2d(16)
    """

    _dims = (4,)


class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` dims; weight ones and bias zeros of that shape."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
        self.normalized_shape = tuple(require_int("LayerNorm: normalized_shape", s, 1) for s in shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = Parameter(_filled(self.normalized_shape, 1.0, device, dtype)) if elementwise_affine else None
        self.bias = Parameter(_filled(self.normalized_shape, 0.0, device, dtype)) if elementwise_affine and bias \
            else None
        for pname in ("weight", "bias"):
            if getattr(self, pname) is None:
                self.register_parameter(pname, None)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class Dropout(Module):
    """Zero each element with probability ``p`` in training, scaling the rest by ``1 / (1 - p)``."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        self.p = require_number("Dropout: p", p, 0, 1)

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Flatten(Module):
    """Flatten dims ``start_dim`` .. ``end_dim`` into one: (N, C, H, W) -> (N, C*H*W) by default."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class ReLU(Module):
    """``max(x, 0)`` elementwise (``inplace`` is accepted for PyTorch compatibility; clnn never aliases)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    fused_activation = "relu"  # the ``FUSED_ACTS`` name a preceding layer's ``forward_fused`` applies in its store

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class LeakyReLU(Module):
    """``x if x > 0 else negative_slope * x``."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class GELU(Module):
    """Gaussian error linear unit; ``approximate="tanh"`` for the tanh approximation."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = require_choice("GELU: approximate", approximate, ("none", "tanh"))

    @property
    def fused_activation(self) -> str:
        return "gelu" if self.approximate == "none" else "gelu_tanh"

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """``x * sigmoid(x)``."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    fused_activation = "silu"

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))``."""

    fused_activation = "sigmoid"

    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class Tanh(Module):
    """Hyperbolic tangent."""

    fused_activation = "tanh"

    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Softmax(Module):
    """Softmax along ``dim`` (``None`` picks dim 0 for 0-, 1- and 3-D input, else 1, as PyTorch does)."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        dim = self.dim if self.dim is not None else (0 if x.ndim in (0, 1, 3) else 1)
        return F.softmax(x, dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
