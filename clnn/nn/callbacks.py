"""Keras-style callbacks for :meth:`Module.fit`: ``History``, ``EarlyStopping``, ``ModelCheckpoint``,
``LearningRateScheduler``. Epoch ``logs`` are dicts like ``{"loss": 0.3, "accuracy": 0.9, "val_loss": ...}``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..files import atomic_write
from ..io import save_state_dict

__all__ = ["Callback", "History", "EarlyStopping", "ModelCheckpoint", "LearningRateScheduler"]


class Callback:
    """Base class: override the hooks you need. ``self.model`` is the model being trained."""

    def __init__(self) -> None:
        self.model: Any = None
        self.params: dict[str, Any] = {}

    def set_model(self, model: Any) -> None:
        self.model = model

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params

    def on_train_begin(self, logs: dict[str, float] | None = None) -> None: ...

    def on_train_end(self, logs: dict[str, float] | None = None) -> None: ...

    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None: ...

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None: ...

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None: ...

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None: ...


class History(Callback):
    """What ``fit`` returns: ``history`` maps each metric to its per-epoch values; ``epoch`` lists the epochs."""

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[str, list[float]] = {}
        self.epoch: list[int] = []

    def on_train_begin(self, logs: dict[str, float] | None = None) -> None:
        self.epoch = []

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)

    def plot(self, metrics: Sequence[str] | None = None, path: str | os.PathLike[str] | None = None) -> Any:
        """Draw each metric's training and validation curves over the epochs, one panel per metric.

        Args:
            metrics: names like ``["loss", "accuracy"]`` (their ``val_*`` curves come along); default all.
            path: save a PNG there (atomically) instead of showing the figure.

        Returns:
            The matplotlib ``Figure``.

        Raises:
            ImportError: matplotlib is missing (``pip install 'clnn[plot]'``).
            ValueError: a metric was not logged.

        Example:
            >>> model.fit(x, y, epochs=10, validation_split=0.1).plot(path="curves.png")
        """
        try:
            from matplotlib.figure import Figure
        except ImportError:
            raise ImportError("History.plot needs matplotlib: pip install 'clnn[plot]'") from None
        names = list(metrics) if metrics is not None else [k for k in self.history if not k.startswith("val_")]
        for name in names:
            if name not in self.history:
                raise ValueError(f"History.plot: metrics expects logged names {sorted(self.history)}; got {name!r}")
        if not names:
            raise ValueError("History.plot: nothing to plot; fit has not completed an epoch")
        if path is None:
            import matplotlib.pyplot as plt

            fig = plt.figure(figsize=(4.5 * len(names), 3.5))
        else:
            fig = Figure(figsize=(4.5 * len(names), 3.5))
        epochs = [e + 1 for e in self.epoch]
        for i, name in enumerate(names):
            ax = fig.add_subplot(1, len(names), i + 1)
            ax.plot(epochs, self.history[name], marker="o", label="train")
            if f"val_{name}" in self.history:
                ax.plot(epochs, self.history[f"val_{name}"], marker="o", label="validation")
            ax.set(title=name, xlabel="epoch")
            ax.legend()
        fig.tight_layout()
        if path is None:
            plt.show()
            return fig
        with atomic_write(path) as f:
            fig.savefig(f, format="png")
        return fig

    def __repr__(self) -> str:
        return f"History(epochs={len(self.epoch)}, keys={list(self.history)})"


class _Monitor(Callback):
    """Shared logic: which log entry to watch and whether a value improves on the best."""

    def __init__(self, monitor: str, mode: str, min_delta: float = 0.0) -> None:
        super().__init__()
        name = type(self).__name__
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"{name}: mode expects 'auto', 'min' or 'max'; got {mode!r}")
        if mode == "auto":
            mode = "max" if any(k in monitor for k in ("acc", "auc", "precision", "recall")) else "min"
        self.monitor, self.mode, self.min_delta = monitor, mode, abs(min_delta)
        self.best = math.inf if mode == "min" else -math.inf

    def _improves(self, value: float) -> bool:
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def _value(self, logs: dict[str, float] | None) -> float | None:
        logs = logs or {}
        if self.monitor not in logs:
            return None
        return float(logs[self.monitor])

    def _missing(self, logs: dict[str, float] | None) -> KeyError:
        return KeyError(f"{type(self).__name__}: monitor {self.monitor!r} is not among the logged values "
                        f"{sorted(logs or {})}; pass validation data for 'val_*' metrics")


class EarlyStopping(_Monitor):
    """Stop training when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs.

    Example:
        >>> model.fit(x, y, validation_split=0.1, callbacks=[nn.EarlyStopping(patience=3)])
    """

    def __init__(self, monitor: str = "val_loss", min_delta: float = 0.0, patience: int = 0, verbose: int = 0,
                 mode: str = "auto", baseline: float | None = None, restore_best_weights: bool = False) -> None:
        super().__init__(monitor, mode, min_delta)
        self.patience, self.verbose, self.baseline = patience, verbose, baseline
        self.restore_best_weights = restore_best_weights

    def on_train_begin(self, logs: dict[str, float] | None = None) -> None:
        self.wait, self.stopped_epoch, self.best_weights = 0, 0, None
        self.best = math.inf if self.mode == "min" else -math.inf
        if self.baseline is not None:
            self.best = self.baseline

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        value = self._value(logs)
        if value is None:
            raise self._missing(logs)
        if self._improves(value):
            self.best, self.wait = value, 0
            if self.restore_best_weights:
                self.best_weights = {k: v.numpy() for k, v in self.model.state_dict().items()}
            return
        self.wait += 1
        if self.wait > self.patience:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.verbose:
                print(f"Epoch {epoch + 1}: early stopping ({self.monitor} best {self.best:.4g})")
            if self.restore_best_weights and self.best_weights is not None:
                self.model.load_state_dict(self.best_weights)


class ModelCheckpoint(_Monitor):
    """Save the model (or only its weights) after each epoch, or only when ``monitor`` improves.

    ``filepath`` may hold ``{epoch}`` and log keys: ``"ckpt-{epoch:02d}-{val_loss:.3f}.safetensors"``.
    Weights-only files load with ``model.load_state_dict(clnn.load_state_dict(path))``; full saves with
    ``clnn.nn.load(path)``.
    """

    def __init__(self, filepath: str, monitor: str = "val_loss", verbose: int = 0, save_best_only: bool = False,
                 save_weights_only: bool = False, mode: str = "auto") -> None:
        super().__init__(monitor, mode)
        self.filepath, self.verbose = str(filepath), verbose
        self.save_best_only, self.save_weights_only = save_best_only, save_weights_only

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if self.save_best_only:
            value = self._value(logs)
            if value is None:
                raise self._missing(logs)
            if not self._improves(value):
                return
            self.best = value
        path = self.filepath.format(epoch=epoch + 1, **(logs or {}))
        if self.save_weights_only:
            save_state_dict(self.model.state_dict(), path)
        else:
            self.model.save(path)
        if self.verbose:
            print(f"Epoch {epoch + 1}: saved {path}")


class LearningRateScheduler(Callback):
    """Set the optimizer's learning rate at each epoch's start to ``schedule(epoch, lr)``.

    Example:
        >>> nn.LearningRateScheduler(lambda epoch, lr: lr * 0.9 if epoch >= 5 else lr)
    """

    def __init__(self, schedule: Callable[[int, float], float], verbose: int = 0) -> None:
        super().__init__()
        if not callable(schedule):
            raise TypeError(f"LearningRateScheduler: schedule expects a callable; got {type(schedule).__name__}")
        self.schedule, self.verbose = schedule, verbose

    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        opt = self.model.optimizer
        lr = float(self.schedule(epoch, float(opt.param_groups[0]["lr"])))
        if not np.isfinite(lr) or lr < 0:
            raise ValueError(f"LearningRateScheduler: schedule expects to return a finite lr >= 0; got {lr}")
        for group in opt.param_groups:
            group["lr"] = lr
        if self.verbose:
            print(f"Epoch {epoch + 1}: learning rate {lr:.4g}")

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if logs is not None:
            logs["lr"] = float(self.model.optimizer.param_groups[0]["lr"])
