"""``DataLoader``: NumPy arrays in, device batches out, the next batch's copy overlapping this one's compute.

Double buffering: while batch ``k`` is handed out, batch ``k + 1`` is already gathered into one of two
host staging arrays and copied to the device with a non-blocking write on a second command queue. That
copy first waits for what the compute queue had queued (so it never overwrites pooled memory an earlier
kernel still reads), and the compute queue waits for the copy (a barrier on its event) before batch
``k + 1``'s first kernel. The host never blocks on a transfer unless a staging array is still in flight.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyopencl as cl

from .device import Device
from .device import device as _device
from .ops import random
from .ops._core import empty
from .tensor import Tensor

__all__ = ["DataLoader"]

_copy_queues: dict[Device, cl.CommandQueue] = {}


def _copy_queue(dev: Device) -> cl.CommandQueue:
    with dev._lock:
        q = _copy_queues.get(dev)
        if q is None:
            q = _copy_queues[dev] = cl.CommandQueue(dev.context, dev.cl_device)
        return q


def _as_array(name: str, value: Any) -> np.ndarray:
    if isinstance(value, Tensor):
        value = value.numpy()
    arr = np.asarray(value)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)  # float32 is the training type everywhere (not every device has fp64)
    if arr.dtype.kind not in "fiub" or arr.ndim == 0:
        raise TypeError(f"DataLoader: {name} expects a numeric array with a batch dimension; "
                        f"got {arr.dtype} of shape {arr.shape}")
    return np.ascontiguousarray(arr)


class _Stream:
    """One array's two staging buffers and their in-flight copy events."""

    def __init__(self, data: np.ndarray, batch_size: int) -> None:
        self.data = data
        self.stage = [np.empty((batch_size, *data.shape[1:]), data.dtype) for _ in range(2)]
        self.events: list[cl.Event | None] = [None, None]

    def upload(self, idx: np.ndarray, slot: int, out: Tensor, queue: cl.CommandQueue, after: cl.Event) -> None:
        if self.events[slot] is not None:
            self.events[slot].wait()  # the staging array is still being read by an earlier copy
        host = self.stage[slot][: len(idx)]
        np.take(self.data, idx, axis=0, out=host)
        self.events[slot] = None
        if host.size:
            self.events[slot] = cl.enqueue_copy(queue, out.data, host, is_blocking=False, wait_for=[after])

    def wait(self) -> None:
        for ev in self.events:
            if ev is not None:
                ev.wait()


class DataLoader:
    """Batches of ``x`` (and ``y``) as device tensors, optionally shuffled, with prefetching.

    Args:
        x: (N, ...) array of inputs; float64 becomes float32.
        y: optional (N, ...) array of targets (integer labels stay int64).
        batch_size: samples per batch; the last batch is smaller unless ``drop_last``.
        shuffle: a new order every epoch (every ``iter``).
        seed: with a seed, epoch ``e``'s order depends only on ``(seed, e)``; without, each epoch's order
            comes from the global generator, so :func:`clnn.manual_seed` makes it repeatable.
        drop_last: skip a final incomplete batch.
        device: where the batches go (default device when None).

    Yields:
        ``(xb, yb)`` tensors, or ``xb`` alone when ``y`` is None.

    Example:
        >>> for xb, yb in clnn.data.DataLoader(x, y, batch_size=64, shuffle=True, device=dev):
        ...     loss = F.cross_entropy(model(xb), yb)
    """

    def __init__(self, x: Any, y: Any = None, batch_size: int = 32, shuffle: bool = False, seed: int | None = None,
                 drop_last: bool = False, device: str | int | Device | None = None) -> None:
        if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size expects an int >= 1; got {batch_size!r}")
        self.x = _as_array("x", x)
        self.y = None if y is None else _as_array("y", y)
        if self.y is not None and len(self.y) != len(self.x):
            raise ValueError(f"DataLoader: x and y expect the same number of samples; got {len(self.x)} and "
                             f"{len(self.y)}")
        self.batch_size, self.shuffle, self.drop_last = int(batch_size), bool(shuffle), bool(drop_last)
        self.device = _device(device)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter`` epoch ``epoch`` (its order, with a seed), e.g. to resume training."""
        self.epoch = int(epoch)

    def _order(self) -> np.ndarray:
        n = len(self.x)
        if not self.shuffle:
            return np.arange(n)
        key = (int(self.seed) & (2**64 - 1), self.epoch) if self.seed is not None else random.advance()
        self.epoch += 1
        return np.random.default_rng(key).permutation(n)

    def __len__(self) -> int:
        n = len(self.x)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        n, bs, dev = len(self.x), self.batch_size, self.device
        order = self._order()
        starts = range(0, n - bs + 1 if self.drop_last else n, bs)
        batches = [order[s:s + bs] for s in starts]
        if not batches:
            return
        streams = [_Stream(a, bs) for a in (self.x, self.y) if a is not None]
        queue = _copy_queue(dev)

        def upload(k: int) -> list[tuple[Tensor, cl.Event | None]]:
            slot = k % 2
            outs = [empty((len(batches[k]), *s.data.shape[1:]), s.data.dtype, dev) for s in streams]
            with dev._lock:  # after whatever the compute queue has queued so far, allocations included
                after = cl.enqueue_marker(dev.queue)
                dev.queue.flush()  # the copy queue waits on this marker: make sure it gets submitted
            for s, out in zip(streams, outs):
                s.upload(batches[k], slot, out, queue, after)
            return [(out, s.events[slot]) for s, out in zip(streams, outs)]

        try:
            pending = upload(0)
            queue.flush()
            for k in range(len(batches)):
                current = pending
                if k + 1 < len(batches):
                    pending = upload(k + 1)
                    queue.flush()
                events = [ev for _, ev in current if ev is not None]
                if events:
                    with dev._lock:
                        cl.enqueue_barrier(dev.queue, wait_for=events)
                tensors = [t for t, _ in current]
                yield tensors[0] if len(tensors) == 1 else tuple(tensors)
        finally:
            for s in streams:  # never free a batch's memory while a copy into it is in flight
                s.wait()
