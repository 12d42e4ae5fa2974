"""``clnn.distributed``: collectives across processes over MPI (mpi4py with MPICH: ``pip install 'clnn[mpi]'``).

Launch the same program on every rank (``mpiexec -n 2 python train.py``, ``srun python train.py``) and call
:func:`init` once. Collectives take a tensor or a list of tensors (a *bucket*): a bucket's tensors of one
device and dtype travel as one MPI message, through a mapping of their device memory (:func:`on_host`).
Results are written back into the tensors' own device memory, as PyTorch's collectives do.

After :func:`init`, an exception nobody catches on one rank aborts every rank (``MPI_Abort``) after printing
its traceback, so the others exit with that error instead of waiting forever in their next collective.
"""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

import numpy as np
import pyopencl as cl

from .device import Device
from .ops.creation import empty
from .tensor import FLOAT_DTYPES, Tensor
from .validation import require_choice, require_int, require_tensor

__all__ = ["init", "is_initialized", "rank", "world_size", "all_reduce", "broadcast", "all_gather", "barrier"]

_state: dict[str, Any] = {"comm": None, "MPI": None}
_staging: dict[int, tuple[Device, cl.Buffer]] = {}  # id(device) -> it and its host-visible buffer, grown, reused
_gathered: dict[str, np.ndarray] = {}  # "host" -> the host bytes a gathered group's message uses, reused
_OPS = ("sum", "mean", "max")
# seconds between a failing rank's traceback and MPI_Abort: the launcher forwards a rank's stderr through its
# proxy, and an abort that kills the proxy first loses the message (seen once under load: empty stderr)
ABORT_GRACE_S = 1.0


def _mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise ModuleNotFoundError(
            "clnn.distributed needs mpi4py and an MPI library: `pip install 'clnn[mpi]'` (mpi4py and the mpich "
            f"wheel, which brings mpiexec), then launch with `mpiexec -n 2 python script.py` ({err})",
            name="mpi4py",
        ) from None
    return MPI


def init() -> None:
    """Join the MPI job (idempotent): rank and world size come from the launcher (``mpiexec``, ``srun``).

    Run without a launcher, the process is a job of one. Also installs the abort-on-error hook.

    Raises:
        ModuleNotFoundError: mpi4py is not installed (the message says how to install it).
    """
    if _state["comm"] is None:
        mpi = _mpi()
        _state["MPI"], _state["comm"] = mpi, mpi.COMM_WORLD
        if mpi.COMM_WORLD.Get_size() > 1:
            sys.excepthook = _abort_all


def _abort_all(kind: type[BaseException], err: BaseException, tb: TracebackType | None) -> None:
    """An uncaught exception on one rank: print it, then end every rank of the job."""
    comm = _state["comm"]
    print(f"clnn.distributed: rank {comm.Get_rank()} of {comm.Get_size()} raised {kind.__name__}; aborting every "
          "rank of the job", file=sys.stderr)
    traceback.print_exception(kind, err, tb, file=sys.stderr)
    sys.stderr.flush()
    time.sleep(ABORT_GRACE_S)
    comm.Abort(1)


def is_initialized() -> bool:
    """Whether :func:`init` has run in this process."""
    return _state["comm"] is not None


def _comm() -> Any:
    if _state["comm"] is None:
        raise RuntimeError("clnn.distributed: call clnn.distributed.init() first")
    return _state["comm"]


def rank() -> int:
    """This process's rank, 0 to ``world_size() - 1``."""
    return int(_comm().Get_rank())


def world_size() -> int:
    """The number of processes in the job."""
    return int(_comm().Get_size())


def barrier() -> None:
    """Wait until every rank has called ``barrier``."""
    _comm().Barrier()


def _bucket(op: str, tensors: Tensor | Sequence[Tensor]) -> list[Tensor]:
    items = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    if not items:
        raise ValueError(f"{op}: tensors expects a tensor or a non-empty list of tensors; got an empty list")
    for i, t in enumerate(items):
        require_tensor(f"{op}: tensors[{i}]", t)
    return items


def _groups(items: list[Tensor]) -> list[list[Tensor]]:
    """``items`` grouped by (device, dtype), each group in the given order: one message per group."""
    groups: dict[tuple[int, np.dtype], list[Tensor]] = {}
    for t in items:
        groups.setdefault((id(t.device), t.dtype), []).append(t)
    return list(groups.values())


def _span(group: Sequence[Tensor]) -> tuple[Any, int, int, list[tuple[int, int]] | None] | None:
    """``(buffer, byte offset, elements, pieces)`` when ``group`` lies in one buffer: a lone tensor, or sub-buffers
    of one parent that do not overlap, in any order. ``pieces`` is ``None`` when they fill the span back to back
    in the group's order (the mapping is the message); else each tensor's ``(start, stop)`` in the span's elements.
    """
    if len(group) == 1:
        return group[0].data, 0, group[0].size, None
    info, itemsize = cl.mem_info, group[0].dtype.itemsize
    parent = group[0].data.get_info(info.ASSOCIATED_MEMOBJECT)
    if parent is None:
        return None
    offsets = []
    for t in group:
        sub = t.data.get_info(info.ASSOCIATED_MEMOBJECT)
        offset = t.data.get_info(info.OFFSET)
        if sub is None or sub.int_ptr != parent.int_ptr or offset % itemsize:
            return None
        offsets.append(offset)
    start = min(offsets)
    pieces = [((at - start) // itemsize, (at - start) // itemsize + t.size) for at, t in zip(offsets, group)]
    ordered = sorted(pieces)
    if any(a[1] > b[0] for a, b in zip(ordered, ordered[1:])):
        return None
    tiled = all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    return parent, start, ordered[-1][1], None if tiled else pieces


def _host_array(dtype: np.dtype, n: int) -> np.ndarray:
    """``n`` elements of a reused host array (grown as needed): the message of a gathered group."""
    held = _gathered.get("host")
    if held is None or held.nbytes < n * dtype.itemsize:
        held = _gathered["host"] = np.empty(n * dtype.itemsize, np.uint8)
    return held[: n * dtype.itemsize].view(dtype)


@contextlib.contextmanager
def on_host(group: Sequence[Tensor], load: bool = True, store: bool = True) -> Iterator[np.ndarray]:
    """The contents of ``group`` (one device, one dtype) as one host array, in order; with ``store``, what the
    block leaves in it becomes the tensors' contents.

    A group inside one buffer (:func:`_span`: a lone tensor, or views of one buffer in any order) maps that
    buffer once: no copy on CPU devices, one transfer each way on GPUs. When the views fill it back to back
    in the group's order, the mapping is the array; otherwise NumPy gathers them from the mapping into a reused
    host array (and scatters them back). Tensors of several buffers are first gathered on the device into a
    reused host-visible staging buffer (and scattered back after), so the host sees one mapping, never one copy
    per tensor.
    """
    dev, dtype = group[0].device, group[0].dtype
    span = _span(group)
    if span is not None:
        buf, offset, n, pieces = span
        mapped = dev.map(buf, dtype, n, offset)
        try:
            if pieces is None:
                yield mapped
            else:
                moves, at = [], 0  # (the tensor's slice of the mapping, its slice of the message)
                for a, b in pieces:
                    moves.append((slice(a, b), slice(at, at + b - a)))
                    at += b - a
                host = _host_array(dtype, at)
                if load:
                    for there, here in moves:
                        host[here] = mapped[there]
                yield host
                if store:
                    for there, here in moves:
                        mapped[there] = host[here]
        finally:
            dev.unmap(mapped)
        return
    total = sum(t.nbytes for t in group)
    owner, buf = _staging.get(id(dev), (None, None))
    if owner is not dev or buf.size < total:  # another Device may have had this id: its buffer is not dev's
        buf = dev.host_buffer(total)
        _staging[id(dev)] = (dev, buf)
    if load:
        at = 0
        for t in group:
            dev.copy(buf, t.data, t.nbytes, dst_offset=at)
            at += t.nbytes
    host = dev.map(buf, dtype, total // dtype.itemsize)
    try:
        yield host
    finally:
        dev.unmap(host)
    if store:
        at = 0
        for t in group:
            dev.copy(t.data, buf, t.nbytes, src_offset=at)
            at += t.nbytes


def all_reduce(tensors: Tensor | Sequence[Tensor], op: str = "sum") -> None:
    """Replace each tensor by the elementwise ``"sum"``, ``"mean"`` or ``"max"`` of it over all ranks (in place).

    A list is reduced as one message per device and dtype. ``"mean"`` needs floating tensors.

    Example:
        >>> dist.all_reduce(grad, op="mean")
    """
    require_choice("all_reduce: op", op, _OPS)
    items = _bucket("all_reduce", tensors)
    if op == "mean" and any(t.dtype not in FLOAT_DTYPES for t in items):
        raise TypeError(f"all_reduce: op='mean' expects floating tensors; got {[t.dtype.name for t in items]}")
    comm, mpi = _comm(), _state["MPI"]
    for group in _groups(items):
        with on_host(group) as host:
            comm.Allreduce(mpi.IN_PLACE, host, op=mpi.MAX if op == "max" else mpi.SUM)
            if op == "mean":
                np.divide(host, comm.Get_size(), out=host)


def allreduce_host(values: np.ndarray) -> np.ndarray:
    """The element-wise sum of a small host array over every rank (a collective: every rank calls it)."""
    return _comm().allreduce(values)


def broadcast(tensors: Tensor | Sequence[Tensor], src: int = 0) -> None:
    """Overwrite each tensor with rank ``src``'s (in place); a list travels as one message per dtype."""
    comm = _comm()
    require_int("broadcast: src", src, 0)
    if src >= comm.Get_size():
        raise ValueError(f"broadcast: src expects a rank below the world size {comm.Get_size()}; got {src}")
    source = comm.Get_rank() == src
    for group in _groups(_bucket("broadcast", tensors)):
        with on_host(group, load=source, store=not source) as host:
            comm.Bcast(host, root=src)


def all_gather(tensor: Tensor) -> list[Tensor]:
    """Every rank's ``tensor``, in rank order, as new tensors on ``tensor``'s device.

    Raises:
        ValueError: the ranks' tensors differ in shape or dtype (every rank raises).
    """
    require_tensor("all_gather: tensor", tensor)
    comm = _comm()
    metas = comm.allgather((tensor.shape, tensor.dtype.str))
    if any(m != metas[0] for m in metas):
        raise ValueError(f"all_gather: tensor expects the same shape and dtype on every rank; got "
                         f"{[(s, np.dtype(d).name) for s, d in metas]} on ranks 0..{len(metas) - 1}")
    world = comm.Get_size()
    gathered = np.empty((world, tensor.size), tensor.dtype)
    with on_host([tensor], store=False) as mine:
        comm.Allgather(mine, gathered)
    outs = [empty(*tensor.shape, dtype=tensor.dtype, device=tensor.device) for _ in range(world)]
    for out, host in zip(outs, gathered):
        out.device.upload(out.data, host)
    return outs
