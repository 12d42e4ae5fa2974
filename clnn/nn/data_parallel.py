"""``DataParallel``: one process, several OpenCL devices; each forward splits the batch across them.

The module lives on the first device; every other device holds a replica, refreshed from it at each
forward. A forward cuts the batch into one chunk per device, runs each replica on its own device's queue
(launches are asynchronous, so the devices compute at the same time), and joins the outputs on the first
device with a recorded op, so ``backward()`` sends each chunk's gradient back to its replica. As backward
ends, the replicas' gradients are added onto the module's, in device order, and the optimizer steps the
module alone.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device import Device
from ..device import device as _device
from ..ops.shape import cat
from ..tensor import Tensor, grad_hooks, is_grad_enabled
from .module import Module, Parameter

__all__ = ["DataParallel"]


class DataParallel(Module):
    """Split each batch of ``module``'s input across ``devices`` (PyTorch's ``DataParallel``).

    Args:
        module: the model; it is moved to ``devices[0]``, where its outputs and gradients are.
        devices: two or more devices (specs as :func:`clnn.device`, or :class:`Device` objects such as the
            sub-devices from :meth:`Device.split`).

    Example:
        >>> cpu = clnn.device("pocl")
        >>> model = nn.DataParallel(Net(), devices=cpu.split(2))
        >>> F.cross_entropy(model(xb), yb).backward(); opt.step()   # opt over model.parameters()
    """

    def __init__(self, module: Module, devices: Sequence[str | int | Device]) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DataParallel: module expects a clnn.nn.Module; got {type(module).__name__}")
        devs = [_device(d) for d in devices]
        if len(devs) < 2 or len(set(map(id, devs))) != len(devs):
            raise ValueError(f"DataParallel: devices expects two or more distinct devices; got {devs}")
        self.module = module.to(devs[0])
        self.devices = devs
        self.replicas = [_replica(module, d) for d in devs[1:]]  # a plain list: not trained, not saved

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.ndim == 0:
            raise TypeError(f"DataParallel: x expects a batched clnn.Tensor; got {type(x).__name__}")
        for rep in self.replicas:
            rep.train(self.training)
            for mine, theirs in zip(_state(self.module), _state(rep)):
                theirs.device.upload(theirs.data, mine.numpy())
        bounds = np.linspace(0, len(x), len(self.devices) + 1).round().astype(int)
        models = [self.module, *self.replicas]
        outs = [m(x[a:b].to(d)) for m, d, a, b in zip(models, self.devices, bounds, bounds[1:]) if b > a]
        if is_grad_enabled() and self._reduce not in grad_hooks:
            grad_hooks.append(self._reduce)
        return _join(outs, self.devices[0])

    def _reduce(self, leaf: Tensor | None) -> None:
        """As backward ends: add every replica's gradients onto the module's (on the first device)."""
        if leaf is not None:
            return
        grad_hooks.remove(self._reduce)
        mains = [p for p in self.module.parameters()]
        for rep in self.replicas:
            for p, q in zip(mains, rep.parameters()):
                if q.grad is not None:
                    moved = q.grad.to(p.device)
                    p.grad = moved if p.grad is None else p.grad + moved
                    q.grad = None


def _state(module: Module) -> list[Tensor]:
    return [*module.parameters(), *module.buffers()]


def _replica(module: Module, dev: Device) -> Module:
    """A copy of ``module`` with its parameters and buffers copied to ``dev``."""
    memo: dict[int, Any] = {}
    for t in _state(module):
        moved = t.detach().to(dev)
        memo[id(t)] = Parameter(moved, t.requires_grad) if isinstance(t, Parameter) else moved
    return copy.deepcopy(module, memo)


def _join(parts: list[Tensor], dev: Device) -> Tensor:
    """``parts`` (on their own devices) concatenated along the batch axis on ``dev``; backward splits it."""
    return cat([p.to(dev) for p in parts])
