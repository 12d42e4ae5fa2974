"""``DistributedDataParallel``: one model replica per MPI rank, gradients averaged after each backward.

Construction checks that every rank built the same parameters (names, shapes, dtypes) and copies rank 0's
parameters and buffers to the others. Gradients are grouped into buckets of at most ``bucket_cap_mb``, in
reverse parameter order (roughly the order backward produces them). Each bucket is one host-visible device
buffer with a view per gradient. During ``backward()`` each gradient is copied into its view on the device;
as soon as a bucket is full it is mapped (no copy on CPU devices) and its sum starts as a non-blocking
``MPI_Iallreduce``, so communication overlaps the rest of the backward; as backward ends, the sums are
awaited and divided by the world size, and the views become the parameters' gradients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import distributed as dist
from ..tensor import Tensor, grad_hooks, is_grad_enabled
from .module import Module, Parameter

__all__ = ["DistributedDataParallel"]


class _Bucket:
    """Parameters whose gradients travel as one message, and the device buffer that holds them: one
    host-visible buffer with a sub-buffer view per gradient (PyTorch's ``gradient_as_bucket_view``), so the
    message is a mapping of device memory, not a copy per gradient."""

    def __init__(self, params: list[Parameter], align: int) -> None:
        self.params = params
        dev = params[0].device
        starts = [0]
        for p in params[:-1]:
            starts.append(-(-(starts[-1] + p.nbytes) // align) * align)
        self.buffer = dev.host_buffer(starts[-1] + params[-1].nbytes)
        dev.fill(self.buffer, np.zeros(1, np.uint8), self.buffer.size)  # the padding travels too
        self.views = [Tensor(self.buffer.get_sub_region(at, p.nbytes), p.shape, p.dtype, dev)
                      for at, p in zip(starts, params)]
        dtype = params[0].dtype
        self.flat = Tensor(self.buffer, (self.buffer.size // dtype.itemsize,), dtype, dev)  # the message
        self.ready = 0
        self.host: np.ndarray | None = None  # the mapped message while its all-reduce runs
        self.request: Any = None


class DistributedDataParallel(Module):
    """Train ``module`` data-parallel over the ranks of an MPI job (PyTorch's ``DistributedDataParallel``).

    Each rank feeds its own shard of every batch (``DataLoader(..., shard=(rank, world))``); after
    ``loss.backward()`` every rank holds the gradients averaged over all ranks, so identical optimizer
    steps keep the replicas identical. Buffers (BatchNorm's running statistics) follow rank 0: they are
    sent from rank 0 before each forward. Calls :func:`clnn.distributed.init` if needed.

    Args:
        module: the model, built identically on every rank.
        bucket_cap_mb: the most gradient megabytes per all-reduce message.
        broadcast_buffers: send rank 0's buffers to every rank before each forward.

    Raises:
        ValueError: the ranks' models differ (the message names the first differing parameter).

    Example:
        >>> model = nn.DistributedDataParallel(Net())
        >>> loss = F.cross_entropy(model(xb), yb); loss.backward(); opt.step()
    """

    def __init__(self, module: Module, bucket_cap_mb: float = 25.0, broadcast_buffers: bool = True) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: module expects a clnn.nn.Module; got {type(module).__name__}")
        if not isinstance(bucket_cap_mb, (int, float)) or bucket_cap_mb <= 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb expects a positive number; got {bucket_cap_mb!r}")
        dist.init()
        self.module = module
        self.broadcast_buffers = bool(broadcast_buffers)
        self.world = dist.world_size()
        self._sync = True
        named = list(module.named_parameters())
        _check_same_everywhere(named + list(module.named_buffers()))
        state = [t for _, t in named] + list(module.buffers())
        if self.world > 1 and state:
            dist.broadcast(state, src=0)
        trained = [p for _, p in reversed(named) if p.requires_grad]
        # one padding rule on every rank, so the buckets' messages have one layout
        align = max(dist._state["comm"].allgather(max((p.device.base_align for p in trained), default=1)))
        self._buckets = _buckets(trained, int(bucket_cap_mb * 2**20), align)
        self._where = {id(p): (b, i) for b in self._buckets for i, p in enumerate(b.params)}

    @property
    def buckets(self) -> list[Tensor]:
        """Each gradient bucket as one flat tensor over its host-visible buffer (alignment padding included):
        the messages a backward all-reduces, in the order it starts them."""
        return [b.flat for b in self._buckets]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.world > 1:
            buffers = list(self.module.buffers())
            if self.broadcast_buffers and buffers:
                dist.broadcast(buffers, src=0)
            if self._sync and is_grad_enabled() and self._on_grad not in grad_hooks:
                grad_hooks.append(self._on_grad)
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Inside the block, backward passes only accumulate local gradients (for gradient accumulation);
        the first backward after it averages the accumulated gradients."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    # ---- the backward hook ------------------------------------------------------------------------
    def _on_grad(self, leaf: Tensor | None) -> None:
        if leaf is None:
            self._finish()
            return
        where = self._where.get(id(leaf))
        if where is None:
            return
        bucket, i = where
        view = bucket.views[i]
        leaf.device.copy(view.data, leaf.grad.data, view.nbytes)
        bucket.ready += 1
        if bucket.ready == len(bucket.params):
            self._launch(bucket)

    def _launch(self, bucket: _Bucket) -> None:
        """Map the bucket (once its gradients' copies have run) and start its non-blocking sum."""
        mpi, flat = dist._state["MPI"], bucket.flat
        bucket.host = flat.device.map(flat.data, flat.dtype, flat.size)
        bucket.request = dist._state["comm"].Iallreduce(mpi.IN_PLACE, bucket.host, op=mpi.SUM)

    def _finish(self) -> None:
        """Backward ended: launch what unused parameters held back (their gradient counts as zero), await
        every sum, and make the averages (the bucket views) the parameters' gradients."""
        grad_hooks.remove(self._on_grad)
        if not any(b.ready for b in self._buckets):
            return  # a backward through another graph
        zero = np.zeros(1, np.uint8)
        for b in self._buckets:
            if b.request is None:
                for view, p in zip(b.views, b.params):
                    if p.grad is None:
                        view.device.fill(view.data, zero, view.nbytes)
                self._launch(b)
        dist._state["MPI"].Request.Waitall([b.request for b in self._buckets])
        for b in self._buckets:
            np.divide(b.host, self.world, out=b.host)
            b.params[0].device.unmap(b.host)
            for view, p in zip(b.views, b.params):
                p.grad = view
            b.ready, b.host, b.request = 0, None, None


def _buckets(params: list[Parameter], cap: int, align: int) -> list[_Bucket]:
    """``params`` in order, cut into buckets of one device and dtype and at most ``cap`` bytes (or one
    parameter), each gradient starting at a multiple of ``align`` bytes."""
    out: list[list[Parameter]] = []
    size = 0
    for p in params:
        if out and out[-1][0].dtype == p.dtype and out[-1][0].device is p.device and size + p.nbytes <= cap:
            out[-1].append(p)
            size += p.nbytes
        else:
            out.append([p])
            size = p.nbytes
    return [_Bucket(group, align) for group in out]


def _check_same_everywhere(named: list[tuple[str, Tensor]]) -> None:
    """Every rank's (name, shape, dtype) list against rank 0's; a ValueError on every rank if they differ."""
    mine = [(name, t.shape, t.dtype.str) for name, t in named]
    ranks = dist._state["comm"].allgather(mine)
    for r, theirs in enumerate(ranks[1:], 1):
        for i in range(max(len(theirs), len(ranks[0]))):
            a = ranks[0][i] if i < len(ranks[0]) else None
            b = theirs[i] if i < len(theirs) else None
            if a != b:
                what = lambda e: "nothing" if e is None else f"{e[0]!r} of shape {e[1]}, {np.dtype(e[2]).name}"  # noqa: E731
                raise ValueError(f"DistributedDataParallel: every rank expects the same model; parameter or buffer "
                                 f"#{i} is {what(a)} on rank 0 but {what(b)} on rank {r}")
