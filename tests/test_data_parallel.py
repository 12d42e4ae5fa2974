"""nn.DataParallel over two sub-devices of one CPU (PoCL can partition; the test runs in the PoCL part)."""

import numpy as np
import pytest

import clnn
import clnn.nn as nn
from clnn import functional as F

pytestmark = pytest.mark.skipif("Portable" not in clnn.device().platform_name or clnn.device().compute_units < 2,
                                reason="sub-devices: the PoCL part, on a CPU with 2 or more cores")


def net() -> nn.Module:  # smooth layers: relu's or max pooling's branch points flip under another summation order
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Tanh(), nn.AvgPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, 5))


def train(model: nn.Module, params: list, x: np.ndarray, y: np.ndarray, dev: clnn.Device) -> None:
    opt = clnn.optim.SGD(params, lr=0.1, momentum=0.9)
    for step in range(3):
        xb, yb = (clnn.tensor(a[step * 7:(step + 1) * 7], device=dev) for a in (x, y))  # 7: an uneven split
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()


def test_data_parallel_over_two_sub_devices_equals_one_device(dev, rng):
    subs = dev.split(2)
    x = rng.standard_normal((21, 1, 7, 7)).astype(np.float32)
    y = rng.integers(0, 5, 21)
    clnn.manual_seed(int(rng.integers(2**31)))
    alone = net().to(dev).eval()  # BatchNorm in train mode normalizes per chunk: compare in eval mode
    start = {k: v.numpy() for k, v in alone.state_dict().items()}
    train(alone, list(alone.parameters()), x, y, dev)

    model = net()
    model.load_state_dict(start)
    parallel = nn.DataParallel(model, devices=subs)
    assert model.device is subs[0] and parallel.replicas[0].device is subs[1]
    parallel.eval()
    train(parallel, list(parallel.parameters()), x, y, subs[0])
    for (k, want), got in zip(alone.state_dict().items(), model.state_dict().values()):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_data_parallel_rejects_one_device(dev):
    with pytest.raises(ValueError, match="two or more distinct devices"):
        nn.DataParallel(net(), devices=[dev])
