"""Test set-up: every new tensor starts as NaN, so a kernel that skips an output element fails; no tuning
database is read, so the tables' rows, which tests pin and patch, choose every tile."""

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import clnn
from clnn.ops._core import poison_new_tensors


@pytest.fixture(autouse=True, scope="session")
def _no_tuning_database():
    """Point $CLNN_TUNING_DB at an empty folder's file for the session: a database left by `clnn tune` (the user's
    cache, or gpu_check.sh's) would override the rows tests patch; test_tune sets its own."""
    with tempfile.TemporaryDirectory() as folder:
        old = os.environ.get("CLNN_TUNING_DB")
        os.environ["CLNN_TUNING_DB"] = os.path.join(folder, "tuning.json")
        yield
        if old is None:
            del os.environ["CLNN_TUNING_DB"]
        else:
            os.environ["CLNN_TUNING_DB"] = old


@pytest.fixture(autouse=True, scope="session")
def _poison_outputs():
    poison_new_tensors(True)
    yield
    poison_new_tensors(False)


@pytest.fixture(autouse=True)
def _device_faults_fail_their_test():
    """Wait for each test's queued work on the default device: a kernel that faults fails the test that launched it
    (at its teardown), not whichever test next waits for the queue (on NVIDIA's runtime every call after a fault
    fails with OUT_OF_RESOURCES)."""
    yield
    try:
        device = clnn.device()
    except clnn.DeviceError:  # tests of device selection may leave none to choose
        return
    device.synchronize()


@pytest.fixture
def dev() -> clnn.Device:
    """The device under test: CLNN_DEVICE, else the automatic choice."""
    return clnn.device()


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh generator per test, seeded from the OS: inputs differ run to run."""
    return np.random.default_rng()


def _leaf_errors(err: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, e.g. Hypothesis' multiple failures."""
    subs = getattr(err, "exceptions", None)
    return [leaf for sub in subs for leaf in _leaf_errors(sub)] if subs else [err]


@pytest.fixture
def fp64() -> None:
    """Skip a test of float64 up front on a device without fp64 (``@pytest.mark.usefixtures("fp64")``). The hook below
    also reports a float64 refusal as a skip, but only once the test has failed: after Hypothesis has shrunk every
    refusal (18 s of limits64's max_pool2d test)."""
    if not clnn.device().fp64:
        pytest.skip("needs float64; the device has no fp64")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a device without fp64 (e.g. CLNN_LIMITS=...,fp64=0), a test that fails only because it made a
    float64 tensor there is reported as skipped: the device refused it correctly, as documented."""
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and call.excinfo is not None and all(
        "float64 is not supported on" in str(e) for e in _leaf_errors(call.excinfo.value)
    ):
        try:
            no_fp64 = not clnn.device().fp64
        except clnn.DeviceError:
            return
        if no_fp64:
            rep.outcome = "skipped"
            rep.longrepr = (str(item.path), item.location[1] or 0, "Skipped: needs float64; the device has no fp64")


def pytest_collection_modifyitems(items):
    """Test ids must be the same in every process: pytest-xdist's workers each collect the suite and refuse to
    start when their lists differ (an id made from an object's repr carries its address)."""
    unstable = [item.nodeid for item in items if " at 0x" in item.nodeid]
    if unstable:
        raise pytest.UsageError(f"test ids that name object addresses (give them ids=): {unstable[:3]}")


_census: list[tuple[str, str, float]] = []  # (test, kernel file, seconds) of each program build, with CLNN_BUILD_CENSUS


def pytest_configure(config):
    """With CLNN_BUILD_CENSUS=FILE (scripts/run_tests.py --census), time every program build: a cold suite is mostly
    compiling, and the count of builds and their seconds a test asks for are what a change to it moves, where wall
    clock on a shared machine moves 10-40 % between runs of the same code."""
    if not os.environ.get("CLNN_BUILD_CENSUS"):
        return
    from clnn import kernels

    compile_ = kernels._compile

    def timed(context, cl_device, file, *args):
        start = time.perf_counter()
        try:
            return compile_(context, cl_device, file, *args)
        finally:
            _census.append((os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0], file, time.perf_counter() - start))

    kernels._compile = timed


def pytest_sessionfinish(session):
    path = os.environ.get("CLNN_BUILD_CENSUS")
    if path:
        Path(path).write_text(json.dumps(_census))
