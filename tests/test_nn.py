"""Modules and layers against torch.nn: names, shapes, default inits, forward/backward on fresh inputs."""

import math

import numpy as np
import pytest
import torch
from helpers import multi_tensor_launches, rel_err

import clnn
from clnn import nn

# (clnn layer, torch layer, input shape) — same constructor arguments on both sides
LAYERS = [
    (lambda: nn.Linear(7, 5), lambda: torch.nn.Linear(7, 5), (3, 7)),
    (lambda: nn.Linear(7, 5, bias=False), lambda: torch.nn.Linear(7, 5, bias=False), (2, 4, 7)),
    (lambda: nn.Linear(7, 5), lambda: torch.nn.Linear(7, 5), (7,)),  # a single sample: a 1-D output
    (lambda: nn.Linear(7, 5), lambda: torch.nn.Linear(7, 5), (2, 1, 3, 7)),
    (lambda: nn.Conv1d(3, 4, 5, stride=2, padding=1), lambda: torch.nn.Conv1d(3, 4, 5, stride=2, padding=1),
     (2, 3, 17)),
    (lambda: nn.Conv2d(3, 6, 3, padding=1), lambda: torch.nn.Conv2d(3, 6, 3, padding=1), (2, 3, 9, 7)),
    (lambda: nn.Conv2d(4, 4, (3, 1), stride=(2, 1), groups=2, bias=False),
     lambda: torch.nn.Conv2d(4, 4, (3, 1), stride=(2, 1), groups=2, bias=False), (1, 4, 8, 5)),
    (lambda: nn.Conv2d(2, 5, 3, padding="same", dilation=2), lambda: torch.nn.Conv2d(2, 5, 3, padding="same",
                                                                                      dilation=2), (2, 2, 7, 7)),
    (lambda: nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),
     lambda: torch.nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1), (2, 4, 5, 6)),
    (lambda: nn.MaxPool2d(2), lambda: torch.nn.MaxPool2d(2), (2, 3, 8, 7)),
    (lambda: nn.MaxPool2d(3, 2, padding=1), lambda: torch.nn.MaxPool2d(3, 2, padding=1), (2, 3, 9, 9)),
    (lambda: nn.AvgPool2d(2, ceil_mode=True), lambda: torch.nn.AvgPool2d(2, ceil_mode=True), (2, 3, 7, 7)),
    (lambda: nn.AvgPool2d(3, 2, 1, divisor_override=5), lambda: torch.nn.AvgPool2d(3, 2, 1, divisor_override=5),
     (2, 3, 7, 7)),
    (lambda: nn.AdaptiveAvgPool2d((3, 2)), lambda: torch.nn.AdaptiveAvgPool2d((3, 2)), (2, 3, 7, 9)),
    (lambda: nn.BatchNorm1d(5), lambda: torch.nn.BatchNorm1d(5), (8, 5)),
    (lambda: nn.BatchNorm1d(4, affine=False), lambda: torch.nn.BatchNorm1d(4, affine=False), (6, 4, 3)),
    (lambda: nn.BatchNorm2d(3, momentum=None), lambda: torch.nn.BatchNorm2d(3, momentum=None), (4, 3, 5, 5)),
    (lambda: nn.LayerNorm(6), lambda: torch.nn.LayerNorm(6), (3, 4, 6)),
    (lambda: nn.LayerNorm((4, 6), elementwise_affine=False),
     lambda: torch.nn.LayerNorm((4, 6), elementwise_affine=False), (3, 4, 6)),
    (lambda: nn.Flatten(), lambda: torch.nn.Flatten(), (2, 3, 4, 5)),
    (lambda: nn.Flatten(0, 2), lambda: torch.nn.Flatten(0, 2), (2, 3, 4, 5)),
    (lambda: nn.ReLU(), lambda: torch.nn.ReLU(), (4, 9)),
    (lambda: nn.LeakyReLU(0.2), lambda: torch.nn.LeakyReLU(0.2), (4, 9)),
    (lambda: nn.GELU(), lambda: torch.nn.GELU(), (4, 9)),
    (lambda: nn.GELU("tanh"), lambda: torch.nn.GELU("tanh"), (4, 9)),
    (lambda: nn.SiLU(), lambda: torch.nn.SiLU(), (4, 9)),
    (lambda: nn.Sigmoid(), lambda: torch.nn.Sigmoid(), (4, 9)),
    (lambda: nn.Tanh(), lambda: torch.nn.Tanh(), (4, 9)),
    (lambda: nn.Softmax(dim=1), lambda: torch.nn.Softmax(dim=1), (4, 9, 2)),
    (lambda: nn.Softmax(), lambda: torch.nn.Softmax(), (3, 4, 5)),
    (lambda: nn.Dropout(0.3), lambda: torch.nn.Dropout(0.3), (4, 9)),  # eval mode: identity on both
    (lambda: nn.Identity(), lambda: torch.nn.Identity(), (4, 9)),
]
IDS = [f"{i}-{type(make()).__name__}" for i, (make, _, _) in enumerate(LAYERS)]


def _state_shapes(sd) -> dict:
    return {k: tuple(v.shape) for k, v in sd.items()}


@pytest.mark.parametrize("make, tmake, shape", LAYERS, ids=IDS)
def test_state_dict_names_and_shapes_match_torch(dev, make, tmake, shape):
    assert _state_shapes(make().to(dev).state_dict()) == _state_shapes(tmake().state_dict())


@pytest.mark.parametrize("make, tmake, shape", LAYERS, ids=IDS)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_forward_backward_match_torch_with_torch_weights(dev, rng, make, tmake, shape, training):
    ours, ref = make().to(dev), tmake().double()
    if isinstance(ours, nn.Dropout) and training:
        pytest.skip("dropout in training is random; clnn's own tests check its statistics")
    with torch.no_grad():  # non-default running statistics, so eval mode really uses them
        for name, buf in ref.named_buffers():
            if name.endswith("running_mean"):
                buf.copy_(torch.from_numpy(rng.standard_normal(buf.shape)))
            elif name.endswith("running_var"):
                buf.copy_(torch.from_numpy(rng.uniform(0.5, 2, buf.shape)))
    ours.load_state_dict(ref.state_dict())
    ours.train(training)
    ref.train(training)
    x = rng.standard_normal(shape).astype(np.float32)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    xc = clnn.tensor(x, device=dev, requires_grad=True)
    y, yt = ours(xc), ref(xt)
    assert rel_err(y.numpy(), yt.detach().numpy()) < 1e-5
    g = rng.standard_normal(yt.shape).astype(np.float32)
    y.backward(clnn.tensor(g, device=dev))
    yt.backward(torch.tensor(g, dtype=torch.float64))
    assert rel_err(xc.grad.numpy(), xt.grad.numpy()) < 1e-5
    for name, p in ours.named_parameters():
        assert rel_err(p.grad.numpy(), dict(ref.named_parameters())[name].grad.numpy()) < 1e-5, name
    for name, b in ours.state_dict().items():  # running statistics updated as torch updates them
        assert rel_err(b.numpy(), ref.state_dict()[name].numpy()) < 1e-5, name


@pytest.mark.parametrize("make, tmake, shape", LAYERS, ids=IDS)
def test_default_init_matches_torch_distribution(dev, make, tmake, shape):
    ours, ref = make().to(dev), tmake()
    for (name, p), (tname, tp) in zip(ours.state_dict().items(), ref.state_dict().items()):
        assert name == tname
        ref_v, v = tp.numpy().astype(np.float64), p.numpy().astype(np.float64)
        if ref_v.size > 1 and np.all(ref_v == ref_v.flat[0]) or ref_v.ndim == 0:  # constants: exactly
            np.testing.assert_array_equal(v, ref_v)
            continue
        bound = np.abs(ref_v).max()
        fan_bound = 1 / math.sqrt(ref.weight.shape[1] * int(np.prod(ref.weight.shape[2:])))
        assert np.abs(v).max() <= fan_bound * (1 + 1e-6) and bound <= fan_bound * (1 + 1e-6)
        if v.size >= 100:  # a uniform on (-b, b) has std b / sqrt(3)
            assert abs(v.std() - fan_bound / math.sqrt(3)) < 0.15 * fan_bound


def test_module_api(dev):
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
            self.head = nn.Linear(4, 2)
            self.register_buffer("scale", clnn.ones(1), persistent=False)

        def forward(self, x):
            return self.head(self.features(x).mean(axis=(2, 3)))

    net = Net().to(dev)
    assert [n for n, _ in net.named_parameters()] == [
        "features.0.weight", "features.0.bias", "features.1.weight", "features.1.bias", "head.weight", "head.bias"]
    assert [type(m).__name__ for m in net.children()] == ["Sequential", "Linear"]
    assert "scale" not in net.state_dict() and "features.1.num_batches_tracked" in net.state_dict()
    assert len(list(net.buffers())) == 4
    assert net.training and all(m.training for m in net.modules())
    net.eval()
    assert not any(m.training for m in net.modules())
    assert net(clnn.zeros(2, 1, 5, 5, device=dev)).shape == (2, 2)
    assert "(head): Linear(in_features=4, out_features=2, bias=True)" in repr(net)
    seq = nn.Sequential(nn.ReLU(), nn.Tanh())
    assert len(seq) == 2 and isinstance(seq[-1], nn.Tanh) and isinstance(seq[:1], nn.Sequential)


def test_to_keeps_parameter_identity_and_moves_dtype(dev):
    lin = nn.Linear(3, 2)
    w = lin.weight
    lin.to(dev)
    assert lin.weight is w and w.device is dev
    if dev.fp64:
        lin.to(dtype=np.float64)
        assert lin.weight is w and w.dtype == np.float64 and w.requires_grad


def test_batchnorm_counts_batches_as_torch(dev, rng):
    bn, tbn = nn.BatchNorm1d(3).to(dev), torch.nn.BatchNorm1d(3)
    for _ in range(3):
        x = rng.standard_normal((5, 3)).astype(np.float32)
        bn(clnn.tensor(x, device=dev))
        tbn(torch.tensor(x))
    assert int(bn.state_dict()["num_batches_tracked"].item()) == int(tbn.num_batches_tracked) == 3
    fresh = nn.BatchNorm1d(3).to(dev)
    fresh.load_state_dict(tbn.state_dict())
    assert fresh._batches == 3


@pytest.mark.parametrize(
    "call, exc, pattern",
    [
        (lambda: nn.Linear(0, 3), ValueError, "Linear: in_features expects an int >= 1; got 0"),
        (lambda: nn.Conv2d(3, 4, 3, groups=2), ValueError, "divisible by groups"),
        (lambda: nn.Conv2d(3, 4, (3, 3, 3)), TypeError, "kernel_size expects an int or a tuple of 2 ints"),
        (lambda: nn.Conv2d(3, 4, 3, padding_mode="reflect"), ValueError, "padding_mode expects 'zeros'"),
        (lambda: nn.MaxPool2d(2, return_indices=True), ValueError, "return_indices"),
        (lambda: nn.Dropout(1.5), ValueError, r"Dropout: p expects a number in \[0, 1\]; got 1.5"),
        (lambda: nn.GELU("fast"), ValueError, r"approximate expects one of \('none', 'tanh'\)"),
        (lambda: nn.Sequential(nn.ReLU(), 3), TypeError, "Sequential: module 1 expects a Module; got int"),
        (lambda: nn.Linear(4, 2)(clnn.zeros(3, 5)), ValueError, r"Linear: x expects shape \(\*, 4\); got \(3, 5\)"),
        (lambda: nn.BatchNorm2d(3)(clnn.zeros(3, 5)), ValueError, "BatchNorm2d: x expects 4-D input"),
    ],
)
def test_layer_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_load_state_dict_errors_leave_module_unchanged(dev, rng):
    lin = nn.Linear(4, 3).to(dev)
    before = {k: v.numpy() for k, v in lin.state_dict().items()}
    good = {"weight": rng.standard_normal((3, 4)), "bias": rng.standard_normal(3)}
    with pytest.raises(ValueError, match=r"bias expects shape \(3,\); got \(4,\)"):
        lin.load_state_dict({"weight": good["weight"], "bias": np.zeros(4)})
    with pytest.raises(KeyError, match=r"missing \['bias'\], unexpected \['b'\]"):
        lin.load_state_dict({"weight": good["weight"], "b": good["bias"]})
    for k, v in lin.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    result = lin.load_state_dict({"weight": good["weight"]}, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == []
    np.testing.assert_allclose(lin.weight.numpy(), good["weight"].astype(np.float32))


# more gradients than one multi-tensor launch takes, one spanning many work-groups, sizes 1 and primes
CLIP_SHAPES = [(7, 5), (5,), (3, 2, 2), (1,), (301, 43), *((k,) for k in (2, 3, 11, 13, 17, 19, 23))]


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_clip_grad_norm_matches_torch(dev, rng, norm_type, max_norm, dtype, monkeypatch):
    """In place, in two multi-tensor passes whatever the number of gradients; a gradient shared by two leaves is
    scaled once."""
    from clnn import kernels

    grads = [rng.standard_normal(s).astype(dtype) for s in CLIP_SHAPES]
    params = [clnn.zeros(s, dtype=dtype, device=dev, requires_grad=True) for s in CLIP_SHAPES]
    tparams = [torch.zeros(s, dtype=torch.float64 if dtype == np.float64 else torch.float32, requires_grad=True)
               for s in CLIP_SHAPES]
    for p, tp, g in zip(params, tparams, grads):
        p.grad, tp.grad = clnn.tensor(g, device=dev), torch.tensor(g)
    shared = clnn.zeros(CLIP_SHAPES[0], dtype=dtype, device=dev, requires_grad=True)
    shared.grad = params[0].grad  # autograd hands one gradient to several leaves (the two inputs of a + b)
    memory = [p.grad.data for p in params]
    launches = []
    launch = kernels.launch
    monkeypatch.setattr(kernels, "launch", lambda d, k, *a: launches.append(k.function_name) or launch(d, k, *a))
    total = nn.utils.clip_grad_norm_([*params, shared], max_norm, norm_type)
    monkeypatch.undo()
    tshared = torch.zeros(CLIP_SHAPES[0], dtype=tparams[0].dtype, requires_grad=True)
    tshared.grad = tparams[0].grad.clone()  # counted twice in the norm, like clnn's, and scaled once
    ttotal = torch.nn.utils.clip_grad_norm_([*tparams, tshared], max_norm, norm_type)
    sizes = [math.prod(s) for s in CLIP_SHAPES]  # the norm counts the shared gradient twice, as torch; the scale once
    assert launches.count("norm_multi") == multi_tensor_launches(dev, [*sizes, sizes[0]]), launches
    assert launches.count("scale_multi") == multi_tensor_launches(dev, sizes), launches
    assert total.dtype == dtype and rel_err(total.numpy(), ttotal.numpy()) < 1e-5
    assert all(p.grad.data is m for p, m in zip(params, memory))
    for p, tp in zip([*params, shared], [*tparams, tshared]):
        assert rel_err(p.grad.numpy(), tp.grad.numpy()) < 1e-5


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_clip_grad_norm_propagates_nan(dev, rng, norm_type):
    """A NaN anywhere makes the norm NaN (torch's max propagates it too), in any of the partial sums."""
    grads = [rng.standard_normal(s).astype(np.float32) for s in CLIP_SHAPES]
    grads[4][rng.integers(301), rng.integers(43)] = np.nan
    params = [clnn.zeros(s, device=dev, requires_grad=True) for s in CLIP_SHAPES]
    for p, g in zip(params, grads):
        p.grad = clnn.tensor(g, device=dev)
    assert np.isnan(nn.utils.clip_grad_norm_(params, 1.0, norm_type).item())


def test_clip_grad_norm_errors(dev):
    p = clnn.zeros(3, device=dev, requires_grad=True)
    p.grad = clnn.full((3,), float("inf"), device=dev)
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="max_norm expects a number >= 0; got -1"):
        nn.utils.clip_grad_norm_([p], -1)


def test_dataloader_batches_shuffles_and_drops(dev, rng):
    x = rng.standard_normal((103, 3, 2)).astype(np.float32)
    y = rng.integers(0, 5, 103)
    loader = clnn.data.DataLoader(x, y, batch_size=16, shuffle=True, seed=7, device=dev)
    assert len(loader) == 7
    seen_x, seen_y = [], []
    for xb, yb in loader:
        assert xb.device is dev and xb.dtype == np.float32 and yb.dtype == np.int64
        seen_x.append(xb.numpy())
        seen_y.append(yb.numpy())
    order = np.lexsort(np.concatenate(seen_x).reshape(103, -1).T)
    ref = np.lexsort(x.reshape(103, -1).T)
    np.testing.assert_array_equal(np.concatenate(seen_x)[order], x[ref])
    np.testing.assert_array_equal(np.concatenate(seen_y)[order], y[ref])
    again = [yb.numpy() for _, yb in clnn.data.DataLoader(x, y, batch_size=16, shuffle=True, seed=7, device=dev)]
    np.testing.assert_array_equal(np.concatenate(again), np.concatenate(seen_y))  # same seed, same order
    dropped = clnn.data.DataLoader(x, batch_size=16, drop_last=True, device=dev)
    batches = [xb.numpy() for xb in dropped]
    assert len(batches) == len(dropped) == 6
    np.testing.assert_array_equal(np.concatenate(batches), x[:96])  # no shuffle: in order


def test_dataloader_orders_come_from_seed_and_epoch_or_the_global_generator(dev):
    x = np.arange(29, dtype=np.float32)[:, None]

    def orders(loader, epochs=3):
        return [np.concatenate([xb.numpy()[:, 0] for xb in loader]) for _ in range(epochs)]

    seeded = orders(clnn.data.DataLoader(x, batch_size=8, shuffle=True, seed=7, device=dev))
    assert not np.array_equal(seeded[0], seeded[1])  # a new order each epoch
    resumed = clnn.data.DataLoader(x, batch_size=8, shuffle=True, seed=7, device=dev)
    resumed.set_epoch(2)
    np.testing.assert_array_equal(orders(resumed, 1)[0], seeded[2])
    clnn.manual_seed(3)
    first = orders(clnn.data.DataLoader(x, batch_size=8, shuffle=True, device=dev))
    clnn.manual_seed(3)
    again = orders(clnn.data.DataLoader(x, batch_size=8, shuffle=True, device=dev))
    np.testing.assert_array_equal(np.stack(first), np.stack(again))
    assert not np.array_equal(first[0], first[1])
    clnn.manual_seed(4)
    assert not np.array_equal(orders(clnn.data.DataLoader(x, batch_size=8, shuffle=True, device=dev), 1)[0],
                              first[0])


def test_dataloader_errors():
    with pytest.raises(ValueError, match="x and y expect the same number of samples; got 4 and 3"):
        clnn.data.DataLoader(np.zeros((4, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="batch_size expects an int >= 1; got 0"):
        clnn.data.DataLoader(np.zeros((4, 2)), batch_size=0)


def test_load_digits_split():
    (xt, yt), (xs, ys) = clnn.datasets.load_digits()
    assert xt.shape == (1438, 1, 8, 8) and xs.shape == (359, 1, 8, 8)
    assert xt.dtype == np.float32 and yt.dtype == np.int64 and xt.min() >= 0 and xt.max() <= 1
    assert set(np.unique(ys)) == set(range(10)) and np.bincount(ys).min() >= 35
    (xt2, _), _ = clnn.datasets.load_digits()
    np.testing.assert_array_equal(xt, xt2)  # fixed split


def _write_idx(path, array, gz):
    import gzip

    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    data = header + array.astype(np.uint8).tobytes()
    if gz:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist_reads_idx(tmp_path, rng, gz):
    files = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (5, 28, 28)),
        "train-labels-idx1-ubyte": rng.integers(0, 10, 5),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (3, 28, 28)),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, 3),
    }
    for name, arr in files.items():
        _write_idx(tmp_path / name, arr, gz)
    (xt, yt), (xs, ys) = clnn.datasets.load_mnist(tmp_path)
    assert xt.shape == (5, 1, 28, 28) and xs.shape == (3, 1, 28, 28) and xt.dtype == np.float32
    np.testing.assert_allclose(xt[:, 0], files["train-images-idx3-ubyte"] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(ys, files["t10k-labels-idx1-ubyte"])


def test_load_mnist_names_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte, train-labels-idx1-ubyte, "
                                                "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte"):
        clnn.datasets.load_mnist(tmp_path)
