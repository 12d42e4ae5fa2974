"""``DataLoader``: NumPy arrays in, device batches out, the next batch's copy overlapping this one's compute.

Double buffering: while batch ``k`` is handed out, batch ``k + 1`` is already gathered into one of two
host staging arrays and copied to the device with :meth:`Device.prefetch` (a non-blocking write on the
device's second queue, after what the compute queue had queued); the compute queue waits for the copy
(:meth:`Device.wait_for`) before batch ``k + 1``'s first kernel. The host never blocks on a transfer
unless a staging array is still in flight.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyopencl as cl

from .device import Device
from .device import device as _device
from .ops import random
from .ops.creation import empty
from .tensor import Tensor
from .validation import require_int

__all__ = ["DataLoader"]


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

    def gather(self, idx: np.ndarray, slot: int) -> np.ndarray:
        """The samples ``idx`` in staging array ``slot``, once no earlier copy still reads it."""
        if self.events[slot] is not None:
            self.events[slot].wait()
            self.events[slot] = None
        host = self.stage[slot][: len(idx)]
        np.take(self.data, idx, axis=0, out=host)
        return host

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
        shard: ``(rank, world_size)`` to yield only this rank's share of each epoch, for data-parallel
            training: every rank computes the same epoch order (a seed is needed with shuffle: ``seed=None``
            means 0 here), pads it by repeating its first samples to a multiple of ``world_size`` (or, with
            ``drop_last``, cuts it to one) and takes every ``world_size``-th sample from ``rank`` on. So every
            rank takes the same number of steps, and the ranks' ``k``-th batches together are the ``k``-th
            batch of ``batch_size * world_size`` an unsharded loader would yield.

    Yields:
        ``(xb, yb)`` tensors, or ``xb`` alone when ``y`` is None.

    Example:
        >>> for xb, yb in clnn.data.DataLoader(x, y, batch_size=64, shuffle=True, device=dev):
        ...     loss = F.cross_entropy(model(xb), yb)
    """

    def __init__(self, x: Any, y: Any = None, batch_size: int = 32, shuffle: bool = False, seed: int | None = None,
                 drop_last: bool = False, device: str | int | Device | None = None,
                 shard: tuple[int, int] | None = None) -> None:
        require_int("DataLoader: batch_size", batch_size, 1)
        if shard is not None:
            if not isinstance(shard, tuple) or len(shard) != 2:
                raise TypeError(f"DataLoader: shard expects a pair (rank, world_size); got {shard!r}")
            require_int("DataLoader: shard world_size", shard[1], 1)
            require_int("DataLoader: shard rank", shard[0], 0)
            if shard[0] >= shard[1]:
                raise ValueError(f"DataLoader: shard expects rank < world_size; got {shard}")
            seed = 0 if seed is None else seed
        self.x = _as_array("x", x)
        self.y = None if y is None else _as_array("y", y)
        if self.y is not None and len(self.y) != len(self.x):
            raise ValueError(f"DataLoader: x and y expect the same number of samples; got {len(self.x)} and "
                             f"{len(self.y)}")
        self.batch_size, self.shuffle, self.drop_last = int(batch_size), bool(shuffle), bool(drop_last)
        self.device = _device(device)
        self.seed, self.epoch = seed, 0
        self.shard = shard

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter`` epoch ``epoch`` (its order, with a seed), e.g. to resume training."""
        self.epoch = int(epoch)

    def _order(self) -> np.ndarray:
        n = len(self.x)
        if not self.shuffle:
            order = np.arange(n)
        else:
            key = (int(self.seed) & (2**64 - 1), self.epoch) if self.seed is not None else random.advance()
            self.epoch += 1
            order = np.random.default_rng(key).permutation(n)
        if self.shard is None:
            return order
        rank, world = self.shard
        total = n // world * world if self.drop_last else -(-n // world) * world
        return np.resize(order, total)[rank::world]  # resize repeats the order from its start

    def _samples(self) -> int:
        n = len(self.x)
        if self.shard is None:
            return n
        world = self.shard[1]
        return n // world if self.drop_last else -(-n // world)

    def __len__(self) -> int:
        n = self._samples()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        bs, dev = self.batch_size, self.device
        order = self._order()
        n = len(order)
        starts = range(0, n - bs + 1 if self.drop_last else n, bs)
        batches = [order[s:s + bs] for s in starts]
        if not batches:
            return
        streams = [_Stream(a, bs) for a in (self.x, self.y) if a is not None]

        def upload(k: int) -> tuple[list[Tensor], list[cl.Event]]:
            slot = k % 2
            hosts = [s.gather(batches[k], slot) for s in streams]
            outs = [empty(*h.shape, dtype=h.dtype, device=dev) for h in hosts]
            copies = [(s, out, h) for s, out, h in zip(streams, outs, hosts) if h.size]
            events = dev.prefetch([(out.data, h) for _, out, h in copies])
            for (s, _, _), ev in zip(copies, events):
                s.events[slot] = ev
            return outs, events

        try:
            pending = upload(0)
            for k in range(len(batches)):
                current, events = pending
                if k + 1 < len(batches):
                    pending = upload(k + 1)
                dev.wait_for(events)
                yield current[0] if len(current) == 1 else tuple(current)
        finally:
            for s in streams:  # never free a batch's memory while a copy into it is in flight
                s.wait()
