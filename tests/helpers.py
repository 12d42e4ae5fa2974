"""Shared test helpers: relative error against a float64 reference."""

from __future__ import annotations

import numpy as np

F32_TOL = 1e-5


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    """``||out - ref|| / ||ref||`` in float64 (absolute error when the reference is all zero)."""
    out = np.asarray(out, np.float64)
    ref = np.asarray(ref, np.float64)
    assert out.shape == ref.shape, f"shape {out.shape} != reference {ref.shape}"
    assert not np.isnan(out).any() or np.isnan(ref).any(), "NaN in output (a poisoned element was not written?)"
    denom = np.linalg.norm(ref)
    diff = np.linalg.norm(out - ref)
    return float(diff / denom) if denom else float(diff)


def assert_close(out, ref, tol: float = F32_TOL, what: str = "") -> None:
    err = rel_err(np.asarray(out), np.asarray(ref))
    assert err < tol, f"{what} relative error {err:.3e} >= {tol:.1e}"


def assert_sum_close(out, ref, magnitude, tol: float = F32_TOL, what: str = "") -> None:
    """Check values that are sums of signed terms: ``||out - ref|| / ||magnitude||`` under ``tol``, where
    ``magnitude`` holds each output's sum of absolute terms.

    Any float32 summation order only promises ``|sum_hat - sum| <= gamma_n * sum(|t_i|)`` (Higham, *Accuracy
    and Stability of Numerical Algorithms*, 4.2): measured against ``|sum|`` alone, a draw whose terms cancel
    fails at random whatever the kernel does. A wrong kernel still errs by the size of the terms and fails.
    """
    out, ref, magnitude = (np.asarray(a, np.float64) for a in (out, ref, magnitude))
    assert out.shape == ref.shape == magnitude.shape, f"shapes {out.shape}, {ref.shape}, {magnitude.shape} differ"
    assert not np.isnan(out).any(), f"{what}: NaN in output (a poisoned element was not written?)"
    err = float(np.linalg.norm(out - ref) / np.linalg.norm(magnitude))
    assert err < tol, f"{what} error {err:.3e} relative to the terms' magnitude >= {tol:.1e}"
