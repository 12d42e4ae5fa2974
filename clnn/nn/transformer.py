"""``MultiheadAttention`` and the Transformer encoder and decoder, with PyTorch's arguments, parameter names,
shapes, initialization and ``state_dict`` layout (``load_state_dict(torch_module.state_dict())`` works).

Without ``need_weights`` attention is one fused :func:`F.scaled_dot_product_attention` call, masks passed as
broadcasting views ((N, 1, 1, S) key padding, (1, 1, L, S) or (N, H, L, S) attention masks), so no (N H, L, S)
tensor is made; with it, scores, softmax and weights are explicit, as torch's.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import functional as F
from ..ops import broadcast_to, cat, creation, log
from ..ops.attention import multi_head_attention
from ..ops.matmul import linear_act
from ..tensor import Tensor
from ..validation import require_choice, require_int, require_number, require_tensor
from .containers import ModuleList
from .layers import Dropout, LayerNorm, Linear
from .module import Module, Parameter, fusing

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
           "TransformerDecoder"]


def _xavier(shape: tuple[int, int], device: Any, dtype: Any) -> Parameter:
    bound = math.sqrt(6 / (shape[0] + shape[1]))
    u = creation.rand(*shape, device=device, dtype=dtype or np.float32)
    return Parameter(u * (2 * bound) - bound)


def _additive(mask: Tensor, dtype: np.dtype) -> Tensor:
    """A mask as scores to add: a bool mask (True: masked out, torch's MHA convention) becomes -inf / 0."""
    if mask.dtype == np.bool_:
        return log((mask == False).astype(dtype))  # noqa: E712 (elementwise): log(1) = 0, log(0) = -inf
    return mask.astype(dtype)


def _pad_keys(mask: Tensor, extra: int) -> Tensor:
    """``mask`` with ``extra`` more key columns that mask nothing (False, or 0 added), as torch pads its masks for
    ``bias_k`` and the zero key."""
    if not extra:
        return mask
    return cat([mask, creation.zeros(*mask.shape[:-1], extra, dtype=mask.dtype, device=mask.device)], -1)


def _check_mask(name: str, mask: Any, shapes: tuple[tuple[int, ...], ...]) -> Tensor:
    m = require_tensor(f"MultiheadAttention: {name}", mask)
    if m.dtype != np.bool_ and m.dtype.kind != "f":
        raise TypeError(f"MultiheadAttention: {name} expects a bool or float tensor; got dtype {m.dtype}")
    if m.shape not in shapes:
        raise ValueError(f"MultiheadAttention: {name} expects shape {' or '.join(map(str, shapes))}; got {m.shape}")
    return m


class MultiheadAttention(Module):
    """Attention over ``num_heads`` heads of ``embed_dim // num_heads`` features each, as ``torch.nn``'s.

    Parameters: ``in_proj_weight`` (3 E, E), or ``q_proj_weight`` (E, E), ``k_proj_weight`` (E, kdim),
    ``v_proj_weight`` (E, vdim) when kdim or vdim differ from E; ``in_proj_bias`` (3 E,); ``out_proj``
    (a Linear E -> E); with ``add_bias_kv``, ``bias_k`` and ``bias_v`` (1, 1, E). Projections are
    Xavier-uniform, their biases zero, ``bias_k``/``bias_v`` Xavier-normal (std 1/sqrt(E)).

    ``add_bias_kv`` appends ``bias_k``/``bias_v`` to the projected keys and values as one more key, then
    ``add_zero_attn`` a key and value of zeros; masks get a column for each that masks nothing, as torch's.

    Shapes: query (L, N, E) (or (N, L, E) with ``batch_first``, or (L, E) unbatched), key (S, N, kdim),
    value (S, N, vdim). ``key_padding_mask`` (N, S) (or (S,)), ``attn_mask`` (L, S) or (N num_heads, L, S);
    bool masks mark excluded keys with True, float masks are added to the scores.

    Example:
        >>> mha = nn.MultiheadAttention(64, 8, batch_first=True)
        >>> out, weights = mha(x, x, x, key_padding_mask=pad)   # x (N, L, 64) -> (N, L, 64), (N, L, L)
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.embed_dim = require_int("MultiheadAttention: embed_dim", embed_dim, 1)
        self.num_heads = require_int("MultiheadAttention: num_heads", num_heads, 1)
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) expects to be divisible by num_heads; "
                             f"got num_heads={num_heads}")
        self.dropout = require_number("MultiheadAttention: dropout", dropout, 0, 1, high_open=True)
        self.kdim = embed_dim if kdim is None else require_int("MultiheadAttention: kdim", kdim, 1)
        self.vdim = embed_dim if vdim is None else require_int("MultiheadAttention: vdim", vdim, 1)
        self.head_dim, self.batch_first = embed_dim // num_heads, batch_first
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = _xavier((3 * embed_dim, embed_dim), device, dtype)
        else:
            self.q_proj_weight = _xavier((embed_dim, embed_dim), device, dtype)
            self.k_proj_weight = _xavier((embed_dim, self.kdim), device, dtype)
            self.v_proj_weight = _xavier((embed_dim, self.vdim), device, dtype)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(creation.zeros(3 * embed_dim, dtype=dtype or np.float32, device=device))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if bias:
            self.out_proj.bias = Parameter(creation.zeros(embed_dim, dtype=dtype or np.float32, device=device))
        for name in ("bias_k", "bias_v"):
            std = 1 / math.sqrt(embed_dim)  # xavier_normal_ of (1, 1, E): fan_in = fan_out = E
            self.register_parameter(name, Parameter(creation.randn(1, 1, embed_dim, dtype=dtype or np.float32,
                                                                   device=device) * std) if add_bias_kv else None)
        self.add_zero_attn = bool(add_zero_attn)

    @property
    def _extra_keys(self) -> int:
        """Keys appended to the projected ones: ``bias_k`` and the zero key."""
        return (self.bias_k is not None) + self.add_zero_attn

    def _append_keys(self, x: Tensor, bias: Tensor | None, seq: int) -> Tensor:
        """Projected keys or values x ((S, N, E), or (N, S, E) when ``seq`` is 1) with ``bias`` (1, 1, E) and
        the zero key appended along the sequence."""
        one = (1, x.shape[1], x.shape[2]) if seq == 0 else (x.shape[0], 1, x.shape[2])
        parts = [x] + ([broadcast_to(bias, one)] if bias is not None else [])
        if self.add_zero_attn:
            parts.append(creation.zeros(*one, dtype=x.dtype, device=x.device))
        return cat(parts, seq) if len(parts) > 1 else x

    def _weights(self) -> tuple[Tensor, ...]:
        """(w_q, w_k, w_v, b_q, b_k, b_v)."""
        e, b = self.embed_dim, self.in_proj_bias
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            ws = (w[:e], w[e:2 * e], w[2 * e:])
        else:
            ws = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        return (*ws, *((None,) * 3 if b is None else (b[:e], b[e:2 * e], b[2 * e:])))

    def _check(self, query: Any, key: Any, value: Any) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = (require_tensor(f"MultiheadAttention: {n}", t) for n, t in
                   (("query", query), ("key", key), ("value", value)))
        if q.ndim not in (2, 3) or k.ndim != q.ndim or v.ndim != q.ndim:
            raise ValueError(f"MultiheadAttention: query, key and value expect all 3-D (batched) or all 2-D; got "
                             f"{q.shape}, {k.shape}, {v.shape}")
        for n, t, d in (("query", q, self.embed_dim), ("key", k, self.kdim), ("value", v, self.vdim)):
            if t.shape[-1] != d:
                raise ValueError(f"MultiheadAttention: {n} expects {d} features; got shape {t.shape}")
        if k.shape[:-1] != v.shape[:-1]:
            raise ValueError(f"MultiheadAttention: key and value expect the same sequence and batch dims; got "
                             f"{k.shape}, {v.shape}")
        seq, batch = (1, 0) if self.batch_first and q.ndim == 3 else (0, 1)
        if q.ndim == 3 and q.shape[batch] != k.shape[batch]:
            raise ValueError(f"MultiheadAttention: query and key expect the same batch size; got {q.shape}, "
                             f"{k.shape} (batch_first={self.batch_first})")
        return q, k, v

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        """(output like query, attention weights (N, L, S) or (N, H, L, S) per head, or None)."""
        q, k, v = self._check(query, key, value)
        batched, seq = q.ndim == 3, int(self.batch_first and q.ndim == 3)
        lq, s, n, e, h = q.shape[seq], k.shape[seq], q.shape[1 - seq] if batched else 1, self.embed_dim, self.num_heads
        mask = self._mask(key_padding_mask, attn_mask, is_causal, need_weights, batched, (n, lq, s), q.dtype)
        if not batched:
            q, k, v = (t.reshape(t.shape[0], 1, t.shape[1]) for t in (q, k, v))
        seq_first = not seq  # the layout stays the caller's: (T, N, *) or (N, T, *)
        p = self.dropout if self.training else 0.0
        weights = None
        # fused self-attention takes one packed projection
        packed = not need_weights and query is key is value and self._qkv_same_embed_dim and not self._extra_keys
        if not packed:
            wq, wk, wv, bq, bk, bv = self._weights()
            q = linear_act(q, wq, bq)
            k = self._append_keys(linear_act(k, wk, bk), self.bias_k, seq)
            v = self._append_keys(linear_act(v, wv, bv), self.bias_v, seq)
        if need_weights:
            split, merge = ((1, 2, 0, 3), (2, 0, 1, 3)) if seq_first else ((0, 2, 1, 3), (0, 2, 1, 3))

            def heads(y: Tensor) -> Tensor:  # (T, N, E) or (N, T, E) -> (N, H, T, head_dim)
                return y.reshape(*y.shape[:2], h, self.head_dim).permute(split)

            qh, kh, vh = heads(q), heads(k), heads(v)
            scores = (qh * (1 / math.sqrt(self.head_dim))) @ kh.transpose(-1, -2)
            weights = F.dropout(F.softmax(scores if mask is None else scores + mask, -1), p, p > 0)
            out = (weights @ vh).permute(merge)
            out = out.reshape(*out.shape[:2], e)
            if average_attn_weights:
                weights = weights.mean(1)
            if not batched:
                weights = weights.reshape(*weights.shape[1:])
        else:
            causal = is_causal and mask is None
            if packed:
                qkv = linear_act(q, self.in_proj_weight, self.in_proj_bias)
                out = multi_head_attention(qkv, None, None, h, seq_first, mask, p, causal)
            else:
                out = multi_head_attention(q, k, v, h, seq_first, mask, p, causal)
        out = linear_act(out, self.out_proj.weight, self.out_proj.bias)
        if not batched:
            out = out.reshape(lq, e)
        return out, weights

    def _mask(self, kpm: Any, attn_mask: Any, is_causal: bool, need_weights: bool, batched: bool,
              nls: tuple[int, int, int], dtype: np.dtype) -> Tensor | None:
        """The one mask for the (N, H, L, S) scores, as a broadcasting view: bool (True: the key takes part, for
        the fused kernel) when it is one bool mask and no weights are wanted, else additive; None when there is
        none or ``is_causal`` replaces it (then attention is causal). Masks given for S keys get a column for
        each appended key."""
        (n, lq, s), h, extra = nls, self.num_heads, self._extra_keys
        if is_causal and attn_mask is None:
            raise ValueError("MultiheadAttention: is_causal=True is a hint that attn_mask is the causal mask and "
                             "needs that attn_mask; got attn_mask=None")
        masks = []
        if kpm is not None:
            m = _pad_keys(_check_mask("key_padding_mask", kpm, ((n, s),) if batched else ((s,),)), extra)
            masks.append(m.reshape(n, 1, 1, s + extra))
        if attn_mask is not None and not (is_causal and kpm is None and not need_weights):
            m = _pad_keys(_check_mask("attn_mask", attn_mask, ((lq, s), (n * h, lq, s))), extra)
            masks.append(m.reshape(1, 1, lq, s + extra) if m.ndim == 2 else m.reshape(n, h, lq, s + extra))
        if not masks:
            return None
        if len(masks) == 1 and masks[0].dtype == np.bool_ and not need_weights:
            return masks[0] == False  # noqa: E712 (elementwise)
        merged = _additive(masks[0], dtype)
        return merged if len(masks) == 1 else merged + _additive(masks[1], dtype)

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}, "
                f"batch_first={self.batch_first}")


_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}  # by name; a product's store applies them by the same names
_FUSED = {fn: name for name, fn in _ACTIVATIONS.items()}


def _activation(name: str, fn: str | Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    if callable(fn):
        return fn
    return _ACTIVATIONS[require_choice(f"{name}: activation", fn, tuple(_ACTIVATIONS))]


class _FeedForward(Module):
    """The layers' shared parts: ``linear1``, ``dropout``, ``linear2`` and the activation between them."""

    def _init_ff(self, d_model: int, dim_feedforward: int, dropout: float, activation: Any, bias: bool,
                 device: Any, dtype: Any) -> None:
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, device=device, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, device=device, dtype=dtype)
        self.activation = _activation(type(self).__name__, activation)

    def _ff_block(self, x: Tensor, drop: Dropout) -> Tensor:
        act = _FUSED.get(self.activation) or getattr(self.activation, "fused_activation", None)
        if act is not None and fusing():  # the activation in linear1's store: one launch, as nn.Sequential's
            return drop(self.linear2(self.dropout(self.linear1.forward_fused(x, act))))
        return drop(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoderLayer(_FeedForward):
    """Self-attention then a feed-forward block, each with a residual and a LayerNorm (after, or before with
    ``norm_first``), as ``torch.nn.TransformerEncoderLayer``.

    Shapes: src (S, N, d_model) ((N, S, d_model) with ``batch_first``; (S, d_model) unbatched); ``src_mask``
    (S, S) or (N nhead, S, S); ``src_key_padding_mask`` (N, S).
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[[Tensor], Tensor] = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            device=device, dtype=dtype)
        self._init_ff(d_model, dim_feedforward, dropout, activation, bias, device, dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device, dtype=dtype)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)

    def forward(self, src: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        def sa(x: Tensor) -> Tensor:
            out = self.self_attn(x, x, x, attn_mask=src_mask, key_padding_mask=src_key_padding_mask,
                                 need_weights=False, is_causal=is_causal)[0]
            return self.dropout1(out)

        x = src
        if self.norm_first:
            x = x + sa(self.norm1(x))
            return x + self._ff_block(self.norm2(x), self.dropout2)
        x = self.norm1(x + sa(x))
        return self.norm2(x + self._ff_block(x, self.dropout2))


class TransformerDecoderLayer(_FeedForward):
    """Self-attention, attention over ``memory``, then a feed-forward block, each with a residual and a
    LayerNorm (after, or before with ``norm_first``), as ``torch.nn.TransformerDecoderLayer``."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[[Tensor], Tensor] = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        kw = {"dropout": dropout, "bias": bias, "batch_first": batch_first, "device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, **kw)
        self._init_ff(d_model, dim_feedforward, dropout, activation, bias, device, dtype)
        self.norm_first = norm_first
        for i in (1, 2, 3):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device, dtype=dtype))
        self.dropout1, self.dropout2, self.dropout3 = Dropout(dropout), Dropout(dropout), Dropout(dropout)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        def sa(x: Tensor) -> Tensor:
            return self.dropout1(self.self_attn(x, x, x, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask,
                                                need_weights=False, is_causal=tgt_is_causal)[0])

        def mha(x: Tensor) -> Tensor:
            return self.dropout2(self.multihead_attn(x, memory, memory, attn_mask=memory_mask,
                                                     key_padding_mask=memory_key_padding_mask,
                                                     need_weights=False, is_causal=memory_is_causal)[0])

        x = tgt
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + mha(self.norm2(x))
            return x + self._ff_block(self.norm3(x), self.dropout3)
        x = self.norm1(x + sa(x))
        x = self.norm2(x + mha(x))
        return self.norm3(x + self._ff_block(x, self.dropout3))


class _Stack(Module):
    def _init_stack(self, layer: Module, num_layers: int, norm: Module | None) -> None:
        name = type(self).__name__
        self.layers = ModuleList([copy.deepcopy(layer) for _ in range(require_int(f"{name}: num_layers",
                                                                                     num_layers, 1))])
        self.num_layers, self.norm = num_layers, norm

    def _finish(self, x: Tensor) -> Tensor:
        return x if self.norm is None else self.norm(x)


class TransformerEncoder(_Stack):
    """``num_layers`` deep copies of ``encoder_layer`` (in ``layers``), then ``norm`` if given.
    ``enable_nested_tensor`` is accepted for PyTorch compatibility and changes nothing."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self._init_stack(encoder_layer, num_layers, norm)

    def forward(self, src: Tensor, mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None) -> Tensor:
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return self._finish(x)


class TransformerDecoder(_Stack):
    """``num_layers`` deep copies of ``decoder_layer`` (in ``layers``), then ``norm`` if given."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None) -> None:
        super().__init__()
        self._init_stack(decoder_layer, num_layers, norm)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return self._finish(x)
