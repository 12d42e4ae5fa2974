"""Compare a clnn function with its PyTorch peer (float64 on the CPU): the output and every input's gradient."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from helpers import F32_TOL, assert_close, assert_sum_close

import clnn


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
    g = np.asarray(rng.standard_normal(out.shape)).astype(dtype)
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
