"""PoCL's target CPU on processors its LLVM does not know (clnn/pocl_target.py)."""

from __future__ import annotations

import ctypes
import struct
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
    monkeypatch.setattr(pocl_target, "_needs_repair", lambda p, d: True)
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


@pytest.mark.parametrize(("flags", "level"), [
    ("fpu sse2 avx avx2 bmi1 bmi2 f16c fma movbe xsave cx16 popcnt sse4_1 sse4_2 ssse3 avx512f avx512bw "
     "avx512cd avx512dq avx512vl", "x86-64-v4"),
    ("fpu sse2 avx avx2 bmi1 bmi2 f16c fma movbe xsave cx16 popcnt sse4_1 sse4_2 ssse3 avx512f", "x86-64-v3"),
    ("fpu sse2 cx16 popcnt sse4_1 sse4_2 ssse3 avx", "x86-64-v2"),
    ("fpu sse2", "x86-64"),
])
def test_level_is_the_highest_the_flags_cover(flags, level):
    assert pocl_target._level(set(flags.split())) == level


def test_every_pocl_device_builds_and_says_its_target():
    """A PoCL device that reported ``generic`` was given a level and builds kernels; the others were left."""
    pocl = [d for d in clnn.devices() if "Portable Computing Language" in d.platform_name]
    if not pocl:
        pytest.skip("no PoCL device here")
    for dev in pocl:
        generic = dev.cl_device.version.strip().endswith("-generic")
        assert (dev.cl_device.int_ptr in pocl_target.repaired) == generic
        x = np.random.default_rng().standard_normal(37).astype(np.float32)
        np.testing.assert_array_equal((-clnn.tensor(x, device=dev)).numpy(), -x)
