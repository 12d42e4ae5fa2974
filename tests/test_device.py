"""Device listing and selection: specs, the CLNN_DEVICE variable, scoping, errors, the CLI."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys

import pyopencl as cl
import pytest
from helpers import run_tests_script

import clnn
from clnn import tuning

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
        max_work_group_size=256, max_groups=device_mod._group_limit(vendor), opencl_c_version="OpenCL C 1.2",
        fp16=False, fp64=True, vector_width=8, cl_device=None,
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


RUN_TESTS = run_tests_script()
H100 = RUN_TESTS.H100


def test_ci_runs_the_kernel_tests_posing_as_the_h100():
    part = RUN_TESTS.parts("intel")["h100"]
    assert "h100" in RUN_TESTS.DEFAULT_PARTS.split(",")
    assert part.env == {"CLNN_DEVICE": "intel", "CLNN_LIMITS": H100}
    assert H100 == "type=gpu,cu=132,wg=1024,local=49152,vendor=NVIDIA Corporation"


def test_census_times_each_build_a_test_asks_for(tmp_path, capsys):
    """run_tests.py --census: a part's pytest (here one test, cold) writes each program build, named by its test and
    kernel file, and the summary sums them by part and names the heaviest test."""
    if "Intel" not in clnn.device().platform_name:
        pytest.skip("host code, the same on every runtime: the Intel part's pytest runs it")
    test = "tests/test_activations.py::test_activation[relu-(7,)]"
    env = {**os.environ, "CLNN_BUILD_CENSUS": str(tmp_path / "one.json"), "PYOPENCL_NO_CACHE": "1",
           "XDG_CACHE_HOME": str(tmp_path)}  # cold: PoCL's own cache too
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test], env=env,
                         cwd=RUN_TESTS.ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    builds = json.loads((tmp_path / "one.json").read_text())
    assert builds and {t for t, _, _ in builds} == {test} and {f for _, f, _ in builds} >= {"elementwise.cl"}
    assert all(secs > 0 for _, _, secs in builds)
    RUN_TESTS.print_census(tmp_path, ["one", "missing"])
    out = capsys.readouterr().out
    assert re.search(rf"one +{len(builds)} builds .*heaviest: test_activation \d+ s", out), out
    assert re.search(r"missing +no census written", out), out


def test_limits_env_parses_every_key(monkeypatch):
    monkeypatch.setenv("CLNN_LIMITS", f" {H100}, fp16=0 ,fp64=1,name=NVIDIA H100 80GB HBM3")
    assert device_mod._pose_from_env() == {
        "type": "gpu", "cu": 132, "wg": 1024, "local": 49152, "vendor": "NVIDIA Corporation", "fp16": False,
        "fp64": True, "name": "NVIDIA H100 80GB HBM3",
    }
    monkeypatch.setenv("CLNN_LIMITS", "")
    assert device_mod._pose_from_env() == {}


@pytest.mark.parametrize("spec, item, why", [
    ("wg=lots", "wg=lots", "wg expects a positive integer"),
    ("wg=64,local=0", "local=0", "local expects a positive integer"),
    ("cu=-3", "cu=-3", "cu expects a positive integer"),
    ("fp16=2", "fp16=2", "fp16 expects 0 or 1"),
    ("fp64=no", "fp64=no", "fp64 expects 0 or 1"),
    ("type=tpu", "type=tpu", "type expects one of"),
    ("vendor=", "vendor=", "vendor expects a non-empty string"),
    ("wg", "wg", "is not key=value"),
    ("speed=9", "speed=9", "is not key=value with a key in type, vendor, name, cu, wg, local, groups, fp16, fp64"),
    ("wg=64,wg=32", "wg=32", "sets wg a second time"),
])
def test_bad_limits_item_is_a_clear_error(monkeypatch, spec, item, why):
    monkeypatch.setenv("CLNN_LIMITS", spec)
    with pytest.raises(clnn.DeviceError, match=re.escape(f"CLNN_LIMITS item {item!r}") + ".*" + re.escape(why)):
        device_mod._pose_from_env()


@pytest.mark.parametrize("kwargs, why", [
    ({"wg": "64"}, "limit_devices(wg=...): wg expects a positive integer; got '64'"),
    ({"cu": True}, "limit_devices(cu=...): cu expects a positive integer; got True"),
    ({"fp64": 0.5}, "limit_devices(fp64=...): fp64 expects 0 or 1"),
    ({"type": "GPU "}, "limit_devices(type=...): type expects one of"),
])
def test_bad_limit_devices_argument_is_a_clear_error(kwargs, why):
    saved = device_mod._pose
    with pytest.raises(clnn.DeviceError, match=re.escape(why)):
        clnn.limit_devices(**kwargs)
    assert device_mod._pose is saved  # nothing applied


@pytest.fixture
def posed(monkeypatch):
    """A fake device (wg 256, 32 KiB local, no fp16) posed by ``pose(**keys)`` as limit_devices would."""
    dev = dataclasses.replace(FAKES[0], real={})

    def pose(**keys):
        monkeypatch.setattr(device_mod, "_pose", keys)
        device_mod._apply_pose(dev)
        return dev

    return pose


def test_pose_sets_identity_freely_and_only_lowers_capabilities(posed):
    dev = posed(type="gpu", cu=132, wg=1024, local=49152, vendor="NVIDIA Corporation", fp16=True, fp64=False,
                name="NVIDIA H100")
    assert (dev.type, dev.compute_units, dev.vendor, dev.name) == ("gpu", 132, "NVIDIA Corporation", "NVIDIA H100")
    # kernels really use these: the pose is min(pose, real), and an extension can't be switched on
    assert (dev.max_work_group_size, dev.local_mem_size, dev.fp16, dev.fp64) == (256, 2**15, False, False)
    assert dev.max_groups == 65_535  # NVIDIA's runtime runs CUDA grids: so does a device posing as one
    assert dev.real == {"type": "cpu", "compute_units": 4, "vendor": "GenuineIntel", "name": FAKES[0].name,
                        "max_groups": 2**31 - 1, "fp64": True}
    assert str(dev) == "NVIDIA H100 (Portable Computing Language, gpu, posing)"
    table = device_mod.device_table([dev]).splitlines()
    assert "gpu (posing)" in table[2] and "(posing): CLNN_LIMITS" in table[-1]
    dev = posed(wg=64, groups=3)  # a new pose replaces the old one: everything else is real again
    assert (dev.type, dev.compute_units, dev.max_work_group_size, dev.max_groups, dev.fp64) == ("cpu", 4, 64, 3, True)
    assert dev.real == {"max_work_group_size": 256, "max_groups": 2**31 - 1}
    dev = posed()
    attrs = device_mod._POSE_ATTRS.values()
    assert dev.real == {} and [getattr(dev, a) for a in attrs] == [getattr(FAKES[0], a) for a in attrs]


def test_posing_as_the_h100_selects_the_gpu_tuning_rows(posed, monkeypatch):
    rows = {"default": {"TM": 1}, "cpu": {"TM": 2}, "gpu": {"TM": 3, "TN": 3}, "nvidia": {"TN": 4},
            "portable computing language": {"TK": 5}, "pthread": {"WM": 6}}
    monkeypatch.setitem(tuning.TABLE, "probe", rows)
    assert tuning.params(posed(), "probe") == {"TM": 2, "TK": 5, "WM": 6}  # the real PoCL CPU
    monkeypatch.setenv("CLNN_LIMITS", H100)
    dev = posed(**device_mod._pose_from_env())
    assert dev.type == "gpu" and dev.compute_units == 132
    # the real platform and name would pick PoCL's rows: a vendor pose is looked up by its posed keys only
    assert tuning.params(dev, "probe") == {"TM": 3, "TN": 4}
    assert tuning.params(dev, "gemm") == {**tuning.TABLE["gemm"]["default"], **tuning.TABLE["gemm"]["gpu"]}


def test_tuning_rows_go_from_general_to_specific_each_once(posed, monkeypatch):
    """type, type and vector width, vendor, type and vendor, type, width and vendor: the general "cpu" row, a
    substring of the later keys, is not laid again over the more specific rows; another width's row is not taken."""
    rows = {"default": {"TM": 1, "WM": 1, "WN": 1}, "cpu": {"TM": 2, "TN": 2, "WM": 2}, "cpu simd8": {"TM": 7},
            "cpu simd16": {"TM": 9}, "genuineintel": {"TN": 8}, "cpu genuineintel": {"WM": 5, "WN": 5},
            "cpu simd8 genuineintel": {"WN": 3}, "cpu simd16 genuineintel": {"WN": 4}}
    monkeypatch.setitem(tuning.TABLE, "probe", rows)
    dev = posed()
    assert dev.vector_width == 8 and dev.vendor == "GenuineIntel"
    assert tuning.params(dev, "probe") == {"TM": 7, "TN": 8, "WM": 5, "WN": 3}


def test_limit_devices_poses_every_listed_device():
    devs = clnn.devices()
    saved = dict(device_mod._pose or {})
    try:
        clnn.limit_devices()
        real = [(d.type, d.compute_units, d.max_work_group_size, d.local_mem_size, d.fp64) for d in devs]
        clnn.limit_devices(type="gpu", cu=132, wg=64, local=16384, fp64=False, vendor="NVIDIA Corporation")
        for d, (_, _, wg, local, _) in zip(devs, real, strict=True):
            assert (d.type, d.compute_units, d.vendor, d.fp64) == ("gpu", 132, "NVIDIA Corporation", False)
            assert (d.max_work_group_size, d.local_mem_size) == (min(wg, 64), min(local, 16384))
        clnn.limit_devices()
        assert [(d.type, d.compute_units, d.max_work_group_size, d.local_mem_size, d.fp64) for d in devs] == real
        assert all(not d.real for d in devs)
    finally:
        clnn.limit_devices(**saved)  # the pose under test (CLNN_LIMITS) for the tests after this one


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
