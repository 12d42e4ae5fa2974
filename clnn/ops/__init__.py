"""Ops: argument checks and kernel launches, each recording its backward for autograd."""

from .activation import relu, sigmoid, tanh
from .creation import arange, empty, full, ones, ones_like, rand, randn, tensor, zeros, zeros_like
from .einsum import einsum
from .elementwise import (
    abs,
    add,
    clip,
    div,
    equal,
    exp,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    maximum,
    minimum,
    mul,
    neg,
    not_equal,
    pow,
    sqrt,
    sub,
)
from .index import copy_, gather, getitem, index_select, masked_fill, scatter_add, setitem, tril, triu, where
from .matmul import gemm, matmul
from .random import manual_seed
from .reduce import argmax, argmin, broadcast_to, expand, logsumexp, max, mean, min, repeat, std, sum, var
from .scan import cumsum, topk
from .shape import astype, cat, chunk, flatten, permute, reshape, split, squeeze, stack, to, transpose, unsqueeze
