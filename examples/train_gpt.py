"""Train a small character-level GPT on the source code of Python's own standard library, then sample from it.

The text is every ``.py`` file under ``sysconfig.get_paths()["stdlib"]`` (real text on every machine, nothing
to download), read as bytes; the last tenth is held out for validation. The model: token and position
embeddings, pre-norm ``TransformerEncoderLayer``s with a causal mask, a final LayerNorm and a head tied to the
token embedding. Default configuration: context 64 bytes, width 128, 4 layers of 4 heads (GELU, feed-forward
512, no dropout; 818,432 parameters), batches of 32 windows, AdamW (lr 3e-3, weight decay 0.01, gradient
norm clipped to 1) with 100 warm-up steps and a cosine decay to a tenth over 600 steps. On the 2-core CI
machine it ends at a validation loss of 1.56 nats/byte (2.26 at step 200, 1.78 at step 400) after 527 s of
training on PoCL and 115 s on Intel's CPU runtime (2026-11-23; the two runtimes give the same losses).

    python examples/train_gpt.py [--steps 600] [--device cpu] [--quiet]

``benchmarks/bench_gpt.py`` trains a PyTorch twin of the same model (same initial weights, same batches, same
schedule) beside it.
"""

from __future__ import annotations

import argparse
import math
import sysconfig
import time
from pathlib import Path
from typing import Any

import numpy as np

try:
    from tqdm.auto import tqdm
except ImportError:  # tqdm is optional (the `examples` extra): no bar without it
    tqdm = None

CONFIG = dict(block=64, width=128, layers=4, heads=4, batch=32, lr=3e-3, weight_decay=0.01, warmup=100,
              steps=600, eval_every=200, eval_batches=8)


def load_corpus(limit: int = 4_000_000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The standard library's ``.py`` files as token ids (train, validation) and the byte of each id."""
    root = Path(sysconfig.get_paths()["stdlib"])
    text = bytearray()
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts:
            continue
        text += path.read_bytes() + b"\n"
        if len(text) >= limit:
            break
    data = np.frombuffer(bytes(text[:limit]), np.uint8)
    vocab, ids = np.unique(data, return_inverse=True)
    ids = ids.astype(np.int64)
    cut = len(ids) * 9 // 10
    return ids[:cut], ids[cut:], vocab


def gpt(lib: Any, vocab: int, block: int, width: int, layers: int, heads: int) -> Any:
    """The model, built from ``lib`` (``clnn`` or ``torch``: the same code gives the clnn model and its twin)."""
    nn = lib.nn

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(vocab, width)
            self.positions = nn.Embedding(block, width)
            layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, dropout=0.0,
                                               activation="gelu", batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(width)
            causal = np.triu(np.full((block, block), -np.inf, np.float32), 1)
            self.register_buffer("causal", lib.tensor(causal), persistent=False)
            self.register_buffer("where", lib.arange(block), persistent=False)

        def forward(self, idx: Any) -> Any:
            t = idx.shape[1]
            x = self.tokens(idx) + self.positions(self.where[:t])
            x = self.blocks(x, mask=self.causal[:t, :t], is_causal=True)
            # the head shares the token embedding, scaled by width ** -0.5 (as T5 does for its tied head) so the
            # initial logits are of order one rather than sqrt(width)
            return (self.norm(x) * width ** -0.5) @ self.tokens.weight.T

    return GPT()


def windows(ids: np.ndarray, block: int, batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` random windows of ``block`` ids and the same windows shifted by one (the targets)."""
    start = rng.integers(0, len(ids) - block - 1, batch)
    x = np.stack([ids[s:s + block] for s in start])
    y = np.stack([ids[s + 1:s + block + 1] for s in start])
    return x, y


def schedule(step: int, warmup: int, steps: int) -> float:
    """Linear warm-up, then a cosine decay to a tenth of the peak learning rate."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min((step - warmup) / max(steps - warmup, 1), 1.0)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def main() -> None:
    import clnn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=CONFIG["steps"])
    parser.add_argument("--device", default=None, help="a clnn device spec (default: CLNN_DEVICE or auto)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()
    cfg = dict(CONFIG, steps=args.steps)

    dev = clnn.set_default_device(clnn.device(args.device))
    train, val, vocab = load_corpus()
    print(f"device: {dev}\ncorpus: {len(train):,} training and {len(val):,} validation bytes, "
          f"{len(vocab)} distinct")
    clnn.manual_seed(args.seed)
    model = gpt(clnn, len(vocab), cfg["block"], cfg["width"], cfg["layers"], cfg["heads"])
    print(f"parameters: {sum(p.size for p in model.parameters()):,}")
    opt = clnn.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    sched = clnn.optim.LambdaLR(opt, lambda s: schedule(s, cfg["warmup"], cfg["steps"]))
    loss_fn = clnn.nn.CrossEntropyLoss()
    rng, val_rng = np.random.default_rng(args.seed), np.random.default_rng(args.seed + 1)

    def evaluate() -> float:
        model.eval()
        with clnn.no_grad():
            total = sum(loss_fn(model(clnn.tensor(x)).reshape(-1, len(vocab)), clnn.tensor(y.reshape(-1))).item()
                        for x, y in (windows(val, cfg["block"], cfg["batch"], val_rng)
                                     for _ in range(cfg["eval_batches"])))
        model.train()
        return total / cfg["eval_batches"]

    bar = tqdm(total=cfg["steps"], unit="step", dynamic_ncols=True) if tqdm is not None and not args.quiet else None
    start = time.perf_counter()
    for step in range(cfg["steps"]):
        x, y = windows(train, cfg["block"], cfg["batch"], rng)
        loss = loss_fn(model(clnn.tensor(x)).reshape(-1, len(vocab)), clnn.tensor(y.reshape(-1)))
        opt.zero_grad()
        loss.backward()
        clnn.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        sched.step()
        if (step + 1) % cfg["eval_every"] == 0 or step + 1 == cfg["steps"]:
            line = f"step {step + 1}: train loss {loss.item():.3f}, validation loss {evaluate():.3f} nats/byte"
            print(line) if bar is None else bar.write(line)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    print(f"trained {cfg['steps']} steps in {time.perf_counter() - start:.0f} s")
    print("sample:\n" + generate(clnn, model, vocab, b"def ", 200, cfg["block"], args.seed).decode("utf-8", "replace"))


def generate(lib: Any, model: Any, vocab: np.ndarray, prompt: bytes, n: int, block: int, seed: int) -> bytes:
    """``prompt`` continued by ``n`` bytes drawn from the model's distribution (temperature 0.8)."""
    lookup = {int(b): i for i, b in enumerate(vocab)}
    ids = [lookup.get(b, 0) for b in prompt]
    rng = np.random.default_rng(seed)
    model.eval()
    with lib.no_grad():
        for _ in range(n):
            logits = model(lib.tensor(np.array([ids[-block:]], np.int64)))[0, -1].numpy().astype(np.float64) / 0.8
            p = np.exp(logits - logits.max())
            ids.append(int(rng.choice(len(p), p=p / p.sum())))
    return bytes(int(vocab[i]) for i in ids)


if __name__ == "__main__":
    main()
