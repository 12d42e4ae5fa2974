"""An AlexNet-style network on 3x224x224 images: builds it, prints its Keras-style summary (about 58
million parameters) and runs one Adam training step on random images at batch 2.

    python examples/alexnet.py [--device gpu]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import clnn
import clnn.functional as F
from clnn import nn


def alexnet(num_classes: int = 10, lib=nn) -> nn.Sequential:
    """Five convolutions (BatchNorm after the first two) and three Linear layers with dropout.

    ``lib`` is the module of layers: ``clnn.nn``, or ``torch.nn`` for the same network in PyTorch.
    """
    return lib.Sequential(
        lib.Conv2d(3, 96, 11, stride=4, padding=5), lib.ReLU(), lib.BatchNorm2d(96), lib.MaxPool2d(3, 2),  # 27x27
        lib.Conv2d(96, 256, 5, padding="same"), lib.ReLU(), lib.BatchNorm2d(256), lib.MaxPool2d(3, 2),  # 13x13
        lib.Conv2d(256, 384, 3, padding="same"), lib.ReLU(),
        lib.Conv2d(384, 384, 3, padding="same"), lib.ReLU(),
        lib.Conv2d(384, 256, 3, padding="same"), lib.ReLU(), lib.MaxPool2d(3, 2),  # (N, 256, 6, 6)
        lib.Flatten(),
        lib.Linear(256 * 6 * 6, 4096), lib.ReLU(), lib.Dropout(0.5),
        lib.Linear(4096, 4096), lib.ReLU(), lib.Dropout(0.5),
        lib.Linear(4096, num_classes),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="a clnn device spec (default: CLNN_DEVICE or auto)")
    parser.add_argument("--batch-size", type=int, default=2)
    args = parser.parse_args()

    dev = clnn.device(args.device)
    print(f"device: {dev}")
    clnn.manual_seed(0)
    model = alexnet().to(dev)
    model.summary(input_shape=(3, 224, 224))

    rng = np.random.default_rng(0)
    x = clnn.tensor(rng.standard_normal((args.batch_size, 3, 224, 224)).astype(np.float32), device=dev)
    y = clnn.tensor(rng.integers(0, 10, args.batch_size), device=dev)
    opt = clnn.optim.Adam(model.parameters(), lr=1e-4)
    start = time.perf_counter()
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    value = loss.item()
    print(f"one Adam step at batch {args.batch_size}: loss {value:.4f}, {time.perf_counter() - start:.1f} s")
    stats = clnn.memory_stats(dev)
    print(f"device memory in use: {stats['bytes_in_use'] / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
