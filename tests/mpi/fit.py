"""Run under mpiexec by tests/test_distributed.py: ``model.fit(..., distributed=True)``.

argv: seed, checkpoint folder. Weights and logs must agree on every rank and match one process fitting the
concatenated batches; only rank 0 saves checkpoints and prints.
"""

import sys
from pathlib import Path

import numpy as np

import clnn
import clnn.nn as nn
from clnn import distributed as dist

seed, folder = int(sys.argv[1]), Path(sys.argv[2])
dist.init()
rank, world = dist.rank(), dist.world_size()
BS = 4


def net() -> nn.Module:  # smooth (tanh, not relu): a pre-activation within rounding of 0 would flip a branch
    model = nn.Sequential(nn.Conv2d(1, 3, 3), nn.Tanh(), nn.Flatten(), nn.Linear(3 * 4 * 4, 4))
    model.compile(optimizer=clnn.optim.SGD(model.parameters(), lr=0.2, momentum=0.5), loss="cross_entropy",
                  metrics=["accuracy"])
    return model


g = np.random.default_rng(seed)
x = g.standard_normal((BS * world * 3, 1, 6, 6)).astype(np.float32)
y = g.integers(0, 4, len(x))
clnn.manual_seed(seed + rank)
model = net()
ckpt = nn.ModelCheckpoint(str(folder / "w-{epoch}.safetensors"), monitor="loss", save_weights_only=True, verbose=1)
history = model.fit(x, y, batch_size=BS, epochs=2, seed=seed, verbose=0, callbacks=[ckpt], distributed=True)

everyone = dist._state["comm"].allgather(({k: v.numpy() for k, v in model.state_dict().items()}, history.history))
for weights, logs in everyone:
    assert logs == history.history
    for k, v in weights.items():
        assert np.array_equal(v, everyone[0][0][k]), k
if rank == 0:
    clnn.manual_seed(seed)  # rank 0's initialization, which fit copied to every rank
    alone = net()
    solo = alone.fit(x, y, batch_size=BS * world, epochs=2, seed=seed, verbose=0)
    for k, v in alone.state_dict().items():
        np.testing.assert_allclose(everyone[0][0][k], v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    for k, v in solo.history.items():
        np.testing.assert_allclose(history.history[k], v, rtol=1e-5, err_msg=k)
    saved = clnn.load_state_dict(str(folder / "w-2.safetensors"))
    assert all(np.array_equal(saved[k], everyone[0][0][k]) for k in saved)
print(f"rank {rank}: ok")
