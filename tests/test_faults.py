"""Faults: clear errors, and the process keeps working after them.

- An allocation larger than the device can give: MemoryError naming the size and the device's limit.
- float64 on a device without cl_khr_fp64: "float64 is not supported on <device>".
- A kernel that fails to build on one device leaves the kernel cache usable for every device.
- float16 storage (vload_half / vstore_half) works on every device, with or without cl_khr_fp16.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import clnn
from clnn import kernels

ROOT = Path(__file__).resolve().parent.parent


def _still_works(dev: clnn.Device) -> None:
    x = np.arange(7, dtype=np.float32)
    t = clnn.tensor(x, device=dev)
    np.testing.assert_allclose(((t * 2 + 1).sum()).item(), float((x * 2 + 1).sum()))


# ---- allocation larger than the device can give ------------------------------------------------------
def test_allocation_over_the_single_allocation_limit(dev):
    n = 2**31 - 1  # the most elements a tensor may hold: 8 GiB of float32
    if n * 4 <= dev.max_alloc_size:
        pytest.skip(f"{dev} can allocate {n * 4} bytes in one buffer")
    before = clnn.memory_stats(dev)["bytes_in_use"]
    with pytest.raises(MemoryError) as err:
        clnn.empty(n, dtype=np.float32, device=dev)
    msg = str(err.value)
    assert str(n * 4) in msg, msg
    assert str(dev.max_alloc_size) in msg, msg
    assert dev.name in msg, msg
    assert clnn.memory_stats(dev)["bytes_in_use"] == before
    _still_works(dev)


def test_allocation_failure_in_the_driver_is_a_memory_error(dev, monkeypatch):
    """When the OpenCL allocator itself fails (memory exhausted), the error says so, and later work runs."""

    class ExhaustedPool:
        def allocate(self, nbytes):
            raise MemoryError("clCreateBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE")

    monkeypatch.setattr(dev, "_queue", dev.queue)  # open the device first, so _open() keeps the pool below
    monkeypatch.setattr(dev, "_pool", ExhaustedPool())
    with pytest.raises(MemoryError, match=r"cannot allocate 4096 bytes .*global memory \d+ bytes"):
        clnn.empty(1024, dtype=np.float32, device=dev)
    monkeypatch.undo()
    _still_works(dev)


def test_element_count_over_int32_is_a_clear_error(dev):
    with pytest.raises(ValueError, match=r"at most 2\*\*31 - 1 elements"):
        clnn.empty(2**16, 2**16, dtype=np.float16, device=dev)
    _still_works(dev)


# ---- float64 on a device without fp64 ----------------------------------------------------------------
FP64_CALLS = {
    "tensor from float64 data": lambda d: clnn.tensor(np.zeros(3), device=d),
    "tensor(dtype=float64)": lambda d: clnn.tensor([1.0, 2.0], dtype=np.float64, device=d),
    "zeros": lambda d: clnn.zeros(2, 3, dtype=np.float64, device=d),
    "full": lambda d: clnn.full((2,), 1.5, dtype=np.float64, device=d),
    "rand": lambda d: clnn.rand(4, dtype=np.float64, device=d),
    "arange": lambda d: clnn.arange(0.0, 1.0, 0.25, dtype=np.float64, device=d),
    "astype": lambda d: clnn.ones(3, device=d).astype(np.float64),
    "to(dtype=)": lambda d: clnn.ones(3, device=d).to(dtype=np.float64),
}


@pytest.mark.parametrize("call", list(FP64_CALLS), ids=list(FP64_CALLS))
def test_float64_without_fp64_is_a_clear_error(dev, monkeypatch, call):
    monkeypatch.setattr(dev, "fp64", False)
    with pytest.raises(TypeError, match=re.escape(f"float64 is not supported on {dev}")):
        FP64_CALLS[call](dev)
    _still_works(dev)


_NO_FP64_SCRIPT = """
import re, sys
import numpy as np
import clnn
if sys.argv[1] == "api":
    clnn.limit_devices(fp64=False)
dev = clnn.device()
assert not dev.fp64, dev
try:
    clnn.tensor(np.ones(3), device=dev)
except TypeError as err:
    assert f"float64 is not supported on {dev}" in str(err), err
else:
    raise SystemExit("float64 tensor was created on a device without fp64")
t = clnn.tensor(np.ones(3), dtype=np.float32, device=dev)
print((t + 1).sum().item())
"""


@pytest.mark.parametrize("how", ["env", "api"])
def test_no_fp64_limit_mode(how):
    """CLNN_LIMITS=fp64=0 and clnn.limit_devices(fp64=False) both make devices refuse float64."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("CLNN_LIMITS", None)
    if how == "env":
        env["CLNN_LIMITS"] = "fp64=0"
    res = subprocess.run([sys.executable, "-c", _NO_FP64_SCRIPT, how], capture_output=True, text=True,
                         env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "6.0"


# ---- a build failure on one device does not poison the cache -----------------------------------------
def _twin(dev: clnn.Device) -> clnn.Device:
    """The same OpenCL device behind a second context, queue and pool: to the kernel cache, another device."""
    return dataclasses.replace(dev, _context=None, _queue=None, _pool=None, _lock=threading.RLock())


def test_build_failure_on_one_device_leaves_the_cache_usable(dev):
    other = _twin(dev)
    bad = {**kernels.defines(np.float32), "STORE_T": "no_such_type"}
    with pytest.raises(clnn.KernelBuildError) as err:
        kernels.kernel(dev, "elementwise.cl", "unary", bad)
    msg = str(err.value)
    assert "elementwise.cl" in msg and dev.name in msg and "no_such_type" in msg, msg
    # the failure is not cached: a retry builds again and fails again, with the same clear error
    with pytest.raises(clnn.KernelBuildError):
        kernels.kernel(dev, "elementwise.cl", "unary", bad)
    # the same file with good defines builds on both devices, and ops run on both
    x = np.linspace(-1, 1, 11, dtype=np.float32)
    for d in (other, dev):
        y = clnn.tensor(x, device=d).exp()
        assert y.device is d
        np.testing.assert_allclose(y.numpy(), np.exp(x), rtol=1e-6)
    assert kernels.kernel(dev, "elementwise.cl", "unary", kernels.defines(np.float32)) is not \
        kernels.kernel(other, "elementwise.cl", "unary", kernels.defines(np.float32))


def test_build_logs_are_shown_only_when_pyopencl_is_asked(dev, monkeypatch):
    """A successful build's log (a runtime's remarks, or NVIDIA's registers with -cl-nv-verbose) reaches the user as
    PyOpenCL's CompilerWarning where PYOPENCL_COMPILER_OUTPUT asks for it, read at each build; else it is silenced."""

    class Chatty:
        def build(self, *args, **kwargs):
            warnings.warn("ptxas info: Used 96 registers", kernels.cl.CompilerWarning, stacklevel=2)
            return self

    monkeypatch.setattr(kernels.cl, "Program", lambda context, source: Chatty())
    monkeypatch.delenv("PYOPENCL_COMPILER_OUTPUT", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernels._compile(dev.context, dev.cl_device, "copy.cl", [], None, str(dev))
    monkeypatch.setenv("PYOPENCL_COMPILER_OUTPUT", "1")
    with pytest.warns(kernels.cl.CompilerWarning, match="Used 96 registers"):
        kernels._compile(dev.context, dev.cl_device, "copy.cl", [], None, str(dev))


def test_build_failure_raised_by_the_driver_is_not_cached(dev, monkeypatch):
    """A build that fails on one device (here: injected into its first attempt only) is retried later."""
    other = _twin(dev)
    real_program = kernels.cl.Program
    failures = {"left": 1}

    class Crashing:
        def build(self, *args, **kwargs):
            raise kernels.cl.RuntimeError("clBuildProgram failed: injected compiler crash")

    def program(context, source):
        if failures["left"] and context is other.context:
            failures["left"] -= 1
            return Crashing()
        return real_program(context, source)

    monkeypatch.setattr(kernels.cl, "Program", program)
    defines = {**kernels.defines(np.float32), "RED_WG": 16}  # a specialization no other test builds
    with pytest.raises(clnn.KernelBuildError, match="injected compiler crash"):
        kernels.kernel(other, "reduce.cl", "reduce_group", defines)
    assert kernels.kernel(dev, "reduce.cl", "reduce_group", defines) is not None
    assert kernels.kernel(other, "reduce.cl", "reduce_group", defines) is not None
    _still_works(other)
    _still_works(dev)


# ---- float16 storage everywhere ----------------------------------------------------------------------
def test_float16_storage_works_on_every_device():
    rng = np.random.default_rng()
    a = rng.uniform(-2, 2, (7, 9)).astype(np.float16)
    b = rng.uniform(0.5, 2, (9, 5)).astype(np.float16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for d in clnn.devices():
        if "oclgrind" in d.platform_name.lower():
            continue  # covered by tests/test_oclgrind.py; 1,000x slower
        ta, tb = clnn.tensor(a, device=d), clnn.tensor(b, device=d)
        assert ta.dtype == np.float16
        np.testing.assert_array_equal(ta.numpy(), a)  # storage round trip is exact
        np.testing.assert_allclose((ta * 2 - 1).numpy(), (a64 * 2 - 1).astype(np.float16), rtol=1e-3)
        np.testing.assert_allclose(ta.sum(axis=1).numpy(), a64.sum(axis=1), rtol=1e-2, atol=1e-2)
        np.testing.assert_allclose((ta @ tb).numpy(), a64 @ b64, rtol=1e-2, atol=2e-2)
        np.testing.assert_allclose(ta.astype(np.float32).numpy(), a.astype(np.float32))
        np.testing.assert_array_equal(clnn.tensor(a.astype(np.float32), device=d).astype(np.float16).numpy(), a)
