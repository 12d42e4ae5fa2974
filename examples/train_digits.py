"""Train a small CNN on scikit-learn's handwritten digits (real 8x8 scans, no download) and print its
test accuracy (>= 98%). Runs on the default OpenCL device (``CLNN_DEVICE`` picks another); well under
a minute on two CPU cores through PoCL.

    python examples/train_digits.py [--epochs 8] [--device cpu]
"""

from __future__ import annotations

import argparse
import time

import clnn
from clnn import nn


def build_model() -> nn.Module:
    """Conv-BatchNorm-ReLU-Pool twice, then one Linear layer: about 22k parameters."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),  # (N, 32, 4, 4)
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),  # (N, 64, 2, 2)
        nn.Flatten(), nn.Dropout(0.3),
        nn.Linear(64 * 2 * 2, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--device", default=None, help="a clnn device spec (default: CLNN_DEVICE or auto)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args()

    dev = clnn.device(args.device)
    print(f"device: {dev}")
    (x_train, y_train), (x_test, y_test) = clnn.datasets.load_digits()
    clnn.manual_seed(args.seed)
    model = build_model().to(dev)
    model.compile(optimizer=clnn.optim.Adam(model.parameters(), lr=args.lr), loss="cross_entropy",
                  metrics=["accuracy"])
    model.summary(input_shape=x_train.shape[1:])
    start = time.perf_counter()
    model.fit(x_train, y_train, epochs=args.epochs, batch_size=args.batch_size, seed=args.seed,
              verbose=0 if args.quiet else 1,
              callbacks=[nn.LearningRateScheduler(lambda epoch, lr: args.lr * 0.5 ** (epoch // 3))])
    seconds = time.perf_counter() - start
    result = model.evaluate(x_test, y_test, batch_size=256)
    print(f"trained {args.epochs} epochs on {len(x_train)} digits in {seconds:.1f} s")
    print(f"test accuracy: {result['accuracy']:.4f} ({len(x_test)} held-out digits, loss {result['loss']:.4f})")


if __name__ == "__main__":
    main()
