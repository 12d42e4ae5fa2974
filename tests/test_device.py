"""Device listing and selection: specs, the CLNN_DEVICE variable, scoping, errors, the CLI."""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys

import pyopencl as cl
import pytest

import clnn

device_mod = importlib.import_module("clnn.device")  # the module, not the clnn.device() function


def test_devices_describe_every_device():
    devs = clnn.devices()
    assert devs, "at least one device (PoCL) is installed for the tests"
    n_cl = sum(len(p.get_devices()) for p in cl.get_platforms())
    assert len(devs) == n_cl
    for i, d in enumerate(devs):
        assert d.index == i
        assert d.type in ("gpu", "cpu", "accelerator", "other")
        assert d.name and d.platform_name and d.platform_version.startswith("OpenCL")
        assert d.compute_units >= 1 and d.max_work_group_size >= 1
        assert d.global_mem_size > 0 and d.local_mem_size > 0
        assert d.opencl_c_version.startswith("OpenCL C")
        assert isinstance(d.fp16, bool) and isinstance(d.fp64, bool)
        assert d.cl_device.name.strip() == d.name


@pytest.mark.parametrize("spec", [None, "auto", "AUTO", 0, "0"])
def test_auto_and_index_specs_pick_a_device(spec):
    assert isinstance(clnn.device(spec), clnn.Device)


def test_platform_device_spec_and_index_agree():
    for d in clnn.devices():
        assert clnn.device(f"{d.platform_index}:{d.device_index}") is d
        assert clnn.device(d.index) is d
        assert clnn.device(d) is d


def test_type_and_name_specs():
    for d in clnn.devices():
        if d.type != "other":  # a simulator such as Oclgrind claims every type: never auto-picked
            assert clnn.device(d.type).type == d.type
        assert d.platform_name.lower() in clnn.device(d.platform_name.upper()).platform_name.lower()


def _fake(index, platform, platform_vendor, name, vendor, type_="cpu", cus=4):
    return device_mod.Device(
        index=index, platform_index=index, device_index=0, name=name, vendor=vendor,
        platform_name=platform, platform_vendor=platform_vendor, platform_version="OpenCL 3.0",
        type=type_, compute_units=cus, global_mem_size=2**30, max_alloc_size=2**28, local_mem_size=2**15,
        max_work_group_size=256, opencl_c_version="OpenCL C 1.2", fp16=False, fp64=True, cl_device=None,
    )


FAKES = [
    _fake(0, "Portable Computing Language", "The pocl project", "pthread-Intel(R) Core i7", "GenuineIntel"),
    _fake(1, "Intel(R) OpenCL", "Intel(R) Corporation", "Intel(R) Core(TM) i7", "Intel(R) Corporation"),
    _fake(2, "NVIDIA CUDA", "NVIDIA Corporation", "NVIDIA H100", "NVIDIA Corporation", "gpu", 132),
    _fake(3, "AMD Accelerated Parallel Processing", "Advanced Micro Devices", "gfx1100", "AMD", "gpu", 48),
]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("auto", 2),  # GPU first, ties broken by compute units
        ("gpu", 2),
        ("cpu", 0),  # equal compute units: the first listed
        ("intel", 1),  # the platform match wins over PoCL's GenuineIntel device vendor
        ("pocl", 0),
        ("nvidia", 2),
        ("amd", 3),
        ("gfx1100", 3),
        ("1:0", 1),
        (3, 3),
        ("3", 3),
    ],
)
def test_spec_matching_rules(spec, expected):
    assert device_mod._match(spec, FAKES).index == expected


@pytest.mark.parametrize("spec", ["nosuchvendor", "accelerator", "9:0", 17, "-1"])
def test_unmatched_spec_lists_available_devices(spec):
    with pytest.raises(clnn.DeviceError, match=r"available: \[0\] 0:0 .*Portable"):
        device_mod._match(spec, FAKES)


def test_bad_spec_type_is_a_type_error():
    with pytest.raises(TypeError, match="device spec must be"):
        clnn.device(1.5)


def test_real_unmatched_spec_lists_real_devices():
    with pytest.raises(clnn.DeviceError, match="no OpenCL device matches 'no-such-device'.*available"):
        clnn.device("no-such-device")


def test_no_platform_says_how_to_fix(monkeypatch):
    monkeypatch.setattr(device_mod, "_devices", None)
    monkeypatch.setattr(cl, "get_platforms", lambda: [])
    with pytest.raises(clnn.DeviceError, match=r"no OpenCL platform was found.*pip install 'clnn\[pocl\]'"):
        clnn.devices()


def test_env_var_sets_the_default(monkeypatch):
    target = clnn.devices()[-1]
    previous = clnn.default_device()
    monkeypatch.setenv("CLNN_DEVICE", f"{target.platform_index}:{target.device_index}")
    try:
        assert clnn.set_default_device(None) is target
        assert clnn.device() is target
        monkeypatch.setenv("CLNN_DEVICE", "no-such-device")
        with pytest.raises(clnn.DeviceError, match="no-such-device"):
            clnn.set_default_device(None)
    finally:
        clnn.set_default_device(previous)  # the device under test (CLNN_DEVICE) for the tests after this one


def test_use_device_scopes_and_set_default_device():
    base = clnn.default_device()
    other = dataclasses.replace(base, _context=None, _queue=None, _pool=None)
    with clnn.use_device(other) as d:
        assert d is other and clnn.device() is other
        assert clnn.zeros(3).device is other
        with clnn.use_device(base):
            assert clnn.default_device() is base
        assert clnn.default_device() is other
    assert clnn.default_device() is base
    try:
        assert clnn.set_default_device(other) is other
        assert clnn.ones(2).device is other
    finally:
        clnn.set_default_device(base)


def test_limit_devices_lowers_reported_limits(monkeypatch):
    monkeypatch.setattr(device_mod, "_limits", {})
    devs = clnn.devices()
    saved = [(d.max_work_group_size, d.local_mem_size, d.fp64) for d in devs]
    try:
        clnn.limit_devices(max_work_group_size=64, local_mem_size=16384, fp64=False)
        for d in devs:
            assert d.max_work_group_size <= 64 and d.local_mem_size <= 16384 and not d.fp64
    finally:
        for d, (wg, lm, fp64) in zip(devs, saved, strict=True):
            d.max_work_group_size, d.local_mem_size, d.fp64 = wg, lm, fp64


def test_memory_stats_track_live_tensors():
    dev = clnn.device()
    before = clnn.memory_stats(dev)["bytes_in_use"]
    t = clnn.empty(1 << 20, device=dev)
    during = clnn.memory_stats(dev)
    assert during["bytes_in_use"] >= before + t.nbytes
    del t
    after = clnn.memory_stats(dev)
    assert after["bytes_in_use"] <= during["bytes_in_use"] - (1 << 22)
    assert after["bytes_held"] >= 1 << 22  # the pool keeps the block for reuse


@pytest.mark.parametrize("argv", [[sys.executable, "-m", "clnn", "devices"], ["clnn", "devices"]])
def test_cli_prints_device_table(argv):
    if argv[0] == "clnn":
        argv = [os.path.join(os.path.dirname(sys.executable), "clnn"), "devices"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    for d in clnn.devices():
        assert d.name in out and d.platform_name in out
    assert "fp64" in out.splitlines()[0] and "*" in out


def test_device_and_tensor_reprs_name_the_platform():
    for d in clnn.devices():
        assert str(d) == f"{d.name} ({d.platform_name}, {d.type})"
        assert repr(d) == f"<clnn.Device [{d.index}] {d.platform_index}:{d.device_index} {d}>"
        assert f"device='{d}'" in repr(clnn.tensor([1.0, 2.0], device=d))


def test_without_pyopencl_the_message_says_to_use_the_environment():
    code = "import sys; sys.modules['pyopencl'] = None; import clnn"  # None: that import fails
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "clnn needs PyOpenCL" in res.stderr and ".venv/bin/clnn" in res.stderr
