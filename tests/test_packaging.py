"""The built wheel ships kernels_cl/ and works from outside the source tree."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_USE_WHEEL = """
import sys
import numpy as np
import clnn
assert clnn.__file__.startswith(sys.argv[1]), clnn.__file__
assert str(clnn.kernels.kernel_dir).startswith(sys.argv[1]), clnn.kernels.kernel_dir
a = np.arange(12, dtype=np.float32).reshape(3, 4)
out = (clnn.tensor(a) @ clnn.tensor(a.T)).numpy()
np.testing.assert_allclose(out, a @ a.T, rtol=1e-6)
print("ok", clnn.kernels.kernel_dir)
"""


def test_wheel_ships_kernels_and_runs_an_op_from_another_directory(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
        check=True, timeout=600, capture_output=True,
    )
    (wheel,) = wheels.glob("clnn-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n.split("/")[-1] for n in names if n.startswith("clnn/kernels_cl/")}
    assert {p.name for p in (ROOT / "kernels_cl").iterdir() if p.is_file()} <= shipped
    assert any(n.endswith("entry_points.txt") for n in names)

    # a throwaway venv: clnn from the wheel; its dependencies (pyopencl, numpy, PoCL) are borrowed
    # from this environment through a .pth line, which comes after the venv's own site-packages
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True, timeout=600, capture_output=True,
    )
    deps = Path(sysconfig.get_path("purelib"))
    (site / "borrowed_deps.pth").write_text(f"{deps}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run([python, "-c", _USE_WHEEL, str(site)], cwd=elsewhere, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("ok")
