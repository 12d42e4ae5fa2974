"""bfloat16 storage: host round trips, the kernels' conversions and safetensors/torch interchange, bit for bit
against ml_dtypes and PyTorch."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import clnn

BF16 = np.dtype(ml_dtypes.bfloat16)

# float32 words whose rounding to bfloat16 is a corner: signed zeros, infinities, NaNs of both signs and
# payloads, float32 and bfloat16 subnormals, exact ties (to even, either way), the largest finite float
# (rounds to infinity) and the largest value that rounds down to bfloat16's largest finite.
SPECIAL_WORDS = np.array([
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF,
    0x00000001, 0x807FFFFF, 0x00008000, 0x00018000, 0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF,
    0x7F7FFFFF, 0x7F7F7FFF, 0x3F800000, 0xC0490FDB,
], dtype=np.uint32)


def _float32_cases(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` random float32 words over every exponent, followed by the special ones."""
    words = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([words, SPECIAL_WORDS]).view(np.float32)


def _bits(a) -> np.ndarray:
    return np.asarray(a).view(np.uint16)


def _torch_bits(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(x).bfloat16().view(torch.int16).numpy().view(np.uint16)


def test_dtype_is_ml_dtypes_bfloat16():
    assert clnn.bfloat16 == BF16 and np.dtype("bfloat16") == clnn.bfloat16


@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (2, 3, 4, 5)])
def test_host_round_trip_is_exact(dev, rng, shape):
    host = (rng.standard_normal(shape) * 100).astype(BF16)
    t = clnn.tensor(host, device=dev)
    assert t.dtype == clnn.bfloat16 and t.shape == shape
    np.testing.assert_array_equal(_bits(t.numpy()), _bits(host))
    widened = clnn.tensor(host.astype(np.float32), dtype=clnn.bfloat16, device=dev)
    np.testing.assert_array_equal(_bits(widened.numpy()), _bits(host))


@pytest.mark.parametrize("n", [1, 7, 4097])
def test_device_rounding_matches_ml_dtypes_and_torch(dev, rng, n):
    x = _float32_cases(rng, n)
    got = _bits(clnn.tensor(x, device=dev).astype(clnn.bfloat16).numpy())
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got, _bits(x.astype(BF16)))  # NaNs too: sign kept, quiet payload 0x7FC0
    number = ~np.isnan(x)  # PyTorch makes every NaN +0x7FC0
    np.testing.assert_array_equal(got[number], _torch_bits(x)[number])


@pytest.mark.parametrize("dst", ["float32", "float64", "float16", "int32", "int64", "bool"])
def test_astype_from_bfloat16_matches_ml_dtypes(dev, rng, dst):
    if not dev.supports(np.dtype(dst)):
        pytest.skip(f"{dst} is not supported on {dev}")
    a = (rng.standard_normal(1023) * 50).astype(BF16)
    got = clnn.tensor(a, device=dev).astype(dst).numpy()
    np.testing.assert_array_equal(got, a.astype(dst))
    assert got.dtype == np.dtype(dst)


@pytest.mark.parametrize("src", ["float64", "float16", "int32", "int64", "bool"])
def test_astype_to_bfloat16_matches_ml_dtypes(dev, rng, src):
    if not dev.supports(np.dtype(src)):
        pytest.skip(f"{src} is not supported on {dev}")
    a = (rng.standard_normal(1023) * 50).astype(src)
    np.testing.assert_array_equal(_bits(clnn.tensor(a, device=dev).astype(clnn.bfloat16).numpy()),
                                  _bits(a.astype(np.float32).astype(BF16)))


@pytest.mark.parametrize("n", [1, 7, 4097])
@pytest.mark.parametrize("op", ["add", "mul", "div"])
def test_kernel_stores_round_like_torch(dev, rng, n, op):
    """An elementwise op loads bfloat16 (vector and scalar paths), computes in float32 and rounds its store
    to nearest even: PyTorch's CPU bfloat16 ops do exactly that, so the words agree."""
    a, b = (rng.standard_normal(n).astype(BF16) for _ in range(2))
    ta, tb = (torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) for v in (a, b))
    ours = getattr(clnn.tensor(a, device=dev), f"__{op if op != 'div' else 'truediv'}__")(clnn.tensor(b, device=dev))
    theirs = getattr(torch, op)(ta, tb)
    np.testing.assert_array_equal(_bits(ours.numpy()), theirs.view(torch.int16).numpy().view(np.uint16))


def test_safetensors_interchange_with_torch_is_bit_exact(dev, rng, tmp_path):
    w = torch.from_numpy(rng.standard_normal((5, 3)).astype(np.float32)).bfloat16()
    save_file({"w": w}, tmp_path / "torch.safetensors")
    back = clnn.load_state_dict(tmp_path / "torch.safetensors")["w"]
    assert back.dtype == clnn.bfloat16
    np.testing.assert_array_equal(_bits(back), w.view(torch.int16).numpy().view(np.uint16))
    clnn.save_state_dict({"w": clnn.tensor(back, device=dev)}, tmp_path / "clnn.safetensors")
    theirs = load_file(tmp_path / "clnn.safetensors")["w"]
    assert theirs.dtype == torch.bfloat16 and torch.equal(theirs, w)


def test_torch_bfloat16_state_dict_loads_into_modules(dev, rng):
    ref = torch.nn.Linear(3, 4).bfloat16()
    model = clnn.nn.Linear(3, 4).to(dev, clnn.bfloat16)
    model.load_state_dict(ref.state_dict())
    assert model.weight.dtype == clnn.bfloat16
    np.testing.assert_array_equal(_bits(model.weight.numpy()), _bits(clnn.io.to_numpy(ref.weight)))
    model32 = clnn.nn.Linear(3, 4).to(dev)
    model32.load_state_dict(ref.state_dict())  # widened exactly
    np.testing.assert_array_equal(model32.weight.numpy(), ref.weight.detach().float().numpy())
