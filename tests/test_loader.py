"""Kernel loader: builds are cached in-process and across processes; failures carry the log."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import clnn
from clnn import kernels, tuning


def test_kernel_dir_holds_every_kernel_file():
    files = sorted(p.name for p in kernels.kernel_dir.glob("*.cl"))
    assert {"elementwise.cl", "reduce.cl", "copy.cl", "gemm.cl", "random.cl"} <= set(files)


def test_second_build_is_an_in_process_cache_hit(dev):
    defines = kernels.defines("float32")
    first = kernels.program(dev, "softmax.cl", defines)  # unguarded: the program holds its kernels
    assert kernels.program(dev, "softmax.cl", dict(reversed(list(defines.items())))) is first
    k1 = kernels.kernel(dev, "softmax.cl", "softmax_small", defines)
    assert k1.program.int_ptr == first.int_ptr and kernels.kernel(dev, "softmax.cl", "softmax_small", defines) is k1
    other = kernels.program(dev, "softmax.cl", {**defines, "UNUSED_KNOB": 3})
    assert other is not first


GUARDED = sorted(p.name for p in kernels.kernel_dir.glob("*.cl") if kernels._built_alone(p.name))


def test_guarded_files_build_each_kernel_alone(dev):
    """Files that guard each kernel with #ifdef KERNEL_<name>: kernel() builds only the one it is asked for (a
    program per kernel); a file without guards still builds all its kernels into one program."""
    assert {"gemm.cl", "conv.cl", "elementwise.cl", "norm.cl", "optim.cl"} <= set(GUARDED)
    d = kernels.defines("float32")
    for file, name in (("gemm.cl", "gemm_direct"), ("conv.cl", "conv_direct_fwd"), ("elementwise.cl", "unary")):
        k = kernels.kernel(dev, file, name, d)
        assert [x.function_name for x in k.program.all_kernels()] == [name]
    k = kernels.kernel(dev, "softmax.cl", "softmax_small", d)
    assert len(k.program.all_kernels()) > 1


@pytest.mark.parametrize("file", GUARDED)
def test_every_kernel_of_a_guarded_file_has_its_guard(file):
    """Each kernel declared in a guarded file sits inside its own #ifdef KERNEL_<name> (an unguarded one would
    be compiled into every program of the file)."""
    source = (kernels.kernel_dir / file).read_text()
    decl = re.compile(r"^(?:__kernel|TILED_KERNEL)\s+(?:__attribute__\s*\(\(.*?\)\)\s*)*void\s+(\w+)\(", re.M | re.S)
    guards = [(m.start(), m.group(1)) for m in re.finditer(r"^#ifdef KERNEL_(\w+)$", source, re.M)]
    declared = [(m.start(), m.group(1)) for m in decl.finditer(source)]
    # the last guard opened before each kernel is its own
    within = [max((g for g in guards if g[0] < at), default=(0, None))[1] for at, _ in declared]
    assert len(declared) >= 3 and within == [name for _, name in declared], (declared, guards)
    assert len(guards) == len(declared)


_PROBE = """
import json, clnn
from clnn import kernels
dev = clnn.device()
p = kernels.program(dev, "copy.cl", {"SRC_T": "float", "DST_T": "float", "PROBE": %d})
print(json.dumps({"info": p._build_duration_info[:2], "platform": dev.platform_name}))
"""


def test_second_process_reuses_the_on_disk_cache(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "POCL_CACHE_DIR": str(tmp_path / "pocl")}
    env.pop("PYOPENCL_NO_CACHE", None)
    probe = _PROBE % os.getpid()
    runs = [
        json.loads(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                                  check=True, timeout=300).stdout.strip().splitlines()[-1])
        for _ in range(2)
    ]
    (_, cached1), (descr2, cached2) = runs[0]["info"], runs[1]["info"]
    if "assuming cached by ICD" in descr2:  # PoCL and NVIDIA cache source builds themselves
        assert any((tmp_path / "pocl").rglob("*")) or "pocl" not in runs[1]["platform"].lower()
    else:
        assert not cached1 and cached2, runs


def test_broken_kernel_error_names_file_defines_device_and_log(dev, tmp_path, monkeypatch):
    (tmp_path / "broken.cl").write_text(
        "__kernel void broken(__global float *x) { x[get_global_id(0)] = undefined_name + 1; }\n"
    )
    monkeypatch.setattr(kernels, "kernel_dir", Path(tmp_path))
    with pytest.raises(kernels.KernelBuildError) as info:
        kernels.program(dev, "broken.cl", {"TILE": 7})
    msg = str(info.value)
    assert "kernels_cl/broken.cl" in msg and "TILE" in msg and dev.name in msg
    assert "undefined_name" in msg  # the compiler's log
    # the failure is not cached: a fixed file builds afterwards
    (tmp_path / "broken.cl").write_text("__kernel void broken(__global float *x) { x[get_global_id(0)] = 1; }\n")
    assert kernels.program(dev, "broken.cl", {"TILE": 7}) is not None


def test_launch_rejects_work_groups_over_the_device_limit(dev):
    k = kernels.kernel(dev, "elementwise.cl", "unary", kernels.defines("float32"))
    too_big = dev.max_work_group_size * 2
    with pytest.raises(ValueError, match="max_work_group_size"):
        kernels.launch(dev, k, (too_big,), (too_big,))


def test_launch_refuses_work_groups_over_a_kernels_local_arrays(dev):
    k = kernels.kernel(dev, "reduce.cl", "reduce_group", kernels.defines("float32", RED_WG=8))
    with pytest.raises(RuntimeError, match=r"reduce_group: a work-group of 16 work-items overruns its local arrays, "
                                           r"sized for RED_WG=8"):
        kernels.launch(dev, k, (16,), (16,))


def test_launch_respects_a_lowered_work_group_limit(dev, monkeypatch):
    monkeypatch.setattr(dev, "max_work_group_size", 16)
    x = clnn.arange(1, 1000, dtype="float32", device=dev)
    assert float((x * 2).sum().item()) == pytest.approx(999 * 1000)
    assert float(x.sum().item()) == pytest.approx(999 * 500)


def test_kernels_sized_by_a_limit_follow_its_change(dev, monkeypatch):
    """A reduction built while the work-group limit was 16 (its local arrays sized by it) is not launched with the
    restored limit's work-groups of 256: a test that lowered the limit made a later GPU run overrun them (the
    H200's full suite faulted, and Intel's runtime posing as an H100 crashed, in the cross-entropy test after it)."""
    monkeypatch.setattr(dev, "type", "gpu")  # reduce_group: a work-group per long row, on every device
    x = np.random.default_rng().standard_normal(100_003).astype(np.float32)
    t = clnn.tensor(x, device=dev)
    wg = dev.max_work_group_size
    revision = dev.revision
    monkeypatch.setattr(dev, "max_work_group_size", 16)
    assert dev.revision == revision + 1
    lowered = tuning.memoized(dev, ("probe", id(dev)), lambda: kernels.group_size(dev))
    assert float(t.max().item()) == x.max()
    monkeypatch.setattr(dev, "max_work_group_size", wg)
    restored = tuning.memoized(dev, ("probe", id(dev)), lambda: kernels.group_size(dev))
    assert restored == kernels.group_size(dev) > lowered
    assert float(t.max().item()) == x.max()
