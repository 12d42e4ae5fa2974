"""Whole models in one safetensors file: ``model.save(path)`` and :func:`clnn.nn.load`.

The file holds the weights (the model's ``state_dict``, readable by any safetensors reader) and, in its
``__metadata__``, the constructor calls that rebuild the architecture. A compiled model adds its training
state, so a loaded model evaluates, predicts and goes on training exactly where it stopped: the compile
configuration (optimizer class and ``state_dict``, loss, metrics), the epoch ``fit`` reached and the
global random generator's state. Optimizer state tensors are entries named ``optimizer/<index>/<key>``.

Loading never imports (runs) code: every class and function the file names must already be imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .. import optim
from ..device import use_device
from ..io import load_state_dict, read_metadata, save_state_dict
from ..ops import random
from ..tensor import FLOAT_DTYPES, Tensor

__all__ = ["SavingMixin", "load"]

_ARCH_KEY, _TRAIN_KEY = "clnn.architecture", "clnn.training"
_OPT_PREFIX = "optimizer/"  # "/" never appears in a module's state_dict names


class _NotStorable(TypeError):
    pass


class SavingMixin:
    """``save`` mixed into ``Module``."""

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save weights, the architecture (when its constructor arguments are plain data) and, for a compiled
        model, its training state, in one atomic write; load with :func:`clnn.nn.load`.

        Example:
            >>> model.save("digits.safetensors")
        """
        meta = {"format": "clnn", "clnn.dtype": _float_dtype(self)}
        try:
            meta[_ARCH_KEY] = json.dumps(_encode(self))
        except _NotStorable as err:
            meta["clnn.no_architecture"] = f"a constructor argument of type {err} cannot be stored"
        tensors: dict[str, Any] = dict(self.state_dict())
        if hasattr(self, "_compile_spec"):  # compiled
            try:
                config, opt_tensors = _training_state(self)
                meta[_TRAIN_KEY] = json.dumps(config)
                tensors.update(opt_tensors)
            except _NotStorable as err:
                meta["clnn.no_training"] = str(err)
                warnings.warn(f"save: {path} holds weights and architecture but no training state: {err}",
                              RuntimeWarning, stacklevel=2)
        save_state_dict(tensors, path, meta)


def load(path: str | os.PathLike[str], device: Any = None, compile: bool = True) -> Any:
    """Rebuild and return a model saved with ``model.save(path)``, its weights loaded (on ``device``).

    A compiled model comes back compiled, its optimizer state restored, ``next_epoch`` set and the global
    random generator where it was at the save, so ``fit(..., initial_epoch=model.next_epoch)`` continues
    exactly as if training had never stopped. ``compile=False`` loads only the architecture and weights.
    The model's classes (and any custom loss or metric) must be importable and already imported.

    Raises:
        ValueError: the file has no architecture, or names a class or function that is not imported.

    Example:
        >>> model = clnn.nn.load("digits.safetensors")
        >>> model.evaluate(x_test, y_test)
    """
    meta = read_metadata(path)
    if _ARCH_KEY not in meta:
        why = meta.get("clnn.no_architecture", "it holds weights only")
        raise ValueError(f"load: {path} has no architecture ({why}); build the model and call "
                         f"model.load_state_dict(clnn.load_state_dict(path))")
    with use_device(device) if device is not None else contextlib.nullcontext():
        model = _decode(json.loads(meta[_ARCH_KEY]))
    if meta.get("clnn.dtype", "float32") != "float32":
        model.to(dtype=np.dtype(meta["clnn.dtype"]))
    tensors = load_state_dict(path)
    model.load_state_dict({k: v for k, v in tensors.items() if not k.startswith(_OPT_PREFIX)})
    if compile and _TRAIN_KEY in meta:
        _restore_training(model, json.loads(meta[_TRAIN_KEY]), tensors)
    return model


# ---- architecture: constructor calls as JSON ----------------------------------------------------------
def _encode(value: Any) -> Any:
    if isinstance(value, SavingMixin):
        cls = type(value)
        args, kwargs = value.__dict__.get("_init_args", ((), {}))
        return {"__module__": f"{cls.__module__}:{cls.__qualname__}", "args": [_encode(a) for a in args],
                "kwargs": {k: _encode(v) for k, v in kwargs.items() if k not in ("device", "dtype")}}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _encode(v) for k, v in value.items()}}
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise _NotStorable(type(value).__name__)


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__tuple__" in value:
        return tuple(_decode(v) for v in value["__tuple__"])
    if "__dict__" in value:
        return {k: _decode(v) for k, v in value["__dict__"].items()}
    cls = _imported(value["__module__"], lambda obj: isinstance(obj, type) and issubclass(obj, SavingMixin),
                    "clnn Module subclass")
    return cls(*[_decode(a) for a in value["args"]], **{k: _decode(v) for k, v in value["kwargs"].items()})


def _imported(ref: str, ok: Callable[[Any], bool], kind: str) -> Any:
    """The object named ``"module:qualname"``, looked up among imported modules only."""
    modname, _, qualname = ref.partition(":")
    obj: Any = sys.modules.get(modname)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not ok(obj):
        raise ValueError(f"load: the file uses {modname}.{qualname}, which is not an imported {kind}; import the "
                         f"module that defines it first")
    return obj


def _float_dtype(model: Any) -> str:
    return next((p.dtype.name for p in model.parameters() if p.dtype in FLOAT_DTYPES), "float32")


# ---- training state -----------------------------------------------------------------------------------
def _ref(fn: Any, what: str) -> str:
    """A loss or metric as compile takes it: its name, or ``"module:qualname"`` for a function."""
    if isinstance(fn, str):
        return fn
    qualname = getattr(fn, "__qualname__", "")
    if not qualname or "<" in qualname or getattr(fn, "__module__", None) is None:
        raise _NotStorable(f"the {what} {fn!r} is not a module-level function")
    return f"{fn.__module__}:{qualname}"


def _training_state(model: Any) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """The JSON-able compile configuration and the optimizer's state tensors (by file entry name)."""
    opt = model.optimizer
    cls = type(opt)
    if "<" in cls.__qualname__:
        raise _NotStorable(f"the optimizer class {cls.__qualname__} is not defined at module level")
    names = {id(p): n for n, p in model.named_parameters()}
    params = [p for g in opt.param_groups for p in g["params"]]
    if any(id(p) not in names for p in params):
        raise _NotStorable("the optimizer trains a tensor that is not one of the model's parameters")
    sd = opt.state_dict()
    tensors, state = {}, {}
    for i, entries in sd["state"].items():
        state[str(i)] = {}
        for k, v in entries.items():
            if isinstance(v, Tensor):
                tensors[f"{_OPT_PREFIX}{i}/{k}"] = v
            else:
                state[str(i)][k] = v
    loss, metrics = model._compile_spec
    config = {
        "optimizer": f"{cls.__module__}:{cls.__qualname__}",
        "param_names": [names[id(p)] for p in params],
        "param_groups": sd["param_groups"],
        "state": state,
        "loss": _ref(loss, "loss"),
        "metrics": [_ref(m, "metric") for m in metrics],
        "next_epoch": int(model.next_epoch),
        "rng": list(random.get_state()),
        "precision": model.precision,
        "jit_compile": model.jit_compile,
    }
    if model._scaler is not None:
        config["scaler"] = model._scaler.state_dict()
    return config, tensors


def _restore_training(model: Any, config: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
    cls = _imported(config["optimizer"], lambda obj: isinstance(obj, type) and issubclass(obj, optim.Optimizer),
                    "clnn.optim.Optimizer subclass")
    named = dict(model.named_parameters())
    params = [named[n] for n in config["param_names"]]
    state: dict[int, dict[str, Any]] = {int(i): dict(entries) for i, entries in config["state"].items()}
    for key, arr in tensors.items():
        if key.startswith(_OPT_PREFIX):
            i, _, k = key[len(_OPT_PREFIX):].partition("/")
            state.setdefault(int(i), {})[k] = arr
    opt = cls([{"params": [params[i] for i in g["params"]]} for g in config["param_groups"]])
    opt.load_state_dict({"state": state, "param_groups": config["param_groups"]})

    def callable_or_name(ref: str) -> Any:
        return _imported(ref, callable, "function") if ":" in ref else ref

    model.compile(optimizer=opt, loss=callable_or_name(config["loss"]),
                  metrics=[callable_or_name(m) for m in config["metrics"]],
                  precision=config.get("precision", "float32"), jit_compile=config.get("jit_compile", False))
    if "scaler" in config:
        model._scaler.load_state_dict(config["scaler"])
    model.next_epoch = config["next_epoch"]
    random.set_state(tuple(config["rng"]))
