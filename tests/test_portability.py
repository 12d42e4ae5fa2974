"""Portability: several devices in one process, threads sharing a device, GPU-sized limits.

- Two devices in one process (two sub-devices of one CPU made with ``create_sub_devices``, and two
  platforms such as PoCL and Intel's runtime when both are installed) keep their buffers apart, refuse
  mixed-device ops with a clear error, and move tensors between them (gradients flow back).
- Two Python threads running ops on one device at the same time get correct results.
- The limits mode (``CLNN_LIMITS`` / ``clnn.limit_devices``) makes devices report a small GPU's limits and
  every op still launches within them.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import clnn

ROOT = Path(__file__).resolve().parent.parent


def _as_device(base: clnn.Device, cl_device: cl.Device, label: str) -> clnn.Device:
    """A clnn Device for a sub-device of ``base`` (its own context, queue, pool and lock)."""
    return dataclasses.replace(
        base, cl_device=cl_device, name=f"{base.name} [{label}]", compute_units=cl_device.max_compute_units,
        _context=None, _queue=None, _pool=None, _lock=threading.RLock(),
    )


def _sub_devices(dev: clnn.Device) -> list[clnn.Device] | None:
    try:
        subs = dev.cl_device.create_sub_devices([cl.device_partition_property.EQUALLY, 1])
    except (cl.Error, cl.LogicError, cl.RuntimeError):
        return None
    return [_as_device(dev, s, f"sub-device {i}") for i, s in enumerate(subs[:2])] if len(subs) >= 2 else None


def _pairs() -> list:
    dev = clnn.device()
    pairs = []
    subs = _sub_devices(dev) if dev.compute_units >= 2 else None
    pairs.append(pytest.param(subs, id="sub-devices",
                              marks=pytest.mark.skipif(subs is None, reason=f"{dev} cannot be partitioned")))
    real = [d for d in clnn.devices() if "oclgrind" not in d.platform_name.lower()]
    platforms = {d.platform_name: d for d in real}
    other = next((d for name, d in platforms.items() if name != dev.platform_name), None)
    pairs.append(pytest.param([dev, other] if other else None, id="two-platforms",
                              marks=pytest.mark.skipif(other is None, reason="only one OpenCL platform installed")))
    return pairs


@pytest.mark.parametrize("pair", _pairs())
def test_two_devices_keep_buffers_apart(pair, rng):
    a_dev, b_dev = pair
    xa = rng.standard_normal((13, 7)).astype(np.float32)
    xb = rng.standard_normal((7, 5)).astype(np.float32)
    ta, tb = clnn.tensor(xa, device=a_dev), clnn.tensor(xb, device=b_dev)
    assert ta.device is a_dev and tb.device is b_dev
    # interleave work on both queues; results must not cross
    ya, yb = ta.exp().sum(axis=0), (tb * 3).max(axis=1)
    za = ta @ clnn.tensor(xb, device=a_dev)
    np.testing.assert_allclose(ya.numpy(), np.exp(xa).sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(yb.numpy(), (xb * 3).max(axis=1), rtol=1e-6)
    np.testing.assert_allclose(za.numpy(), xa @ xb, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"is on .* but .* is on .*\.to\(device\)"):
        ta @ tb
    with pytest.raises(ValueError, match="to\\(device\\)"):
        ta[:7, :5] + tb


@pytest.mark.parametrize("pair", _pairs())
def test_moving_tensors_between_devices(pair, rng):
    a_dev, b_dev = pair
    x = rng.standard_normal((4, 9)).astype(np.float32)
    ta = clnn.tensor(x, device=a_dev, requires_grad=True)
    tb = ta.to(b_dev)
    assert tb.device is b_dev and tb.data is not ta.data
    np.testing.assert_array_equal(tb.numpy(), x)
    back = (tb * tb).to(a_dev)
    back.sum().backward()  # the gradient crosses back to a_dev
    assert ta.grad.device is a_dev
    np.testing.assert_allclose(ta.grad.numpy(), 2 * x, rtol=1e-6)
    h = clnn.tensor(x.astype(np.float16), device=a_dev).to(b_dev)
    assert h.dtype == np.float16 and h.device is b_dev
    np.testing.assert_array_equal(h.numpy(), x.astype(np.float16))
    # the source stays intact after the move and later work on it
    (tb + 1).numpy()
    np.testing.assert_array_equal(ta.numpy(), x)


def test_two_threads_on_one_device(dev):
    """Two threads run ops on the same device at the same time; each gets its own correct results."""
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            start.wait()
            for _ in range(25):
                a = rng.standard_normal((31, 17)).astype(np.float32)
                b = rng.standard_normal((17, 9)).astype(np.float32)
                ta, tb = clnn.tensor(a, device=dev), clnn.tensor(b, device=dev)
                out = ((ta @ tb).exp() * 0.5).sum(axis=1)
                ref = (np.exp(a.astype(np.float64) @ b) * 0.5).sum(axis=1)
                np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4)
                np.testing.assert_array_equal(ta.T.numpy(), a.T)
        except BaseException as err:  # noqa: BLE001  (re-raised in the main thread)
            errors.append(err)

    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    assert not errors, errors[0]


def test_use_device_is_per_thread(dev):
    """``use_device`` in one thread does not change another thread's default."""
    others = [d for d in clnn.devices() if d is not dev]
    if not others:
        pytest.skip("one device only")
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def scoped() -> None:
        with clnn.use_device(others[0]):
            seen["scoped"] = clnn.default_device()
            inside.set()
            release.wait(60)

    t = threading.Thread(target=scoped)
    t.start()
    inside.wait(60)
    seen["main"] = clnn.default_device()
    release.set()
    t.join(60)
    assert seen["scoped"] is others[0]
    assert seen["main"] is clnn.default_device() and seen["main"] is not others[0] or others[0] is dev


_LIMITS_SCRIPT = """
import sys
import numpy as np
import clnn
from clnn import kernels
if sys.argv[1] == "api":
    clnn.limit_devices(wg=int(sys.argv[2]), local=int(sys.argv[3]))
dev = clnn.device()
assert dev.max_work_group_size <= int(sys.argv[2]), dev
assert dev.local_mem_size <= int(sys.argv[3]), dev
biggest = {"wg": 0}
real_launch = kernels.launch
def launch(d, k, global_size, local_size, *args):
    if local_size is not None:
        biggest["wg"] = max(biggest["wg"], int(np.prod(local_size)))
        wg_limit = k.get_work_group_info(kernels.cl.kernel_work_group_info.WORK_GROUP_SIZE, d.cl_device)
        local = k.get_work_group_info(kernels.cl.kernel_work_group_info.LOCAL_MEM_SIZE, d.cl_device)
        assert int(np.prod(local_size)) <= min(wg_limit, d.max_work_group_size), (k.function_name, local_size)
        assert local <= d.local_mem_size, (k.function_name, local, d.local_mem_size)
    return real_launch(d, k, global_size, local_size, *args)
kernels.launch = launch
rng = np.random.default_rng(0)
a = rng.standard_normal((70, 45)).astype(np.float32)
b = rng.standard_normal((45, 66)).astype(np.float32)
ta, tb = clnn.tensor(a), clnn.tensor(b)
np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4)
long = rng.standard_normal((3, 1000)).astype(np.float32)
t = clnn.tensor(long)
np.testing.assert_allclose(t.sum(axis=1).numpy(), long.sum(axis=1), rtol=1e-4)
np.testing.assert_array_equal(t.argmax(axis=1).numpy(), long.argmax(axis=1))
assert 0 < biggest["wg"] <= int(sys.argv[2]), biggest
print("ok", dev.max_work_group_size, dev.local_mem_size, biggest["wg"])
"""


@pytest.mark.parametrize("how", ["env", "api"])
@pytest.mark.parametrize("wg,local", [(64, 16384), (256, 32768)])
def test_limits_mode_launches_within_small_gpu_limits(how, wg, local):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("CLNN_LIMITS", None)
    if how == "env":
        env["CLNN_LIMITS"] = f"wg={wg},local={local},fp64=0"
    res = subprocess.run([sys.executable, "-c", _LIMITS_SCRIPT, how, str(wg), str(local)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    assert res.stdout.startswith("ok"), res.stdout


def test_bad_limits_spec_is_a_clear_error():
    env = dict(os.environ, CLNN_LIMITS="wg=lots",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    res = subprocess.run([sys.executable, "-c", "import clnn; clnn.devices()"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode != 0
    assert "CLNN_LIMITS item 'wg=lots': wg expects a positive integer; got 'lots'" in res.stderr
