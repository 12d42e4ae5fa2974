"""Device manager: find, describe and pick OpenCL devices on every platform.

This is the only module that touches OpenCL platforms and queues. A :class:`Device` owns one context, one
in-order command queue, one memory pool and the lock that serializes enqueues; everything else (kernels,
tensors) hangs off a ``Device`` and moves memory or launches kernels through its methods.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.tools as cl_tools

from . import pocl_target

__all__ = [
    "Device",
    "DeviceError",
    "devices",
    "device",
    "default_device",
    "set_default_device",
    "use_device",
    "memory_stats",
    "limit_devices",
]

_TYPE_NAMES = {
    cl.device_type.GPU: "gpu",
    cl.device_type.CPU: "cpu",
    cl.device_type.ACCELERATOR: "accelerator",
}
_TYPE_RANK = {"gpu": 0, "accelerator": 1, "cpu": 2}
RECORDED = SimpleNamespace(kernel=0, fill=1, copy=2, rect=3, python=4)  # kinds of a graph's recorded commands
MAP_YIELD_S = 1e-4  # Device.map polls with sched_yield this long before it sleeps


class DeviceError(RuntimeError):
    """No OpenCL device is available, none matches the request, or a pose (``CLNN_LIMITS``) is malformed."""


@dataclass(eq=False)
class Device:
    """One OpenCL device, with the facts kernels need to size their launches.

    Attributes mirror the OpenCL device queries. :func:`limit_devices` (or ``CLNN_LIMITS``) may make the
    device pose as another: ``real`` then holds the driver's values of the attributes the pose changed.
    """

    index: int
    platform_index: int
    device_index: int
    name: str
    vendor: str
    platform_name: str
    platform_vendor: str
    platform_version: str
    type: str
    compute_units: int
    global_mem_size: int
    max_alloc_size: int
    local_mem_size: int
    max_work_group_size: int
    max_groups: int  # the most work-groups one launch may have along its 2nd and 3rd dimensions
    opencl_c_version: str
    fp16: bool
    fp64: bool
    vector_width: int  # float lanes of the device's native vectors (16 with AVX-512, 8 with AVX2)
    cl_device: cl.Device = field(repr=False)
    real: dict[str, object] = field(default_factory=dict)
    _context: cl.Context | None = field(default=None, repr=False)
    _queue: cl.CommandQueue | None = field(default=None, repr=False)
    _pool: cl_tools.MemoryPool | None = field(default=None, repr=False)
    _side_queue: cl.CommandQueue | None = field(default=None, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _graph: Any = field(default=None, repr=False)  # the clnn.Graph recording this device's work, if any
    _graphs: weakref.WeakSet = field(default_factory=weakref.WeakSet, repr=False)  # graphs with pools of their own
    revision: int = field(default=0, repr=False)  # counts changes of what kernels are sized by: see __setattr__

    def __setattr__(self, name: str, value: object) -> None:
        """Set an attribute; a change of one that kernels or plans are sized by (a pose's, or a test lowering a
        limit) bumps ``revision``, so what was derived from the old value (``tuning.memoized``, ``tuning.params``)
        is derived again: a reduction built for work-groups of 16 would overrun its local arrays at 256."""
        if name in _SIZING and name in self.__dict__ and self.__dict__[name] != value:
            self.__dict__["revision"] += 1
        object.__setattr__(self, name, value)

    @property
    def context(self) -> cl.Context:
        """The device's OpenCL context, created on first use."""
        self._open()
        return self._context

    @property
    def queue(self) -> cl.CommandQueue:
        """The device's in-order command queue, created on first use."""
        self._open()
        return self._queue

    @property
    def pool(self) -> cl_tools.MemoryPool:
        """The device's buffer pool: freed buffers are kept and reused instead of released."""
        self._open()
        return self._pool

    def _open(self) -> None:
        if self._queue is None:
            with self._lock:
                if self._queue is None:
                    ctx = cl.Context([self.cl_device])
                    self._queue = cl.CommandQueue(ctx)
                    self._side_queue = cl.CommandQueue(ctx)  # for prefetch: copies overlapping kernels
                    self._pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(self._queue))
                    self._context = ctx

    def _swap_queue(self, queue: cl.CommandQueue) -> cl.CommandQueue:
        """Finish the work queued so far, then make ops enqueue on ``queue``; returns the previous queue.

        The profiler's hook: it gives the device a profiling-enabled queue for a ``with`` block.
        """
        with self._lock:
            self.queue.finish()
            previous, self._queue = self._queue, queue
            return previous

    def supports(self, dtype: np.dtype) -> bool:
        """Whether tensors of ``dtype`` can live on this device (float16 and bfloat16 need no extension)."""
        return np.dtype(dtype) != np.float64 or self.fp64

    def synchronize(self) -> None:
        """Wait until every command queued on this device has finished."""
        if self._graph is not None:
            self._graph._refuse("synchronize() waits for the device")
        self.queue.finish()

    # ---- memory and launches: kernel objects and the queue are shared, so every enqueue holds the lock ----
    def upload(self, buf: cl.Buffer, host: np.ndarray) -> None:
        """Copy the contiguous ``host`` array into ``buf``; returns once ``host`` may be reused."""
        if self._graph is not None:
            self._graph._refuse("an upload copies host data to the device (clnn.tensor of an array, a NumPy operand)")
        if host.size:
            with self._lock:
                cl.enqueue_copy(self.queue, buf, _raw(host), is_blocking=True)

    def download(self, buf: cl.Buffer, host: np.ndarray) -> None:
        """Copy ``buf`` into the contiguous ``host`` array, after every command queued before."""
        if self._graph is not None:
            self._graph._refuse("a read of device memory (numpy(), item(), a check of device values)")
        if host.size:
            with self._lock:
                cl.enqueue_copy(self.queue, _raw(host), buf, is_blocking=True)

    def fill(self, buf: cl.Buffer, pattern: np.ndarray, nbytes: int) -> None:
        """Repeat the bytes of the scalar array ``pattern`` over the first ``nbytes`` of ``buf``."""
        if nbytes and self._graph is not None:
            self._graph._fill(buf, _raw(pattern), nbytes)
        elif nbytes:
            with self._lock:
                cl.enqueue_fill_buffer(self.queue, buf, _raw(pattern), 0, nbytes)

    def copy(self, dst: cl.Buffer, src: cl.Buffer, nbytes: int, dst_offset: int = 0, src_offset: int = 0) -> None:
        """Copy ``nbytes`` from ``src`` to ``dst`` on the device, in queue order (does not wait)."""
        if nbytes and self._graph is not None:
            self._graph._copy(dst, src, nbytes, dst_offset, src_offset)
        elif nbytes:
            with self._lock:
                cl.enqueue_copy(self.queue, dst, src, byte_count=nbytes, dst_offset=dst_offset,
                                src_offset=src_offset)

    def copy_rect(self, dst: cl.Buffer, src: cl.Buffer, region: tuple[int, int, int], dst_offset: int,
                  dst_pitches: tuple[int, int], src_offset: int, src_pitches: tuple[int, int]) -> None:
        """Copy a ``region`` of (bytes, rows, slices) from ``src`` to ``dst`` on the device, in queue order (does not
        wait): byte x of row y of slice z at ``offset + z * pitches[1] + y * pitches[0] + x`` in each buffer. The
        runtime's copy (OpenCL's rectangular buffer copy) moves rows at memory speed."""
        if self._graph is not None:
            self._graph._copy_rect(dst, src, region, (dst_offset, 0, 0), (src_offset, 0, 0), dst_pitches, src_pitches)
            return
        with self._lock:
            cl.enqueue_copy(self.queue, dst, src, region=region, src_origin=(src_offset, 0, 0),
                            dst_origin=(dst_offset, 0, 0), src_pitches=src_pitches, dst_pitches=dst_pitches)

    def host_buffer(self, nbytes: int) -> cl.Buffer:
        """A device buffer the host can map cheaply (``ALLOC_HOST_PTR``: the same memory on CPUs, pinned
        memory on GPUs), for data that crosses to the host often."""
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR
        return cl.Buffer(self.context, flags, max(int(nbytes), 1))

    @property
    def base_align(self) -> int:
        """The byte alignment a sub-buffer's origin needs (``CL_DEVICE_MEM_BASE_ADDR_ALIGN``)."""
        return max(self.cl_device.mem_base_addr_align // 8, 1)

    def map(self, buf: cl.Buffer, dtype: np.dtype, n: int, offset: int = 0) -> np.ndarray:
        """``n`` elements of ``buf`` from byte ``offset`` as a host array to read and write, once every command
        queued before has run (no copy on CPU devices). The device must not use ``buf`` until :meth:`unmap`.

        It waits by polling, not in a blocking map: CPU runtimes spin there, taking the core from the worker
        thread that runs the awaited work when both share one core (a pinned MPI rank). The first
        ``MAP_YIELD_S`` of polling yields the core between checks (a map after finished work completes in
        microseconds, below a sleep's ~60 us timer slack); then it sleeps, backing off to 0.2 ms.
        """
        if self._graph is not None:
            self._graph._refuse("a map of device memory to the host")
        with self._lock:
            host, done = cl.enqueue_map_buffer(self.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE, offset,
                                               (n,), dtype, is_blocking=False)
            self.queue.flush()
        yield_until, delay = time.perf_counter() + MAP_YIELD_S, 1e-5
        while done.command_execution_status > 0:  # queued, submitted or running; complete is 0, failed < 0
            if time.perf_counter() < yield_until:
                os.sched_yield()
            else:
                time.sleep(delay)
                delay = min(2 * delay, 2e-4)
        done.wait()  # raises if the map failed
        return host

    def unmap(self, host: np.ndarray) -> None:
        """Hand an array from :meth:`map` back to the device; commands queued afterwards see its changes."""
        with self._lock:
            host.base.release(self.queue)

    def enqueue(
        self,
        kernel: cl.Kernel,
        global_size: tuple[int, ...],
        local_size: tuple[int, ...] | None,
        args: Sequence,
        offset: tuple[int, ...] | None = None,
    ) -> cl.Event:
        """Set ``kernel``'s arguments and enqueue it over ``global_size`` from global id ``offset`` (callers
        check the geometry: ``kernels.launch``); while a graph is captured, record it there instead."""
        if self._graph is not None:
            return self._graph._kernel(kernel, global_size, local_size, args, offset)
        with self._lock:
            kernel.set_args(*args)
            return cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size, global_work_offset=offset)

    # ---- captured graphs (clnn.graphs records; the device swaps its pool and runs the record) ---------------
    @contextlib.contextmanager
    def _recording(self, graph: Any, pool: cl_tools.MemoryPool) -> Iterator[None]:
        """Inside the block, enqueues are recorded in ``graph`` and tensors take memory from ``pool``."""
        with self._lock:
            outer, self._pool, self._graph = self.pool, pool, graph
            self._graphs.add(graph)
        try:
            yield
        finally:
            with self._lock:
                self._pool, self._graph = outer, None

    def _replay(self, work: Sequence[tuple], launched: Callable[..., None] | None) -> None:
        """Enqueue ``work``, commands recorded by a graph (:data:`RECORDED` kinds), in order; ``launched(self,
        kernel, size, local, event)`` hears of each kernel (the profiler's hook)."""
        with self._lock:
            queue = self.queue
            for command in work:
                kind = command[0]
                if kind == RECORDED.kernel:
                    _, k, size, local, args, offset = command
                    k.set_args(*args)
                    event = cl.enqueue_nd_range_kernel(queue, k, size, local, global_work_offset=offset)
                    if launched is not None:
                        launched(self, k, size, local, event)
                elif kind == RECORDED.python:
                    command[1]()
                elif kind == RECORDED.fill:
                    cl.enqueue_fill_buffer(queue, command[1], command[2], 0, command[3])
                elif kind == RECORDED.copy:
                    _, dst, src, nbytes, dst_offset, src_offset = command
                    cl.enqueue_copy(queue, dst, src, byte_count=nbytes, dst_offset=dst_offset, src_offset=src_offset)
                else:
                    _, dst, src, region, dst_origin, src_origin, dst_pitches, src_pitches = command
                    cl.enqueue_copy(queue, dst, src, region=region, src_origin=src_origin, dst_origin=dst_origin,
                                    src_pitches=src_pitches, dst_pitches=dst_pitches)

    def prefetch(self, copies: Sequence[tuple[cl.Buffer, np.ndarray]]) -> list[cl.Event]:
        """Start non-blocking ``host -> buf`` copies on a second queue, each after all work queued so far.

        Waiting for what is already queued keeps a copy from overwriting pooled memory an earlier kernel
        still reads. Each host array must stay unchanged until its event completes, and the buffers'
        readers must be queued after :meth:`wait_for` on the returned events.
        """
        if self._graph is not None:
            self._graph._refuse("a prefetch copies host data to the device")
        with self._lock:
            after = cl.enqueue_marker(self.queue)
            self.queue.flush()  # the side queue waits on this marker: make sure it gets submitted
            events = [
                cl.enqueue_copy(self._side_queue, buf, _raw(host), is_blocking=False, wait_for=[after])
                for buf, host in copies
            ]
            self._side_queue.flush()
        return events

    def wait_for(self, events: Sequence[cl.Event]) -> None:
        """Make commands queued from now on wait for ``events`` (from :meth:`prefetch`)."""
        if events:
            with self._lock:
                cl.enqueue_barrier(self.queue, wait_for=list(events))

    def split(self, parts: int) -> list[Device]:
        """This device's compute units cut into ``parts`` equal sub-devices (OpenCL ``create_sub_devices``).

        Each is a :class:`Device` with its own context and queue, e.g. for :class:`clnn.nn.DataParallel`,
        or to give each MPI rank one core's worth of a CPU's worker threads (``dev.split(dev.compute_units)``).
        A sub-device does not pin those threads to a core; ``os.sched_setaffinity`` on every thread of the
        process does (``benchmarks/bench_distributed.py``).

        Raises:
            DeviceError: the driver cannot partition the device (GPUs seldom can) or has too few units.
        """
        units = self.real.get("compute_units", self.compute_units) // max(int(parts), 1)
        if not isinstance(parts, int) or parts < 1 or units < 1:
            raise DeviceError(f"split: parts expects an int from 1 to {self.compute_units} (the compute units of "
                              f"{self}); got {parts!r}")
        try:
            subs = self.cl_device.create_sub_devices([cl.device_partition_property.EQUALLY, units])[:parts]
        except (cl.Error, cl.LogicError, cl.RuntimeError) as err:
            raise DeviceError(f"split: {self} cannot be partitioned into sub-devices ({err})") from None
        platform = self.cl_device.platform
        out = []
        for i, sub in enumerate(subs):
            dev = _describe(self.index, self.platform_index, self.device_index, platform, sub)
            dev.name = f"{dev.name} [sub-device {i + 1}/{parts}]"
            _apply_pose(dev)
            out.append(dev)
        return out

    def __str__(self) -> str:
        return f"{self.name} ({self.platform_name}, {self.type}{', posing' if self.real else ''})"

    def __repr__(self) -> str:
        return f"<clnn.Device [{self.index}] {self.platform_index}:{self.device_index} {self}>"


_lock = threading.Lock()
_devices: list[Device] | None = None
_default: Device | None = None
_scoped = threading.local()
_pose: dict[str, object] | None = None  # CLNN_LIMITS key -> value; None until read from the environment

# CLNN_LIMITS key -> Device attribute. type, vendor, name and compute units only steer tuning and launch
# planning, so a pose sets them freely; kernels depend on the others, so a pose can only lower them.
_POSE_ATTRS = {"type": "type", "vendor": "vendor", "name": "name", "cu": "compute_units",
               "wg": "max_work_group_size", "local": "local_mem_size", "groups": "max_groups", "fp16": "fp16",
               "fp64": "fp64"}
_LOWER_ONLY = ("wg", "local", "groups", "fp16", "fp64")
_SIZING = frozenset((*_POSE_ATTRS.values(), "vector_width"))  # Device attributes whose change bumps its revision
CUDA_GROUPS = 65_535  # NVIDIA's OpenCL runs kernels as CUDA grids: at most this many work-groups along y and z
ANY_GROUPS = 2**31 - 1  # other runtimes: no limit short of the int indices kernels use
_POSE_EXAMPLE = "type=gpu,cu=132,wg=1024,local=49152,vendor=NVIDIA Corporation"


def _raw(host: np.ndarray) -> np.ndarray:
    """``host`` as bytes when its dtype is a NumPy extension (ml_dtypes' bfloat16) that the buffer protocol
    cannot describe; the same memory either way."""
    return host.reshape(-1).view(np.uint8) if host.dtype.isbuiltin == 2 else host


def _describe(index: int, p_index: int, d_index: int, platform: cl.Platform, d: cl.Device) -> Device:
    ext = d.extensions.split()
    # a device claiming several types (Oclgrind claims all) is "other": auto never picks a simulator
    dtype = _TYPE_NAMES.get(d.type & ~cl.device_type.DEFAULT, "other")
    return Device(
        index=index,
        platform_index=p_index,
        device_index=d_index,
        name=d.name.strip(),
        vendor=d.vendor.strip(),
        platform_name=platform.name.strip(),
        platform_vendor=platform.vendor.strip(),
        platform_version=platform.version.strip(),
        type=dtype,
        compute_units=d.max_compute_units,
        global_mem_size=d.global_mem_size,
        max_alloc_size=d.max_mem_alloc_size,
        local_mem_size=d.local_mem_size,
        max_work_group_size=d.max_work_group_size,
        max_groups=_group_limit(d.vendor),
        opencl_c_version=d.opencl_c_version.strip(),
        fp16="cl_khr_fp16" in ext,
        fp64="cl_khr_fp64" in ext or d.double_fp_config != 0,
        vector_width=max(1, d.native_vector_width_float),
        cl_device=d,
    )


def _group_limit(vendor: str) -> int:
    """The most work-groups a launch may have along y and z on a device of ``vendor`` (OpenCL has no query)."""
    return CUDA_GROUPS if "nvidia" in vendor.lower() else ANY_GROUPS


def _check_pose_item(key: str, value: object, where: str) -> object:
    """``value`` for pose ``key``, validated; a DeviceError naming ``where`` (the item or argument) otherwise."""
    if key in ("type", "vendor", "name"):
        if not isinstance(value, str) or not value.strip():
            raise DeviceError(f"{where}: {key} expects a non-empty string; got {value!r}")
        value = value.strip()
        if key == "type" and value not in _TYPE_RANK:
            raise DeviceError(f"{where}: type expects one of {sorted(_TYPE_RANK)}; got {value!r}")
        return value
    if key in ("fp16", "fp64"):
        if value not in (0, 1) or not isinstance(value, (bool, int)):
            raise DeviceError(f"{where}: {key} expects 0 or 1 (it can switch the extension off, not on); got {value!r}")
        return bool(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise DeviceError(f"{where}: {key} expects a positive integer; got {value!r}")
    return value


def _pose_from_env() -> dict[str, object]:
    """The pose in ``CLNN_LIMITS``: comma-separated ``key=value`` items (keys as :func:`limit_devices`)."""
    spec = os.environ.get("CLNN_LIMITS", "").strip()
    pose: dict[str, object] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        key, eq, text = (part.strip() for part in item.partition("="))
        if key not in _POSE_ATTRS or not eq:
            raise DeviceError(
                f"CLNN_LIMITS item {item!r}: is not key=value with a key in {', '.join(_POSE_ATTRS)} "
                f"(e.g. CLNN_LIMITS={_POSE_EXAMPLE})"
            )
        if key in pose:
            raise DeviceError(f"CLNN_LIMITS item {item!r}: sets {key} a second time")
        value: object = int(text) if text.isdigit() and key not in ("type", "vendor", "name") else text
        pose[key] = _check_pose_item(key, value, f"CLNN_LIMITS item {item!r}")
    return pose


def _apply_pose(dev: Device) -> None:
    """Recompute ``dev``'s posable attributes from its real values and the current pose."""
    posed: dict[str, object] = {}  # a new dict: copies made with dataclasses.replace keep their own
    for key, attr in _POSE_ATTRS.items():
        real = dev.real.get(attr, getattr(dev, attr))
        value = (_pose or {}).get(key, real)
        if key in _LOWER_ONLY:
            value = min(real, value)
        if key == "groups":  # a device posing as NVIDIA's takes its grid limits too
            value = min(value, _group_limit(str(dev.vendor)))
        setattr(dev, attr, value)
        if value != real:
            posed[attr] = real
    dev.real = posed


def devices() -> list[Device]:
    """Every OpenCL device on every platform, in platform then device order.

    Raises:
        DeviceError: no OpenCL platform is installed.
    """
    global _devices, _pose
    with _lock:
        if _devices is None:
            if _pose is None:
                _pose = _pose_from_env()
            try:
                platforms = cl.get_platforms()
            except cl.Error:
                platforms = []
            found: list[Device] = []
            for p_index, platform in enumerate(platforms):
                try:
                    cl_devs = platform.get_devices()
                except cl.Error:
                    continue
                for d_index, d in enumerate(cl_devs):
                    pocl_target.repair(platform, d)
                    found.append(_describe(len(found), p_index, d_index, platform, d))
            for dev in found:
                _apply_pose(dev)
            _devices = found
        if not _devices:
            raise DeviceError(
                "no OpenCL platform was found. Install a CPU runtime with `pip install 'clnn[pocl]'`, "
                "or your GPU vendor's OpenCL driver (NVIDIA, AMD ROCm, Intel compute-runtime)."
            )
        return list(_devices)


def limit_devices(
    *,
    type: str | None = None,
    vendor: str | None = None,
    name: str | None = None,
    cu: int | None = None,
    wg: int | None = None,
    local: int | None = None,
    groups: int | None = None,
    fp16: bool | None = None,
    fp64: bool | None = None,
) -> None:
    """Make every device pose as another, so launch code and tuning rows for it run on the device at hand.

    Replaces any earlier pose (``CLNN_LIMITS`` included); with no arguments devices report their real
    values again. ``type`` (``"gpu"``, ``"cpu"``, ``"accelerator"``), ``vendor``, ``name`` and ``cu``
    (compute units) are reported as given: they select tuning rows and shape launch plans. ``wg`` (max
    work-group size), ``local`` (local memory bytes), ``groups`` (the most work-groups along a launch's y
    and z: 65,535 on NVIDIA's runtime, whose pose takes it too), ``fp16`` and ``fp64`` can only lower what the
    device has, since kernels really use them: the device reports ``min(pose, real)``, and ``fp16=True`` on a
    device without ``cl_khr_fp16`` leaves it off. ``CLNN_LIMITS`` takes the same keys, e.g.
    ``CLNN_LIMITS=type=gpu,cu=132,wg=1024,local=49152,vendor=NVIDIA Corporation`` (an H100).

    Raises:
        DeviceError: a value of the wrong kind (naming the key and the value).
    """
    global _pose
    given = {"type": type, "vendor": vendor, "name": name, "cu": cu, "wg": wg, "local": local, "groups": groups,
             "fp16": fp16, "fp64": fp64}
    _pose = {k: _check_pose_item(k, v, f"limit_devices({k}=...)") for k, v in given.items() if v is not None}
    for dev in _devices or []:
        _apply_pose(dev)


def _auto(devs: list[Device]) -> Device:
    return min(devs, key=lambda d: (_TYPE_RANK.get(d.type, 3), -d.compute_units, d.index))


def _available(devs: list[Device]) -> str:
    return "; ".join(f"[{d.index}] {d.platform_index}:{d.device_index} {d}" for d in devs)


def _match(spec: str | int, devs: list[Device]) -> Device:
    if isinstance(spec, int) and not isinstance(spec, bool):
        if 0 <= spec < len(devs):
            return devs[spec]
        raise DeviceError(f"device index {spec} is out of range; available: {_available(devs)}")
    if not isinstance(spec, str):
        raise TypeError(f"device spec must be None, a str, an int or a Device; got {type(spec).__name__}")
    s = spec.strip().lower()
    if s in ("", "auto"):
        return _auto(devs)
    if s in ("gpu", "cpu", "accelerator"):
        typed = [d for d in devs if d.type == s]
        if typed:
            return _auto(typed)
    elif ":" in s and all(part.isdigit() for part in s.split(":")):
        p, d = (int(x) for x in s.split(":"))
        for dev in devs:
            if (dev.platform_index, dev.device_index) == (p, d):
                return dev
    elif s.isdigit():
        return _match(int(s), devs)
    else:
        on_platform = [d for d in devs if s in d.platform_name.lower() or s in d.platform_vendor.lower()]
        on_device = [d for d in devs if s in d.name.lower() or s in d.vendor.lower()]
        if on_platform or on_device:
            return _auto(on_platform or on_device)
    raise DeviceError(f"no OpenCL device matches {spec!r}; available: {_available(devs)}")


def device(spec: str | int | Device | None = None) -> Device:
    """Pick a device.

    Args:
        spec: ``None`` for the current default (``CLNN_DEVICE`` or ``"auto"``); ``"auto"`` (GPU, then
            accelerator, then CPU, most compute units first); ``"gpu"``/``"cpu"``; a case-insensitive
            substring of a platform's name or vendor, else of a device's name or vendor (``"nvidia"``,
            ``"intel"``, ``"pocl"``); ``"P:D"`` platform and device indices; or an index into
            :func:`devices`.

    Raises:
        DeviceError: no device matches; the message lists the available ones.

    Example:
        >>> dev = clnn.device("cpu")
    """
    if isinstance(spec, Device):
        return spec
    if spec is None:
        return default_device()
    return _match(spec, devices())


def default_device() -> Device:
    """The device ops use when none is given: the innermost ``use_device``, else the global default."""
    global _default
    stack = getattr(_scoped, "stack", None)
    if stack:
        return stack[-1]
    if _default is None:
        chosen = _match(os.environ.get("CLNN_DEVICE", "auto"), devices())
        with _lock:
            if _default is None:
                _default = chosen
    return _default


def set_default_device(spec: str | int | Device | None) -> Device:
    """Set the global default device (``None`` re-reads ``CLNN_DEVICE``); returns it."""
    global _default
    _default = None if spec is None else device(spec)
    return default_device()


@contextlib.contextmanager
def use_device(spec: str | int | Device) -> Iterator[Device]:
    """Make ``spec`` the default device inside a ``with`` block (per thread)."""
    dev = device(spec)
    stack = getattr(_scoped, "stack", None)
    if stack is None:
        stack = _scoped.stack = []
    stack.append(dev)
    try:
        yield dev
    finally:
        stack.pop()


def memory_stats(dev: str | int | Device | None = None) -> dict[str, int]:
    """Bytes in use by live tensors and bytes held by the allocator's pools on ``dev`` (the device's, and those of
    its live captured graphs)."""
    d = device(dev)
    pools = [d.pool, *(g._pool for g in list(d._graphs))]
    return {
        "bytes_in_use": sum(int(p.active_bytes) for p in pools),
        "bytes_held": sum(int(p.managed_bytes - p.active_bytes) for p in pools),
        "blocks_in_use": sum(int(p.active_blocks) for p in pools),
        "blocks_held": sum(int(p.held_blocks) for p in pools),
    }


def device_table(devs: list[Device] | None = None) -> str:
    """A readable table of ``devs`` (default: all devices)."""
    devs = devices() if devs is None else devs
    default = default_device()
    header = ("#", "P:D", "type", "device", "platform", "CUs", "global", "local", "max WG", "fp16", "fp64", "OpenCL C")
    rows = [header]
    for d in devs:
        rows.append((
            f"{d.index}{'*' if d is default else ''}",
            f"{d.platform_index}:{d.device_index}",
            f"{d.type} (posing)" if d.real else d.type,
            d.name,
            d.platform_name,
            str(d.compute_units),
            f"{d.global_mem_size / 2**30:.1f} GiB",
            f"{d.local_mem_size // 1024} KiB",
            str(d.max_work_group_size),
            "yes" if d.fp16 else "no",
            "yes" if d.fp64 else "no",
            d.opencl_c_version.replace("OpenCL C ", ""),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("* default device (set with CLNN_DEVICE or clnn.set_default_device)")
    if any(d.real for d in devs):
        lines.append("(posing): CLNN_LIMITS or clnn.limit_devices changed what the device reports")
    return "\n".join(lines)
