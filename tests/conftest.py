"""Test set-up: every new tensor starts as NaN, so a kernel that skips an output element fails."""

import numpy as np
import pytest

import clnn
from clnn.ops._core import poison_new_tensors


@pytest.fixture(autouse=True, scope="session")
def _poison_outputs():
    poison_new_tensors(True)
    yield
    poison_new_tensors(False)


@pytest.fixture
def dev() -> clnn.Device:
    """The device under test: CLNN_DEVICE, else the automatic choice."""
    return clnn.device()


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh generator per test, seeded from the OS: inputs differ run to run."""
    return np.random.default_rng()
