"""Ops: argument checks and kernel launches, each recording its backward for autograd."""

from .activation import relu, sigmoid, tanh
from .creation import arange, empty, full, ones, ones_like, rand, randn, tensor, zeros, zeros_like
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
from .matmul import gemm, matmul
from .random import manual_seed
from .reduce import argmax, argmin, broadcast_to, logsumexp, max, mean, min, sum
from .shape import astype, cat, flatten, getitem, permute, reshape, to, transpose
