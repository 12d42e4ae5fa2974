"""The profiler on a small training step: every launch recorded and attributed, the table, the Chrome trace
(checked against the trace-event schema), and the device's plain queue back afterwards."""

import contextlib
import json

import numpy as np
import pyopencl as cl
import pytest
from helpers import multi_tensor_launches

import clnn
import clnn.functional as F
from clnn import kernels, nn, profiler
from clnn.ops import elementwise

PROFILING = cl.command_queue_properties.PROFILING_ENABLE


def _model(dev):
    # the first Linear and its ReLU run fused (one op, gemm); the ReLU after the Flatten runs on its own
    return nn.Sequential(nn.Conv2d(2, 5, 3, padding=1), nn.Flatten(), nn.ReLU(), nn.Linear(5 * 7 * 5, 4), nn.ReLU(),
                         nn.Linear(4, 3)).to(dev)


def _step(model, opt, x, y):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


@pytest.fixture
def step(dev, rng):
    """A conv + relu + linear + loss + backward + SGD training step on fresh inputs."""
    model = _model(dev)
    opt = clnn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = clnn.tensor(rng.standard_normal((3, 2, 7, 5)).astype(np.float32), device=dev)
    y = clnn.tensor(rng.integers(0, 3, 3), device=dev)
    _step(model, opt, x, y)  # builds every kernel, and makes SGD's momentum buffers
    return lambda: _step(model, opt, x, y)


@pytest.fixture
def launches(monkeypatch):
    """Every non-empty kernel launch, counted outside the profiler by wrapping ``kernels.launch``."""
    seen = []
    original = kernels.launch

    def counting(dev, k, *args):
        event = original(dev, k, *args)
        if event is not None:
            seen.append(k.function_name)
        return event

    monkeypatch.setattr(kernels, "launch", counting)
    return seen


def test_training_step_records_every_launch(dev, step, launches):
    plain = dev.queue
    with profiler.profile(dev) as prof:
        assert dev.queue.properties & PROFILING
        step()
    assert dev.queue is plain and not dev.queue.properties & PROFILING

    assert len(launches) > 10
    assert [k.name for k in prof.kernels] == launches
    for k in prof.kernels:
        assert isinstance(k.name, str) and k.name and k.op
        assert 0 <= k.enqueue_ns <= k.start_ns <= k.end_ns and k.device_ns >= 0
    ops = {op.name for op in prof.ops}
    launched_by = {k.op for k in prof.kernels}
    for name in ("conv2d", "relu", "gemm", "cross_entropy", "SGD.step",
                 "conv2d_backward", "relu_backward", "gemm_backward", "cross_entropy_backward"):
        assert name in ops and name in launched_by, name
    assert launched_by <= ops
    assert all(0 <= op.start_ns <= op.end_ns for op in prof.ops)
    assert prof.bytes_allocated > 0 and any(op.bytes_allocated > 0 for op in prof.ops if op.name == "conv2d")

    stats = {s.name: s for s in prof.key_averages()}
    assert sum(s.kernels for s in stats.values()) == len(launches)
    assert sum(s.device_ns for s in stats.values()) == sum(k.device_ns for k in prof.kernels)
    assert sum(s.calls for s in stats.values()) == len(prof.ops)
    sizes = [p.size for p in _model(dev).parameters()]  # one update per launch's worth of params
    assert stats["SGD.step"].kernels == multi_tensor_launches(dev, sizes)


def test_profiling_changes_no_result(dev, rng):
    """The same step with and without the profiler gives bit-identical parameters."""
    # 16 samples: with 3, all four hidden ReLUs were dead for every sample about once in 4,000 runs, and then
    # the layers before them did not change
    x = clnn.tensor(rng.standard_normal((16, 2, 7, 5)).astype(np.float32), device=dev)
    y = clnn.tensor(rng.integers(0, 3, 16), device=dev)
    initial = {k: v.numpy() for k, v in _model(dev).state_dict().items()}
    after = []
    for on in (False, True):
        model = _model(dev)
        model.load_state_dict(initial)
        opt = clnn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        with profiler.profile(dev) if on else contextlib.nullcontext():
            _step(model, opt, x, y)
        after.append({k: v.numpy() for k, v in model.state_dict().items()})
    for name in initial:
        np.testing.assert_array_equal(after[0][name], after[1][name], err_msg=name)
        assert not np.array_equal(after[0][name], initial[name]), name  # the step did change it


def test_scope_and_nesting(dev, rng):
    a = clnn.tensor(rng.standard_normal(13).astype(np.float32), device=dev)
    with profiler.profile(dev) as prof:
        with profiler.scope("mine"):
            F.relu(a + a)  # ops inside an op belong to it
        a * a
    assert [op.name for op in prof.ops] == ["mine", "mul"]
    assert [k.op for k in prof.kernels] == ["mine", "mine", "mul"]
    assert profiler.scope("off") is profiler.scope("other")  # one shared no-op outside a profile


def test_launch_outside_every_op_is_its_own_op(dev, rng):
    x = clnn.tensor(rng.standard_normal(17).astype(np.float32), device=dev)
    with profiler.profile(dev) as prof:
        elementwise.unary("neg", x)  # an internal helper: no op around its launch
    assert [(op.name, op.host_ns) for op in prof.ops] == [("unary", 0)]
    assert [(k.name, k.op) for k in prof.kernels] == [("unary", "unary")]
    assert prof.bytes_allocated == x.nbytes  # counted though no op was open


def test_nested_profiles_refused_and_queue_restored_after_error(dev):
    plain = dev.queue
    with pytest.raises(ZeroDivisionError), profiler.profile(dev):
        with pytest.raises(RuntimeError, match="already active"), profiler.profile(dev):
            pass
        raise ZeroDivisionError
    assert dev.queue is plain and profiler._active is None


def test_table(dev, step):
    with profiler.profile(dev) as prof:
        step()
    table = prof.table(sort_by="device_time", top=5)
    lines = table.splitlines()
    assert lines[1].split() == ["Name", "Calls", "Host", "total", "Host", "avg", "Device", "total", "Device", "avg",
                                "Device", "%", "Kernels", "Allocated"]
    rows = lines[3:-2]
    assert len(rows) == 5
    assert rows[0].split()[0] == prof.key_averages()[0].name
    assert "Device time total" in lines[-1] and f"Kernels: {len(prof.kernels)}" in lines[-1]
    names = [r.split()[0] for r in prof.table(sort_by="name", top=None).splitlines()[3:-2]]
    assert names == sorted(s.name for s in prof.key_averages())
    calls = [int(r.split()[1]) for r in prof.table(sort_by="calls").splitlines()[3:-2]]
    assert calls == sorted(calls, reverse=True)


@pytest.mark.parametrize("kwargs, exc, pattern", [
    (dict(sort_by="cuda_time"), ValueError, r"sort_by expects one of \['device_time', .*'cuda_time'"),
    (dict(top=0), ValueError, "top expects a value >= 1; got 0"),
    (dict(top="5"), TypeError, "top expects an int or None; got str"),
])
def test_table_bad_arguments(dev, kwargs, exc, pattern):
    with profiler.profile(dev) as prof:
        pass
    with pytest.raises(exc, match=pattern):
        prof.table(**kwargs)


def _check_trace_event(ev: dict) -> None:
    """The trace-event format's required keys and types for the phases the profiler writes."""
    assert ev["ph"] in ("X", "M"), ev
    assert isinstance(ev["name"], str) and ev["name"], ev
    for key in ("pid", "tid"):
        assert isinstance(ev[key], int) and not isinstance(ev[key], bool), ev
    assert isinstance(ev.get("args", {}), dict), ev
    if ev["ph"] == "X":
        assert isinstance(ev["cat"], str), ev
        for key in ("ts", "dur"):
            assert isinstance(ev[key], (int, float)) and not isinstance(ev[key], bool) and ev[key] >= 0, ev
    else:
        assert ev["name"] in ("process_name", "thread_name") and isinstance(ev["args"]["name"], str), ev


def test_chrome_trace_is_valid_trace_event_json(dev, step, tmp_path):
    with profiler.profile(dev) as prof:
        step()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]  # no temporary file left behind
    trace = json.loads(path.read_text())
    assert set(trace) == {"traceEvents", "displayTimeUnit"} and trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    for ev in events:
        _check_trace_event(ev)
    host = [e for e in events if e["ph"] == "X" and e["cat"] == "op"]
    device = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    assert len(host) == len(prof.ops) and len(device) == len(prof.kernels)
    assert {e["pid"] for e in host} == {0} and {e["pid"] for e in device} == {1}
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in host + device} <= named
    assert all(e["args"]["op"] in {h["name"] for h in host} for e in device)
