"""clnn.distributed and data-parallel training, each check a short ``mpiexec`` job (scripts in tests/mpi/).

The jobs use the mpiexec of the mpich wheel beside this Python, with the clnn this test imports. They run in
one CI part only (the PoCL one): they check communication, not kernels, and each starts several processes.
"""

import dataclasses
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import clnn
from clnn import distributed as dist

MPI_DIR = Path(__file__).parent / "mpi"
MPIEXEC = Path(sys.executable).with_name("mpiexec")

pytestmark = [
    pytest.mark.skipif("Portable" not in clnn.device().platform_name,
                       reason="MPI jobs run in the PoCL part only (CLNN_DEVICE=pocl)"),
    pytest.mark.skipif(not MPIEXEC.exists(), reason="needs the mpich wheel's mpiexec: pip install 'clnn[mpi]'"),
]


def mpirun(ranks: int, script: str, *args: object, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``tests/mpi/<script>`` on ``ranks`` processes; fail the test unless every rank exits cleanly."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(clnn.__file__).parents[1]), env.get("PYTHONPATH")]))
    cmd = [str(MPIEXEC), "-n", str(ranks), sys.executable, str(MPI_DIR / script), *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def check(proc: subprocess.CompletedProcess, ranks: int) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # ranks share the pipe, so their lines may interleave
    assert sorted(re.findall(r"rank (\d+): ok", proc.stdout)) == [str(r) for r in range(ranks)], proc.stdout


@pytest.mark.parametrize("ranks", [2, 3])
def test_collectives_match_numpy(ranks):
    check(mpirun(ranks, "collectives.py", np.random.SeedSequence().entropy % 2**32, ranks), ranks)


def test_missing_mpi4py_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py now raises ImportError
    monkeypatch.setitem(dist._state, "comm", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'clnn\[mpi\]'"):
        dist.init()
    with pytest.raises(RuntimeError, match="init"):
        dist.rank()


@pytest.mark.parametrize(("ranks", "kind"), [(2, "plain"), (3, "plain"), (2, "bn")])
def test_ddp_training_matches_one_process(ranks, kind):
    check(mpirun(ranks, "train.py", np.random.SeedSequence().entropy % 2**32, ranks, kind), ranks)


def test_ddp_names_a_mismatched_parameter():
    check(mpirun(2, "faults.py", "mismatch"), 2)


def test_a_failing_rank_ends_the_job():
    proc = mpirun(3, "faults.py", "raise", timeout=30)  # without the abort hook, ranks 0 and 1 would hang
    assert proc.returncode != 0
    assert "rank 2 of 3 raised RuntimeError" in proc.stderr and "boom on purpose" in proc.stderr, proc.stderr


def test_fit_distributed(tmp_path):
    proc = mpirun(2, "fit.py", np.random.SeedSequence().entropy % 2**32, tmp_path)
    check(proc, 2)
    assert proc.stdout.count("Epoch 1: saved") == 1  # ModelCheckpoint on rank 0 only


def test_staging_buffer_belongs_to_its_device(dev, rng):
    """on_host stages a group of several buffers in a host-visible buffer kept per device; an entry left under the
    same id by another (dead) Device, whose buffer lives in another context, is not used."""
    other = dataclasses.replace(dev, _context=None, _queue=None, _pool=None, _side_queue=None,
                                _lock=threading.RLock())
    stale = other.host_buffer(1 << 16)
    values = [rng.standard_normal(n).astype(np.float32) for n in (5, 7)]
    group = [clnn.tensor(v, device=dev) for v in values]
    saved = dist._staging.get(id(dev))
    dist._staging[id(dev)] = (other, stale)
    try:
        with dist.on_host(group) as host:
            np.testing.assert_array_equal(host, np.concatenate(values))
            host *= 2
        owner, buf = dist._staging[id(dev)]
        assert owner is dev and buf is not stale
    finally:
        if saved is None:
            dist._staging.pop(id(dev), None)
        else:
            dist._staging[id(dev)] = saved
    for t, v in zip(group, values):
        np.testing.assert_array_equal(t.numpy(), 2 * v)
