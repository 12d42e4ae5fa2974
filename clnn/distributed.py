"""``clnn.distributed``: collectives across processes over MPI (mpi4py with MPICH: ``pip install 'clnn[mpi]'``).

Launch the same program on every rank (``mpiexec -n 2 python train.py``, ``srun python train.py``) and call
:func:`init` once. Collectives take a tensor or a list of tensors (a *bucket*): a bucket's tensors of one
dtype travel as one MPI message through a host staging array that is kept and reused between calls.
Results are written back into the tensors' own device memory, as PyTorch's collectives do.

After :func:`init`, an exception nobody catches on one rank aborts every rank (``MPI_Abort``) after printing
its traceback, so the others exit with that error instead of waiting forever in their next collective.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import numpy as np

from .ops.creation import empty
from .tensor import Tensor
from .validation import require_choice, require_int, require_tensor

__all__ = ["init", "is_initialized", "rank", "world_size", "all_reduce", "broadcast", "all_gather", "barrier"]

_state: dict[str, Any] = {"comm": None, "MPI": None}
_staging: dict[np.dtype, np.ndarray] = {}  # dtype -> host array, grown as needed, reused by every collective
_OPS = ("sum", "mean", "max")


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


def _by_dtype(items: list[Tensor]) -> dict[np.dtype, list[Tensor]]:
    groups: dict[np.dtype, list[Tensor]] = {}
    for t in items:
        groups.setdefault(t.dtype, []).append(t)
    return groups


def staging(dtype: np.dtype, n: int) -> np.ndarray:
    """A host array of ``n`` elements of ``dtype``, reused between calls (the contents are not kept)."""
    buf = _staging.get(dtype)
    if buf is None or buf.size < n:
        buf = _staging[dtype] = np.empty(max(n, 1), dtype)
    return buf[:n]


def pack(group: Sequence[Tensor], host: np.ndarray) -> None:
    """Copy each tensor of ``group`` into consecutive slices of ``host``."""
    at = 0
    for t in group:
        t.device.download(t.data, host[at:at + t.size])
        at += t.size


def unpack(host: np.ndarray, group: Sequence[Tensor]) -> None:
    """Copy consecutive slices of ``host`` back into each tensor of ``group`` (in place)."""
    at = 0
    for t in group:
        t.device.upload(t.data, host[at:at + t.size])
        at += t.size


def all_reduce(tensors: Tensor | Sequence[Tensor], op: str = "sum") -> None:
    """Replace each tensor by the elementwise ``"sum"``, ``"mean"`` or ``"max"`` of it over all ranks (in place).

    A list is reduced as one message per dtype. ``"mean"`` needs floating tensors.

    Example:
        >>> dist.all_reduce(grad, op="mean")
    """
    require_choice("all_reduce: op", op, _OPS)
    items = _bucket("all_reduce", tensors)
    if op == "mean" and any(t.dtype.kind != "f" for t in items):
        raise TypeError(f"all_reduce: op='mean' expects floating tensors; got {[t.dtype.name for t in items]}")
    comm, mpi = _comm(), _state["MPI"]
    for dtype, group in _by_dtype(items).items():
        host = staging(dtype, sum(t.size for t in group))
        pack(group, host)
        comm.Allreduce(mpi.IN_PLACE, host, op=mpi.MAX if op == "max" else mpi.SUM)
        if op == "mean":
            np.divide(host, comm.Get_size(), out=host)
        unpack(host, group)


def allreduce_host(values: np.ndarray) -> np.ndarray:
    """The element-wise sum of a small host array over every rank (a collective: every rank calls it)."""
    return _comm().allreduce(values)


def broadcast(tensors: Tensor | Sequence[Tensor], src: int = 0) -> None:
    """Overwrite each tensor with rank ``src``'s (in place); a list travels as one message per dtype."""
    comm = _comm()
    require_int("broadcast: src", src, 0)
    if src >= comm.Get_size():
        raise ValueError(f"broadcast: src expects a rank below the world size {comm.Get_size()}; got {src}")
    for dtype, group in _by_dtype(_bucket("broadcast", tensors)).items():
        host = staging(dtype, sum(t.size for t in group))
        if comm.Get_rank() == src:
            pack(group, host)
        comm.Bcast(host, root=src)
        if comm.Get_rank() != src:
            unpack(host, group)


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
    world, n = comm.Get_size(), tensor.size
    host = staging(tensor.dtype, n * (world + 1))
    mine, gathered = host[:n], host[n:]
    pack([tensor], mine)
    comm.Allgather(mine, gathered)
    outs = [empty(*tensor.shape, dtype=tensor.dtype, device=tensor.device) for _ in range(world)]
    unpack(gathered, outs)
    return outs
