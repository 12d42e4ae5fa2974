"""``clnn tune`` end to end on the device under test, with a temporary database: it measures, stores,
shows, is used by gemm's planner, resets; candidates that do not fit the device are skipped with a reason."""

from __future__ import annotations

import dataclasses
import itertools
import json
import time

import numpy as np
import pytest
import torch
from helpers import assert_close, set_direct_conv_max_k

import clnn
import clnn.functional as F
from clnn import cli, kernels, tune, tuning
from clnn.ops import conv
from clnn.ops.matmul import (
    OPTIONAL_KEYS,
    GemmPlan,
    PlanOption,
    _fewer_rows,
    choose,
    config_problem,
    gemm_config,
    plan,
    plan_options,
    rows_config,
)


@pytest.fixture
def db(tmp_path, monkeypatch):
    """A database of the test's own; reset afterwards, so that no op keeps what it read from it (ops look for the
    database at most every tuning.RECHECK_S)."""
    path = tmp_path / "cache" / "tuning.json"
    monkeypatch.setenv("CLNN_TUNING_DB", str(path))
    yield path
    tuning.reset(path)


@pytest.fixture
def small_products(monkeypatch):
    """The gemm tuner times its tiles at a 40x48x24 product: microseconds, where a GPU pose's 2048^3 is seconds on a
    CPU."""
    monkeypatch.setattr(tune, "_shapes", lambda dev, kind: (40, 48, 24))


def test_tune_stores_shows_is_used_and_resets(dev, db, capsys, small_products):
    assert cli.main(["tune", "--budget", "1", "--kernels", "gemm"]) == 0
    progress = capsys.readouterr().out
    assert "gemm: stored TM=" in progress and "gemm_small: stored TM=" in progress, progress
    stored = json.loads(db.read_text())["devices"][tuning.device_key(dev)]
    assert set(stored) == {"gemm", "gemm_small"} and stored["gemm"]["gflops"] > 0

    assert cli.main(["tune", "--show"]) == 0
    shown = capsys.readouterr().out
    assert tuning.device_key(dev) in shown and json.dumps(stored["gemm"], sort_keys=True) in shown

    f32 = np.dtype("float32")
    assert tuning.params(dev, "gemm") == {**tuning.params(dev, "gemm"), **stored["gemm"]["params"]}
    big, small = stored["gemm"]["params"], stored["gemm_small"]["params"]  # weighed: these and big, fewer rows
    assert plan(dev, f32, 1, 512, 512, 512, rows=False).cfg in (big, *_fewer_rows(big, small["TM"], 512), small)

    assert cli.main(["tune", "--reset"]) == 0
    assert not db.exists() and "removed" in capsys.readouterr().out
    assert tuning.load_db() == {}


def test_tune_rows_stores_a_checked_block_and_matmul_runs_it(dev, db, monkeypatch, rng):
    """On a CPU, `clnn tune --kernels rows` times gemm_rows blocks (the current one first, every one within the
    vector registers), checks each, stores the winner, and products then run in that block (a stored odd one:
    3 rows of 2 vectors, 4 work-items a group); on a GPU it says there is nothing to tune."""
    monkeypatch.setattr(tune._RowsProblem, "__init__", _small_rows_problem)
    current, candidates = rows_config(dev, np.float32), tune.rows_candidates(dev)
    lines: list[str] = []
    stored = tune.tune_rows(dev, 2.0, None, lines.append)
    if current is None:
        assert stored == {} and candidates == [] and "nothing to tune" in lines[0], lines
        return
    assert candidates[0] == current and len({tuple(c.items()) for c in candidates}) == len(candidates)
    assert all(c["WM"] * (c["WN"] // c["VW"]) + c["WN"] // c["VW"] + 1 <= tune._registers(dev) for c in candidates)
    assert "rows: stored WM=" in lines[-1] and stored["gemm_rows"]["params"] in candidates, lines
    assert not any("skip" in ln for ln in lines), lines
    odd = {"WM": 3, "WN": 2 * current["VW"], "VW": current["VW"], "LY": 4, "SPAN": 1 << 20}
    tuning.store(dev, "gemm_rows", {"params": odd})
    assert plan(dev, np.dtype("float32"), 1, 300, 200, 150) == GemmPlan("rows", odd)
    launches = []
    real = kernels.launch
    monkeypatch.setattr(kernels, "launch", lambda d, k, g, lo, *a: launches.append((k.function_name, lo)) or
                        real(d, k, g, lo, *a))
    a, b = rng.standard_normal((300, 150)).astype(np.float32), rng.standard_normal((150, 200)).astype(np.float32)
    out = clnn.matmul(clnn.tensor(a, device=dev), clnn.tensor(b, device=dev))
    assert launches == [("gemm_rows", (1, 4, 1))], launches
    ref = torch.from_numpy(a).double() @ torch.from_numpy(b).double()
    assert_close(out.numpy(), ref.numpy(), 1e-5, "gemm with the stored block")


def _small_rows_problem(self, dev, rng):
    """tune's _RowsProblem at a 40x64x24 product: microseconds a candidate."""
    self.dev, self.products = dev, ((40, 64, 24),)
    self.shape, self.flops = self.products[0], 2.0 * 40 * 64 * 24
    a, b = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((24, 64)).astype(np.float32)
    self.operands = [(clnn.tensor(a, device=dev), clnn.tensor(b, device=dev))]
    sa, sb = rng.standard_normal((131, 67)).astype(np.float32), rng.standard_normal((137, 67)).astype(np.float32)
    self.sa, self.sb = clnn.tensor(sa, device=dev), clnn.tensor(sb, device=dev)
    self.refs = (a.astype(np.float64) @ b, sa.astype(np.float64) @ sb.astype(np.float64).T)


def test_a_stored_entry_decides_the_tile(dev, db, rng):
    """An odd tile no table row has (A's tile k-major, its multiply unrolled by 3), stored for this device, is what
    gemm then runs, correctly (on a CPU without its gemm_rows, which takes float32 products there)."""
    odd = {"TM": 16, "TN": 24, "TK": 8, "WM": 2, "WN": 3, "VW": 1, "VWG": 2, "VWA": 2, "APAD": 1, "DB": 1, "PF": 1,
           "KU": 3}
    f32 = np.dtype("float32")
    tuning.store(dev, "gemm_rows", {"params": {"LY": 0}})
    before = plan(dev, f32, 1, 300, 200, 150).cfg
    tuning.store(dev, "gemm", {"params": odd})
    tuning.store(dev, "gemm_small", {"params": odd})
    assert plan(dev, f32, 1, 300, 200, 150).cfg == odd != before
    other = dataclasses.replace(dev, name=dev.name + " (another device)")
    assert plan(other, f32, 1, 300, 200, 150, rows=False).cfg == before  # keyed by device name
    a, b = rng.standard_normal((300, 150)).astype(np.float32), rng.standard_normal((150, 200)).astype(np.float32)
    out = clnn.matmul(clnn.tensor(a, device=dev), clnn.tensor(b, device=dev))
    ref = torch.from_numpy(a).double() @ torch.from_numpy(b).double()
    assert_close(out.numpy(), ref.numpy(), 1e-5, "gemm with the stored tile")


def test_candidates_beyond_the_device_are_skipped_with_a_reason(dev, db, monkeypatch, small_products):
    small = dataclasses.replace(dev, max_work_group_size=64, local_mem_size=16384, _context=None, _queue=None,
                                _pool=None)
    too_big = {"VWA": 1, **tuning.TABLE["gemm"]["gpu"]}  # 256 work-items
    too_local = {"TM": 64, "TN": 64, "TK": 64, "WM": 8, "WN": 8, "VW": 4, "VWG": 4, "VWA": 4, "APAD": 1, "DB": 1}
    fits = {"TM": 32, "TN": 32, "TK": 8, "WM": 4, "WN": 4, "VW": 2, "VWG": 4, "VWA": 1, "APAD": 1, "DB": 1, "PF": 0,
            "KU": 0}
    monkeypatch.setattr(tune, "candidates", lambda dev, kind: iter([too_big, too_local, fits]))
    lines: list[str] = []
    winners = tune.tune_gemm(small, 0.5, None, lines.append)
    assert any("skip" in ln and "work-group of 256 exceeds the device's 64" in ln for ln in lines), lines
    assert any("skip" in ln and "bytes of local memory exceed the device's 16384" in ln for ln in lines), lines
    assert winners["gemm"]["params"] == winners["gemm_small"]["params"] == fits


@pytest.mark.parametrize(("current_times", "winner"), [((3.0, 1.0), "current"), ((2.0, 2.0), "other")],
                         ids=["slowed-once", "slower"])
def test_finalists_are_retimed_so_a_slowed_timing_does_not_decide(dev, db, monkeypatch, small_products,
                                                                    current_times, winner):
    """The current choice's first timing slowed (3 s, then 1 s every round) loses to no candidate that ran in 1.5 s
    once; one slower in every round (2 s) does."""
    current, other = ({**OPTIONAL_KEYS, "TM": 32, "TN": tn, "TK": 8, "WM": 4, "WN": 4, "VW": 2, "VWG": 4, "APAD": 1,
                       "DB": 0} for tn in (32, 16))
    monkeypatch.setattr(tune, "candidates", lambda dev, kind: iter([current, other]))
    times = {32: itertools.chain(current_times[:1], itertools.repeat(current_times[1])), 16: itertools.repeat(1.5)}
    monkeypatch.setattr(tune._GemmProblem, "seconds", lambda self, cfg, budget: next(times[cfg["TN"]]))
    lines: list[str] = []
    entry = tune._search(dev, "gemm", tune._GemmProblem(dev, (40, 48, 24), np.random.default_rng()), 60, None,
                         lines.append, "1/1")
    assert entry["params"] == {"current": current, "other": other}[winner], lines
    assert entry["gflops"] == round(2 * 40 * 48 * 24 / {"current": 1.0, "other": 1.5}[winner] / 1e9, 2)
    assert any(ln.startswith("  re-timed: ") for ln in lines), lines


def test_tune_conv_stores_each_kernel_and_the_planner_uses_it(dev, db, monkeypatch, capsys):
    """``clnn tune --kernels conv`` over a tiny space (two candidates, a small layer) checks each candidate
    against NumPy (a wrong reference would skip them all), stores one tile per kernel (the implicit-GEMM ones
    single-buffered) and one for Winograd's product of that layer's planes with whether Winograd pays, and the
    planners then use them."""
    first = tune.candidates
    monkeypatch.setattr(tune, "candidates", lambda dev, kind: itertools.islice(first(dev, kind), 2))
    monkeypatch.setattr(tune, "_conv_shape", lambda dev: (2, 8, 9, 11, 16))
    monkeypatch.setattr(tune, "_winograd_layers", lambda dev: [(2, 8, 6, 7, 8)])  # intensity 4
    assert cli.main(["tune", "--budget", "1", "--kernels", "conv"]) == 0
    progress = capsys.readouterr().out
    assert "wrong result" not in progress and "failed" not in progress, progress  # skips only for device limits
    stored = json.loads(db.read_text())["devices"][tuning.device_key(dev)]
    assert set(stored) == {*conv.TUNED, "winograd"}
    for kind in conv.TUNED:
        assert stored[kind]["params"]["DB"] == 0 and stored[kind]["shape"] == [2, 8, 9, 11, 16]
    assert stored["winograd"]["shape"] == [16, 2 * 3 * 3, 8]  # F(4x4)'s planes: O x tiles x C, 36 of them
    assert stored["winograd"]["params"]["MIN_INTENSITY"] in (0, 4)  # this machine's measured winner
    for kind in stored:
        tile = {k: v for k, v in stored[kind]["params"].items() if k != "MIN_INTENSITY"}
        assert gemm_config(dev, np.float32, kind) == tile


def test_a_stored_conv_entry_decides_the_tile(dev, db, rng, monkeypatch):
    """A tile no table row has, stored for the convolution kernels, is what conv2d's planner then picks for a
    layer with 16 channels in and out, for its forward and its input gradient (its 16 rows fill the tile, so it
    beats gemm_small's on every device and pose), no other kind changes, and forward and gradients stay correct."""
    # 16-wide runs: no tile with fewer rows (the planner's other candidates) is valid; A's tile k-major
    odd = {"TM": 16, "TN": 64, "TK": 16, "WM": 4, "WN": 8, "VW": 2, "VWG": 16, "VWA": 4, "APAD": 1, "DB": 0, "PF": 1,
           "KU": 2}
    xa, wa, gya = (rng.standard_normal(s).astype(np.float32) for s in ((2, 16, 30, 30), (16, 16, 3, 3),
                                                                       (2, 16, 30, 30)))
    x = clnn.tensor(xa, device=dev)
    geom = conv._Geom(2, 16, 30, 30, 16, 3, 3, 30, 30, 1, 1, 1, 1, 1, 1, 1)  # also its input gradient's
    before = conv._tile(dev, x.dtype, 16, 1800, 144, geom, True)  # rows, N*H*W, k of the product
    for kind in conv.TUNED:
        tuning.store(dev, kind, {"params": odd})
    assert conv._tile(dev, x.dtype, 16, 1800, 144, geom, True) == odd != before
    assert gemm_config(dev, np.float32, "gemm") != odd  # gemm keeps its tile
    x.requires_grad = True
    w = clnn.tensor(wa, device=dev, requires_grad=True)
    set_direct_conv_max_k(monkeypatch, 0)  # the input gradient takes the stored tile too, not a direct kernel
    y = F.conv2d(x, w, padding=1)
    y.backward(clnn.tensor(gya, device=dev))
    tx, tw = (torch.from_numpy(v).double().requires_grad_() for v in (xa, wa))
    ref = torch.nn.functional.conv2d(tx, tw, padding=1)
    ref.backward(torch.from_numpy(gya).double())
    for got, want, what in ((y, ref, "y"), (x.grad, tx.grad, "input gradient"), (w.grad, tw.grad, "weight gradient")):
        assert_close(got.numpy(), want.detach().numpy(), 1e-5, f"conv2d {what} with the stored tile")


def test_candidate_space_is_valid_and_starts_with_the_current_choice(dev):
    """The current choice first, then the same with its multiply unrolled (gemm.h's KU) or not."""
    first = list(zip(range(50), tune.candidates(dev, "gemm")))
    current = gemm_config(dev, np.float32, "gemm")
    assert first[0][1] == current
    assert first[1][1] == {**current, "KU": 0 if current["KU"] else tune._UNROLLED}
    keys = [tuple(c.values()) for _, c in first]
    assert len(set(keys)) == len(keys)
    assert all(config_problem(c) is None for _, c in first)
    assert any(c.get("ASYNC") for _, c in first) == (kernels.runs_ptx(dev) and kernels.sm80(dev))


def test_nvidia_candidates_include_the_current_choice_staged_by_cp_async(dev, monkeypatch):
    """On NVIDIA's runtime from compute capability 8.0 the third candidate is the current choice staged by cp.async
    (gemm.h's ASYNC, with PF 0), kept apart from the current choice it otherwise equals."""
    monkeypatch.setattr(kernels, "runs_ptx", lambda d: True)
    monkeypatch.setattr(kernels, "sm80", lambda d: True)
    current = gemm_config(dev, np.float32, "gemm")
    third = list(itertools.islice(tune.candidates(dev, "gemm"), 3))[2]
    assert third == {**current, "PF": 0, "ASYNC": 1} and "ASYNC=1" in tune._brief(third)


def test_cpu_space_counts_vector_registers_and_gpu_space_scalar_accumulators():
    """A CPU's tiles fit their work-items' accumulator vectors, B's vectors and a broadcast in its registers (8x48
    blocks of 16-wide vectors on AVX-512: 24 + 3 + 1 of 32), not its scalars in 128; a GPU's fit 128 scalars."""
    col = {k: i for i, k in enumerate(tune._SPACE_KEYS)}
    for registers in (16, 32):
        space = tune._space(registers)
        wm, wn, vw = space[:, col["WM"]], space[:, col["WN"]], space[:, col["VW"]]
        assert (wm * (wn // vw) + wn // vw + 1 <= registers).all()
        assert ((wm == 8) & (wn == 48) & (vw == 16)).any() == (registers == 32)
        assert not ((wm == 4) & (wn == 8) & (vw == 1)).any()  # 32 scalars take 32 registers, B's 8 more
    gpu = tune._space(None)
    assert (gpu[:, col["WM"]] * gpu[:, col["WN"]] <= tune._MAX_ACC).all()
    assert ((gpu[:, col["WM"]] == 8) & (gpu[:, col["WN"]] == 16)).any()


@pytest.mark.parametrize("argv, pattern", [
    (["tune", "--kernels", "winograd"],
     r"--kernels expects names from \['conv', 'gemm', 'plan', 'rows'\]; got 'winograd'"),
    (["tune", "--budget", "0"], r"--budget expects a positive number of seconds; got 0.0"),
])
def test_bad_arguments(db, argv, pattern):
    with pytest.raises(SystemExit, match=pattern):
        cli.main(argv)


def test_unreadable_database_says_how_to_fix(dev, db):
    db.parent.mkdir(parents=True)
    db.write_text("{not json")
    with pytest.raises(ValueError, match=r"tuning database .* is unreadable .*clnn tune --reset"):
        tuning.params(dev, "gemm")


def test_candidates_try_the_current_choices_neighbours_first(dev):
    """After the current choice and the table's rows, the space comes nearest first: one parameter a step away,
    then further (a shuffled space put the H200's 1.55x faster neighbour anywhere among ~10^5 tiles)."""
    cands = list(itertools.islice(tune.candidates(dev, "gemm"), 300))
    assert len({tuple(c.values()) for c in cands}) == len(cands)
    firsts = 1 + sum(len(tuning.TABLE[k]) for k in ("gemm", "gemm_small"))  # at most this many before the space
    distances = [tune._distance(c, cands[0]) for c in cands[firsts:]]
    assert distances == sorted(distances) and distances[0] <= 1, distances[:20]


def test_kept_parameters_and_plans_follow_every_change_of_the_table(dev, monkeypatch):
    """params and matmul.plan keep their results between calls: a row patched in place, replaced, or added
    must reach them at once (tests and the Oclgrind drive patch rows so)."""
    f32 = np.dtype("float32")
    before = plan(dev, f32, 1, 1, 1, 1)
    assert before.kernel == "direct" and tuning.params(dev, "gemm_direct") == tuning.params(dev, "gemm_direct")
    rows = tuning.TABLE["gemm_direct"]
    key = max((k for k in rows if k in ("default", dev.type)), key=lambda k: k != "default")  # the row that applies
    monkeypatch.setitem(rows[key], "MAX_MACS", 0)  # in place, inside a row
    assert tuning.params(dev, "gemm_direct")["MAX_MACS"] == 0 and plan(dev, f32, 1, 1, 1, 1).kernel != "direct"
    monkeypatch.setitem(rows, key, {"MAX_MACS": 1 << 30})  # a row replaced
    assert plan(dev, f32, 1, 64, 64, 64).kernel == "direct"
    monkeypatch.setitem(rows, f"{dev.type} {dev.vendor.lower()}", {"MAX_MACS": 0})  # a row added, for this device
    assert plan(dev, f32, 1, 64, 64, 64).kernel != "direct"


@pytest.mark.parametrize("wins, least", [
    ([(16, False), (32, True), (64, True)], 32),
    ([(16, True), (32, False), (64, True)], 64),  # from the most intense down, while it keeps winning
    ([(16, True), (32, True), (64, True)], 16),
    ([(16, True), (32, True), (64, False)], 0),  # lost where it should gain most: never
])
def test_least_winning_intensity(wins, least):
    assert tune.least_winning(wins) == least


@pytest.mark.parametrize("winner", ["winograd", "gemm"])
def test_winograd_choice_is_stored_and_routes_conv2d(dev, db, rng, monkeypatch, winner):
    """``clnn tune --kernels conv``'s last step times 3x3 layers with and without Winograd (checked against NumPy
    both ways) and stores winograd's MIN_INTENSITY beside its tile: the least intensity from which it won (times
    forced here: the measured winner depends on the machine), or 0; conv2d then takes Winograd's kernels or not."""
    monkeypatch.setattr(tune, "_winograd_layers", lambda dev: [(2, 8, 6, 7, 8), (2, 32, 6, 7, 32)])  # 4, 16

    def seconds(fn, budget):  # the forced winner is faster; each way still runs (and is checked) first
        fn()
        return 1.0 if (tuning.params(dev, "winograd")["MIN_INTENSITY"] > 0) == (winner == "winograd") else 2.0

    monkeypatch.setattr(tune, "_best_seconds", seconds)
    tile = {"params": {**gemm_config(dev, np.float32, "winograd"), "TK": 8}}
    tuning.store(dev, "winograd", tile)
    lines: list[str] = []
    entry = tune.tune_winograd_choice(dev, 0.1, None, lines.append)
    assert entry["params"] == {**tile["params"], "MIN_INTENSITY": 4 if winner == "winograd" else 0}, lines
    assert tuning.params(dev, "winograd")["TK"] == 8  # the tile stays
    x = clnn.tensor(rng.standard_normal((2, 8, 6, 7)).astype(np.float32), device=dev)
    w = clnn.tensor(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), device=dev)
    with clnn.profiler.profile() as prof:
        F.conv2d(x, w, padding=1)
    assert any(k.name.startswith("wino_") for k in prof.kernels) == (winner == "winograd"), prof.kernels


def test_override_has_the_last_word_within_its_block(dev, db):
    before = tuning.params(dev, "winograd")
    tuning.store(dev, "winograd", {"params": {"MIN_INTENSITY": 7}})
    with tuning.override("winograd", MIN_INTENSITY=0, M=2):
        assert tuning.params(dev, "winograd") == {**before, "MIN_INTENSITY": 0, "M": 2}
        with tuning.override("winograd", M=4):  # nested: laid over the outer one
            assert tuning.params(dev, "winograd") == {**before, "MIN_INTENSITY": 0, "M": 4}
    assert tuning.params(dev, "winograd") == {**before, "MIN_INTENSITY": 7}
    with pytest.raises(ValueError, match=r"override: kernel must be one of .*; got 'wingrad'"), \
            tuning.override("wingrad", M=2):
        pass


def test_ops_see_a_store_and_a_reset_at_once(dev, db):
    """What ops keep from the parameters (tuning.memoized, looking for the database at most every RECHECK_S) is
    dropped by this process's own store and reset at once."""
    from clnn.ops import foreach

    before = foreach.per_launch(dev)
    tuning.store(dev, "foreach", {"params": {"TENSORS": 3}})
    assert foreach.per_launch(dev) == 3
    tuning.reset()
    assert foreach.per_launch(dev) == before


def test_another_database_is_read_at_once(dev, tmp_path, monkeypatch):
    """Kept parameters follow $CLNN_TUNING_DB to another database (they were kept from the last one read)."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    tuning.store(dev, "winograd", {"params": {"MIN_INTENSITY": 5}}, a)
    tuning.store(dev, "winograd", {"params": {"MIN_INTENSITY": 6}}, b)
    for path, least in ((a, 5), (b, 6), (a, 5)):
        monkeypatch.setenv("CLNN_TUNING_DB", str(path))
        assert tuning.params(dev, "winograd")["MIN_INTENSITY"] == least, path


def _tile_programs(name: str) -> set[tuple]:
    return {key for key in kernels._programs if (f"KERNEL_{name}", "1") in key[3]}


@pytest.mark.parametrize("kind", ["gemm", *conv.TUNED])
def test_a_prebuilt_program_is_the_one_the_candidate_runs(dev, kind):
    """The program a builder process's binary makes for a candidate (an odd tile no other test builds) is the one
    its check, against NumPy in float64, and its timing then take."""
    rng = np.random.default_rng()
    cfg = {"TM": 16, "TN": 48, "TK": 8, "WM": 2, "WN": 6, "VW": 2, "VWG": 2, "VWA": 2, "APAD": 0, "DB": 0, "PF": 1}
    assert config_problem({**OPTIONAL_KEYS, **cfg}, dev) is None
    problem = (tune._GemmProblem(dev, (40, 48, 24), rng) if kind == "gemm"
               else tune._ConvProblem(dev, kind, (2, 8, 9, 11, 16), rng))
    file, name, defines = problem.program_of(cfg)
    binary = kernels.build_binary(dev.index, file, kernels.build_options(dev, file, name, defines))
    before = _tile_programs(kind)
    kernels.kernel(dev, file, name, defines, binary)
    built = _tile_programs(kind)
    assert problem.check(cfg) is None
    problem.seconds(cfg, 0.01)
    assert _tile_programs(kind) == built and len(built - before) == 1


def test_candidates_are_built_ahead_on_other_devices(dev, db, monkeypatch, small_products):
    """With builder processes (a GPU's tuner: tune.builders), every candidate's program comes from a builder's
    binary, and the search still checks, times and stores as without them."""
    first = tune.candidates
    monkeypatch.setattr(tune, "candidates", lambda dev, kind: itertools.islice(first(dev, kind), 3))
    monkeypatch.setattr(tune, "builders", lambda dev: 2)
    from_binaries, kernel = [], kernels.kernel

    def spy(dev, file, name, defines=None, binary=None):
        if isinstance(binary, bytes) and binary:
            from_binaries.append(defines)
        return kernel(dev, file, name, defines, binary)

    monkeypatch.setattr(kernels, "kernel", spy)
    fits = [c for c in ({**OPTIONAL_KEYS, **c} for c in itertools.islice(first(dev, "gemm"), 3))
            if config_problem(c, dev) is None]  # before the search: its stored winner becomes the current choice
    assert fits
    lines: list[str] = []
    winners = tune.tune_gemm(dev, 600.0, None, lines.append)  # three candidates a kind: no deadline is reached
    assert set(winners) == {"gemm", "gemm_small"} and not any("failed" in ln for ln in lines), lines
    for cfg in fits:  # each one's turn came within the budget, its program from a builder's binary
        assert any({(k, v) for k, v in cfg.items()} <= set(d.items()) for d in from_binaries), cfg


@pytest.mark.parametrize("processes", [0, 2])
def test_a_candidate_that_fails_to_build_is_skipped_with_the_error(dev, db, monkeypatch, processes,
                                                                    small_products):
    """Built ahead by a builder process or when its turn comes, a candidate whose program does not build is skipped
    with the compiler's error line; the search goes on to the next. The planted error: TK's value cut short."""
    good = {"TM": 32, "TN": 32, "TK": 8, "WM": 4, "WN": 4, "VW": 2, "VWG": 4, "VWA": 1, "APAD": 1, "DB": 0, "PF": 0,
            "KU": 0}
    bad = {**good, "TK": 24}
    options = kernels._options
    monkeypatch.setattr(kernels, "_options", lambda dev, d: [o.replace("-DTK=24", "-DTK=24)") for o in options(dev, d)])
    monkeypatch.setattr(tune, "candidates", lambda dev, kind: iter([bad, good]))
    monkeypatch.setattr(tune, "builders", lambda dev: processes)
    lines: list[str] = []
    winners = tune.tune_gemm(dev, 30.0 if processes else 0.5, None, lines.append)
    skipped = [ln for ln in lines if ln.startswith("  skip") and "TK=24" in ln]
    assert len(skipped) == 2 and all("build failed:" in ln and "error" in ln for ln in skipped), lines
    assert winners["gemm"]["params"] == good


def _slow_unless_tn_32(index: int, file: str, options: list[str]) -> bytes:
    """kernels.build_binary, a minute late for any tile but 32 columns wide (in a builder process)."""
    if "-DTN=32" not in options:
        time.sleep(60)
    return kernels.build_binary(index, file, options)


def test_the_search_ends_at_its_budget_whatever_the_builds_take(dev, db, monkeypatch):
    """Once a candidate has run, the search waits for later builds only until its budget ends, and does not wait
    for the builds under way: their processes are ended."""
    good = {"TM": 32, "TN": 32, "TK": 8, "WM": 4, "WN": 4, "VW": 2, "VWG": 4, "VWA": 1, "APAD": 1, "DB": 0, "PF": 0,
            "KU": 0}
    slow = [{**good, "TN": tn} for tn in (48, 64, 96)]
    monkeypatch.setattr(tune, "candidates", lambda dev, kind: iter([good, *slow]))
    monkeypatch.setattr(tune, "builders", lambda dev: 2)
    monkeypatch.setattr(kernels, "build_binary", _slow_unless_tn_32)
    start = time.perf_counter()
    winners = tune._search(dev, "gemm", tune._GemmProblem(dev, (64, 64, 64), np.random.default_rng()), 2.0, None,
                           lambda line: None, "1/1")
    assert time.perf_counter() - start < 20 and winners["params"] == good and winners["tried"] == 1


def _option(tile: int, splits: int, groups: int) -> PlanOption:
    cfg = {"TM": tile, "TN": tile, "TK": 16}
    return PlanOption(GemmPlan("tiled", cfg, splits, 64), groups, macs=100.0 * tile, staged=10.0 * tile,
                      partial=50.0 * (splits > 1))


def test_fit_costs_follows_the_timings():
    """The fitted costs make the planner pick each product's fastest timed plan; where the timings do not tell
    points apart, the current costs stay."""
    current = {"STAGE": 0.5, "SPLIT": 1.0, "FILL": 2}
    whole, split = _option(64, 1, 10), _option(64, 4, 40)  # FILL 2 on 10 units: only the split fills them
    slow_split = [[(whole, 1.0), (split, 3.0)]]
    costs, loss = tune.fit_costs(slow_split, current, compute_units=10)
    assert loss == 0 and choose([whole, split], costs, 10) is whole.how and costs["FILL"] < 2
    fast_split = [[(whole, 3.0), (split, 1.0)]]
    costs, loss = tune.fit_costs(fast_split, current, compute_units=10)
    assert loss == 0 and costs == current  # the current costs already pick it: no change
    big, small = _option(128, 1, 10), _option(32, 1, 160)
    costs, loss = tune.fit_costs([[(big, 2.0), (small, 1.0)]], current, compute_units=10)
    assert loss == 0 and choose([big, small], costs, 10) is small.how


def test_tune_plan_times_every_option_and_the_planner_uses_the_fit(dev, db, monkeypatch):
    monkeypatch.setattr(tune, "_plan_shapes", lambda dev: [(2, 40, 56, 300), (1, 9, 70, 5)])
    lines: list[str] = []
    stored = tune.tune_plan(dev, 30.0, None, lines.append)["plan"]  # both shapes within it with cold builds: each
    # plan is timed at most five times, so the small products take milliseconds once built
    assert not any("error" in ln for ln in lines) and stored["shapes"] == 2, lines
    assert set(stored["params"]) == {"STAGE", "SPLIT", "FILL"}
    assert tuning.params(dev, "plan") == {**tuning.params(dev, "plan"), **stored["params"]}
    timed = [ln for ln in lines if "plans; fastest" in ln]
    options = len(plan_options(dev, np.dtype(np.float32), 2, 40, 56, 300))
    assert len(timed) == 2 and f"{options} plans" in timed[0], lines
