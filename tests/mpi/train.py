"""Run under mpiexec by tests/test_distributed.py: DistributedDataParallel training of a small CNN.

argv: seed, world size, "plain" or "bn". Each rank initializes its model differently (DDP must copy rank 0's)
and trains on its shard: 3 steps of one batch, then 2 steps of two accumulated batches (``no_sync``). At the
end every rank's weights must equal rank 0's bit for bit, and for "plain" equal to 1e-5 those of one process
training on the concatenated batches (BatchNorm's batch statistics are per rank, so "bn" checks only that
buffers and weights follow rank 0).
"""

import contextlib
import sys

import numpy as np

import clnn
import clnn.nn as nn
from clnn import distributed as dist
from clnn import functional as F
from clnn.data import DataLoader

seed, world, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init()
rank = dist.rank()
assert dist.world_size() == world
BS, STEPS = 3, 7  # per-rank batch; 3 plain steps + 2 accumulated steps of 2 batches


def net() -> nn.Module:
    """Smooth layers (tanh, average pooling): with relu or max pooling, a value within rounding of a branch point
    (0, or a tie in a window) takes either branch in sums of another order, and the 1e-5 comparison fails."""
    norm = [nn.BatchNorm2d(4)] if kind == "bn" else []
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), *norm, nn.Tanh(), nn.AvgPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, 5))


g = np.random.default_rng(seed)
x = g.standard_normal((BS * world * STEPS, 1, 7, 7)).astype(np.float32)
y = g.integers(0, 5, len(x))


def train(model: nn.Module, loader: DataLoader, opt: clnn.optim.Optimizer, no_sync) -> None:
    batches = iter(loader)
    for step in range(5):
        opt.zero_grad()
        if step >= 3:
            with no_sync():
                xb, yb = next(batches)
                F.cross_entropy(model(xb), yb).backward()
        xb, yb = next(batches)
        F.cross_entropy(model(xb), yb).backward()
        opt.step()


clnn.manual_seed(seed + rank)
local = net()
ddp = nn.DistributedDataParallel(local, bucket_cap_mb=200 / 2**20)  # 200 bytes: several buckets
assert len(ddp._buckets) > 2
initial = {k: v.numpy() for k, v in local.state_dict().items()}
opt = clnn.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
train(ddp, DataLoader(x, y, batch_size=BS, shuffle=True, seed=seed, shard=(rank, world)), opt, ddp.no_sync)

# the buckets are flat tensors holding exactly the averaged gradients (their padding zero), alike on every rank
held = np.concatenate([b.numpy() for b in ddp.buckets])
grads = np.concatenate([q.grad.numpy().ravel() for q in local.parameters()])
np.testing.assert_array_equal(np.sort(held[held != 0]), np.sort(grads[grads != 0]))
for b in ddp.buckets:
    for r, other in enumerate(dist.all_gather(b)):
        assert np.array_equal(other.numpy(), b.numpy()), f"a bucket differs on rank {r}"

ddp.eval()
ddp(clnn.tensor(x[:2]))  # each forward starts from rank 0's buffers
for name, t in local.state_dict().items():
    for r, other in enumerate(dist.all_gather(t)):
        assert np.array_equal(other.numpy(), t.numpy()), f"{name} differs on rank {r}"
if kind == "plain" and rank == 0:  # one process on the concatenated batches
    alone = net()
    alone.load_state_dict(initial)
    opt = clnn.optim.SGD(alone.parameters(), lr=0.1, momentum=0.9)
    train(alone, DataLoader(x, y, batch_size=BS * world, shuffle=True, seed=seed), opt, contextlib.nullcontext)
    for (name, a), b in zip(alone.state_dict().items(), local.state_dict().values()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
print(f"rank {rank}: ok")
