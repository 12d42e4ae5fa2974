"""Multi-tensor launches (torch's ``_foreach_`` ops): one kernel over up to ``MT`` tensors at a time.

``optim.cl``'s ``optim_multi``, ``scale_multi``, ``check_multi`` and ``norm_multi`` take a group of same-dtype
tensors as ``MT`` buffer arguments per role, their sizes and the running totals of their blocks (a work-group's
worth of elements) as ``int8``s; each work-group finds its tensor and block from those. An optimizer
step, GradScaler's unscale and ``clip_grad_norm_`` then cost a launch per ``MT`` tensors instead of one (or
four) per tensor: on GPUs, where each launch costs the host tens of microseconds, that is most of a small
model's step. CPUs, whose compilers vectorize only the one-tensor kernel, take a big tensor per launch
(:func:`per_launch`, tuning's ``foreach`` row) and share launches among small ones (its SMALL), whose time is the
launch's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import pyopencl as cl
import pyopencl.cltypes as cltypes

from .. import kernels, tuning
from ..device import Device
from ..tensor import Tensor
from ._core import empty

T = TypeVar("T")
MT = kernels.op_codes("optim.cl", "MT_")["slots"]  # tensor arguments per role: the most a launch takes


def per_launch(dev: Device) -> int:
    """How many tensors ``dev``'s multi-tensor launches take (tuning's ``foreach`` row; at most ``MT``)."""
    return tuning.memoized(dev, ("foreach", id(dev)), lambda: min(MT, int(tuning.params(dev, "foreach")["TENSORS"])))


def _small(dev: Device) -> int:
    """The most elements a tensor may have to share a launch on a device of one tensor per launch (tuning's
    ``foreach`` SMALL)."""
    return tuning.memoized(dev, ("foreach small", id(dev)), lambda: int(tuning.params(dev, "foreach")["SMALL"]))


def one_tensor(dev: Device, tensors: int) -> bool:
    """Whether a launch of ``tensors`` tensors on ``dev`` takes the one-tensor kernel (MT_TENSORS 1: one tensor on a
    device of one tensor per launch), not ``MT`` slots."""
    return tensors == 1 == per_launch(dev)


def kernel(dev: Device, name: str, dtype: np.dtype, tensors: int, **extra: object) -> cl.Kernel:
    """``optim.cl``'s multi-tensor kernel ``name`` for ``dtype``, built for a launch of ``tensors`` tensors
    (:func:`one_tensor`)."""
    single = one_tensor(dev, tensors)
    key = ("foreach kernel", id(dev), name, np.dtype(dtype), single, *extra.items())
    return tuning.memoized(dev, key, lambda: kernels.kernel(
        dev, "optim.cl", name, kernels.defines(dtype, MT_TENSORS=1 if single else MT,
                                               MT_WHOLE_GROUPS=int(single and static(dev)), **extra)))


def static(dev: Device) -> bool:
    """Whether ``dev``'s one-tensor launches build their op in (tuning's ``foreach`` STATIC)."""
    return tuning.memoized(dev, ("foreach static", id(dev)),
                           lambda: per_launch(dev) == 1 and bool(tuning.params(dev, "foreach")["STATIC"]))


def groups(items: Sequence[T], key: Callable[[T], tuple[Device, Any]],
           elements: Callable[[T], int]) -> Iterator[tuple[Device, Any, list[T]]]:
    """``items`` in runs that agree on ``key(item)``, a (device, rest) pair: (device, rest, run) in order of first
    appearance of each key and size class: at most :func:`per_launch` items a run, or ``MT`` small ones (of at
    most tuning's ``foreach`` SMALL ``elements(item)``)."""
    by_key: dict[tuple[Device, Any, bool], list[T]] = {}
    for item in items:
        dev, rest = key(item)
        by_key.setdefault((dev, rest, elements(item) <= _small(dev)), []).append(item)
    for (dev, rest, small), run in by_key.items():
        size = MT if small else per_launch(dev)
        for i in range(0, len(run), size):
            yield dev, rest, run[i : i + size]


def _size(t: Tensor) -> int:
    return t.size


def sizes(tensors: Sequence[Tensor], wg: int, per_item: int = 1) -> tuple[np.generic, np.generic, int]:
    """The ``int8``s of ``tensors``' sizes and of their blocks' running totals (unused slots: 0 and the total)
    for work-groups of ``wg`` work-items taking ``per_item`` elements each, and the number of blocks."""
    counts = [t.size for t in tensors]
    blocks = list(itertools.accumulate(-(-c // (wg * per_item)) for c in counts))
    spare = MT - len(tensors)
    n = kernels.cl_vector(cltypes.int8, *counts, *[0] * spare)
    return n, kernels.cl_vector(cltypes.int8, *blocks, *[blocks[-1]] * spare), blocks[-1]


def launch(dev: Device, k: cl.Kernel, roles: Sequence[Sequence[Tensor]], *args: object, before: Sequence[object] = (),
           counted: tuple[np.generic, np.generic, int] | None = None) -> int:
    """Launch ``k(*before, sizes, ends, *buffers, *args)`` over the tensors of ``roles[0]`` (a run of
    :func:`groups`), ``buffers`` each role's tensors in the kernel's slots (unused ones repeating the role's
    first); ``counted``: ``sizes(roles[0], group_size(dev))`` when the caller has it. Returns the work-groups."""
    wg, width = kernels.group_size(dev), 1 if one_tensor(dev, len(roles[0])) else MT
    n, ends, blocks = counted or sizes(roles[0], wg)
    buffers = [b for role in roles for b in [t.data for t in role] + [role[0].data] * (width - len(role))]
    kernels.launch(dev, k, (blocks * wg,), (wg,), *before, n, ends, *buffers, *args)
    return blocks


def scale_(tensors: Sequence[Tensor], factor: float, coef: Tensor | None = None,
           found: Tensor | None = None) -> None:
    """Multiply every tensor of ``tensors`` (contiguous, none sharing memory) in place by ``factor`` (and by the
    0-d device scalar ``coef`` when given); with ``found`` (an int32 tensor of one element), set it to 1 when an
    element was inf or NaN before the multiply."""
    coefs = {}  # coef in each tensor's `real` type, as the kernel reads it
    for dev, dtype, run in groups(tensors, lambda t: (t.device, t.dtype), _size):
        spare = run[0].data  # stands for the coefficient or the flag where there is none: never read
        if coef is not None and (real := kernels.real_dtype(dtype)) not in coefs:
            coefs[real] = coef if coef.dtype == real else coef.astype(real)
        launch(dev, kernel(dev, "scale_multi", dtype, len(run)), [run], kernels.real_scalar(dtype, factor),
               np.int32(coef is not None), spare if coef is None else coefs[kernels.real_dtype(dtype)].data,
               np.int32(found is not None), spare if found is None else found.data)


def _read_width(dev: Device) -> int:
    """The elements a work-item of ``dev``'s read-only passes (``check_multi``, ``norm_multi``) takes (tuning's
    ``foreach`` READ_VW)."""
    return tuning.memoized(dev, ("foreach read", id(dev)), lambda: int(tuning.params(dev, "foreach")["READ_VW"]))


def check_finite(tensors: Sequence[Tensor], found: Tensor) -> None:
    """Set ``found`` (an int32 tensor of one element) to 1 when an element of ``tensors`` (contiguous) is inf or NaN,
    reading them only."""
    for dev, dtype, run in groups(tensors, lambda t: (t.device, t.dtype), _size):
        vw = _read_width(dev)
        launch(dev, kernel(dev, "check_multi", dtype, len(run), READ_VW=vw), [run], found.data,
               counted=sizes(run, kernels.group_size(dev), vw))


def norm_partials(tensors: Sequence[Tensor], power: float) -> list[Tensor]:
    """Per (device, dtype) of ``tensors``, the partial sums of ``|x| ** power`` (``power`` math.inf: partial
    maxima of ``|x|``) over those tensors, in a 1-D tensor of their ``real`` type for the caller to sum (or max)."""
    runs: dict[tuple[Device, np.dtype], list[list[Tensor]]] = {}
    for dev, dtype, run in groups(tensors, lambda t: (t.device, t.dtype), _size):
        runs.setdefault((dev, dtype), []).append(run)
    out = []
    for (dev, dtype), these in runs.items():
        wg, vw = kernels.group_size(dev), _read_width(dev)
        counted = [sizes(run, wg, vw) for run in these]
        partials = empty((sum(c[2] for c in counted),), kernels.real_dtype(dtype), dev)
        code = kernels.real_scalar(dtype, 0.0 if power == math.inf else power)
        base = 0
        for run, c in zip(these, counted):
            k = kernel(dev, "norm_multi", dtype, len(run), MT_WG=wg, READ_VW=vw)
            base += launch(dev, k, [run], code, partials.data, np.int32(base), counted=c)
        out.append(partials)
    return out
