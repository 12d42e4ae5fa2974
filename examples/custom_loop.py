"""The PyTorch-style loop on the digits: DataLoader, Adam, a cosine learning-rate schedule and gradient
clipping, written out by hand; prints the loss per epoch and the test accuracy.

    python examples/custom_loop.py [--epochs 6] [--device cpu]
"""

from __future__ import annotations

import argparse

import clnn
import clnn.functional as F
from clnn import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--device", default=None, help="a clnn device spec (default: CLNN_DEVICE or auto)")
    args = parser.parse_args()

    dev = clnn.device(args.device)
    (x, y), (x_test, y_test) = clnn.datasets.load_digits()
    clnn.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 4 * 4, 10)
    ).to(dev)
    opt = clnn.optim.Adam(model.parameters(), lr=1e-2)
    sched = clnn.optim.CosineAnnealingLR(opt, T_max=args.epochs)
    loader = clnn.data.DataLoader(x, y, batch_size=64, shuffle=True, seed=0, device=dev)

    for epoch in range(args.epochs):
        model.train()
        total, seen = 0.0, 0
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            clnn.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            opt.step()
            total += loss.item() * len(yb)
            seen += len(yb)
        sched.step()
        print(f"epoch {epoch + 1}: loss {total / seen:.4f}, lr {sched.get_last_lr()[0]:.5f}")

    model.eval()
    correct = 0
    with clnn.no_grad():
        for xb, yb in clnn.data.DataLoader(x_test, y_test, batch_size=256, device=dev):
            correct += int((model(xb).argmax(1) == yb).astype("float32").sum().item())
    print(f"test accuracy: {correct / len(y_test):.4f}")


if __name__ == "__main__":
    main()
