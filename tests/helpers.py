"""Shared test helpers: relative error against a float64 reference; the CI matrix's settings; attention's paths."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import clnn
from clnn import tuning

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


def multi_tensor_launches(dev: clnn.Device, sizes: list[int]) -> int:
    """The launches a multi-tensor op (``clnn.ops.foreach``) takes for tensors of ``sizes`` elements sharing their
    key: small ones (tuning's ``foreach`` SMALL) ``MT`` a launch, the others ``per_launch`` a launch."""
    from clnn.ops import foreach

    small = sum(size <= tuning.params(dev, "foreach")["SMALL"] for size in sizes)
    return -(-small // foreach.MT) + -(-(len(sizes) - small) // foreach.per_launch(dev))


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
    size, diff = np.linalg.norm(magnitude), np.linalg.norm(out - ref)
    err = float(diff / size if size else diff)  # no terms at all (a gradient no output reaches): exactly 0
    assert err < tol, f"{what} error {err:.3e} relative to the terms' magnitude >= {tol:.1e}"


@functools.cache
def set_direct_conv_max_k(monkeypatch, max_k: int) -> None:
    """Every device's ``conv_direct`` tuning row with MAX_K = ``max_k``: 0 sends short unit-stride input gradients
    to tiles as on devices without the route (Intel's runtime takes the direct kernel up to 576)."""
    from clnn import tuning

    for key in tuning.TABLE["conv_direct"]:
        monkeypatch.setitem(tuning.TABLE["conv_direct"], key, {**tuning.TABLE["conv_direct"][key], "MAX_K": max_k})


def set_winograd(monkeypatch, least: int, m: int = 4, vt: int | None = None) -> None:
    """Every device's ``winograd`` tuning row with MIN_INTENSITY = ``least`` (1: every 3x3 stride-1 convolution
    the kernels compute takes them, 0: none; CPUs take them from 32) and M = ``m`` (and VT = ``vt`` when given)."""
    from clnn import tuning

    for key in tuning.TABLE["winograd"]:
        extra = {} if vt is None else {"VT": vt}
        monkeypatch.setitem(tuning.TABLE["winograd"], key, {**tuning.TABLE["winograd"][key], "MIN_INTENSITY": least,
                                                             "M": m, **extra})


def run_tests_script() -> ModuleType:
    """``scripts/run_tests.py`` as a module: the CI matrix, e.g. its ``H100`` pose for CLNN_LIMITS."""
    path = Path(__file__).resolve().parent.parent / "scripts" / "run_tests.py"
    spec = importlib.util.spec_from_file_location("clnn_run_tests", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=["fused", "rows"])
def attention_path(request, monkeypatch) -> str:
    """Runs a test on each of attention's paths: the fused kernels (every GPU's path) and, on CPUs, attention_rows.cl's
    ("rows", which CPUs take from tuning's ``attention_rows`` MIN_KEYS keys on: one). The fused kernels run forced
    on Intel's runtime (its intel part, and as small GPUs in the limits parts, which pose no device type), not on
    PoCL: its builds of them took 7 of its 30 minutes (Zen 3), and the other parts and Oclgrind run them."""
    dev = clnn.default_device()
    if request.param == "rows" and dev.type != "cpu":
        pytest.skip("the rows path runs on CPUs only")
    if request.param == "fused" and "portable computing language" in dev.platform_name.lower():
        pytest.skip("PoCL's builds of the fused kernels are slow; the other parts and Oclgrind run them")
    for key, row in tuning.TABLE["attention_rows"].items():
        monkeypatch.setitem(tuning.TABLE["attention_rows"], key, {**row, "MIN_KEYS": int(request.param == "rows")})
    return request.param
