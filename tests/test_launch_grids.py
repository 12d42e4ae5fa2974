"""Grids with more work-groups along y or z than the device runs (NVIDIA's runtime: CUDA's 65,535) run as several
launches at global offsets (``kernels.launch``), and the kernels' results do not change."""

from __future__ import annotations

import re

import pytest
import torch.nn.functional as TF
from helpers import set_direct_conv_max_k, set_winograd
from torch_ref import check_against_torch

import clnn
import clnn.functional as F
from clnn import tuning
from clnn.kernels import kernel_dir

# what counts from each launch of a cut grid, not from the whole grid: the y and z group ids and grid sizes
_PER_LAUNCH = re.compile(r"\b(get_group_id|get_num_groups|get_global_size)\s*\(\s*[12]\s*\)")


def per_launch_ids(sources: dict[str, str]) -> list[str]:
    """Uses of a y or z group id, group count or global size in kernel sources: the kernels' GROUP_ID instead."""
    return [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for name, text in sources.items()
            for m in _PER_LAUNCH.finditer(text)]


def test_kernels_take_group_ids_that_survive_cutting():
    sources = {p.name: p.read_text() for p in sorted(kernel_dir.iterdir()) if p.suffix in (".cl", ".h")}
    assert per_launch_ids(sources) == []
    assert per_launch_ids({"bad.cl": "int g = get_group_id(1);\nint n = get_num_groups( 2 );"}) == [
        "bad.cl:1: get_group_id(1)", "bad.cl:2: get_num_groups( 2 )"]
    assert per_launch_ids({"ok.cl": "int g = GROUP_ID(1), x = get_group_id(0);"}) == []


def _tiled_gemm(monkeypatch) -> None:
    """Every product by tiles: GPUs take gemm_direct's one-dimensional grid for products this small."""
    for key in tuning.TABLE["gemm_direct"]:
        monkeypatch.setitem(tuning.TABLE["gemm_direct"], key, {"MAX_MACS": 0})


def _tiled_transpose(monkeypatch) -> None:
    """Transposes by copy.cl's tiles (a 3-dimensional grid) at every size: CPUs take blocks or runs (one dimension)."""
    for key in tuning.TABLE["transpose"]:
        monkeypatch.setitem(tuning.TABLE["transpose"], key, {"TB": 0, "TILE_PLANE": 0})


def _conv(x, w):
    return F.conv2d(x, w, padding=1)


def _torch_conv(x, w):
    return TF.conv2d(x, w, padding=1)


# op, its reference, input shapes, the route's tuning: every kernel launched over a 2- or 3-dimensional grid, with
# more than 2 work-groups along y or z at these shapes (the norms' rows: on GPUs; CPUs walk them in one dimension)
GRID_CASES = {
    "gemm": (lambda a, b: a @ b, lambda a, b: a @ b, [(523, 37), (37, 29)], _tiled_gemm),
    "batched gemm": (lambda a, b: a @ b, lambda a, b: a @ b, [(5, 67, 19), (5, 19, 23)], _tiled_gemm),
    "transpose": (lambda a: a.transpose(1, 2).contiguous(), lambda a: a.transpose(1, 2), [(5, 67, 41)],
                  _tiled_transpose),
    "conv tiles": (lambda x, w: F.conv2d(x, w, padding=1, groups=3), lambda x, w: TF.conv2d(x, w, padding=1, groups=3),
                   [(5, 6, 13, 11), (36, 2, 3, 3)], lambda mp: _tiled_gemm(mp) or set_direct_conv_max_k(mp, 0)),
    "conv direct": (_conv, _torch_conv, [(5, 6, 13, 11), (7, 6, 3, 3)], lambda mp: set_direct_conv_max_k(mp, 4096)),
    "winograd": (_conv, _torch_conv, [(5, 6, 13, 11), (7, 6, 3, 3)], lambda mp: set_winograd(mp, 1)),
    "depthwise": (lambda x, w: F.conv2d(x, w, padding=1, groups=6),
                  lambda x, w: TF.conv2d(x, w, padding=1, groups=6), [(5, 6, 13, 11), (6, 1, 3, 3)],
                  None),
    "layer norm": (lambda x: F.layer_norm(x, (33,)),
                   lambda x: TF.layer_norm(x, (33,)), [(700, 33)], None),
    "batch norm": (lambda x: F.batch_norm(x, None, None, training=True),
                   lambda x: TF.batch_norm(x, None, None, training=True), [(9, 70, 300)], None),
}


@pytest.mark.parametrize("case", list(GRID_CASES))
def test_grids_over_the_group_limit_run_in_pieces(case, dev, rng, monkeypatch):
    """A device that runs at most 2 work-groups along y and z (NVIDIA's runtime: 65,535) gets grids cut into
    launches at global offsets; kernels find their work-groups by GROUP_ID, so results match torch's."""
    fn, ref, shapes, route = GRID_CASES[case]
    if route is not None:
        route(monkeypatch)
    monkeypatch.setattr(dev, "max_groups", 2)
    offsets = []
    enqueue = dev.enqueue
    monkeypatch.setattr(dev, "enqueue", lambda k, g, ls, args, offset=None: offsets.append(offset) or enqueue(
        k, g, ls, args, offset))
    with clnn.use_device(dev):
        check_against_torch(fn, ref, [rng.standard_normal(s) for s in shapes], rng)
    if dev.type != "gpu" and case.endswith(" norm") and not any(offsets):
        pytest.skip(f"{dev} walks {case}'s rows in one dimension")
    assert any(o is not None for o in offsets), "no grid was cut"
