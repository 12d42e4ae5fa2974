"""Recurrent layers ``LSTM`` (with ``proj_size``) and ``GRU`` with PyTorch's constructor, parameter names, shapes,
initialization (every parameter U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))) and gate order; each layer is one
call of :func:`clnn.ops.rnn.rnn_layer`.
"""

from __future__ import annotations

import math
from typing import Any

from .. import functional as F
from ..device import Device
from ..ops.rnn import GATES, rnn_layer
from ..ops.shape import cat
from ..tensor import Tensor
from ..validation import require_float, require_int, require_number, require_tensor, same_device, same_dtype
from .layers import _uniform
from .module import Module

__all__ = ["LSTM", "GRU"]


class _RNNBase(Module):
    _mode = "lstm"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: str | int | Device | None = None, dtype: Any = None, proj_size: int = 0) -> None:
        super().__init__()
        name = type(self).__name__
        self.input_size = require_int(f"{name}: input_size", input_size, 1)
        self.hidden_size = require_int(f"{name}: hidden_size", hidden_size, 1)
        self.num_layers = require_int(f"{name}: num_layers", num_layers, 1)
        self.dropout = float(require_number(f"{name}: dropout", dropout, 0, 1))
        self.proj_size = require_int(f"{name}: proj_size", proj_size, 0)
        if proj_size and self._mode != "lstm":
            raise ValueError(f"{name}: proj_size is only supported by LSTM (expects 0); got {proj_size}")
        if proj_size >= hidden_size:
            raise ValueError(f"{name}: proj_size expects a value smaller than hidden_size ({hidden_size}); "
                             f"got {proj_size}")
        self.bias, self.batch_first, self.bidirectional = bool(bias), bool(batch_first), bool(bidirectional)
        g, bound, r = GATES[self._mode], 1 / math.sqrt(hidden_size), self.state_size
        kinds = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")
        self._weights: list[list[tuple[str, ...]]] = []
        for layer in range(num_layers):
            n_in = input_size if layer == 0 else r * self.num_directions
            names = []
            for suffix in ("", "_reverse")[: self.num_directions]:
                keys = tuple(f"{kind}_l{layer}{suffix}" for kind in kinds)
                gh = g * hidden_size
                shapes = ((gh, n_in), (gh, r), (gh,), (gh,), (proj_size, hidden_size))
                for key, shape in zip(keys, shapes):
                    if (bias or "bias" not in key) and (proj_size or "hr" not in key):
                        setattr(self, key, _uniform(shape, bound, device, dtype))
                names.append(keys)
            self._weights.append(names)

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def state_size(self) -> int:
        """h's width: ``proj_size`` when the LSTM projects, else ``hidden_size``."""
        return self.proj_size or self.hidden_size

    def _layer_weights(self, layer: int) -> list[tuple[Any, ...]]:
        return [tuple(self._parameters.get(k) for k in keys) for keys in self._weights[layer]]

    def _check_state(self, what: str, s: Any, x: Tensor, shape: tuple[int, ...]) -> None:
        name = type(self).__name__
        require_tensor(f"{name}: {what}", s)
        same_device(name, input=x, **{what: s})
        same_dtype(name, input=x, **{what: s})
        if s.shape != shape:
            raise ValueError(f"{name}: {what} expects shape {shape} for input of shape {x.shape}; got {s.shape}")

    def forward(self, input: Tensor, hx: Any = None) -> tuple[Tensor, Any]:  # noqa: A002
        name, lstm = type(self).__name__, self._mode == "lstm"
        require_tensor(f"{name}: input", input)
        require_float(f"{name}: input", input)
        same_device(name, input=input, weight_ih_l0=self.weight_ih_l0)
        same_dtype(name, input=input, weight_ih_l0=self.weight_ih_l0)
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise ValueError(f"{name}: input expects shape (L, {self.input_size}) or "
                             f"{'(N, L' if self.batch_first else '(L, N'}, {self.input_size}); got {input.shape}")
        batched = input.ndim == 3
        x = input if batched else input.reshape(input.shape[0], 1, self.input_size)
        if self.batch_first and batched:
            x = x.transpose(0, 1)
        t_len, batch = x.shape[:2]
        if t_len == 0 or batch == 0:
            raise ValueError(f"{name}: input expects a sequence length and batch size of at least 1; got {input.shape}")
        ld, r = self.num_layers * self.num_directions, self.state_size
        shape_h, shape_c = (((ld, batch, n) if batched else (ld, n)) for n in (r, self.hidden_size))
        h0 = c0 = None
        if hx is not None:
            if lstm:
                if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                    raise TypeError(f"{name}: hx expects a tuple (h_0, c_0); got {type(hx).__name__}")
                h0, c0 = hx
                self._check_state("c_0", c0, input, shape_c)
            else:
                h0 = hx
            self._check_state("h_0", h0, input, shape_h)
            if not batched:
                h0, c0 = (s if s is None else s.reshape(ld, 1, s.shape[-1]) for s in (h0, c0))
        d, hns, cns = self.num_directions, [], []
        for layer in range(self.num_layers):
            part = slice(layer * d, (layer + 1) * d)
            x, hn, cn = rnn_layer(self._mode, x, None if h0 is None else h0[part], None if c0 is None else c0[part],
                                  self._layer_weights(layer))
            hns.append(hn)
            cns.append(cn)
            if self.training and self.dropout and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
        states = [cat(s) if len(s) > 1 else s[0] for s in ((hns, cns) if lstm else (hns,))]
        if not batched:
            x = x.reshape(t_len, x.shape[-1])
            states = [s.reshape(ld, s.shape[-1]) for s in states]
        elif self.batch_first:
            x = x.transpose(0, 1)
        return x, (tuple(states) if lstm else states[0])

    def extra_repr(self) -> str:
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, bias={self.bias}, "
                f"batch_first={self.batch_first}, dropout={self.dropout}, bidirectional={self.bidirectional}"
                + (f", proj_size={self.proj_size}" if self.proj_size else ""))


class LSTM(_RNNBase):
    """Long short-term memory over a sequence, as ``torch.nn.LSTM`` (gates i, f, g, o).

    Shapes: input (L, N, H_in) (``(N, L, H_in)`` with ``batch_first``) or unbatched (L, H_in); hx an optional
    tuple (h_0, c_0), h_0 (num_layers * D, N, R) and c_0 (num_layers * D, N, H), or without N unbatched (zeros
    when absent). Returns ``output, (h_n, c_n)``: output (L, N, D * R) (batch first likewise), h_n and c_n
    shaped as h_0 and c_0. D is 2 when bidirectional; R is ``proj_size`` when it is not 0 (then each step's
    h_t = (o * tanh(c_t)) @ W_hr^T, with ``weight_hr_l{k}{_reverse}`` (proj_size, hidden_size)), else H.
    ``dropout`` applies to every layer's output but the last, in training.

    Raises:
        ValueError: a bad size, dropout outside [0, 1], proj_size negative or not below hidden_size; input or
            state shapes that do not match the layer.

    Example:
        >>> lstm = nn.LSTM(10, 20, num_layers=2, proj_size=8)
        >>> out, (h, c) = lstm(clnn.randn(5, 3, 10))   # out (5, 3, 8), h (2, 3, 8), c (2, 3, 20)
    """

    _mode = "lstm"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device: str | int | Device | None = None, dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, device, dtype,
                         proj_size)


class GRU(_RNNBase):
    """Gated recurrent unit over a sequence, as ``torch.nn.GRU`` (gates r, z, n with
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``).

    Shapes: as :class:`LSTM`, with one state: ``output, h_n = gru(input, h_0)``.

    Raises:
        ValueError: a bad size or dropout outside [0, 1]; input or state shapes that do not match the layer.

    Example:
        >>> gru = nn.GRU(10, 20, batch_first=True, bidirectional=True)
        >>> out, h = gru(clnn.randn(3, 5, 10))
    """

    _mode = "gru"
