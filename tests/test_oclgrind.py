"""Every kernel in kernels_cl/ runs under Oclgrind with zero reported errors.

Oclgrind simulates an OpenCL device and checks each memory access: out-of-bounds reads and writes,
data races between work-items (OCLGRIND_DATA_RACES=1), uses of uninitialized values
(OCLGRIND_UNINITIALIZED=1, in the passes of UNINITIALIZED_PASSES), barrier divergence. It reports on
stderr and never changes an exit code, so each op family runs in its own process (tests/oclgrind/drive.py,
through clnn's public API, on tiny shapes) and this module parses what it printed. A planted bug
(tests/oclgrind/broken.cl) proves the parsing catches real errors, and a coverage test proves every kernel in
kernels_cl/ was launched.

Oclgrind comes from ``pip install 'pyopencl[oclgrind]'``. Without it these tests skip, unless
CLNN_REQUIRE_OCLGRIND=1 (set by scripts/run_tests.py) turns the skip into a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import run_tests_script

import clnn
from clnn.kernels import kernel_dir
from clnn.ops.matmul import OPTIONAL_KEYS

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "oclgrind" / "drive.py"
BROKEN = HERE / "oclgrind" / "broken.cl"
ROOT = HERE.parent
TIMEOUT_S = 600
# Each family runs in all its dtypes with Oclgrind's own limits (a device of type "other"), then in float32
# as a small GPU, posing as an H100 (CI's h100 part) and posing as a CPU, so tile, work-group and per-device-type
# choices (GPU tuning rows, CPU-only kernel variants) are checked too. The H100 here runs one work-group along y and z:
# kernels.launch cuts every grid with more into launches at global offsets, so GROUP_ID's sums are checked too.
H100 = run_tests_script().H100 + ",groups=1"
LIMIT_PASSES = ("", "wg=64,local=16384", H100, "type=cpu")
PASS_DTYPES = {"": "", "wg=64,local=16384": "float32", H100: "float32", "type=cpu": "float32"}
# Oclgrind's uninitialized-value checker takes about 40 % of a pass (the type=cpu pass: 88 s with it, 51 without,
# 2026-11-27). It runs in the all-dtype pass and the H100's (the GPU tiles NVIDIA's users run); the small GPU's and
# the CPU's passes check bounds, races and barriers.
UNINITIALIZED_PASSES = ("", H100)


def _load_driver():
    spec = importlib.util.spec_from_file_location("clnn_oclgrind_drive", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FAMILIES = sorted(_load_driver().FAMILIES)


def _has_oclgrind() -> bool:
    return any("oclgrind" in d.platform_name.lower() for d in clnn.devices())


if not _has_oclgrind():
    if os.environ.get("CLNN_REQUIRE_OCLGRIND") == "1":
        raise RuntimeError("CLNN_REQUIRE_OCLGRIND=1 but no Oclgrind platform: pip install 'pyopencl[oclgrind]'")
    pytest.skip("Oclgrind is not installed (pip install 'pyopencl[oclgrind]')", allow_module_level=True)


# ---- parsing Oclgrind's reports ------------------------------------------------------------------------
@dataclass(frozen=True)
class Report:
    kind: str  # the headline with addresses removed, e.g. "Invalid write of size 4 at global memory"
    kernel: str
    where: str  # "line 7: <source line>" when Oclgrind knows it
    text: str  # the whole block as printed


_ADDRESS = re.compile(r"\s*(address\s+)?0x[0-9a-fA-F]+")
_AT_LINE = re.compile(r"At line (\d+)")


def parse_reports(stderr: str) -> list[Report]:
    """Oclgrind's error blocks in ``stderr``.

    A block is a headline at column 0 followed by an indented ``Kernel:`` or ``Function:`` line (API
    errors), or an ``OCLGRIND FATAL ERROR`` line. Other output (the driver's progress lines, Python
    warnings) is not a report.
    """
    lines = stderr.splitlines()
    reports = []
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        fatal = line.startswith("OCLGRIND FATAL")
        if not fatal and (not line or line[0].isspace() or not re.match(r"\s+(Kernel|Function):", nxt)):
            continue
        end = i + 1
        while end < len(lines) and (lines[end].startswith(("\t", " ")) or (fatal and end == i + 1)):
            end += 1
        block = lines[i:end]
        kernel = next((b.split(":", 1)[1].strip() for b in block if b.strip().startswith(("Kernel:", "Function:"))),
                      "?")
        where = ""
        for k, b in enumerate(block):
            m = _AT_LINE.search(b)
            if m:
                source = block[k + 1].strip() if k + 1 < len(block) else ""
                where = f"line {m.group(1)}: {source}"
                break
        kind = line if not fatal else f"{line} {nxt.strip()}"
        reports.append(Report(_ADDRESS.sub("", kind).strip(), kernel, where, "\n".join(block)))
    return reports


def summarize(reports: list[Report], limit: int = 12) -> str:
    """One line per distinct (kind, kernel, place) with its count, then the first full block of each."""
    counts = Counter((r.kind, r.kernel, r.where) for r in reports)
    first: dict[tuple[str, str, str], str] = {}
    for r in reports:
        first.setdefault((r.kind, r.kernel, r.where), r.text)
    out = [f"{n:5d} x {kind} in kernel {kernel} ({where or 'no source line'})" for (kind, kernel, where), n
           in counts.most_common(limit)]
    out += ["", "first report of each:"] + [first[key] for key, _ in counts.most_common(limit)]
    return "\n".join(out)


# ---- running under Oclgrind ----------------------------------------------------------------------------
def oclgrind_env(limits: str = "") -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "CLNN_DEVICE": "oclgrind",
        "OCLGRIND_DATA_RACES": "1",
        "OCLGRIND_UNINITIALIZED": "1" if limits in UNINITIALIZED_PASSES else "0",
        "PYOPENCL_NO_CACHE": "1",  # cached binaries carry no source: reports would lack lines
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    })
    env.pop("CLNN_LIMITS", None)
    if limits:
        env["CLNN_LIMITS"] = limits
    return env


@dataclass
class Run:
    returncode: int
    stderr: str
    reports: list[Report]
    fetched: list[dict]


def run_python(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                              timeout=TIMEOUT_S, cwd=ROOT)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"{' '.join(args)} under Oclgrind ran past {TIMEOUT_S} s: shrink its shapes\n{err.stderr}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run each (family, limits) once per session, on demand."""
    done: dict[tuple[str, str], Run] = {}
    out_dir = tmp_path_factory.mktemp("oclgrind")

    def get(family: str, limits: str) -> Run:
        key = (family, limits)
        if key not in done:
            record = out_dir / f"{family}-{len(done)}.json"
            dtypes = ["--dtypes", PASS_DTYPES[limits]] if PASS_DTYPES[limits] else []
            res = run_python([str(DRIVER), family, "--record", str(record), *dtypes], oclgrind_env(limits))
            fetched = json.loads(record.read_text()) if record.exists() else []
            done[key] = Run(res.returncode, res.stderr, parse_reports(res.stderr), fetched)
        return done[key]

    return get


@pytest.mark.parametrize("limits", LIMIT_PASSES, ids=lambda s: "h100" if s == H100 else s or "device-limits")
@pytest.mark.parametrize("family", FAMILIES)
def test_family_is_clean_under_oclgrind(runs, family, limits):
    run = runs(family, limits)
    assert not run.reports, (
        f"Oclgrind reported {len(run.reports)} error(s) for the {family!r} family"
        f"{' with CLNN_LIMITS=' + limits if limits else ''}:\n{summarize(run.reports)}"
    )
    assert run.returncode == 0, f"driver for {family!r} failed (exit {run.returncode}):\n{run.stderr[-6000:]}"
    assert run.fetched, f"driver for {family!r} fetched no kernel"


_KERNEL_DECL = re.compile(  # TILED_KERNEL: gemm.h's __kernel with the tile's required work-group size
    r"\b(?:__kernel|kernel|TILED_KERNEL)\s+(?:__attribute__\s*\(\(.*?\)\)\s*)*void\s+(\w+)\s*\(", re.S)


# kernels in PTX, which only NVIDIA's runtime builds (bench_mma.py's probe of the tensor cores' instructions; gemm.h's
# warp products, which run here in their OpenCL C form, are checked by the gemm and conv families)
NVIDIA_ONLY = ("mma_probe.cl",)


def declared_kernels() -> set[tuple[str, str]]:
    """(file, kernel) for every kernel declared in kernels_cl/*.cl (comments stripped) but NVIDIA_ONLY's."""
    found = set()
    for path in sorted(p for p in kernel_dir.glob("*.cl") if p.name not in NVIDIA_ONLY):
        source = re.sub(r"/\*.*?\*/|//[^\n]*", " ", path.read_text(), flags=re.S)
        found |= {(path.name, name) for name in _KERNEL_DECL.findall(source)}
    return found


def test_every_kernel_ran_under_oclgrind(runs):
    declared = declared_kernels()
    assert declared, f"no kernels found in {kernel_dir}"
    ran = {(f["file"], f["kernel"]) for fam in FAMILIES for lim in LIMIT_PASSES for f in runs(fam, lim).fetched}
    missing = sorted(declared - ran)
    assert not missing, (
        "these kernels never ran under Oclgrind: "
        + ", ".join(f"{f}:{k}" for f, k in missing)
        + f". Call the op that launches them (tiny shapes) in a family of {DRIVER.relative_to(ROOT)}."
    )


@pytest.mark.parametrize("option, value", [("VWA", None), ("PF", 1), ("PF", 2), ("KU", None), ("MMA", 1)])
def test_gpu_tile_options_ran_under_oclgrind(runs, option, value):
    """gemm.h's k-major A tile (VWA > 1), a slice's loads before its stores (PF 1), slices fetched ahead (PF 2),
    unrolled multiplies (KU > 0) and warp products (MMA 1) ran in each kernel that stages tiles: gemm, conv_fwd,
    conv_bwd_weight (value: the option's, None: any but the kernels' default)."""
    off = OPTIONAL_KEYS.get(option, 0)  # the kernels' default
    ran = {(f["file"], f["kernel"]) for fam in ("gemm", "conv") for lim in LIMIT_PASSES for f in runs(fam, lim).fetched
           if (int(f["defines"].get(option, off)) != off if value is None
               else int(f["defines"].get(option, off)) == value)}
    assert {("gemm.cl", "gemm"), ("conv.cl", "conv_fwd"), ("conv.cl", "conv_bwd_weight")} <= ran, sorted(ran)


_BROKEN_SCRIPT = """
import sys
import numpy as np
import pyopencl as cl
platform = next(p for p in cl.get_platforms() if "oclgrind" in p.name.lower())
ctx = cl.Context(platform.get_devices())
queue = cl.CommandQueue(ctx)
prg = cl.Program(ctx, open(sys.argv[1]).read()).build()
n = 24
mf = cl.mem_flags
x = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.arange(n, dtype=np.float32))
y = cl.Buffer(ctx, mf.WRITE_ONLY, n * 4)
prg.reverse_tiles(queue, (32,), (16,), np.int32(n), x, y)
queue.finish()
"""


def test_planted_bugs_are_caught():
    res = run_python(["-c", _BROKEN_SCRIPT, str(BROKEN)], oclgrind_env())
    assert res.returncode == 0, res.stderr[-4000:]  # Oclgrind never changes the exit code
    reports = parse_reports(res.stderr)
    kinds = {r.kind for r in reports if r.kernel == "reverse_tiles"}
    assert any("data race" in k for k in kinds), f"missing barrier not caught; reports: {kinds}"
    assert any(k.startswith("Invalid write") for k in kinds), f"off-by-one write not caught; reports: {kinds}"
    assert all("line" in r.where for r in reports), "reports lack source lines (PYOPENCL_NO_CACHE not honoured?)"


def test_parser_ignores_plain_output():
    text = "done: sum [float32]\nUserWarning: something\n  warnings.warn(msg)\n"
    assert parse_reports(text) == []
