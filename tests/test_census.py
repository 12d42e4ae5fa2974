"""Launch census: a LeNet and an AlexNet-style training step on a GPU record every kernel launch.

They run on GPUs: in CI, the h100 part poses the CPU device as an NVIDIA H100 (CLNN_LIMITS), so the GPU launch plans
are the ones counted. Two checks per model:
- every kernel that touches at least 2**20 elements launches at least FILL work-groups per compute unit (the
  device's `plan` row; at least one), so a big input keeps all 132 compute units busy (the size a launch touches is
  its largest buffer argument). An H200's timed GEMM plans fitted FILL 1: a k-split to reach 2 per compute unit cost
  more than it gained;
- a step launches no more kernels than its budget (counted below per model), so extra passes show up.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import clnn
import clnn.functional as F
from clnn import kernels, nn, tuning

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from alexnet import alexnet  # noqa: E402

BIG = 2**20  # elements


@dataclass
class Launch:
    kernel: str
    groups: int
    elements: int


def lenet() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10),
    )


@pytest.fixture
def gpu(dev):
    """The device under test, if it is (or poses as) a GPU."""
    if dev.type != "gpu":
        pytest.skip("the census counts GPU launch plans: it runs in the h100 CI part (CLNN_LIMITS poses an H100)")
    return dev


def census(dev: clnn.Device, model: nn.Module, shape: tuple[int, ...], batch: int, monkeypatch) -> list[Launch]:
    """The launches of one training step (forward, cross-entropy, backward, Adam)."""
    rng = np.random.default_rng(0)
    model = model.to(dev)
    opt = clnn.optim.Adam(model.parameters(), lr=1e-4)
    x = clnn.tensor(rng.standard_normal((batch, *shape), dtype=np.float32), device=dev)
    y = clnn.tensor(rng.integers(0, 10, batch), device=dev)

    def step() -> None:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    launches: list[Launch] = []
    launch = kernels.launch

    def record(d, k, global_size, local_size, *args):
        work_items = int(np.prod(global_size))
        group = int(np.prod(local_size)) if local_size is not None else 1
        biggest = max((a.size for a in args if hasattr(a, "size") and hasattr(a, "int_ptr")), default=0)
        launches.append(Launch(k.function_name, -(-work_items // group), biggest // 4))
        return launch(d, k, global_size, local_size, *args)

    monkeypatch.setattr(kernels, "launch", record)
    step()
    dev.synchronize()
    return launches


def check(launches: list[Launch], dev: clnn.Device, budget: int) -> None:
    fill = max(1, tuning.params(dev, "plan")["FILL"])
    starved = sorted({f"{x.kernel} ({x.groups} groups, {x.elements} elements)" for x in launches
                      if x.elements >= BIG and x.groups < fill * dev.compute_units})
    assert not starved, f"kernels touching >= 2**20 elements with < {fill} work-groups per compute unit: {starved}"
    assert len(launches) <= budget, (
        f"the step launched {len(launches)} kernels, over its budget of {budget}: "
        f"{sorted({x.kernel for x in launches})}"
    )


# Budgets, the launches each step needs today (a kernel more fails the test; fusing lowers them):
# - forward: a conv or a Linear, with the ReLU after it, is one launch each (bias and ReLU in its store), a pool
#   one, a batch norm three (statistics in two stages, apply) plus its running-stat update, a dropout one, the
#   cross-entropy two (target range check, loss) and its mean one more;
# - backward: per conv its weight gradient (GEMM with k-split partials + their ordered sum), bias gradient (two
#   stages) and input gradient (not for the first layer; per phase of the stride two launches, the landing taps'
#   weights and a forward-kernel pass: two at stride 1), per Linear two GEMMs (+ sum of partials) and a bias
#   sum, per activation, pool, dropout and norm their gradient kernels, the loss's backward;
# - Adam: one update launch per parameter tensor (LeNet 8, AlexNet 20).
# - Winograd (GPUs: 3x3 layers with C*O / (C + O) >= 64, AlexNet's last three): per layer its filter transform,
#   and per chunk of the batch (planes in two buffers of winograd.plane_bytes, 16 MiB) a data transform, a batched
#   GEMM and a store, in the forward and the input gradient; the weight gradient's tile transform and GEMM per chunk,
#   then its filter transform. AlexNet at batch 32: 140 launches (194 in 8 MiB buffers).
# LeNet: 47 (Adam 8, GEMM-family 11, conv 6, pool 4, activation 7, reductions 7, loss 4).
LENET_BUDGET = 47
ALEXNET_BUDGET = 140


def test_lenet_step_fills_the_gpu(gpu, monkeypatch):
    check(census(gpu, lenet(), (1, 28, 28), 256, monkeypatch), gpu, LENET_BUDGET)


def test_alexnet_step_fills_the_gpu(gpu, monkeypatch):
    check(census(gpu, alexnet(), (3, 224, 224), 32, monkeypatch), gpu, ALEXNET_BUDGET)


def test_census_catches_a_starved_kernel_and_an_extra_launch(dev):
    """The checks bite: one work-group over a big tensor fails, and so does a launch over budget."""
    with pytest.raises(AssertionError, match="work-groups per compute unit"):
        check([Launch("starved", 1, BIG)], dev, 10)
    with pytest.raises(AssertionError, match="over its budget"):
        check([Launch("add", 1000, 10)] * 11, dev, 10)
