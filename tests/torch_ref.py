"""Compare a clnn function with its PyTorch peer (float64 on the CPU): the output and every input's gradient."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from helpers import F32_TOL, assert_close, assert_sum_close

import clnn


def _upstream(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A random upstream gradient in ``dtype``. Half-width types draw magnitudes in [0.5, 2) with random signs:
    a standard normal near 0 (|g| < 0.1 one draw in 12) pushes a whole gradient such as a float16 mean's
    g / n below half's normal range (6.1e-5), where values keep only a few bits and no kernel can meet a
    relative tolerance."""
    if np.dtype(dtype).itemsize > 2:
        return rng.standard_normal(shape).astype(dtype)
    return (rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 2.0, shape)).astype(dtype)


def check_against_torch(
    fn: Callable[..., clnn.Tensor],
    ref: Callable[..., torch.Tensor],
    inputs: Sequence[np.ndarray],
    rng: np.random.Generator,
    tol: float = F32_TOL,
    dtype: np.dtype = np.float32,
    grads: Sequence[bool] | None = None,
    sum_magnitudes: Mapping[int, Callable[..., torch.Tensor]] | None = None,
) -> tuple[clnn.Tensor, list[clnn.Tensor]]:
    """Run ``fn(*tensors)`` and ``ref(*torch_tensors)`` on the same values, backward a random upstream
    gradient through both, and compare the outputs and the gradients of the inputs marked in ``grads``.

    Inputs are rounded to ``dtype`` first, so the reference sees exactly what clnn sees.
    ``sum_magnitudes[i](upstream, *torch_inputs)`` marks input ``i``'s gradient as a sum of signed terms and
    returns each element's sum of absolute terms: that gradient is checked with :func:`assert_sum_close`.
    """
    grads = [True] * len(inputs) if grads is None else list(grads)
    host = [np.asarray(a).astype(dtype) for a in inputs]
    xs = [clnn.tensor(a, requires_grad=g) for a, g in zip(host, grads)]
    ts = [torch.tensor(a.astype(np.float64), requires_grad=g) for a, g in zip(host, grads)]
    out, ref_out = fn(*xs), ref(*ts)
    assert out.shape == tuple(ref_out.shape), f"shape {out.shape} != reference {tuple(ref_out.shape)}"
    assert out.dtype == np.dtype(dtype)
    assert_close(out.numpy(), ref_out.detach().numpy(), tol, "forward")
    g = np.asarray(_upstream(rng, out.shape, dtype))
    out.backward(clnn.tensor(g))
    ref_out.backward(torch.tensor(g.astype(np.float64)))
    sum_magnitudes = sum_magnitudes or {}
    for i, (x, t, want) in enumerate(zip(xs, ts, grads)):
        if want:
            assert x.grad is not None, f"input {i} got no gradient"
            if i in sum_magnitudes:
                with torch.no_grad():
                    magnitude = sum_magnitudes[i](torch.tensor(g.astype(np.float64)), *ts).numpy()
                assert_sum_close(x.grad.numpy(), t.grad.numpy(), magnitude, tol, f"gradient of input {i}")
            else:
                assert_close(x.grad.numpy(), t.grad.numpy(), tol, f"gradient of input {i}")
    return out, xs
