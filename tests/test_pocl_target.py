"""PoCL's target CPU on processors newer than its LLVM (clnn/pocl_target.py)."""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import clnn
from clnn import pocl_target


def _fake_record(n_generic: int) -> tuple[ctypes.Array, list[ctypes.Array], int]:
    """The searched span of random words standing for PoCL's device record, with ``n_generic`` pointers to
    ``"generic"`` in it (the first at offset 640, where PoCL 3.0 keeps its target)."""
    rng = np.random.default_rng()
    record = ctypes.create_string_buffer(rng.integers(0, 256, pocl_target._RECORD_BYTES, dtype=np.uint8).tobytes())
    strings = [ctypes.create_string_buffer(b"generic") for _ in range(n_generic)]
    for i, s in enumerate(strings):
        struct.pack_into("<Q", record, 640 + 64 * i, ctypes.addressof(s))
    return record, strings, ctypes.addressof(record)


@pytest.fixture
def posed_generic(monkeypatch):
    """Every device counts as a PoCL device whose target is ``generic``; the repairs made (or not) are forgotten."""
    monkeypatch.setattr(pocl_target, "_target", lambda p, d: "generic")
    monkeypatch.setattr(pocl_target, "repaired", {})
    monkeypatch.setattr(pocl_target, "unrepaired", {})


def test_repair_points_the_target_at_the_processors_level(posed_generic):
    record, strings, address = _fake_record(1)
    before = record.raw
    name = pocl_target.repair(None, SimpleNamespace(int_ptr=address))
    assert name == pocl_target._level(pocl_target._cpu_flags()) and name.startswith("x86-64")
    target = struct.unpack_from("<Q", record, 640)[0]
    assert ctypes.string_at(target) == name.encode()
    assert record.raw[:640] + record.raw[648:] == before[:640] + before[648:], "only the target's pointer changes"
    assert strings[0].value == b"generic", "the old string is left as it was"
    assert pocl_target.repaired == {address: name}
    assert pocl_target.repair(None, SimpleNamespace(int_ptr=address)) == name, "a second call changes nothing"


def test_repair_leaves_a_record_without_the_target(posed_generic):
    record, _, address = _fake_record(0)
    before = record.raw
    assert pocl_target.repair(None, SimpleNamespace(int_ptr=address)) is None
    assert record.raw == before and pocl_target.repaired == {}
    assert "no pointer to 'generic'" in pocl_target.unrepaired[address]  # for the build error to say


def test_repair_takes_the_first_pointer_when_the_span_holds_more(posed_generic):
    """The span searched runs past PoCL's record into other heap data, which may point at a "generic" string too
    (a test process had one at 1288): the record's own field comes first."""
    record, strings, address = _fake_record(2)
    name = pocl_target.repair(None, SimpleNamespace(int_ptr=address))
    assert name is not None and ctypes.string_at(struct.unpack_from("<Q", record, 640)[0]) == name.encode()
    assert struct.unpack_from("<Q", record, 704)[0] == ctypes.addressof(strings[1]), "the later pointer is left"


V3 = "fpu sse2 avx avx2 bmi1 bmi2 f16c fma movbe xsave cx16 popcnt sse4_1 sse4_2 ssse3"
V4 = V3 + " avx512f avx512bw avx512cd avx512dq avx512vl"


@pytest.mark.parametrize(("target", "flags", "given"), [
    ("generic", V4, "x86-64-v4"),  # Zen 5: LLVM 14 does not know it
    ("generic", V3, "x86-64-v3"),
    ("znver3", V4, "x86-64-v4"),  # Zen 4: LLVM 14 names Zen 3, without AVX-512
    ("znver3", V3, None),  # Zen 3 itself
    ("skylake-avx512", V4, None),
    ("sapphirerapids", V4, None),
    ("znver4", V4, None),  # a later LLVM's name for Zen 4
    ("haswell", V3, None),
])
def test_replacement_gives_the_level_where_the_target_lacks_it(target, flags, given):
    assert pocl_target._replacement(target, set(flags.split())) == given


def test_target_is_the_cpu_the_version_string_names():
    pocl = SimpleNamespace(name="Portable Computing Language")
    for version, cpu in (("OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-znver3", "znver3"),
                         ("OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-skylake-avx512", "skylake-avx512")):
        expected = cpu if sys.platform == "linux" and os.uname().machine == "x86_64" else None
        assert pocl_target._target(pocl, SimpleNamespace(version=version)) == expected
    assert pocl_target._target(SimpleNamespace(name="Intel(R) OpenCL"), SimpleNamespace(version="OpenCL 3.0")) is None


@pytest.mark.parametrize(("flags", "level"), [
    ("fpu sse2 avx avx2 bmi1 bmi2 f16c fma movbe xsave cx16 popcnt sse4_1 sse4_2 ssse3 avx512f avx512bw "
     "avx512cd avx512dq avx512vl", "x86-64-v4"),
    ("fpu sse2 avx avx2 bmi1 bmi2 f16c fma movbe xsave cx16 popcnt sse4_1 sse4_2 ssse3 avx512f", "x86-64-v3"),
    ("fpu sse2 cx16 popcnt sse4_1 sse4_2 ssse3 avx", "x86-64-v2"),
    ("fpu sse2", "x86-64"),
])
def test_level_is_the_highest_the_flags_cover(flags, level):
    assert pocl_target._level(set(flags.split())) == level


def _pocl_devices() -> list[clnn.Device]:
    pocl = [d for d in clnn.devices() if "Portable Computing Language" in d.platform_name]
    if not pocl:
        pytest.skip("no PoCL device here")
    return pocl


def test_every_pocl_device_builds_and_says_its_target():
    """A PoCL device whose target lacked what the processor has was given its level and builds kernels; the others
    were left."""
    for dev in _pocl_devices():
        target = pocl_target._target(dev.cl_device.platform, dev.cl_device)
        given = pocl_target._replacement(target, pocl_target._cpu_flags()) if target else None
        assert pocl_target.repaired.get(dev.cl_device.int_ptr) == given
        x = np.random.default_rng().standard_normal(37).astype(np.float32)
        np.testing.assert_array_equal((-clnn.tensor(x, device=dev)).numpy(), -x)


WIDE = """
import numpy as np, pyopencl as cl, clnn
dev = next(d for d in clnn.devices() if "Portable Computing Language" in d.platform_name)
src = "__kernel void twice(__global float *x) { vstore16(vload16(0, x) * 2, 0, x); }"
prg = cl.Program(dev.context, src).build(devices=[dev.cl_device])
x = np.arange(16, dtype=np.float32)
buf = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
prg.twice(dev.queue, (1,), None, buf)
cl.enqueue_copy(dev.queue, x, buf)
print(x.sum())
"""


def test_a_program_of_512_bit_vectors_comes_back_from_pocl_cache(tmp_path):
    """On Zen 4 PoCL's LLVM 14 targeted znver3 (no AVX-512): a program of float16 vectors built, and its cached copy,
    read by the next process, held no kernel (INVALID_KERNEL_NAME). Two processes share a fresh kernel cache."""
    _pocl_devices()
    env = {**os.environ, "POCL_CACHE_DIR": str(tmp_path), "PYOPENCL_NO_CACHE": "1"}
    for run in ("built", "cached"):
        out = subprocess.run([sys.executable, "-c", WIDE], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and out.stdout.split()[-1:] == ["240.0"], f"{run}: {out.stderr[-2000:]}"
