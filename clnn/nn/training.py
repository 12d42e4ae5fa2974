"""The Keras training contract on every :class:`~clnn.nn.Module`: ``compile``, ``fit``, ``evaluate``,
``predict`` and ``summary``.

``fit`` checks its data against the model (one forward pass on one sample) before any training, runs
the PyTorch-style loop over a prefetching :class:`~clnn.data.DataLoader`, keeps running sums of the loss
and metrics on the device (read back a few times a second for the progress bar, not every step), stops
when an epoch's loss is not finite, and returns a :class:`~clnn.nn.History`.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import amp, optim
from .. import distributed as dist
from .. import functional as F
from .. import nn as _nn  # late binding: nn.parallel's DistributedDataParallel is a Module, which mixes this module in
from ..data import DataLoader
from ..device import default_device
from ..graphs import Graph, graph
from ..ops.creation import empty, tensor, zeros
from ..tensor import FLOAT_DTYPES, HALF_DTYPES, Tensor, bfloat16, float16, no_grad
from ..validation import require_choice
from .callbacks import Callback, History, ModelCheckpoint

try:
    from tqdm.auto import tqdm
except ImportError:  # tqdm is optional (the `train`, `examples` and `test` extras): no bar without it
    tqdm = None

__all__ = ["TrainingMixin", "LOSSES"]

_calls = threading.local()  # a list collecting (module, output) while summary() traces a forward pass

LOSSES: dict[str, Callable[..., Tensor]] = {
    "cross_entropy": F.cross_entropy,
    "sparse_categorical_crossentropy": F.cross_entropy,  # Keras' name, here on logits
    "nll_loss": F.nll_loss,
    "mse": F.mse_loss,
    "mse_loss": F.mse_loss,
    "l1": F.l1_loss,
    "l1_loss": F.l1_loss,
    "mae": F.l1_loss,
    "binary_cross_entropy_with_logits": F.binary_cross_entropy_with_logits,
}
_CLASS_LOSSES = (F.cross_entropy, F.nll_loss)
_OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop")
_PRECISIONS = {"float32": None, "mixed_float16": float16, "mixed_bfloat16": bfloat16}


def _accuracy_counts(out: Tensor, y: Tensor) -> Tensor:
    """The number of correct predictions in a batch, on the device."""
    if y.dtype.kind in "iu" and out.ndim >= 2:
        return (out.argmax(1) == y).astype(np.float32).sum()
    return ((out.reshape(y.shape) > 0) == (y > 0.5)).astype(np.float32).sum()  # one logit vs 0/1 targets


class TrainingMixin:
    """Keras-style methods mixed into ``Module``."""

    next_epoch: int = 0  # one past the last epoch fit completed: fit(initial_epoch=model.next_epoch) resumes
    jit_compile: bool = False  # compile's: fit, evaluate and predict replay captured graphs

    # ---- compile ----------------------------------------------------------------------------------
    def compile(self, optimizer: Any = "adam", loss: str | Callable[..., Tensor] = "cross_entropy",
                metrics: Sequence[str | Callable[..., Tensor]] | None = None, precision: str = "float32",
                jit_compile: bool = False) -> None:
        """Choose the optimizer, the loss and the metrics ``fit`` and ``evaluate`` report.

        Args:
            optimizer: ``"adam" | "adamw" | "sgd" | "rmsprop"`` (PyTorch's default hyperparameters), an
                optimizer object, or an optimizer class (built with ``self.parameters()``).
            loss: a name from ``LOSSES`` (``"cross_entropy"``, ``"mse"``, ...) or ``loss(output, target)``.
            metrics: ``["accuracy"]`` and/or callables ``metric(output, target)`` returning a batch mean.
            precision: ``"float32"``, or Keras' mixed policies ``"mixed_float16"`` / ``"mixed_bfloat16"``:
                ``fit``/``evaluate``/``predict`` run the forward under ``clnn.autocast`` of that half type
                while the parameters stay float32 master weights; ``mixed_float16`` also scales the loss
                with a ``clnn.amp.GradScaler`` (bfloat16 has float32's range and needs none).
            jit_compile: ``fit`` captures its training step (forward, loss, backward, update), ``evaluate``
                and ``predict`` their forward, as a :func:`clnn.graph` once per batch shape (and epoch) and
                replay it for every batch: the same results, bit for bit, without the step's Python (a GPU's
                small models are bound by it). Not with ``fit(distributed=True)``.

        Example:
            >>> model.compile(optimizer="adam", loss="cross_entropy", metrics=["accuracy"])
        """
        precision = require_choice("compile: precision", precision, tuple(_PRECISIONS))
        if not isinstance(jit_compile, bool):
            raise TypeError(f"compile: jit_compile expects a bool; got {jit_compile!r}")
        spec = (loss, list(metrics or []))
        if isinstance(optimizer, str):
            if optimizer.lower() not in _OPTIMIZERS:
                raise ValueError(f"compile: optimizer expects one of {list(_OPTIMIZERS)}, an optimizer or its "
                                 f"class; got {optimizer!r}")
            cls = {"sgd": optim.SGD, "adam": optim.Adam, "adamw": optim.AdamW, "rmsprop": optim.RMSprop}
            optimizer = cls[optimizer.lower()](self.parameters())
        elif isinstance(optimizer, type) and issubclass(optimizer, optim.Optimizer):
            optimizer = optimizer(self.parameters())
        elif not isinstance(optimizer, optim.Optimizer):
            raise TypeError(f"compile: optimizer expects a name, a clnn.optim.Optimizer or its class; "
                            f"got {type(optimizer).__name__}")
        if isinstance(loss, str):
            if loss not in LOSSES:
                raise ValueError(f"compile: loss expects one of {sorted(LOSSES)} or a callable; got {loss!r}")
            loss = LOSSES[loss]
        elif not callable(loss):
            raise TypeError(f"compile: loss expects a name or a callable; got {type(loss).__name__}")
        named: dict[str, Callable[[Tensor, Tensor], Tensor]] = {}
        for m in metrics or []:
            if m in ("accuracy", "acc"):
                named["accuracy"] = _accuracy_counts
            elif callable(m):
                named[getattr(m, "__name__", "metric")] = _batch_sum(m)
            else:
                raise ValueError(f"compile: metrics expects 'accuracy' or callables; got {m!r}")
        self.optimizer, self.loss_fn, self.metric_fns = optimizer, loss, named
        self.precision, self.jit_compile = precision, jit_compile
        self._scaler = amp.GradScaler() if precision == "mixed_float16" else None
        self._compile_spec = spec  # what model.save records to compile the loaded model the same way

    # ---- data checks ------------------------------------------------------------------------------
    def _checked(self, op: str, x: Any, y: Any, need_y: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """``x`` and ``y`` as arrays, checked against the model by one forward pass on one sample."""
        x = _array(op, "x", x)
        if y is None:
            if need_y:
                raise ValueError(f"{op}: y expects targets for the {len(x)} samples of x; got None")
        else:
            y = _array(op, "y", y)
            if len(y) != len(x):
                raise ValueError(f"{op}: x and y expect the same number of samples; got {len(x)} and {len(y)}")
        if len(x) == 0:
            raise ValueError(f"{op}: x expects at least one sample; got shape {x.shape}")
        out = self._probe(op, x)
        if y is not None and getattr(self, "loss_fn", None) in _CLASS_LOSSES:
            y = _class_labels(op, y, out)
        elif y is not None and out.shape[1:] != y.shape[1:] and int(np.prod(out.shape[1:])) != int(
                np.prod(y.shape[1:])):
            raise ValueError(f"{op}: y expects samples of shape {out.shape[1:]} (the model's output); "
                             f"got {y.shape[1:]}")
        return x, y

    def _probe(self, op: str, x: np.ndarray) -> Tensor:
        """The model's output for one sample, in eval mode; a clear error if the model rejects its shape."""
        was_training = self.training
        self.eval()
        try:
            with no_grad():
                out = self(tensor(x[:1], device=self._device()))
        except (ValueError, TypeError) as err:
            raise ValueError(f"{op}: x has samples of shape {x.shape[1:]}, which {type(self).__name__} does not "
                             f"accept: {err}") from err
        finally:
            self.train(was_training)
        if not isinstance(out, Tensor) or out.ndim == 0:
            raise TypeError(f"{op}: the model expects to return a batched Tensor; got {type(out).__name__}")
        self._input_shape = tuple(x.shape[1:])
        return out

    def _device(self) -> Any:
        return self.device or default_device()

    # ---- fit --------------------------------------------------------------------------------------
    def fit(self, x: Any, y: Any = None, batch_size: int = 32, epochs: int = 1, verbose: int = 1,
            callbacks: Sequence[Callback] | None = None, validation_split: float = 0.0,
            validation_data: tuple[Any, Any] | None = None, shuffle: bool = True, seed: int | None = None,
            initial_epoch: int = 0, terminate_on_nan: bool = True, distributed: bool = False) -> History:
        """Train for ``epochs`` passes over ``(x, y)``; returns a :class:`History`.

        Args:
            x: (N, ...) NumPy inputs. y: (N,) integer class labels for classification losses, else (N, ...).
            validation_data: ``(x_val, y_val)`` evaluated after each epoch (``val_*`` logs), or
            validation_split: the fraction of the *last* samples held out for it (before shuffling).
            shuffle: a new sample order each epoch, from the global generator (:func:`clnn.manual_seed`
                makes a whole fit repeatable: initialization, shuffling, dropout), or from ``seed`` alone.
            initial_epoch: the epoch to start at; ``model.next_epoch`` resumes a saved model's training.
            verbose: 1 for a tqdm progress bar per epoch (a line per epoch without tqdm), 0 for silence.
            terminate_on_nan: stop when the epoch's loss is NaN or inf, before that epoch's callbacks run,
                so a ModelCheckpoint keeps the last good weights (a RuntimeWarning says so).
            distributed: train data-parallel over the ranks of an MPI job (run the same script under
                ``mpiexec -n 2`` or ``srun``): rank 0's weights are copied to every rank, each rank trains on
                its shard of every batch of ``batch_size`` samples per rank, gradients and the logged loss and
                metrics are averaged over the ranks; progress, printing and ``ModelCheckpoint`` happen on rank 0.

        Raises:
            RuntimeError: ``compile`` was not called.
            ValueError: x's sample shape is not what the model takes, labels are out of range, or x and y
                differ in length; all checked before the first step.

        Example:
            >>> history = model.fit(x, y, epochs=10, batch_size=64, validation_split=0.1)
        """
        if not hasattr(self, "optimizer"):
            raise RuntimeError("fit: call model.compile(optimizer=..., loss=...) before fit")
        if not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"fit: epochs expects an int >= 1; got {epochs!r}")
        if not 0 <= validation_split < 1:
            raise ValueError(f"fit: validation_split expects a fraction in [0, 1); got {validation_split}")
        if distributed and self.jit_compile:
            raise ValueError("fit: distributed=True cannot run a captured step (compile(jit_compile=True)): the "
                             "all-reduce of its gradients runs on the host")
        x, y = self._checked("fit", x, y)
        if validation_data is None and validation_split > 0:
            cut = len(x) - int(len(x) * validation_split)
            if cut in (0, len(x)):
                raise ValueError(f"fit: validation_split={validation_split} of {len(x)} samples leaves an empty set")
            x, y, validation_data = x[:cut], y[:cut], (x[cut:], y[cut:])
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                raise TypeError("fit: validation_data expects a pair (x_val, y_val)")
            validation_data = self._checked("fit: validation_data", *validation_data)
        history = History()
        cbs = [*(callbacks or []), history]  # History last, as Keras: it records what the others logged
        for cb in cbs:
            if not isinstance(cb, Callback):
                raise TypeError(f"fit: callbacks expects clnn.nn.Callback objects; got {type(cb).__name__}")
            cb.set_model(self)
            cb.set_params({"epochs": epochs, "steps": -(-len(x) // batch_size), "verbose": verbose})
        net: Any = self
        shard = None
        if distributed:
            net = _nn.DistributedDataParallel(self)
            shard = (dist.rank(), dist.world_size())
            if shard[0] != 0:
                verbose = 0
                cbs = [cb for cb in cbs if not isinstance(cb, ModelCheckpoint)]
        loader = DataLoader(x, y, batch_size=batch_size, shuffle=shuffle, seed=seed, device=self._device(),
                            shard=shard)
        self.stop_training = False
        for cb in cbs:
            cb.on_train_begin()
        for epoch in range(initial_epoch, epochs):
            for cb in cbs:
                cb.on_epoch_begin(epoch)
            loader.set_epoch(epoch)
            bar = tqdm(total=len(loader), desc=f"Epoch {epoch + 1}/{epochs}", unit="batch", leave=True,
                       dynamic_ncols=True) if verbose and tqdm is not None else None
            logs = self._train_epoch(net, loader, bar, cbs)
            if terminate_on_nan and not np.isfinite(logs["loss"]):
                if bar is not None:
                    bar.close()
                warnings.warn(
                    f"fit: the training loss became {logs['loss']} in epoch {epoch + 1}; training stopped before "
                    "that epoch's callbacks, so checkpoints hold the last good weights (the model's own weights "
                    "may be non-finite: reload a checkpoint). Pass terminate_on_nan=False to train on.",
                    RuntimeWarning, stacklevel=2,
                )
                break
            if validation_data is not None:
                val = self.evaluate(*validation_data, batch_size=batch_size, verbose=0)
                logs.update({f"val_{k}": v for k, v in val.items()})
            if bar is not None:  # validation metrics on the epoch's own line
                bar.set_postfix(logs)
                bar.close()
            elif verbose:
                print(f"Epoch {epoch + 1}/{epochs}: " + ", ".join(f"{k}={v:.4f}" for k, v in logs.items()))
            self.next_epoch = epoch + 1
            for cb in cbs:
                cb.on_epoch_end(epoch, logs)
            if self.stop_training:
                break
        for cb in cbs:
            cb.on_train_end()
        return history

    def _train_epoch(self, net: Any, loader: DataLoader, bar: Any, cbs: list[Callback]) -> dict[str, float]:
        """One epoch of steps; ``net`` is the model itself or its DistributedDataParallel wrapper."""
        self.train()
        sums = _Sums(self.metric_fns)
        last = time.monotonic()
        captured: dict[tuple, Any] = {}  # graphs by batch shapes, for this epoch: see _replayed
        for step, (xb, yb) in enumerate(loader):
            for cb in cbs:
                cb.on_train_batch_begin(step)
            if self.jit_compile:  # the step and its sums of the loss and metrics, replayed
                sums.add_parts(_replayed(captured, (xb, yb), lambda x, y: sums.parts(*self._train_step(self, x, y), y)),
                               len(yb))
            else:
                sums.add(*self._train_step(net, xb, yb), yb)
            for cb in cbs:
                cb.on_train_batch_end(step, {"size": len(xb)})
            if bar is not None:
                bar.update(1)
                if time.monotonic() - last > 0.5:  # reading the sums waits for the device: not every step
                    bar.set_postfix(sums.read(), refresh=False)  # this rank's running values
                    last = time.monotonic()
        return sums.read(across_ranks=net is not self)

    def _train_step(self, net: Any, xb: Tensor, yb: Tensor) -> tuple[Tensor, Tensor]:
        """Forward, loss, backward and update on one batch: (loss, output)."""
        with self._autocast():
            out = net(xb)
            loss = self.loss_fn(out, yb)
        self.optimizer.zero_grad()
        if self._scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self._scaler.scale(loss).backward()
            self._scaler.step(self.optimizer)
            self._scaler.update()
        return loss, out

    def _autocast(self) -> contextlib.AbstractContextManager[None]:
        """``clnn.autocast`` of the compiled precision policy (nothing for float32)."""
        half = _PRECISIONS[getattr(self, "precision", "float32")]
        return contextlib.nullcontext() if half is None else amp.autocast(half)

    # ---- evaluate / predict -----------------------------------------------------------------------
    def evaluate(self, x: Any, y: Any, batch_size: int = 32, verbose: int = 0) -> dict[str, float]:
        """The loss and metrics over ``(x, y)`` in eval mode, as a dict (``{"loss": ..., "accuracy": ...}``)."""
        if not hasattr(self, "loss_fn"):
            raise RuntimeError("evaluate: call model.compile(optimizer=..., loss=...) first")
        x, y = self._checked("evaluate", x, y)
        was_training = self.training
        self.eval()
        sums = _Sums(self.metric_fns)
        loader = DataLoader(x, y, batch_size=batch_size, device=self._device())
        captured: dict[tuple, Any] = {}

        def run(xb: Tensor, yb: Tensor) -> dict[str, Tensor]:
            out = self(xb)
            return sums.parts(self.loss_fn(out, yb), out, yb)

        try:
            with no_grad(), self._autocast():
                for xb, yb in _maybe_bar(loader, verbose, "evaluate"):
                    sums.add_parts(_replayed(captured, (xb, yb), run) if self.jit_compile else run(xb, yb), len(yb))
        finally:
            self.train(was_training)
        return sums.read()

    def predict(self, x: Any, batch_size: int = 32, verbose: int = 0) -> np.ndarray:
        """The model's outputs for ``x`` in eval mode, as one NumPy array."""
        x, _ = self._checked("predict", x, None, need_y=False)
        was_training = self.training
        self.eval()
        outs: list[np.ndarray] = []
        captured: dict[tuple, Any] = {}
        try:
            with no_grad(), self._autocast():
                for xb in _maybe_bar(DataLoader(x, batch_size=batch_size, device=self._device()), verbose, "predict"):
                    out = _replayed(captured, (xb,), self) if self.jit_compile else self(xb)
                    outs.append((out.astype(np.float32) if out.dtype in HALF_DTYPES else out).numpy())
        finally:
            self.train(was_training)
        return np.concatenate(outs)

    # ---- summary -------------------------------------------------------------------------
    def summary(self, input_shape: Sequence[int] | None = None, print_fn: Callable[[str], Any] = print) -> None:
        """Print the layers, their output shapes and parameter counts, as Keras does.

        Args:
            input_shape: one sample's shape, without the batch dimension (e.g. ``(1, 28, 28)``); defaults
                to the shape ``fit`` saw.
        """
        shape = tuple(input_shape) if input_shape is not None else getattr(self, "_input_shape", None)
        if shape is None:
            raise ValueError("summary: input_shape expects one sample's shape, e.g. (1, 28, 28), when fit has "
                             "not run yet; got None")
        names = {id(m): name for name, m in self.named_modules()}
        was_training = self.training
        self.eval()
        _calls.log = []
        try:
            with no_grad():
                self(zeros((1, *shape), device=self._device()))
            calls = [(m, out) for m, out in _calls.log if not any(True for _ in m.children())]
        finally:
            _calls.log = None
            self.train(was_training)
        rows = [("Layer (type)", "Output Shape", "Param #")]
        for m, out in calls:
            count = sum(p.size for p in m.parameters()) + sum(b.size for b in m.buffers() if b.dtype in FLOAT_DTYPES)
            oshape = "(None, " + ", ".join(str(s) for s in out.shape[1:]) + ")" if isinstance(out, Tensor) else "?"
            rows.append((f"{names.get(id(m), '?')} ({type(m).__name__})", oshape.replace(", )", ")"), f"{count:,}"))
        trainable = sum(p.size for p in self.parameters() if p.requires_grad)
        frozen = sum(p.size for p in self.parameters() if not p.requires_grad)
        frozen += sum(b.size for b in self.buffers() if b.dtype in FLOAT_DTYPES)
        w = [max(len(r[i]) for r in rows) + 4 for i in range(3)]
        width = sum(w)
        line = lambda r: (r[0].ljust(w[0]) + r[1].ljust(w[1]) + r[2].rjust(w[2] - 4)).rstrip()  # noqa: E731
        total = trainable + frozen
        out_lines = [f'Model: "{type(self).__name__}"', "_" * width, line(rows[0]), "=" * width]
        out_lines += [line(r) for r in rows[1:]]
        out_lines += [
            "=" * width,
            f"Total params: {total:,} ({total * 4 / 2**20:.2f} MB)",
            f"Trainable params: {trainable:,}",
            f"Non-trainable params: {frozen:,}",
            f"Precision policy: {getattr(self, 'precision', 'float32')}",
            "_" * width,
        ]
        print_fn("\n".join(out_lines))


class _Sums:
    """Running sums of the loss and metrics over an epoch, kept on the device."""

    def __init__(self, metric_fns: dict[str, Callable[[Tensor, Tensor], Tensor]]) -> None:
        self.fns = metric_fns
        self.sums: dict[str, Tensor] = {}
        self.count = 0

    def add(self, loss: Tensor, out: Tensor, y: Tensor) -> None:
        self.add_parts(self.parts(loss, out, y), len(y))

    def parts(self, loss: Tensor, out: Tensor, y: Tensor) -> dict[str, Tensor]:
        """One batch's sums of the loss and of each metric (what a captured step computes with it)."""
        with no_grad():
            parts = {"loss": loss.detach() * float(len(y))}
            parts.update({k: fn(out.detach(), y) for k, fn in self.fns.items()})
        return parts

    def add_parts(self, parts: dict[str, Tensor], n: int) -> None:
        """Add a batch of ``n`` samples' :meth:`parts` (copied first: a replay rewrites a captured step's)."""
        with no_grad():
            for k, v in parts.items():
                self.sums[k] = v.clone() if k not in self.sums else self.sums[k] + v
        self.count += n

    def read(self, across_ranks: bool = False) -> dict[str, float]:
        """The means so far; ``across_ranks``: over every rank's samples (a collective: every rank calls it)."""
        values = np.array([self.count] + [float(v.item()) for v in self.sums.values()])
        if across_ranks:
            values = dist.allreduce_host(values)
        return {k: float(v) / max(values[0], 1) for k, v in zip(self.sums, values[1:])}


def _replayed(captured: dict[tuple, Any], batch: tuple[Tensor, ...], run: Callable[..., Any]) -> Any:
    """``run(*batch)`` by the replay of a graph captured on first sight of the batch's shapes and dtypes (kept in
    ``captured``): the batch is copied into the tensors the capture read, and the capture's outputs, which the
    replay rewrites, are returned."""
    key = tuple((b.shape, b.dtype) for b in batch)
    if key not in captured:
        g, static = Graph(), [empty(*b.shape, dtype=b.dtype, device=b.device) for b in batch]
        with graph(g, batch[0].device):
            outputs = run(*static)
        captured[key] = g, static, outputs
    g, static, outputs = captured[key]
    for s, b in zip(static, batch):
        s.copy_(b)
    g.replay()
    return outputs


def _batch_sum(metric: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Tensor, Tensor], Tensor]:
    return lambda out, y: metric(out, y) * float(len(y))


def _maybe_bar(loader: DataLoader, verbose: int, desc: str) -> Any:
    return tqdm(loader, desc=desc, unit="batch", leave=False) if verbose and tqdm is not None else loader


def _array(op: str, name: str, value: Any) -> np.ndarray:
    if isinstance(value, Tensor):
        value = value.numpy()
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiub" or arr.ndim == 0:
        raise TypeError(f"{op}: {name} expects a numeric array with a batch dimension; got {arr.dtype} of "
                        f"shape {arr.shape}")
    return arr.astype(np.float32) if arr.dtype == np.float64 else arr


def _class_labels(op: str, y: np.ndarray, out: Tensor) -> np.ndarray:
    """``y`` as int64 class labels for logits like ``out``, checked for shape and range."""
    if out.ndim < 2:
        raise ValueError(f"{op}: a classification loss expects (N, C) outputs; the model gives {out.shape[1:]} "
                         "per sample")
    classes = out.shape[1]
    if y.shape[1:] != out.shape[2:]:
        raise ValueError(f"{op}: y expects one class label per sample, shape (N, {', '.join(map(str, out.shape[2:]))}"
                         f"); got shape {y.shape}".replace(", )", ")"))
    if y.dtype.kind == "f" and not np.array_equal(y, np.round(y)):
        raise ValueError(f"{op}: y expects integer class labels; got non-integer values such as "
                         f"{y[y != np.round(y)].ravel()[0]}")
    labels = y.astype(np.int64)
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= classes:
        raise ValueError(f"{op}: y expects class labels in [0, {classes}) for a model with {classes} outputs; "
                         f"got labels from {lo} to {hi}")
    return labels
