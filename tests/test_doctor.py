"""``clnn doctor``: finding vendor libraries, registering them, the kernel check and the report's fixes.

Vendor libraries are fake files under a temporary folder and every ``.icd`` entry goes to a temporary
folder (made the loader's folder through ``OCL_ICD_VENDORS`` for this process only, after PyOpenCL has
already loaded its platforms), so the tests never touch the environment's real ``pyopencl/.libs``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import clnn
from clnn import cli
from clnn import doctor as doc


def _fake(root, rel):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not really a library")
    return path


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A fake machine: NVIDIA mounted as in a container, ROCm and Intel's GPU runtime, and decoys; the real
    machine's vendor libraries and GPUs unseen (a machine with NVIDIA's runtime would otherwise report its own)."""
    monkeypatch.setattr(doc, "default_roots", lambda: [])
    monkeypatch.setattr(doc, "pci_gpu_vendors", lambda: set())
    return {
        "nvidia": _fake(tmp_path, "usr/local/nvidia/lib64/libnvidia-opencl.so.1"),
        "amdocl64": _fake(tmp_path, "opt/rocm-6.2.0/lib/libamdocl64.so"),
        "intel-gpu": _fake(tmp_path, "usr/lib/x86_64-linux-gnu/intel-opencl/libigdrcl.so"),
        "decoys": [_fake(tmp_path, "usr/lib/libnvidia-opencl.so.1.bak"),  # not the library's name
                   _fake(tmp_path, "lib/python3.11/site-packages/x/libamdocl64.so"),  # never searched
                   _fake(tmp_path, "a/b/c/d/e/f/libigdrcl.so")],  # deeper than max_depth
    }


def test_find_libraries_finds_each_vendor_once(tmp_path, machine):
    (tmp_path / "nv").symlink_to(machine["nvidia"].parent)  # the same file reached twice
    libs = doc.find_libraries([tmp_path, tmp_path / "nv"])
    assert {lib.vendor.key: lib.path for lib in libs} == {k: machine[k] for k in ("nvidia", "amdocl64", "intel-gpu")}
    assert len(libs) == 3
    assert doc.find_libraries([tmp_path / "no-such-folder"]) == []


@pytest.mark.parametrize("entry, is_registered", [
    ("{path}", True), ("{link}", True), ("libnvidia-opencl.so.1", True), ("/elsewhere/libnvidia-opencl.so.1", False),
    ("libamdocl64.so", False),
])
def test_an_entry_registers_a_library_by_path_or_bare_name(tmp_path, machine, entry, is_registered):
    link = tmp_path / "link.so.1"
    link.symlink_to(machine["nvidia"])
    icd_dir = tmp_path / "icd"
    icd_dir.mkdir()
    (icd_dir / "whatever.icd").write_text(entry.format(path=machine["nvidia"], link=link) + "\n")
    (icd_dir / "ignored.txt").write_text(str(machine["nvidia"]))  # loaders read *.icd only
    libs = [lib for lib in doc.find_libraries([tmp_path / "usr"]) if lib.vendor.key == "nvidia"]
    missing = doc.unregistered(libs, doc.registered([icd_dir]))
    assert missing == ([] if is_registered else libs)


def test_register_writes_one_line_entries_atomically_and_idempotently(tmp_path, machine):
    libs = doc.find_libraries([tmp_path])
    icd_dir = tmp_path / "vendors"
    assert all(changed for _, changed in doc.register(libs, icd_dir))
    assert sorted(p.name for p in icd_dir.iterdir()) == ["amdocl64.icd", "intel-gpu.icd", "nvidia.icd"]
    assert (icd_dir / "nvidia.icd").read_text() == f"{machine['nvidia']}\n"
    stamps = {p: p.stat().st_mtime_ns for p in icd_dir.iterdir()}
    assert not any(changed for _, changed in doc.register(libs, icd_dir))
    assert {p: p.stat().st_mtime_ns for p in icd_dir.iterdir()} == stamps
    (icd_dir / "nvidia.icd").write_text("/old/venv/libnvidia-opencl.so.1\n")  # a stale entry is replaced
    nvidia = [lib for lib in libs if lib.vendor.key == "nvidia"]
    assert doc.register(nvidia, icd_dir) == [(icd_dir / "nvidia.icd", True)]
    assert doc.unregistered(libs, doc.registered([icd_dir])) == []


def test_pci_gpu_vendors_reads_display_controllers_only(tmp_path):
    for slot, vendor, cls in (("0000:01:00.0", "0x10de", "0x030200"), ("0000:00:00.0", "0x8086", "0x060000"),
                              ("0000:02:00.0", "0x1002", "0x038000")):
        (tmp_path / slot).mkdir()
        (tmp_path / slot / "vendor").write_text(vendor + "\n")
        (tmp_path / slot / "class").write_text(cls + "\n")
    assert doc.pci_gpu_vendors(tmp_path) == {"0x10de", "0x1002"}
    assert doc.pci_gpu_vendors(tmp_path / "absent") == set()


def test_kernel_check_passes_on_every_real_device():
    for d in clnn.devices():
        assert doc.check_device(d) is None, d


def test_kernel_check_reports_a_wrong_result(monkeypatch):
    monkeypatch.setattr(doc, "tensor", lambda a, device: clnn.tensor(a[::-1].copy(), device=device))
    assert doc.check_device(clnn.device()).startswith("wrong result:")


def _doctor(capsys, *args):
    rc = cli.main(["doctor", *args])
    return rc, capsys.readouterr().out


def test_doctor_reports_then_registers_an_unregistered_library(tmp_path, machine, monkeypatch, capsys):
    icd_dir = tmp_path / "icd"
    monkeypatch.setenv("OCL_ICD_VENDORS", str(icd_dir))
    args = ["--search", str(tmp_path / "usr/local/nvidia"), "--icd-dir", str(icd_dir)]
    rc, out = _doctor(capsys, *args)
    assert rc == 1
    assert f"NVIDIA: {machine['nvidia']}  (NOT registered)" in out
    assert (f"NVIDIA library {machine['nvidia']} is installed, but no .icd entry names it" in out
            and f"`clnn doctor --register --icd-dir {icd_dir}` writes {icd_dir}/nvidia.icd" in out)
    for d in clnn.devices():  # the real devices, each with its kernel check
        assert f"{d.platform_index}:{d.device_index}  {d.name}  {d.type}" in out
    assert "KERNEL FAILED" not in out
    assert not icd_dir.exists()

    rc, out = _doctor(capsys, *args, "--register")
    assert f"wrote {icd_dir / 'nvidia.icd'} -> {machine['nvidia']}" in out
    assert (icd_dir / "nvidia.icd").read_text() == f"{machine['nvidia']}\n"
    assert "NVIDIA library" not in out

    rc, out = _doctor(capsys, *args, "--register")
    assert f"(registered by {icd_dir / 'nvidia.icd'})" in out
    assert "wrote" not in out and "NOT registered" not in out


def test_doctor_reports_stale_entries_and_gpus_without_a_runtime(tmp_path, monkeypatch, capsys):
    (tmp_path / "old.icd").write_text("/gone/libamdocl64.so\n")
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path))
    monkeypatch.setattr(doc, "pci_gpu_vendors", lambda: {"0x10de"})
    monkeypatch.setattr(doc, "default_roots", lambda: [])
    monkeypatch.setattr(doc, "devices", lambda: [d for d in clnn.devices() if d.real.get("type", d.type) != "gpu"])
    rc, out = _doctor(capsys, "--icd-dir", str(tmp_path))
    assert rc == 1
    assert f"{tmp_path / 'old.icd'} names /gone/libamdocl64.so, which does not exist" in out
    assert "NVIDIA GPU on the PCI bus; OpenCL device: none" in out
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in out


def test_icd_folder_is_the_bundled_loaders_folder():
    try:
        folder = doc.icd_folder()
    except clnn.DeviceError as err:  # PyOpenCL not from a PyPI wheel: the error says what to do instead
        assert "--icd-dir" in str(err)
        return
    assert folder.name == ".libs" and any(folder.glob("libOpenCL*"))
    assert folder in doc.loader_folders()
    assert os.environ.get("OCL_ICD_VENDORS", "/etc/OpenCL/vendors") == str(doc.loader_folders()[0])


def test_check_uses_fresh_inputs(monkeypatch):
    seen = []
    monkeypatch.setattr(doc, "tensor", lambda a, device: seen.append(a.copy()) or clnn.tensor(a, device=device))
    doc.check_device(clnn.device())
    doc.check_device(clnn.device())
    assert len(seen) == 4 and not np.array_equal(seen[0], seen[2]) and np.all(seen[0] != 0)


def test_doctor_explains_when_it_cannot_register(tmp_path, machine, monkeypatch, capsys):
    search = ["--search", str(tmp_path / "usr/local/nvidia")]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    rc, out = _doctor(capsys, *search, "--register", "--icd-dir", str(blocker / "icd"))
    assert rc == 1 and "cannot write the entries" in out and "OCL_ICD_VENDORS=DIR" in out
    monkeypatch.setattr(doc, "_bundled_folder", lambda: None)  # a PyOpenCL without its own loader
    rc, out = _doctor(capsys, *search)
    assert rc == 1 and "has no bundled ICD loader" in out
    assert "`clnn doctor --register --icd-dir DIR` writes DIR/nvidia.icd" in out


def test_register_defaults_to_the_bundled_loaders_folder(tmp_path, machine, monkeypatch, capsys):
    libs = tmp_path / "pyopencl-libs"  # stands in for the environment's pyopencl/.libs
    libs.mkdir()
    monkeypatch.setattr(doc, "_bundled_folder", lambda: libs)
    search = ["--search", str(tmp_path / "usr/local/nvidia")]
    rc, out = _doctor(capsys, *search)
    assert rc == 1 and f"Fix: `clnn doctor --register` writes {libs}/nvidia.icd" in out
    _doctor(capsys, *search, "--register")
    assert (libs / "nvidia.icd").read_text() == f"{machine['nvidia']}\n"
    rc, out = _doctor(capsys, *search)
    assert f"(registered by {libs / 'nvidia.icd'})" in out and "NVIDIA library" not in out
