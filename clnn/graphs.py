"""Captured steps: a step's device work recorded once and replayed without its Python (CUDA graphs' model).

A small model's step on a GPU waits for the host: clnn spends tens of microseconds of Python on each launch
(validation, planning, autograd), its kernels a few. Inside ``with clnn.graph(g):`` ops run their Python as
usual, but what they enqueue (kernels, fills, device copies) is recorded in ``g`` instead of run;
``g.replay()`` then enqueues that work again, a few microseconds a launch, as ``torch.cuda.graph`` does:

    static_x, static_y = clnn.tensor(x0), clnn.tensor(y0)
    g = clnn.Graph()
    with clnn.graph(g):
        loss = loss_fn(model(static_x), static_y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for x, y in batches:
        static_x.copy_(x)   # new data goes into the tensors the step was captured with
        static_y.copy_(y)
        g.replay()          # loss, the gradients and the parameters now hold this step's values

Tensors made while capturing take memory from the graph's own pool: they keep their places from replay to
replay (reuse among them follows the captured order), and nothing made outside the graph can take it.
What a step reads of the host is fixed at capture (shapes, scalar arguments), with exceptions that replays
evaluate afresh: random draws (dropout and the random fills take the next key of the global generator at every
replay), the optimizers' updates (their Python runs at each replay: step counts, bias corrections and a
scheduler's learning rate stay current), a GradScaler's scale, inf checks, skipped steps and updates, batch
norm's count of batches, and the range checks of device indices
and targets (read back at their place in each replay, raising as the eager op would: a wait for the device).
Reading the device (``numpy``, ``item``), uploading host data and synchronizing are refused while capturing
(:class:`GraphError`): a captured step cannot wait for its own results.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.tools as cl_tools

from . import profiler
from .device import RECORDED, Device, default_device
from .device import device as find_device

__all__ = ["Graph", "GraphError", "graph"]

_capturing: Graph | None = None  # the graph being captured (one at a time per process)


class GraphError(RuntimeError):
    """A step did something a captured graph cannot replay, or a graph was used out of turn."""


class Graph:
    """A recorded step of device work: capture it with :func:`graph`, run it again with :meth:`replay`."""

    def __init__(self) -> None:
        self.device: Device | None = None
        self._work: list[tuple] = []
        self._pool: cl_tools.MemoryPool | None = None
        self._own: dict[int, cl.Buffer] = {}  # pointer -> a reference of our own to a buffer of the graph's pool

    @property
    def launches(self) -> int:
        """The kernels a replay enqueues directly (not counting those of the optimizers' updates)."""
        return sum(w[0] == RECORDED.kernel for w in self._work)

    def replay(self) -> None:
        """Enqueue the captured work on the device's queue. It does not wait for it, but where the step checks
        device indices or targets: there it reads the check back and raises as the eager op would, before the
        work that would read out of bounds is enqueued."""
        if _capturing is not None:
            raise GraphError("Graph.replay: a graph is being captured; replay it after its `with clnn.graph` block")
        if self.device is None:
            raise GraphError("Graph.replay: nothing captured yet; capture a step in `with clnn.graph(g):` first")
        prof = profiler._active
        self.device._replay(self._work, None if prof is None else prof._launched)

    # ---- recording (called by Device's methods and the ops while this graph is captured) ----------------------
    def _buffer(self, obj: Any) -> Any:
        """What a recorded command keeps of the argument ``obj``: for a buffer of the graph's pool, a reference
        of our own to its memory (the tensor may die and its block serve another of the step's tensors, as in
        the captured order); any other buffer itself, so that its memory is never handed to another tensor."""
        if isinstance(obj, cl.MemoryObjectHolder):
            return self._own.get(obj.int_ptr, obj)
        return obj

    def _allocated(self, buf: cl.MemoryObjectHolder) -> None:
        if buf.int_ptr not in self._own:
            self._own[buf.int_ptr] = cl.Buffer.from_int_ptr(buf.int_ptr, retain=True)

    def _kernel(self, k: cl.Kernel, size: tuple[int, ...], local: tuple[int, ...] | None, args: tuple,
                offset: tuple[int, ...] | None) -> None:
        self._work.append((RECORDED.kernel, k, size, local, tuple([self._buffer(a) for a in args]), offset))

    def _fill(self, buf: cl.MemoryObjectHolder, pattern: np.ndarray, nbytes: int) -> None:
        self._work.append((RECORDED.fill, self._buffer(buf), pattern.copy(), nbytes))

    def _copy(self, dst: cl.MemoryObjectHolder, src: cl.MemoryObjectHolder, nbytes: int, dst_offset: int,
              src_offset: int) -> None:
        self._work.append((RECORDED.copy, self._buffer(dst), self._buffer(src), nbytes, dst_offset, src_offset))

    def _copy_rect(self, dst: cl.MemoryObjectHolder, src: cl.MemoryObjectHolder, region: tuple[int, int, int],
                   dst_origin: tuple[int, int, int], src_origin: tuple[int, int, int], dst_pitches: tuple[int, int],
                   src_pitches: tuple[int, int]) -> None:
        self._work.append((RECORDED.rect, self._buffer(dst), self._buffer(src), region, dst_origin, src_origin,
                           dst_pitches, src_pitches))

    def _refuse(self, what: str) -> None:
        raise GraphError(f"clnn.graph: {what} while a graph is captured; a captured step only enqueues device "
                         "work. Make host data a device tensor before capturing (and copy new values into it "
                         "before each replay), and read results after replay()")


@contextlib.contextmanager
def graph(g: Graph, device: str | int | Device | None = None) -> Iterator[Graph]:
    """``with clnn.graph(g):`` records into ``g`` the work that the block's ops enqueue on ``device`` (default:
    the default device) instead of running it; ``g.replay()`` runs it. A graph is captured once. What other
    threads enqueue on ``device`` meanwhile is recorded too; work on other devices runs at once.

    Raises:
        GraphError: ``g`` was captured already, another capture or a profile is active, or the block did
            what a graph cannot replay (then ``g`` stays empty).
    """
    global _capturing
    if not isinstance(g, Graph):
        raise TypeError(f"clnn.graph: g expects a clnn.Graph; got {type(g).__name__}")
    if g.device is not None:
        raise GraphError(f"clnn.graph: this graph was captured already (on {g.device}); make a new clnn.Graph()")
    if _capturing is not None:
        raise GraphError("clnn.graph: another graph is being captured; captures do not nest")
    if profiler._active is not None:
        raise GraphError("clnn.graph: a profile is active; profile the replays instead of the capture")
    dev = default_device() if device is None else find_device(device)
    g._pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(dev.queue))
    _capturing = g
    try:
        with dev._recording(g, g._pool):
            yield g
        g.device = dev
    except BaseException:
        g._work, g._own = [], {}
        raise
    finally:
        _capturing = None


def capturing(dev: Device | None = None) -> Graph | None:
    """The graph being captured (on ``dev`` when given: None if the capture records another device)."""
    g = _capturing
    return g if g is not None and (dev is None or dev._graph is g) else None


def each_replay(dev: Device | None, fn: Callable[[], None]) -> None:
    """Run ``fn`` now, or where a graph is being captured on ``dev`` (None: on any device), at its place in every
    replay: host work a step must redo each time (an optimizer's update, a random draw, a counter, a check of
    device values that may raise)."""
    g = capturing(dev)
    if g is None:
        fn()
    else:
        g._work.append((RECORDED.python, fn))
