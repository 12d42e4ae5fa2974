"""Malformed input, tried systematically: each call gives a correct result or a clear Python exception.

One row per (public function, kind of bad input): wrong ranks, zero-size dimensions, zero or negative
strides, huge paddings, tensors on two devices, non-contiguous NumPy arrays, integer arrays where floats
are needed, NaN inputs, wrong types. A row either names the one exception and a message pattern, or gives
a NumPy reference the result must match. The exception follows ``clnn.validation``'s policy: TypeError for
a wrong type (or dtype), ValueError for a wrong value, shape or device, whichever module raises it.
After every row the device must still compute correctly (no corrupted later state).
``test_every_public_function_has_a_row`` lists public functions without rows.

Adding an op: add rows to ``CASES`` (``x(...)`` makes a float32 tensor on the device under test,
``other(...)`` one on a second device) and, if it is public, its name shows up as covered.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import clnn
import clnn.functional as F
from clnn import signal as sig

NAN = np.float32(np.nan)
_sdpa = F.scaled_dot_product_attention


@dataclass
class Case:
    id: str
    call: Callable[[Any], Any]  # receives the context ``c`` (see Ctx)
    raises: type[BaseException] | tuple[type[BaseException], ...] | None = None
    match: str = ""  # regex the message must contain
    expect: Callable[[Any], Any] | None = None  # NumPy reference for calls that succeed
    covers: tuple[str, ...] = ()  # public names this row exercises (default: the id's first word)
    tol: float = 1e-5


class Ctx:
    """Inputs for the rows: fixed pseudo-random arrays, tensors on the device under test and on another."""

    def __init__(self, dev: clnn.Device, other: clnn.Device) -> None:
        self.dev, self.other_dev = dev, other
        self.rng = np.random.default_rng(1234)

    def a(self, *shape: int) -> np.ndarray:
        # deterministic per shape, so ``call`` and ``expect`` see the same values
        return np.random.default_rng(sum(shape) * 7919 + len(shape)).standard_normal(shape).astype(np.float32)

    def x(self, *shape: int, requires_grad: bool = False) -> clnn.Tensor:
        return clnn.tensor(self.a(*shape), device=self.dev, requires_grad=requires_grad)

    def other(self, *shape: int) -> clnn.Tensor:
        return clnn.tensor(self.a(*shape), device=self.other_dev)

    def i(self, *values: int) -> clnn.Tensor:
        return clnn.tensor(np.array(values, np.int64), device=self.dev)

    def nan(self, *shape: int, at: int = 0) -> np.ndarray:
        v = self.a(*shape).copy()
        v.reshape(-1)[at] = NAN
        return v


def _softmax(v: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(v - np.max(v, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _quiet(fn: Callable, *args: Any) -> Any:
    with np.errstate(all="ignore"):
        return fn(*args)


T = TypeError
V = ValueError
CASES: list[Case] = [
    Case("graph of an int", lambda c: clnn.graph(1).__enter__(), T, "clnn.graph: g expects a clnn.Graph; got int"),
    Case("copy_ across devices", lambda c: c.x(2, 3).copy_(c.other(2, 3)), V, "copy_: x is on .* but src is on"),
    Case("copy_ a bad shape", lambda c: c.x(2, 3).copy_(c.a(3, 2)), V,
         r"copy_: cannot broadcast src of shape \(3, 2\) to x's shape \(2, 3\)"),
    Case("cat along axis 1", lambda c: clnn.cat([c.x(2, 3), c.x(2, 1)], axis=1),
         expect=lambda c: np.concatenate([c.a(2, 3), c.a(2, 1)], axis=1)),
    Case("cat a bare tensor", lambda c: clnn.cat(c.x(2, 3)), T, "cat: tensors expects a non-empty sequence"),
    Case("cat nothing", lambda c: clnn.cat([]), T, "cat: tensors expects a non-empty sequence"),
    Case("cat mismatched dims", lambda c: clnn.cat([c.x(2, 3), c.x(3, 3)], axis=1), V,
         r"cat: tensors\[1\] expects shape \(2, 3\) except along axis 1; got \(3, 3\)"),
    Case("cat mixed dtypes", lambda c: clnn.cat([c.x(2), c.x(2).astype(np.float16)]), T, "has dtype float32 but"),
    Case("cat axis out of range", lambda c: clnn.cat([c.x(2)], axis=1), V, "axis"),
    Case("cat across devices", lambda c: clnn.cat([c.x(2), c.other(2)]), V, "is on"),
    # ---- everyday tensor ops -------------------------------------------------------------------------
    Case("stack mismatched shapes", lambda c: clnn.stack([c.x(2, 3), c.x(3, 2)]), V,
         r"stack: tensors\[1\] expects shape \(2, 3\)"),
    Case("stack a bare tensor", lambda c: clnn.stack(c.x(2)), T, "stack: tensors expects a non-empty sequence"),
    Case("stack dim out of range", lambda c: clnn.stack([c.x(2)], dim=3), V, "stack: dim"),
    Case("split sections wrong sum", lambda c: clnn.split(c.x(5), [2, 2]), V, r"add up to 5.*\[2, 2\]"),
    Case("split zero size", lambda c: clnn.split(c.x(5), 0), V, "split_size expects a positive int"),
    Case("split float size", lambda c: clnn.split(c.x(5), 2.5), T, "split_size_or_sections"),
    Case("chunk zero", lambda c: clnn.chunk(c.x(5), 0), V, "chunk: chunks expects an int >= 1"),
    Case("squeeze dim out of range", lambda c: clnn.squeeze(c.x(1, 3), 2), V, "squeeze: dim"),
    Case("squeeze non-unit dim", lambda c: clnn.squeeze(c.x(2, 3), 1), expect=lambda c: c.a(2, 3)),
    Case("unsqueeze dim out of range", lambda c: clnn.unsqueeze(c.x(2), 3), V, "unsqueeze: dim"),
    Case("expand incompatible", lambda c: clnn.expand(c.x(2, 3), 4, 3), V, r"cannot expand shape \(2, 3\) to \(4, 3\)"),
    Case("expand -1 new dim", lambda c: clnn.expand(c.x(3), -1, 3), V, "no -1 among new ones"),
    Case("repeat too few sizes", lambda c: clnn.repeat(c.x(2, 3), 2), V, "at least 2 values"),
    Case("repeat negative", lambda c: clnn.repeat(c.x(2), -1), V, "repeat: sizes expects values >= 0"),
    Case("var integer", lambda c: clnn.var(c.i(1, 2)), T, "var: x expects a floating tensor"),
    Case("var one element", lambda c: clnn.var(c.x(1)), expect=lambda c: np.float32(np.nan)),
    Case("std correction string", lambda c: clnn.std(c.x(3), correction="1"), T, "std: correction"),
    Case("where non-bool condition", lambda c: clnn.where(c.x(3), c.x(3), 0.0), T,
         "where: condition expects a bool tensor"),
    Case("where shapes mismatch", lambda c: clnn.where(c.x(3) > 0, c.x(3), c.x(4)), V, r"\(3,\) and \(4,\)"),
    Case("where two numbers", lambda c: clnn.where(c.x(3) > 0, 1.0, 0.0), T, "a or b must be a clnn.Tensor"),
    Case("where across devices", lambda c: clnn.where(c.x(3) > 0, c.x(3), c.other(3)), V, "is on"),
    Case("masked_fill mask too big", lambda c: clnn.masked_fill(c.x(3), c.x(2, 3) > 0, 0.0), V,
         r"mask of shape \(2, 3\) does not broadcast"),
    Case("masked_fill nan", lambda c: clnn.masked_fill(c.x(4), c.x(4) > 0, np.nan),
         expect=lambda c: np.where(c.a(4) > 0, np.nan, c.a(4))),
    Case("gather index out of range", lambda c: clnn.gather(c.x(2, 3), 1, c.i(0, 3).reshape(2, 1)), IndexError,
         r"gather: index\[\(1, 0\)\] is 3, out of range for a dimension of size 3"),
    Case("gather negative index", lambda c: clnn.gather(c.x(2, 3), 1, c.i(0, -1).reshape(2, 1)), IndexError,
         "is -1, out of range"),
    Case("gather float index", lambda c: clnn.gather(c.x(2, 3), 1, c.x(2, 1)), T, "int32 or int64 tensor"),
    Case("gather index shape", lambda c: clnn.gather(c.x(2, 3), 1, c.i(0, 1, 2).reshape(3, 1)), V,
         r"index of shape \(3, 1\) expects sizes at most x's \(2, 3\) on every dim but dim 1"),
    Case("gather index rank", lambda c: clnn.gather(c.x(2, 3), 1, c.i(0, 1)), V, r"index expects 2 dimensions"),
    Case("scatter_add src shape", lambda c: clnn.scatter_add(c.x(2, 3), 1, c.i(0, 1).reshape(2, 1), c.x(1, 2)), V,
         r"src expects at least index's size \(2, 1\) on every dim; got \(1, 2\)"),
    Case("scatter_add index out of range",
         lambda c: clnn.scatter_add(c.x(2, 3), 0, c.i(2, 0, 1).reshape(1, 3), c.x(1, 3)), IndexError, "is 2"),
    Case("index_select 2-d index", lambda c: clnn.index_select(c.x(4), 0, c.i(0, 1).reshape(2, 1)), V,
         "index expects 1 dimension"),
    Case("index_select out of range", lambda c: clnn.index_select(c.x(4, 2), 0, c.i(4)), IndexError, "is 4"),
    Case("index_select index on another device",
         lambda c: clnn.index_select(c.x(4), 0, clnn.tensor([1], device=c.other_dev)), V, "is on"),
    Case("getitem index out of range", lambda c: c.x(4, 2)[[0, -5]], IndexError, r"index\[\(1,\)\] is -5"),
    Case("getitem boolean mask shape", lambda c: c.x(3, 2)[np.array([True, False])], IndexError,
         r"a boolean mask expects the shape of x \(3, 2\) or of its leading dims; got \(2,\)"),
    Case("getitem boolean mask and slice", lambda c: c.x(3, 2)[np.array([True, False, True]), :1], T,
         "a boolean mask is supported only alone"),
    Case("getitem index after slice", lambda c: c.x(3, 3)[:, [0, 1]], T, "only as the first item",
         covers=("getitem",)),
    Case("setitem shape mismatch", lambda c: c.x(4, 3).__setitem__(slice(0, 2), c.x(3, 3)), V,
         r"cannot broadcast value of shape \(3, 3\)"),
    Case("setitem requires grad", lambda c: c.x(3, requires_grad=True).__setitem__(0, 1.0), RuntimeError,
         "setitem: x requires grad"),
    Case("tril 1-d", lambda c: clnn.tril(c.x(3)), V, "tril: x expects at least 2 dimensions"),
    Case("triu float diagonal", lambda c: clnn.triu(c.x(3, 3), 0.5), T, "triu: diagonal expects an int"),
    Case("cumsum dim out of range", lambda c: clnn.cumsum(c.x(2, 3), 2), V, "cumsum: dim"),
    Case("cumsum zero-size", lambda c: clnn.cumsum(c.x(0, 3), 0), expect=lambda c: np.zeros((0, 3))),
    Case("cumsum nan", lambda c: clnn.cumsum(clnn.tensor(c.nan(4, at=1), device=c.dev), 0),
         expect=lambda c: np.cumsum(c.nan(4, at=1))),
    Case("topk k too large", lambda c: clnn.topk(c.x(2, 3), 4), V, r"topk: k expects a value in \[0, 3\]"),
    Case("topk negative k", lambda c: clnn.topk(c.x(3), -1), V, "topk: k expects an int >= 0"),
    Case("topk bool", lambda c: clnn.topk(c.x(3) > 0, 1), T, "topk: x expects a numeric tensor"),
    Case("einsum ellipsis", lambda c: clnn.einsum("...ij,...jk", c.x(2, 3), c.x(3, 2)), V,
         r"'\.\.\.' is not supported"),
    Case("einsum diagonal", lambda c: clnn.einsum("ii->i", c.x(3, 3)), V, "repeated index"),
    Case("einsum size mismatch", lambda c: clnn.einsum("ij,jk->ik", c.x(2, 3), c.x(4, 2)), V,
         "dim 'j' has size 3 in one operand and 4"),
    Case("einsum wrong operand count", lambda c: clnn.einsum("ij,jk->ik", c.x(2, 3)), V, "names 2 operands"),
    Case("einsum term rank", lambda c: clnn.einsum("ijk->i", c.x(2, 3)), V, "names 3 dims"),
    Case("embedding index out of range", lambda c: F.embedding(c.i(0, 5), c.x(5, 2)), IndexError,
         r"embedding: input\[\(1,\)\] is 5, out of range for a dimension of size 5"),
    Case("embedding negative index", lambda c: F.embedding(c.i(-1), c.x(5, 2)), IndexError, "is -1"),
    Case("embedding 1-d weight", lambda c: F.embedding(c.i(0), c.x(5)), V, "weight expects 2 dimensions"),
    Case("embedding padding_idx out of range", lambda c: F.embedding(c.i(0), c.x(5, 2), padding_idx=5), V,
         r"padding_idx expects a value in \[-5, 4\]"),
    Case("embedding float indices", lambda c: F.embedding(c.x(3), c.x(5, 2)), T, "int32 or int64"),
    # ---- creation ----------------------------------------------------------------------------------
    Case("tensor non-contiguous columns", lambda c: clnn.tensor(c.a(6, 8)[:, ::3], device=c.dev),
         expect=lambda c: c.a(6, 8)[:, ::3]),
    Case("tensor transposed", lambda c: clnn.tensor(c.a(5, 3).T, device=c.dev), expect=lambda c: c.a(5, 3).T),
    Case("tensor reversed", lambda c: clnn.tensor(c.a(9)[::-1], device=c.dev), expect=lambda c: c.a(9)[::-1]),
    Case("tensor fortran order", lambda c: clnn.tensor(np.asfortranarray(c.a(4, 6)), device=c.dev),
         expect=lambda c: c.a(4, 6)),
    Case("tensor broadcast view (zero strides)", lambda c: clnn.tensor(np.broadcast_to(c.a(3), (4, 3)), device=c.dev),
         expect=lambda c: np.broadcast_to(c.a(3), (4, 3))),
    Case("tensor zero-size", lambda c: clnn.tensor(np.zeros((0, 3), np.float32), device=c.dev),
         expect=lambda c: np.zeros((0, 3), np.float32)),
    Case("tensor strings", lambda c: clnn.tensor(["a", "b"], device=c.dev), T, "expected one of"),
    Case("tensor object array", lambda c: clnn.tensor([[1.0], [2.0, 3.0]], device=c.dev), V, "convert"),
    Case("tensor complex", lambda c: clnn.tensor(np.ones(3, np.complex64), device=c.dev), T, "complex64"),
    Case("tensor unknown dtype", lambda c: clnn.tensor([1.0], dtype="float7", device=c.dev), T, "dtype"),
    Case("zeros negative dim", lambda c: clnn.zeros(3, -1, device=c.dev), V, r"dimensions must be >= 0"),
    Case("zeros float dim", lambda c: clnn.zeros(2.5, device=c.dev), T, "expected ints"),
    Case("zeros zero-size", lambda c: clnn.zeros(0, 4, device=c.dev), expect=lambda c: np.zeros((0, 4))),
    Case("ones bool dim", lambda c: clnn.ones(True, device=c.dev), T, "expected ints"),
    Case("full nan", lambda c: clnn.full((2, 2), np.nan, device=c.dev), expect=lambda c: np.full((2, 2), np.nan)),
    Case("empty too many elements", lambda c: clnn.empty(2**20, 2**20, device=c.dev), V, r"2\*\*31 - 1"),
    Case("arange zero step", lambda c: clnn.arange(0, 5, 0, device=c.dev), V, "step"),
    Case("arange empty", lambda c: clnn.arange(5, 0, device=c.dev), expect=lambda c: np.arange(5, 0)),
    Case("rand negative dim", lambda c: clnn.rand(-2, device=c.dev), V, ">= 0"),
    Case("randn integer dtype", lambda c: clnn.randn(3, dtype=np.int32, device=c.dev), T, "floating"),
    Case("zeros_like list", lambda c: clnn.zeros_like([1.0, 2.0]), T, "clnn.Tensor"),
    Case("ones_like zero-size", lambda c: clnn.ones_like(c.x(0, 2)), expect=lambda c: np.ones((0, 2))),
    Case("device unknown spec", lambda c: clnn.device("no-such-device-xyz"), clnn.DeviceError, "available"),
    Case("device index out of range", lambda c: clnn.device(10**6), clnn.DeviceError, "out of range"),
    Case("device bad type", lambda c: clnn.device(1.5), T, "device spec"),
    # ---- elementwise ---------------------------------------------------------------------------------
    Case("add shapes mismatch", lambda c: c.x(3, 4) + c.x(4, 3), V, r"\(3, 4\).*\(4, 3\)"),
    Case("add mismatched devices", lambda c: c.x(3) + c.other(3), V, r"\.to\(device\)"),
    Case("add dtypes mismatch", lambda c: c.x(3) + clnn.tensor(c.a(3), dtype=np.float16, device=c.dev), T, "float16"),
    Case("add numpy non-contiguous", lambda c: c.x(4, 3) + c.a(3, 4).T,
         expect=lambda c: c.a(4, 3) + c.a(3, 4).T, covers=("add",)),
    Case("add zero-size broadcast", lambda c: c.x(0, 3) + c.x(1, 3), expect=lambda c: np.zeros((0, 3))),
    Case("add nan", lambda c: clnn.tensor(c.nan(5), device=c.dev) + 1, expect=lambda c: c.nan(5) + 1),
    Case("mul string", lambda c: c.x(3) * "a", T),
    Case("exp integer", lambda c: c.i(1, 2).exp(), T, "floating"),
    Case("log nan and negative", lambda c: clnn.tensor(np.array([np.nan, -1, 0, 1], np.float32), device=c.dev).log(),
         expect=lambda c: _quiet(np.log, np.array([np.nan, -1, 0, 1], np.float32)), covers=("log",)),
    Case("sqrt zero-size", lambda c: c.x(0).sqrt(), expect=lambda c: np.zeros(0)),
    Case("maximum nan", lambda c: clnn.maximum(clnn.tensor(c.nan(4), device=c.dev), c.x(4)),
         expect=lambda c: np.maximum(c.nan(4), c.a(4))),
    Case("minimum mismatched devices", lambda c: clnn.minimum(c.x(2), c.other(2)), V, "to\\(device\\)"),
    Case("compare nan", lambda c: clnn.tensor(c.nan(4), device=c.dev) < 0, expect=lambda c: c.nan(4) < 0,
         covers=("less",)),
    Case("pow integer tensor", lambda c: c.i(2, 3) ** 2.5, T),
    # ---- shape ops ------------------------------------------------------------------------------------
    Case("reshape wrong size", lambda c: c.x(3, 4).reshape(5, 2), V, r"\(3, 4\)"),
    Case("reshape two -1", lambda c: c.x(3, 4).reshape(-1, -1), V, "one -1"),
    Case("reshape negative", lambda c: c.x(3, 4).reshape(-3, 4), V),
    Case("reshape zero-size -1", lambda c: c.x(0, 4).reshape(-1, 2), expect=lambda c: np.zeros((0, 2))),
    Case("reshape zero-size ambiguous -1", lambda c: c.x(0, 4).reshape(0, -1), V),
    Case("permute not a permutation", lambda c: c.x(2, 3).permute(0, 0), V, "permutation"),
    Case("permute axis out of range", lambda c: c.x(2, 3).permute(0, 5), V, r"\[-2, 1\]"),
    Case("transpose zero-size", lambda c: c.x(0, 3).T, expect=lambda c: np.zeros((3, 0))),
    Case("getitem zero step", lambda c: c.x(5)[::0], V, "step cannot be zero"),
    Case("getitem negative step", lambda c: c.x(7, 3)[::-2, ::-1], expect=lambda c: c.a(7, 3)[::-2, ::-1]),
    Case("getitem out of bounds", lambda c: c.x(5)[5], IndexError, "out of bounds"),
    Case("getitem too many indices", lambda c: c.x(5)[1, 2], IndexError, "too many"),
    Case("getitem array index", lambda c: c.x(5)[np.array([1, 2])], expect=lambda c: c.a(5)[[1, 2]]),
    Case("getitem float array index", lambda c: c.x(5)[np.array([1.5])], T, "expects integer indices"),
    Case("getitem empty slice", lambda c: c.x(5, 2)[3:1], expect=lambda c: c.a(5, 2)[3:1]),
    Case("broadcast_to incompatible", lambda c: c.x(3).broadcast_to((2, 4)), V, "broadcast"),
    Case("astype bad dtype", lambda c: c.x(3).astype("float7"), T, "dtype"),
    Case("to unknown device", lambda c: c.x(3).to("no-such-device-xyz"), clnn.DeviceError, "available"),
    Case("flatten bad dims", lambda c: c.x(2, 3, 4).flatten(2, 1), V, "start_dim"),
    # ---- reductions -----------------------------------------------------------------------------------
    Case("sum zero-size axis", lambda c: c.x(0, 3).sum(axis=0), expect=lambda c: np.zeros(3)),
    Case("sum axis out of range", lambda c: c.x(2, 3).sum(axis=2), V, r"\[-2, 1\]"),
    Case("sum repeated axis", lambda c: c.x(2, 3).sum(axis=(1, 1)), V, "repeated"),
    Case("sum float axis", lambda c: c.x(2, 3).sum(axis=1.0), T),
    Case("sum integer tensor", lambda c: c.i(1, 2).sum(), T, "floating"),
    Case("sum nan", lambda c: clnn.tensor(c.nan(4, 70, at=75), device=c.dev).sum(axis=1),
         expect=lambda c: c.nan(4, 70, at=75).sum(axis=1), tol=1e-4),
    Case("mean zero-size", lambda c: c.x(0, 3).mean(axis=0), expect=lambda c: np.full(3, np.nan)),
    Case("max empty axis", lambda c: c.x(0, 3).max(axis=0), V, "empty"),
    Case("max nan", lambda c: clnn.tensor(c.nan(3, 5, at=7), device=c.dev).max(axis=1),
         expect=lambda c: c.nan(3, 5, at=7).max(axis=1)),
    Case("min nan long axis", lambda c: clnn.tensor(c.nan(2, 100, at=150), device=c.dev).min(axis=1),
         expect=lambda c: c.nan(2, 100, at=150).min(axis=1)),
    Case("argmax nan", lambda c: clnn.argmax(clnn.tensor(c.nan(2, 6, at=9), device=c.dev), axis=1),
         expect=lambda c: c.nan(2, 6, at=9).argmax(axis=1)),
    Case("argmin empty", lambda c: clnn.argmin(c.x(0)), V, "empty"),
    Case("argmax tuple axis", lambda c: clnn.argmax(c.x(2, 3), axis=(0, 1)), T),
    Case("logsumexp -inf row", lambda c: clnn.logsumexp(clnn.tensor(np.full((2, 3), -np.inf, np.float32),
                                                                       device=c.dev), axis=1),
         expect=lambda c: np.full(2, -np.inf)),
    Case("autocast integer dtype", lambda c: clnn.autocast(np.int32).__enter__(), T, "clnn.float16 or clnn.bfloat16"),
    # ---- matmul / gemm --------------------------------------------------------------------------------
    Case("matmul 0-d", lambda c: clnn.matmul(c.x(1).reshape(()), c.x(3)), V, "at least 1 dimension"),
    Case("matmul inner mismatch", lambda c: c.x(3, 4) @ c.x(5, 2), V, "inner dimensions 4 != 5"),
    Case("matmul zero inner", lambda c: c.x(3, 0) @ c.x(0, 2), expect=lambda c: np.zeros((3, 2))),
    Case("matmul zero rows", lambda c: c.x(0, 4) @ c.x(4, 2), expect=lambda c: np.zeros((0, 2))),
    Case("matmul batch mismatch", lambda c: c.x(2, 3, 4) @ c.x(3, 4, 2), V),
    Case("matmul mismatched devices", lambda c: c.x(3, 4) @ c.other(4, 2), V, "to\\(device\\)"),
    Case("matmul integer", lambda c: clnn.matmul(c.i(1, 2), c.i(3, 4)), T, "floating"),
    Case("matmul numpy transposed", lambda c: clnn.matmul(c.x(3, 4), c.a(2, 4).T),
         expect=lambda c: c.a(3, 4) @ c.a(2, 4).T, tol=1e-5),
    Case("matmul nan", lambda c: clnn.tensor(c.nan(2, 3), device=c.dev) @ c.x(3, 2),
         expect=lambda c: c.nan(2, 3) @ c.a(3, 2)),
    Case("gemm 3-D", lambda c: clnn.gemm(c.x(2, 3, 4), c.x(4, 2)), V, "2-D"),
    Case("gemm inner mismatch", lambda c: clnn.gemm(c.x(3, 4), c.x(3, 4)), V, "inner dimensions"),
    Case("gemm c wrong shape", lambda c: clnn.gemm(c.x(3, 4), c.x(4, 2), c.x(5), beta=1.0), V),
    Case("gemm c other device", lambda c: clnn.gemm(c.x(3, 4), c.x(4, 2), c.other(3, 2), beta=1.0), V),
    Case("gemm not a tensor", lambda c: clnn.gemm(c.a(3, 4), c.x(4, 2)), T, "clnn.Tensor"),
    # ---- activations, softmax -------------------------------------------------------------------------
    Case("relu integer", lambda c: F.relu(c.i(1, -2)), T, "floating"),
    Case("relu numpy array", lambda c: F.relu(c.a(3)), T, "clnn.Tensor"),
    Case("relu nan", lambda c: F.relu(clnn.tensor(c.nan(4), device=c.dev)), expect=lambda c: np.maximum(c.nan(4), 0)),
    Case("sigmoid zero-size", lambda c: F.sigmoid(c.x(0, 2)), expect=lambda c: np.zeros((0, 2))),
    Case("tanh nan", lambda c: F.tanh(clnn.tensor(c.nan(3), device=c.dev)), expect=lambda c: np.tanh(c.nan(3))),
    Case("leaky_relu string slope", lambda c: F.leaky_relu(c.x(3), "big"), T),
    Case("elu nan alpha", lambda c: F.elu(c.x(3), float("nan")), V, "NaN"),
    Case("gelu bad approximate", lambda c: F.gelu(c.x(3), approximate="fast"), V, "approximate"),
    Case("softplus zero beta", lambda c: F.softplus(c.x(3), beta=0), V, "beta"),
    Case("silu integer", lambda c: F.silu(c.i(3)), T),
    Case("hardswish zero-size", lambda c: F.hardswish(c.x(0)), expect=lambda c: np.zeros(0)),
    Case("softmax axis out of range", lambda c: F.softmax(c.x(2, 3), axis=2), V),
    Case("softmax integer", lambda c: F.softmax(c.i(1, 2), axis=0), T),
    Case("softmax nan row", lambda c: F.softmax(clnn.tensor(c.nan(2, 5), device=c.dev), axis=1),
         expect=lambda c: np.stack([np.full(5, np.nan), _softmax(c.a(2, 5)[1], 0)])),
    Case("softmax zero-size", lambda c: F.softmax(c.x(0, 4), axis=1), expect=lambda c: np.zeros((0, 4))),
    Case("log_softmax 0-d", lambda c: F.log_softmax(c.x(1).reshape(()), axis=0),
         expect=lambda c: np.zeros((), np.float32)),
    # ---- losses ---------------------------------------------------------------------------------------
    Case("cross_entropy target out of range", lambda c: F.cross_entropy(c.x(3, 4), np.array([0, 4, 1])), V,
         r"\[0, 3\]"),
    Case("cross_entropy negative target", lambda c: F.cross_entropy(c.x(3, 4), np.array([0, -1, 1])), V),
    Case("cross_entropy float target", lambda c: F.cross_entropy(c.x(3, 4), np.array([0.0, 1.0, 2.0])), T),
    Case("cross_entropy batch mismatch", lambda c: F.cross_entropy(c.x(3, 4), np.array([0, 1])), V),
    Case("cross_entropy bad reduction", lambda c: F.cross_entropy(c.x(3, 4), np.array([0, 1, 2]),
                                                                  reduction="avg"), V),
    Case("cross_entropy smoothing > 1", lambda c: F.cross_entropy(c.x(3, 4), np.array([0, 1, 2]),
                                                                  label_smoothing=1.5), V),
    Case("cross_entropy nan logits", lambda c: F.cross_entropy(clnn.tensor(c.nan(2, 3), device=c.dev),
                                                               np.array([0, 1]), reduction="none"),
         expect=lambda c: np.array([np.nan, -np.log(_softmax(c.a(2, 3)[1], 0)[1])]), tol=1e-5),
    Case("nll_loss target other device", lambda c: F.nll_loss(c.x(3, 4), clnn.tensor(np.array([0, 1, 2]),
                                                                                       device=c.other_dev)), V),
    Case("nll_loss 3-D target", lambda c: F.nll_loss(c.x(3, 4), np.zeros((3, 1, 1), np.int64)), V),
    Case("mse_loss shape mismatch", lambda c: F.mse_loss(c.x(3, 4), c.x(4, 3)), V),
    Case("mse_loss nan", lambda c: F.mse_loss(clnn.tensor(c.nan(3), device=c.dev), c.x(3)),
         expect=lambda c: np.float32(np.nan)),
    Case("l1_loss integer input", lambda c: F.l1_loss(c.i(1, 2), c.i(1, 2)), T),
    Case("bce_with_logits other device", lambda c: F.binary_cross_entropy_with_logits(c.x(3), c.other(3)), V,
         covers=("binary_cross_entropy_with_logits",)),
    Case("cross_entropy weight wrong length", lambda c: F.cross_entropy(c.x(3, 4), np.array([0, 1, 2]), c.x(5)), V,
         r"weight expects one value per class, shape \(4,\); got shape \(5,\)"),
    Case("cross_entropy weight list", lambda c: F.cross_entropy(c.x(3, 4), np.array([0, 1, 2]), [1.0] * 4), T,
         "weight expects a clnn.Tensor"),
    Case("cross_entropy probabilities wrong shape", lambda c: F.cross_entropy(c.x(3, 4), c.x(3, 5)), T,
         r"or class probabilities of the input's shape \(3, 4\); got dtype float32 of shape \(3, 5\)"),
    Case("cross_entropy probabilities with ignore_index", lambda c: F.cross_entropy(c.x(3, 4), c.x(3, 4),
                                                                                  ignore_index=0), V,
         "ignore_index applies to class-index targets only"),
    Case("cross_entropy smoothing < 0", lambda c: F.cross_entropy(c.x(3, 4), np.array([0, 1, 2]),
                                                                  label_smoothing=-0.1), V, "label_smoothing"),
    Case("cross_entropy float ignore_index", lambda c: F.cross_entropy(c.x(3, 4), np.array([0, 1, 2]),
                                                                       ignore_index=1.0), T, "ignore_index"),
    Case("cross_entropy ignore_index out of range is fine", lambda c: F.cross_entropy(
        c.x(3, 4), np.array([0, 9, 2]), ignore_index=9, reduction="sum"),
         expect=lambda c: -np.log(_softmax(c.a(3, 4), 1))[[0, 2], [0, 2]].sum()),
    Case("nll_loss weight other device", lambda c: F.nll_loss(c.x(3, 4), np.array([0, 1, 2]), c.other(4)), V),
    Case("nll_loss target shape mismatch", lambda c: F.nll_loss(c.x(3, 4, 2), np.zeros((3, 4), np.int64)), V,
         r"expected target shape \(3, 2\)"),
    Case("smooth_l1_loss negative beta", lambda c: F.smooth_l1_loss(c.x(3), c.x(3), beta=-1.0), V, "beta"),
    Case("smooth_l1_loss shape mismatch", lambda c: F.smooth_l1_loss(c.x(3), c.x(4)), V, "shape"),
    Case("huber_loss zero delta", lambda c: F.huber_loss(c.x(3), c.x(3), delta=0.0), V, "delta expects a number > 0"),
    Case("huber_loss target other device", lambda c: F.huber_loss(c.x(3), c.other(3)), V),
    Case("bce_with_logits weight not broadcastable", lambda c: F.binary_cross_entropy_with_logits(
        c.x(3, 4), c.x(3, 4), c.x(3)), V, r"weight of shape \(3,\) does not broadcast",
         covers=("binary_cross_entropy_with_logits",)),
    # ---- normalization, dropout -----------------------------------------------------------------------
    Case("batch_norm 1-D", lambda c: F.batch_norm(c.x(5), None, None, training=True), V),
    Case("batch_norm stats wrong size", lambda c: F.batch_norm(c.x(4, 3), c.x(5), c.x(5)), V),
    Case("batch_norm one value per channel", lambda c: F.batch_norm(c.x(1, 3), None, None, training=True), V),
    Case("batch_norm weight other device", lambda c: F.batch_norm(c.x(4, 3), None, None, c.other(3),
                                                                  training=True), V),
    Case("scaled_dot_product_attention key feature mismatch", lambda c: _sdpa(c.x(2, 3, 4), c.x(2, 5, 3), c.x(2, 5, 4)),
         V, r"key expects 4 features"),
    Case("scaled_dot_product_attention value rows mismatch", lambda c: _sdpa(c.x(3, 4), c.x(5, 4), c.x(6, 2)),
         V, r"value expects 5 rows"),
    Case("scaled_dot_product_attention batch mismatch", lambda c: _sdpa(c.x(2, 3, 4), c.x(3, 5, 4), c.x(3, 5, 4)),
         V, "same batch dims"),
    Case("scaled_dot_product_attention mask shape", lambda c: _sdpa(c.x(3, 4), c.x(5, 4), c.x(5, 2), c.x(3, 4)),
         V, r"attn_mask expects a shape that broadcasts to \(3, 5\); got \(3, 4\)"),
    Case("scaled_dot_product_attention mask dtype", lambda c: _sdpa(c.x(3, 4), c.x(5, 4), c.x(5, 2), c.i(1, 0, 1)),
         T, "attn_mask expects bool"),
    Case("scaled_dot_product_attention mask with is_causal", lambda c: _sdpa(c.x(3, 4), c.x(5, 4), c.x(5, 2),
         c.x(3, 5), is_causal=True), V, "attn_mask must be None when is_causal"),
    Case("scaled_dot_product_attention dropout 1", lambda c: _sdpa(c.x(3, 4), c.x(5, 4), c.x(5, 2), dropout_p=1.0),
         V, "dropout_p"),
    Case("scaled_dot_product_attention 1-d query", lambda c: _sdpa(c.x(4), c.x(5, 4), c.x(5, 2)), V, "query expects"),
    Case("scaled_dot_product_attention across devices", lambda c: _sdpa(c.x(3, 4), c.other(5, 4), c.x(5, 2)),
         V, "is on"),
    Case("layer_norm shape mismatch", lambda c: F.layer_norm(c.x(4, 3), (4,)), V),
    Case("layer_norm negative eps", lambda c: F.layer_norm(c.x(4, 3), 3, eps=-1.0), V),
    Case("layer_norm string eps", lambda c: F.layer_norm(c.x(4, 3), 3, eps="1e-5"), T, "eps"),
    Case("dropout p > 1", lambda c: F.dropout(c.x(3), 1.5), V, "p"),
    Case("dropout integer", lambda c: F.dropout(c.i(1, 2), 0.5), T),
    Case("dropout string p", lambda c: F.dropout(c.x(3), "half"), T, "p"),
    Case("dropout eval is identity", lambda c: F.dropout(c.x(4), 0.5, training=False), expect=lambda c: c.a(4)),
    # ---- convolution, pooling -------------------------------------------------------------------------
    Case("conv2d 3-D input", lambda c: F.conv2d(c.x(3, 5, 5), c.x(2, 3, 3, 3)), V),
    Case("conv2d channel mismatch", lambda c: F.conv2d(c.x(1, 3, 5, 5), c.x(2, 4, 3, 3)), V, "channel"),
    Case("conv2d zero stride", lambda c: F.conv2d(c.x(1, 3, 5, 5), c.x(2, 3, 3, 3), stride=0), V, "stride"),
    Case("conv2d negative stride", lambda c: F.conv2d(c.x(1, 3, 5, 5), c.x(2, 3, 3, 3), stride=-1), V, "stride"),
    Case("conv2d negative padding", lambda c: F.conv2d(c.x(1, 3, 5, 5), c.x(2, 3, 3, 3), padding=-1), V),
    Case("conv2d huge padding", lambda c: F.conv2d(c.x(1, 3, 5, 5), c.x(2, 3, 3, 3), padding=10**9), V,
         r"2\*\*31 - 1"),
    Case("conv2d float stride", lambda c: F.conv2d(c.x(1, 3, 5, 5), c.x(2, 3, 3, 3), stride=1.5), T, "stride"),
    Case("conv2d stride pair of one", lambda c: F.conv2d(c.x(1, 1, 5, 5), c.x(1, 1, 3, 3), stride=(2,)),
         expect=lambda c: F.conv2d(c.x(1, 1, 5, 5), c.x(1, 1, 3, 3), stride=2).numpy()),
    Case("conv2d kernel larger than input", lambda c: F.conv2d(c.x(1, 3, 2, 2), c.x(2, 3, 3, 3)), V),
    Case("conv2d groups mismatch", lambda c: F.conv2d(c.x(1, 4, 5, 5), c.x(3, 2, 3, 3), groups=2), V),
    Case("conv2d zero groups", lambda c: F.conv2d(c.x(1, 4, 5, 5), c.x(4, 4, 3, 3), groups=0), V),
    Case("conv2d same with stride", lambda c: F.conv2d(c.x(1, 3, 5, 5), c.x(2, 3, 3, 3), padding="same",
                                                       stride=2), V),
    Case("conv2d bad padding string", lambda c: F.conv2d(c.x(1, 3, 5, 5), c.x(2, 3, 3, 3), padding="full"), V),
    Case("conv2d weight other device", lambda c: F.conv2d(c.x(1, 3, 5, 5), c.other(2, 3, 3, 3)), V),
    Case("conv2d integer input", lambda c: F.conv2d(clnn.tensor(np.ones((1, 1, 3, 3), np.int32), device=c.dev),
                                                    clnn.tensor(np.ones((1, 1, 1, 1), np.int32), device=c.dev)), T),
    Case("conv2d zero batch", lambda c: F.conv2d(c.x(0, 3, 5, 5), c.x(2, 3, 3, 3)),
         expect=lambda c: np.zeros((0, 2, 3, 3))),
    Case("conv2d bias wrong size", lambda c: F.conv2d(c.x(1, 3, 5, 5), c.x(2, 3, 3, 3), c.x(3)), V),
    Case("conv1d 4-D input", lambda c: F.conv1d(c.x(1, 3, 5, 5), c.x(2, 3, 3)), V),
    Case("conv1d zero dilation", lambda c: F.conv1d(c.x(1, 3, 9), c.x(2, 3, 3), dilation=0), V),
    Case("conv_transpose2d bad output_padding", lambda c: F.conv_transpose2d(c.x(1, 3, 4, 4), c.x(3, 2, 3, 3),
                                                                             stride=1, output_padding=2), V),
    Case("conv_transpose2d channel mismatch", lambda c: F.conv_transpose2d(c.x(1, 3, 4, 4), c.x(2, 2, 3, 3)), V),
    Case("max_pool2d 2-D input", lambda c: F.max_pool2d(c.x(5, 5), 2), V),
    Case("max_pool2d zero stride", lambda c: F.max_pool2d(c.x(1, 1, 5, 5), 2, stride=0), V),
    Case("max_pool2d negative kernel", lambda c: F.max_pool2d(c.x(1, 1, 5, 5), -2), V),
    Case("max_pool2d float kernel", lambda c: F.max_pool2d(c.x(1, 1, 5, 5), 2.0), T, "kernel_size"),
    Case("max_pool2d huge padding", lambda c: F.max_pool2d(c.x(1, 1, 5, 5), 2, padding=10**9), V, "padding"),
    Case("max_pool2d nan", lambda c: F.max_pool2d(clnn.tensor(c.nan(1, 1, 2, 4), device=c.dev), 2),
         expect=lambda c: np.array([[[[np.nan, max(c.a(1, 1, 2, 4)[0, 0, :, 2:].ravel())]]]])),
    Case("max_pool2d integer", lambda c: F.max_pool2d(clnn.tensor(np.ones((1, 1, 4, 4), np.int32), device=c.dev), 2),
         T),
    Case("avg_pool2d zero divisor", lambda c: F.avg_pool2d(c.x(1, 1, 4, 4), 2, divisor_override=0), V),
    Case("avg_pool2d float divisor", lambda c: F.avg_pool2d(c.x(1, 1, 4, 4), 2, divisor_override=2.0), T),
    Case("avg_pool2d huge padding", lambda c: F.avg_pool2d(c.x(1, 1, 4, 4), 2, padding=10**9), V),
    Case("adaptive_avg_pool2d zero output", lambda c: F.adaptive_avg_pool2d(c.x(1, 1, 4, 4), 0),
         expect=lambda c: np.zeros((1, 1, 0, 0))),
    Case("adaptive_avg_pool2d zero-size input", lambda c: F.adaptive_avg_pool2d(c.x(1, 1, 0, 4), 2), V),
    # ---- signal ---------------------------------------------------------------------------------------
    Case("correlate bad mode", lambda c: sig.correlate(c.x(5), c.x(3), "wide"), V, "mode"),
    Case("correlate 3-D", lambda c: sig.correlate(c.x(2, 2, 2), c.x(2)), V),
    Case("correlate empty", lambda c: sig.correlate(c.x(0), c.x(3)), V),
    Case("correlate mismatched devices", lambda c: sig.correlate(c.x(5), c.other(3)), V),
    Case("correlate numpy non-contiguous", lambda c: sig.correlate(c.a(10)[::2], c.a(3)),
         expect=lambda c: np.correlate(c.a(10)[::2], c.a(3), "full"), tol=1e-5),
    Case("convolve integer", lambda c: sig.convolve(c.i(1, 2, 3), c.i(1, 1)), T),
    Case("convolve nan", lambda c: sig.convolve(clnn.tensor(c.nan(4), device=c.dev), c.x(2)),
         expect=lambda c: np.convolve(c.nan(4), c.a(2))),
    Case("correlation_lags bad mode", lambda c: sig.correlation_lags(5, 3, "wide"), V),
    Case("correlation_lags negative length", lambda c: sig.correlation_lags(-5, 3), V),
    Case("correlation_lags float length", lambda c: sig.correlation_lags(5.0, 3), T),
    # ---- layers, optimizers, loader: the same mistake raises the same type as in the ops ----------------
    Case("Conv2d float kernel_size", lambda c: clnn.nn.Conv2d(3, 2, 2.5), T, "kernel_size"),
    Case("Conv2d zero stride", lambda c: clnn.nn.Conv2d(3, 2, 3, stride=0), V, "stride"),
    Case("Linear zero features", lambda c: clnn.nn.Linear(0, 2), V, "in_features"),
    Case("Linear float features", lambda c: clnn.nn.Linear(2.0, 2), T, "in_features"),
    Case("SGD negative lr", lambda c: clnn.optim.SGD([c.x(2, requires_grad=True)], lr=-1.0), V, "lr"),
    Case("SGD string lr", lambda c: clnn.optim.SGD([c.x(2, requires_grad=True)], lr="fast"), T, "lr"),
    Case("Adam beta of one", lambda c: clnn.optim.Adam([c.x(2, requires_grad=True)], betas=(0.9, 1.0)), V, "betas"),
    Case("StepLR zero step_size", lambda c: clnn.optim.StepLR(clnn.optim.SGD([c.x(2, requires_grad=True)], lr=0.1),
                                                              step_size=0), V, "step_size"),
    Case("StepLR not an optimizer", lambda c: clnn.optim.StepLR(None, step_size=1), T, "Optimizer"),
    Case("DataLoader zero batch_size", lambda c: clnn.data.DataLoader(c.a(4, 2), batch_size=0), V, "batch_size"),
    Case("DataLoader float batch_size", lambda c: clnn.data.DataLoader(c.a(4, 2), batch_size=2.0), T, "batch_size"),
    Case("clip_grad_norm_ negative max_norm", lambda c: clnn.nn.utils.clip_grad_norm_([], -1.0), V, "max_norm"),
]


@pytest.fixture(scope="module")
def ctx() -> Ctx:
    dev = clnn.device()
    # a second device: the same OpenCL device behind its own context, queue and memory pool
    other = dataclasses.replace(dev, _context=None, _queue=None, _pool=None, _lock=threading.RLock())
    return Ctx(dev, other)


def _sane(c: Ctx) -> None:
    """The device still computes correctly after the row (no corrupted state)."""
    v = c.a(37)
    got = (clnn.tensor(v, device=c.dev) * 2).sum().item()
    assert abs(got - float(v.astype(np.float64).sum() * 2)) < 1e-3, "device state corrupted after the previous call"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(ctx, case):
    assert not isinstance(case.raises, tuple), f"{case.id}: one kind of mistake, one exception type"
    if case.raises is not None:
        with pytest.raises(case.raises) as err:
            case.call(ctx)
        msg = str(err.value)
        assert msg.strip(), f"{case.id}: {type(err.value).__name__} with an empty message"
        if case.match:
            assert re.search(case.match, msg), f"{case.id}: message {msg!r} lacks /{case.match}/"
    else:
        out = case.call(ctx)
        ref = np.asarray(case.expect(ctx))
        got = out.numpy() if isinstance(out, clnn.Tensor) else np.asarray(out)
        assert got.shape == ref.shape, f"{case.id}: shape {got.shape}, expected {ref.shape}"
        if ref.dtype == np.bool_ or got.dtype == np.bool_:
            np.testing.assert_array_equal(got, ref)
        else:
            np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=case.tol, atol=case.tol,
                                       equal_nan=True, err_msg=case.id)
    _sane(ctx)


# Public names that take no tensor input, so malformed tensors don't apply to them.
NO_INPUT = {"default_device", "device_table", "devices", "enable_grad", "is_grad_enabled", "no_grad",
            "manual_seed", "memory_stats", "set_default_device", "use_device", "limit_devices",
            "load_state_dict", "save_state_dict"}


def _covered() -> set[str]:
    names = set()
    for case in CASES:
        names |= set(case.covers) or {case.id.split()[0]}
    return names


def test_every_public_function_has_a_row():
    public = {n for n in clnn.__all__ if callable(getattr(clnn, n)) and not isinstance(getattr(clnn, n), type)}
    public |= set(F.__all__)
    public |= {n for n in ("correlate", "convolve", "correlation_lags") if hasattr(sig, n)}
    missing = sorted(public - NO_INPUT - _covered())
    assert not missing, f"public functions without a bad-input row in {__file__}: {missing}"
