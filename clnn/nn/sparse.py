"""``Embedding``: a lookup table of vectors, PyTorch's ``nn.Embedding``."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import functional as F
from ..device import Device
from ..ops import creation
from ..tensor import Tensor, no_grad
from ..validation import require_int
from .module import Module, Parameter

__all__ = ["Embedding"]


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by integer indices, drawn from N(0, 1).

    Row ``padding_idx`` starts at zero and receives no gradient. Shapes: indices (*) -> (*, embedding_dim).

    Example:
        >>> emb = nn.Embedding(100, 16, padding_idx=0)
        >>> emb(clnn.tensor([[1, 0, 5]])).shape
        (1, 3, 16)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 device: str | int | Device | None = None, dtype: Any = None) -> None:
        super().__init__()
        self.num_embeddings = require_int("Embedding: num_embeddings", num_embeddings, 1)
        self.embedding_dim = require_int("Embedding: embedding_dim", embedding_dim, 1)
        if padding_idx is not None:
            p = require_int("Embedding: padding_idx", padding_idx)
            if not -num_embeddings <= p < num_embeddings:
                raise ValueError(f"Embedding: padding_idx expects a value in [{-num_embeddings}, "
                                 f"{num_embeddings - 1}]; got {p}")
            padding_idx = p % num_embeddings
        self.padding_idx = padding_idx
        self.weight = Parameter(creation.randn(num_embeddings, embedding_dim, device=device,
                                               dtype=dtype or np.float32))
        if padding_idx is not None:
            with no_grad():
                self.weight[padding_idx] = 0.0

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"
