"""Data-parallel training over MPI ranks, both ways: the Keras ``fit(..., distributed=True)`` and a PyTorch-style
loop with ``nn.DistributedDataParallel``.

    pip install 'clnn[pocl,mpi]'
    mpiexec -n 2 python examples/train_distributed.py            # one machine, two processes
    mpiexec -f hosts -n 8 python examples/train_distributed.py   # a cluster (MPICH hostfile: one host per line)
    srun -n 8 python examples/train_distributed.py               # under Slurm

Every rank runs this same script on its own device (``CLNN_DEVICE``) and its own shard of the data; the
printing happens on rank 0. ``--pin`` gives each process one core of a CPU (a one-core sub-device).
"""

from __future__ import annotations

import argparse

import numpy as np

import clnn
import clnn.functional as F
from clnn import distributed as dist
from clnn import nn
from clnn.data import DataLoader


def net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * 4 * 4, 10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--pin", action="store_true", help="run each rank on its own one-core sub-device of a CPU")
    args = parser.parse_args()
    dist.init()
    rank, world = dist.rank(), dist.world_size()
    if args.pin:
        cores = clnn.device().split(clnn.device().compute_units)
        clnn.set_default_device(cores[rank % len(cores)])

    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images[:, None] / 16.0).astype(np.float32)  # (1797, 1, 8, 8)
    y = digits.target

    # 1. Keras: fit shards the batches, averages gradients and logs, and prints/checkpoints on rank 0 only
    model = net()
    model.compile(optimizer="adam", loss="cross_entropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=32, epochs=args.epochs, seed=0, verbose=1, distributed=True)

    # 2. PyTorch: wrap the model, shard the loader, and write the usual loop
    ddp = nn.DistributedDataParallel(net())
    opt = clnn.optim.Adam(ddp.parameters(), lr=1e-3)
    loader = DataLoader(x, y, batch_size=32, shuffle=True, seed=0, shard=(rank, world))
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        total = clnn.zeros(1)
        for xb, yb in loader:
            loss = F.cross_entropy(ddp(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total = total + loss.detach()
        dist.all_reduce(total, op="mean")
        if rank == 0:
            print(f"DDP epoch {epoch + 1}: mean loss {total.item() / len(loader):.4f} over {world} ranks")


if __name__ == "__main__":
    main()
