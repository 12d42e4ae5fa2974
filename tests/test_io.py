"""Saving and loading: safetensors written by hand, read by the safetensors package and back; weights moving
between clnn and PyTorch; corrupt files and mismatches rejected with the model left unchanged."""

import json
import os

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch
from helpers import rel_err

import clnn
from clnn import nn
from clnn.files import atomic_write


def lenet(lib):
    return lib.Sequential(
        lib.Conv2d(1, 6, 3, padding=1), lib.BatchNorm2d(6), lib.ReLU(), lib.MaxPool2d(2),
        lib.Conv2d(6, 8, 3), lib.ReLU(), lib.Flatten(), lib.Linear(8 * 2 * 2, 10),
    )


class Twin(nn.Module):
    """A user-defined model: nn.load rebuilds it from its constructor arguments."""

    def __init__(self, hidden: int, act: str = "relu") -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden))
        self.act = nn.ReLU() if act == "relu" else nn.Tanh()
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.head(self.act(self.body(x)))


def _trained(model, dev, rng):
    """A few steps so BatchNorm statistics and weights are not their defaults."""
    model.compile(optimizer="adam", loss="cross_entropy")
    model.fit(rng.standard_normal((64, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 64), epochs=1,
              batch_size=16, verbose=0)
    return model


def test_save_load_predict_identical(dev, rng, tmp_path):
    model = _trained(lenet(nn).to(dev), dev, rng)
    x = rng.standard_normal((9, 1, 8, 8)).astype(np.float32)
    path = tmp_path / "lenet.safetensors"
    model.save(path)
    again = nn.load(path, device=dev)
    np.testing.assert_array_equal(again.predict(x), model.predict(x))
    assert repr(again) == repr(model)
    fresh = lenet(nn).to(dev)  # the weights alone: a compiled model's file also holds its optimizer state
    _, unexpected = fresh.load_state_dict(clnn.load_state_dict(path), strict=False)
    assert unexpected and all(k.startswith("optimizer/") for k in unexpected)
    np.testing.assert_array_equal(fresh.predict(x), model.predict(x))
    assert [p.name for p in tmp_path.iterdir()] == ["lenet.safetensors"]  # no temporary file left


def test_custom_module_round_trip(dev, rng, tmp_path):
    model = Twin(16, act="tanh").to(dev)
    model.save(tmp_path / "twin.safetensors")
    again = nn.load(tmp_path / "twin.safetensors")
    assert isinstance(again, Twin) and isinstance(again.act, nn.Tanh)
    x = rng.standard_normal((3, 1, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(again.predict(x), model.predict(x))


def mean_square_logit(out, y):
    """A module-level metric: saved by reference, found again on load."""
    return (out * out).mean()


def test_loaded_model_is_compiled_with_its_optimizer_state(dev, rng, tmp_path):
    model = lenet(nn).to(dev)
    opt = clnn.optim.Adam(model.parameters(), lr=3e-3, betas=(0.8, 0.99), amsgrad=True)
    model.compile(optimizer=opt, loss=clnn.functional.cross_entropy, metrics=["accuracy", mean_square_logit])
    x = rng.standard_normal((40, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 40)
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    model.save(tmp_path / "m.safetensors")
    again = nn.load(tmp_path / "m.safetensors", device=dev)
    assert again.evaluate(x, y) == model.evaluate(x, y)
    assert set(again.evaluate(x, y)) == {"loss", "accuracy", "mean_square_logit"}
    assert type(again.optimizer) is clnn.optim.Adam and again.next_epoch == 2
    ours, theirs = again.optimizer.state_dict(), opt.state_dict()
    assert ours["param_groups"] == theirs["param_groups"] and ours["param_groups"][0]["betas"] == (0.8, 0.99)
    assert ours["state"].keys() == theirs["state"].keys()
    for i, entries in theirs["state"].items():
        assert ours["state"][i]["step"] == entries["step"] == 6
        for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            np.testing.assert_array_equal(ours["state"][i][k].numpy(), entries[k].numpy())
    assert not hasattr(nn.load(tmp_path / "m.safetensors", compile=False), "optimizer")


def test_loaded_model_keeps_its_precision_policy_scaler_and_jit_compile(dev, rng, tmp_path):
    model = nn.Sequential(nn.Linear(6, 4)).to(dev)
    model.compile(optimizer="sgd", loss="cross_entropy", precision="mixed_float16", jit_compile=True)
    x, y = rng.standard_normal((24, 6)).astype(np.float32), rng.integers(0, 4, 24)
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    model._scaler.update(new_scale=1024.0)
    model.save(tmp_path / "m.safetensors")
    again = nn.load(tmp_path / "m.safetensors", device=dev)
    assert (again.precision, again.jit_compile) == ("mixed_float16", True)
    assert again._scaler.state_dict() == model._scaler.state_dict() and again._scaler.get_scale() == 1024.0
    assert again.evaluate(x, y) == model.evaluate(x, y)


def test_unstorable_loss_saves_the_model_without_training_state(dev, tmp_path):
    model = nn.Sequential(nn.Linear(3, 2)).to(dev)
    model.compile(optimizer="sgd", loss=lambda out, y: ((out - y) * (out - y)).mean())
    with pytest.warns(RuntimeWarning, match="no training state: the loss .* is not a module-level function"):
        model.save(tmp_path / "m.safetensors")
    again = nn.load(tmp_path / "m.safetensors")
    with pytest.raises(RuntimeError, match=r"evaluate: call model.compile\(optimizer=..., loss=...\) first"):
        again.evaluate(np.zeros((2, 3), np.float32), np.zeros((2, 2), np.float32))


def test_half_precision_model_loads_as_half(dev, rng, tmp_path):
    model = nn.Sequential(nn.Linear(5, 3)).to(dev, np.float16)
    model.save(tmp_path / "h.safetensors")
    again = nn.load(tmp_path / "h.safetensors", device=dev)
    assert {p.dtype for p in again.parameters()} == {np.dtype(np.float16)}
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(again.state_dict()[k].numpy(), v.numpy())


def test_weights_only_file_explains_how_to_load(dev, tmp_path):
    class Holder(nn.Module):
        def __init__(self, layer: object) -> None:
            super().__init__()
            self.layer = nn.Linear(2, 2)

    Holder(object()).save(tmp_path / "h.safetensors")
    with pytest.raises(ValueError, match=r"has no architecture .*model.load_state_dict\(clnn.load_state_dict"):
        nn.load(tmp_path / "h.safetensors")


def test_torch_state_dict_gives_same_predictions(dev, rng, tmp_path):
    ref = lenet(torch.nn)
    ref.train()
    for _ in range(3):  # move BatchNorm's running statistics away from their defaults
        ref(torch.randn(16, 1, 8, 8))
    ref.eval()
    x = rng.standard_normal((7, 1, 8, 8)).astype(np.float32)
    expected = ref(torch.tensor(x)).detach().numpy()
    direct = lenet(nn).to(dev)
    direct.load_state_dict(ref.state_dict())
    assert rel_err(direct.predict(x), expected) < 1e-5
    safetensors.torch.save_file(ref.state_dict(), str(tmp_path / "torch.safetensors"))
    from_file = lenet(nn).to(dev)
    from_file.load_state_dict(clnn.load_state_dict(tmp_path / "torch.safetensors"))
    np.testing.assert_array_equal(from_file.predict(x), direct.predict(x))


def test_clnn_weights_load_into_torch(dev, rng, tmp_path):
    model = _trained(lenet(nn).to(dev), dev, rng)
    clnn.save_state_dict(model.state_dict(), tmp_path / "clnn.safetensors")
    ref = lenet(torch.nn)
    ref.load_state_dict(safetensors.torch.load_file(str(tmp_path / "clnn.safetensors")))
    ref.eval()
    x = rng.standard_normal((5, 1, 8, 8)).astype(np.float32)
    assert rel_err(model.predict(x), ref(torch.tensor(x)).detach().numpy()) < 1e-5


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_])
def test_format_matches_safetensors_package(tmp_path, rng, dtype):
    arrays = {"a": (rng.standard_normal((3, 5)) * 10).astype(dtype), "s": np.array(7, dtype=dtype),
              "e": np.zeros((0, 4), dtype)}
    clnn.save_state_dict(arrays, tmp_path / "ours.safetensors", metadata={"k": "v"})
    theirs = safetensors.numpy.load_file(str(tmp_path / "ours.safetensors"))
    safetensors.numpy.save_file(arrays, str(tmp_path / "theirs.safetensors"))
    back = clnn.load_state_dict(tmp_path / "theirs.safetensors")
    for k, v in arrays.items():
        assert theirs[k].dtype == v.dtype and theirs[k].shape == v.shape and back[k].shape == v.shape
        np.testing.assert_array_equal(theirs[k], v)
        np.testing.assert_array_equal(back[k], v)
    assert clnn.io.read_metadata(tmp_path / "ours.safetensors") == {"k": "v"}


def _header(tensors: dict) -> bytes:
    blob = json.dumps(tensors).encode()
    return len(blob).to_bytes(8, "little") + blob


CORRUPT = [
    (b"\x01\x02", "fewer than the 8-byte header length"),
    ((10**6).to_bytes(8, "little") + b"{}", "the header claims 1000000 bytes"),
    ((4).to_bytes(8, "little") + b"{{{{", "the header is not JSON"),
    (_header({"weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}) + b"\0" * 8,
     "outside the 8 data bytes"),
    (_header({"weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}) + b"\0" * 16,
     "needs 16 bytes; data_offsets give 12"),
    (_header({"weight": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 2]}}) + b"\0" * 2, "dtype 'Q4'"),
    (_header({"weight": [1, 2]}), "lacks dtype, shape or data_offsets"),
    (_header([1, 2]), "not an object"),
]


@pytest.mark.parametrize("content, pattern", CORRUPT)
def test_corrupt_files_raise_and_leave_model_unchanged(dev, tmp_path, content, pattern):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    model = nn.Linear(2, 2).to(dev)
    before = {k: v.numpy() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=pattern):
        model.load_state_dict(clnn.load_state_dict(path))
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        nn.load(path)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])


def test_mismatched_keys_or_shapes_leave_model_unchanged(dev, tmp_path):
    model = lenet(nn).to(dev)
    before = {k: v.numpy() for k, v in model.state_dict().items()}
    other = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(6, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 2 * 2, 12))
    other.save(tmp_path / "other.safetensors")
    with pytest.raises(ValueError, match=r"7.weight expects shape \(10, 32\); got \(12, 32\)"):
        model.load_state_dict(clnn.load_state_dict(tmp_path / "other.safetensors"))
    clnn.save_state_dict({"0.weight": np.zeros((6, 1, 3, 3))}, tmp_path / "partial.safetensors")
    with pytest.raises(KeyError, match="missing .*'0.bias'"):
        model.load_state_dict(clnn.load_state_dict(tmp_path / "partial.safetensors"))
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    with pytest.raises(FileNotFoundError, match="no file at"):
        clnn.load_state_dict(tmp_path / "missing.safetensors")


def test_failed_write_keeps_the_old_file(dev, tmp_path, monkeypatch):
    path = tmp_path / "w.safetensors"
    clnn.save_state_dict({"a": np.arange(3.0)}, path)
    original = path.read_bytes()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        clnn.save_state_dict({"a": np.arange(5.0)}, path)
    assert path.read_bytes() == original
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]
    with pytest.raises(TypeError, match="save_state_dict: a expects a numeric tensor"):
        clnn.save_state_dict({"a": np.array(["x"])}, path)


def test_atomic_write_in_text_mode_sets_permissions_and_keeps_the_old_file_on_error(tmp_path):
    path = tmp_path / "entry.icd"
    path.write_text("old\n")
    with pytest.raises(RuntimeError, match="stop"), atomic_write(path, text=True, chmod=0o644) as f:
        f.write("half")
        raise RuntimeError("stop")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["entry.icd"]
    with atomic_write(path, text=True, chmod=0o644) as f:
        f.write("new\n")
    assert path.read_text() == "new\n" and path.stat().st_mode & 0o777 == 0o644
