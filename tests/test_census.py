"""Launch census: a LeNet and an AlexNet-style training step, posing as an NVIDIA H100, record every kernel launch.

Two checks per model:
- every kernel that touches at least 2**20 elements launches at least 2 work-groups per compute unit, so a big
  input keeps all 132 compute units busy (the size a launch touches is its largest buffer argument);
- a step launches no more kernels than its budget (counted below per model), so extra passes show up.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

import clnn
import clnn.functional as F
from clnn import kernels, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from alexnet import alexnet  # noqa: E402

H100 = {"type": "gpu", "compute_units": 132, "max_work_group_size": 1024, "local_mem_size": 49152,
        "vendor": "NVIDIA Corporation"}
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
def h100(dev, monkeypatch):
    """The device under test reports the H100's type, vendor and limits (its kernels still run for real)."""
    for key, value in H100.items():
        if key in ("max_work_group_size", "local_mem_size"):
            value = min(value, getattr(dev, key))
        monkeypatch.setattr(dev, key, value)
    return dev


def census(dev: clnn.Device, model: nn.Module, shape: tuple[int, ...], batch: int, monkeypatch) -> list[Launch]:
    """The launches of one training step (forward, cross-entropy, backward, Adam) after a warm-up step."""
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

    step()
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
    starved = sorted({f"{x.kernel} ({x.groups} groups, {x.elements} elements)" for x in launches
                      if x.elements >= BIG and x.groups < 2 * dev.compute_units})
    assert not starved, f"kernels touching >= 2**20 elements with < 2 work-groups per compute unit: {starved}"
    assert len(launches) <= budget, (
        f"the step launched {len(launches)} kernels, over its budget of {budget}: "
        f"{sorted({x.kernel for x in launches})}"
    )


# Budgets: per layer, forward launches (conv: GEMM + bias/activation; pool; linear: GEMM + bias; batch norm:
# statistics + apply + running update), their backward launches (input and weight gradients, bias gradient),
# the loss (forward and backward), and one Adam update per parameter tensor.
LENET_BUDGET = 60
ALEXNET_BUDGET = 110


def test_lenet_step_fills_an_h100(h100, monkeypatch):
    torch.manual_seed(0)
    launches = census(h100, lenet(), (1, 28, 28), 1024, monkeypatch)
    check(launches, h100, LENET_BUDGET)


def test_alexnet_step_fills_an_h100(h100, monkeypatch):
    launches = census(h100, alexnet(), (3, 224, 224), 16, monkeypatch)
    check(launches, h100, ALEXNET_BUDGET)


def test_census_catches_a_starved_kernel(h100):
    """The check bites: one work-group over a big tensor fails it."""
    with pytest.raises(AssertionError, match="fewer|< 2 work-groups"):
        check([Launch("bias_grad", 1, BIG)], h100, 10)
    with pytest.raises(AssertionError, match="over its budget"):
        check([Launch("add", 1000, 10)] * 11, h100, 10)
