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
