"""autocast's dtype rules against torch.autocast: which ops run in the half type, which in float32, what
autocast leaves alone.

The rules are the host's (clnn/amp.py), the same on every device, so the CI matrix runs this file once (in the
Intel part); the half kernels' results are checked on every device by test_amp.py and test_half_ops.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import clnn
from clnn import functional as F

TORCH = {clnn.float32: torch.float32, clnn.bfloat16: torch.bfloat16, clnn.float16: torch.float16}

# (name, clnn fn, torch fn, input shapes, integer target or None)
OPS = [
    ("matmul", clnn.matmul, torch.matmul, [(4, 8), (8, 5)]),
    ("linear", lambda x, w, b: clnn.nn.Linear(8, 5)(x), lambda x, w, b: TF.linear(x, w, b), [(4, 8), (5, 8), (5,)]),
    ("gemm_bias", lambda x, w, b: clnn.gemm(x, w, b, beta=1.0, trans_b=True), TF.linear, [(4, 8), (5, 8), (5,)]),
    ("conv2d", lambda x, w: F.conv2d(x, w), TF.conv2d, [(2, 3, 6, 6), (4, 3, 3, 3)]),
    ("conv1d", lambda x, w: F.conv1d(x, w), TF.conv1d, [(2, 3, 9), (4, 3, 3)]),
    ("conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w), TF.conv_transpose2d, [(2, 3, 5, 5), (3, 4, 3, 3)]),
    ("mse_loss", F.mse_loss, TF.mse_loss, [(4, 8), (4, 8)]),
    ("l1_loss", F.l1_loss, TF.l1_loss, [(4, 8), (4, 8)]),
    ("bce_logits", F.binary_cross_entropy_with_logits, TF.binary_cross_entropy_with_logits, [(4, 8), (4, 8)]),
    ("relu", F.relu, torch.relu, [(4, 8)]),
    ("sigmoid", F.sigmoid, torch.sigmoid, [(4, 8)]),
    ("max_pool2d", lambda x: F.max_pool2d(x, 2), lambda x: TF.max_pool2d(x, 2), [(2, 3, 6, 6)]),
    ("add_mixed", lambda a, b: a + b.astype(clnn.float32), lambda a, b: a + b.float(), [(4, 8), (4, 8)]),
    ("mul_mixed", lambda a, b: a.astype(clnn.float32) * b, lambda a, b: a.float() * b, [(4, 8), (4, 8)]),
    ("max", lambda x: x.max(), torch.max, [(4, 8)]),
    ("batch_norm", lambda x: F.batch_norm(x, None, None, training=True),
     lambda x: TF.batch_norm(x, None, None, training=True), [(4, 3, 5)]),
]

# On CUDA's float32 list, which clnn follows for both half types (PyTorch's CPU bfloat16 path keeps these in
# bfloat16, so the expected dtype is written down instead of read from torch).
FLOAT32_OPS = [
    ("softmax", lambda x: F.softmax(x, axis=1)),
    ("log_softmax", lambda x: F.log_softmax(x, axis=1)),
    ("logsumexp", lambda x: clnn.logsumexp(x, axis=1)),
    ("sum", lambda x: x.sum()),
    ("mean", lambda x: x.mean()),
    ("layer_norm", lambda x: F.layer_norm(x, (8,))),
    ("cross_entropy", lambda x: F.cross_entropy(x, np.arange(4) % 8)),
    ("nll_loss", lambda x: F.nll_loss(x, np.arange(4) % 8)),
]


@pytest.mark.parametrize("half", [clnn.bfloat16, clnn.float16], ids=str)
@pytest.mark.parametrize("name, fn, ref, shapes", OPS, ids=[o[0] for o in OPS])
def test_output_dtype_matches_torch_autocast(dev, rng, half, name, fn, ref, shapes):
    """Inputs float32 and, for ops on neither list, a half copy: the dtype out equals torch's (CPU autocast
    with bfloat16; float16's lists are the same)."""
    host = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    unlisted = name in ("relu", "sigmoid", "max_pool2d", "max", "add_mixed", "mul_mixed", "batch_norm")
    with clnn.use_device(dev):
        xs = [clnn.tensor(a, dtype=half if unlisted else clnn.float32) for a in host]
        with clnn.autocast(half):
            out = fn(*xs)
    ts = [torch.tensor(a).to(torch.bfloat16 if unlisted else torch.float32) for a in host]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = ref(*ts).dtype
    assert TORCH[out.dtype] == (TORCH[half] if want == torch.bfloat16 else want)


@pytest.mark.parametrize("half", [clnn.bfloat16, clnn.float16], ids=str)
@pytest.mark.parametrize("name, fn", FLOAT32_OPS, ids=[o[0] for o in FLOAT32_OPS])
def test_float32_list_returns_float32(dev, rng, half, name, fn):
    with clnn.use_device(dev):
        x = clnn.tensor(rng.standard_normal((4, 8)), dtype=half)
        with clnn.autocast(half):
            assert fn(x).dtype == clnn.float32
        assert fn(x).dtype == half  # outside autocast: the input's dtype


def test_float64_and_disabled_are_untouched(dev, rng):
    with clnn.use_device(dev):
        a = clnn.tensor(rng.standard_normal((3, 4)), dtype=clnn.float32)
        with clnn.autocast(clnn.bfloat16, enabled=False):
            assert clnn.matmul(a, a.T).dtype == clnn.float32
        with clnn.autocast(clnn.bfloat16), clnn.autocast(clnn.float16):  # the innermost rules
            assert clnn.matmul(a, a.T).dtype == clnn.float16
        if dev.fp64:
            d = a.astype(clnn.float64)
            with clnn.autocast(clnn.bfloat16):
                assert clnn.matmul(d, d.T).dtype == clnn.float64
