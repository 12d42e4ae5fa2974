"""A small CNN on MNIST, read from the four standard IDX files (plain or .gz) in a folder you give:

    python examples/mnist_cnn.py ~/data/mnist [--epochs 2] [--device gpu]

The files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
t10k-labels-idx1-ubyte) are published at https://yann.lecun.com/exdb/mnist/ and its mirrors.
"""

from __future__ import annotations

import argparse

import clnn
from clnn import nn


def build_model() -> nn.Module:
    """The LeNet-style network of the benchmarks: about 420k parameters."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # (N, 32, 14, 14)
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # (N, 64, 7, 7)
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
        nn.Linear(128, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="folder holding the four MNIST IDX files")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--limit", type=int, default=None, help="train on the first N images only")
    parser.add_argument("--device", default=None, help="a clnn device spec (default: CLNN_DEVICE or auto)")
    parser.add_argument("--save", default=None, help="save the trained model here (.safetensors)")
    args = parser.parse_args()

    try:
        (x_train, y_train), (x_test, y_test) = clnn.datasets.load_mnist(args.path)
    except FileNotFoundError as err:
        raise SystemExit(str(err)) from None
    if args.limit:
        x_train, y_train = x_train[: args.limit], y_train[: args.limit]
    dev = clnn.device(args.device)
    print(f"device: {dev}; {len(x_train)} training and {len(x_test)} test images")
    clnn.manual_seed(0)
    model = build_model().to(dev)
    model.compile(optimizer="adam", loss="cross_entropy", metrics=["accuracy"])
    model.summary(input_shape=(1, 28, 28))
    model.fit(x_train, y_train, epochs=args.epochs, batch_size=args.batch_size, validation_split=0.05,
              callbacks=[nn.EarlyStopping(monitor="val_accuracy", patience=1, restore_best_weights=True)])
    result = model.evaluate(x_test, y_test, batch_size=512)
    print(f"test accuracy: {result['accuracy']:.4f} (loss {result['loss']:.4f})")
    if args.save:
        model.save(args.save)
        print(f"saved to {args.save}; reload with clnn.nn.load({args.save!r})")


if __name__ == "__main__":
    main()
