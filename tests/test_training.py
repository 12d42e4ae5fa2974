"""Training: Keras-style fit/evaluate/predict/summary/callbacks, the PyTorch-style loop against torch,
input checks before training, and flat device memory over many steps."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from helpers import rel_err

import clnn
import clnn.functional as F
from clnn import nn


@pytest.fixture(scope="module")
def digits():
    return clnn.datasets.load_digits()


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),  # (N, 16, 4, 4)
        nn.Flatten(), nn.Linear(16 * 4 * 4, 10),
    )


def test_fit_reaches_95_percent_on_digits(dev, digits):
    (x, y), (xt, yt) = digits
    clnn.manual_seed(0)
    model = small_cnn().to(dev)
    model.compile(optimizer=clnn.optim.Adam(model.parameters(), lr=1e-2), loss="cross_entropy",
                  metrics=["accuracy"])
    history = model.fit(x, y, epochs=3, batch_size=64, validation_split=0.1, verbose=0, seed=0)
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert history.epoch == [0, 1, 2] and all(len(v) == 3 for v in history.history.values())
    assert history.history["loss"][-1] < history.history["loss"][0]
    result = model.evaluate(xt, yt, batch_size=128)
    assert set(result) == {"loss", "accuracy"} and result["accuracy"] >= 0.95, result
    probs = model.predict(xt, batch_size=100)
    assert probs.shape == (len(xt), 10) and isinstance(probs, np.ndarray)
    assert np.mean(probs.argmax(1) == yt) == pytest.approx(result["accuracy"])
    assert model.training  # evaluate/predict restore the mode


def _tiny_classifier(dev) -> nn.Module:
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).to(dev)
    model.compile(optimizer="sgd", loss="cross_entropy", metrics=["accuracy"])
    return model


@pytest.mark.parametrize(
    "x_shape, y_fn, exc, pattern",
    [
        ((20, 1, 8, 9), lambda n: np.zeros(n, np.int64), ValueError,
         r"fit: x has samples of shape \(1, 8, 9\), which Sequential does not accept"),
        ((20, 1, 8, 8), lambda n: np.full(n, 10), ValueError,
         r"y expects class labels in \[0, 10\) for a model with 10 outputs; got labels from 10 to 10"),
        ((20, 1, 8, 8), lambda n: np.full(n, -1), ValueError, r"got labels from -1 to -1"),
        ((20, 1, 8, 8), lambda n: np.zeros(n - 1, np.int64), ValueError,
         "x and y expect the same number of samples; got 20 and 19"),
        ((20, 1, 8, 8), lambda n: np.full(n, 0.5), ValueError, "y expects integer class labels"),
        ((20, 1, 8, 8), lambda n: np.zeros((n, 10)), ValueError, r"y expects one class label per sample"),
        ((20, 1, 8, 8), lambda n: ["a"] * n, TypeError, "y expects a numeric array"),
    ],
)
def test_fit_rejects_bad_input_before_training(dev, x_shape, y_fn, exc, pattern):
    model = _tiny_classifier(dev)
    before = {k: v.numpy() for k, v in model.state_dict().items()}
    x = np.zeros(x_shape, np.float32)
    with pytest.raises(exc, match=pattern):
        model.fit(x, y_fn(x_shape[0]), epochs=1, verbose=0)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])


def test_fit_checks_validation_data_and_compile(dev):
    model = _tiny_classifier(dev)
    x, y = np.zeros((8, 1, 8, 8), np.float32), np.zeros(8, np.int64)
    with pytest.raises(ValueError, match=r"fit: validation_data: y expects class labels in \[0, 10\)"):
        model.fit(x, y, validation_data=(x, y + 12), verbose=0)
    with pytest.raises(RuntimeError, match="call model.compile"):
        nn.Linear(2, 2).fit(x, y)
    with pytest.raises(ValueError, match="compile: optimizer expects one of"):
        model.compile(optimizer="adagrad")
    with pytest.raises(ValueError, match="compile: loss expects one of"):
        model.compile(loss="hinge")


def test_compile_accepts_objects_classes_and_callables(dev, rng):
    model = nn.Linear(3, 1).to(dev)
    x = rng.standard_normal((32, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32)) + 0.1
    model.compile(optimizer=clnn.optim.SGD, loss=lambda out, t: F.mse_loss(out, t))
    assert isinstance(model.optimizer, clnn.optim.SGD)
    model.compile(optimizer=clnn.optim.SGD(model.parameters(), lr=0.1), loss="mse", metrics=[F.l1_loss])
    history = model.fit(x, y, epochs=30, batch_size=8, verbose=0)
    assert history.history["loss"][-1] < 1e-2 and "l1_loss" in history.history


def test_callbacks(dev, tmp_path, digits):
    (x, y), _ = digits
    x, y = x[:256], y[:256]
    model = _tiny_classifier(dev)
    stop = nn.EarlyStopping(monitor="loss", min_delta=1e9, patience=1)
    lrs = nn.LearningRateScheduler(lambda epoch, lr: 0.1 / (epoch + 1))
    ckpt = nn.ModelCheckpoint(str(tmp_path / "m-{epoch:02d}.safetensors"), monitor="val_accuracy",
                              save_best_only=True)
    history = model.fit(x, y, epochs=10, batch_size=64, validation_split=0.25, callbacks=[stop, lrs, ckpt],
                        verbose=0)
    assert history.epoch == [0, 1, 2]  # the first epoch improves on inf, then two without improvement
    assert history.history["lr"] == pytest.approx([0.1, 0.05, 0.1 / 3])
    saved = sorted(p.name for p in tmp_path.iterdir())
    assert saved and saved[0] == "m-01.safetensors" and not any(p.endswith(".tmp") for p in saved)
    restored = nn.load(tmp_path / saved[-1])
    assert [k for k in restored.state_dict()] == [k for k in model.state_dict()]
    with pytest.raises(KeyError, match="monitor 'val_loss' is not among the logged values"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[nn.EarlyStopping()])


def test_nan_loss_stops_fit_and_keeps_the_last_good_checkpoint(dev, tmp_path, digits):
    (x, y), _ = digits
    x, y = x[:256], y[:256]
    model = _tiny_classifier(dev)
    blow_up = nn.LearningRateScheduler(lambda epoch, lr: 0.05 if epoch == 0 else 1e38)
    path = tmp_path / "last.safetensors"
    ckpt = nn.ModelCheckpoint(str(path), monitor="loss", save_weights_only=True)
    with pytest.warns(RuntimeWarning, match=r"training loss became (nan|inf) in epoch 2; training stopped"):
        history = model.fit(x, y, epochs=5, batch_size=64, callbacks=[blow_up, ckpt], verbose=0)
    assert history.epoch == [0]  # epoch 2's logs and callbacks never ran
    good = clnn.load_state_dict(path)
    assert all(np.isfinite(np.asarray(v)).all() for v in good.values())
    current = model.state_dict()
    assert any(not np.array_equal(np.asarray(current[k]), np.asarray(v)) for k, v in good.items())
    model.load_state_dict(good)
    assert np.isfinite(model.predict(x[:8])).all()
    # the default can be turned off: training then runs every epoch
    history = model.fit(x, y, epochs=2, batch_size=64, callbacks=[blow_up], verbose=0, terminate_on_nan=False)
    assert history.epoch == [0, 1] and not np.isfinite(history.history["loss"][1])


def test_progress_output_with_and_without_tqdm(dev, digits, capsys, monkeypatch):
    (x, y), _ = digits
    model = _tiny_classifier(dev)
    model.fit(x[:128], y[:128], epochs=1, batch_size=64, verbose=1, validation_split=0.25)
    err = capsys.readouterr().err
    final = [seg for seg in err.replace("\r", "\n").split("\n") if "Epoch 1/1" in seg][-1]
    assert "loss=" in final and "accuracy=" in final and "val_loss=" in final and "val_accuracy=" in final
    assert "\n  val_" not in err  # no separate validation line
    monkeypatch.setattr("clnn.nn.training.tqdm", None)
    model.fit(x[:128], y[:128], epochs=2, batch_size=64, verbose=1)
    out = capsys.readouterr().out
    assert "Epoch 1/2: loss=" in out and "Epoch 2/2: loss=" in out
    model.fit(x[:128], y[:128], epochs=1, verbose=0)
    assert capsys.readouterr() == ("", "")


def test_summary_like_keras(dev):
    model = small_cnn().to(dev)
    lines = []
    with pytest.raises(ValueError, match="summary: input_shape expects one sample's shape"):
        model.summary()
    model.summary(input_shape=(1, 8, 8), print_fn=lines.append)
    text = lines[0]
    assert 'Model: "Sequential"' in text
    assert "0 (Conv2d)" in text and "(None, 16, 8, 8)" in text and "(None, 10)" in text
    trainable = sum(p.size for p in model.parameters())
    assert f"Trainable params: {trainable:,}" in text
    assert "Non-trainable params: 32" in text  # BatchNorm's running mean and variance
    assert f"Total params: {trainable + 32:,}" in text


def test_pytorch_style_loop_matches_torch(dev, digits):
    """20 SGD-momentum steps, then 20 Adam steps over the same batches; each step from the same state gives torch's.

    Before every step torch's model and optimizer take clnn's weights and optimizer state, so each step is compared
    from one state: two independent float32 trajectories drift apart step by step (1.3e-4 after 40 steps once), and
    that drift is a property of float32 training, not of clnn.
    """
    (x, y), _ = digits

    def build(lib):
        return lib.Sequential(lib.Conv2d(1, 8, 3, padding=1), lib.ReLU(), lib.MaxPool2d(2), lib.Flatten(),
                              lib.Linear(8 * 4 * 4, 32), lib.ReLU(), lib.Linear(32, 10))

    def as_torch(state):
        return {k: torch.as_tensor(clnn.io.to_numpy(v)) if isinstance(v, clnn.Tensor) else v
                for k, v in state.items()}

    torch.manual_seed(0)
    ref = build(torch.nn)
    model = build(nn).to(dev)
    model.load_state_dict(ref.state_dict())
    losses = []
    # Adam with eps 1e-6: its update m / (sqrt(v) + eps) is sign-like, so with the default 1e-8 a gradient element
    # that is float32 noise (~1e-9: a weight the digits' blank border barely reaches) moves its weight by a whole
    # lr in a direction rounding picks, on either side; 1e-6 damps only such noise-level elements
    for name, make in [("sgd", lambda p, lib: lib.SGD(p, lr=0.05, momentum=0.9)),
                       ("adam", lambda p, lib: lib.Adam(p, lr=2e-3, eps=1e-6))]:
        opt, topt = make(model.parameters(), clnn.optim), make(ref.parameters(), torch.optim)
        loader = clnn.data.DataLoader(x, y, batch_size=32, shuffle=True, seed=1, device=dev)
        for step, (xb, yb) in enumerate(loader):
            if step == 20:
                break
            ref.load_state_dict(as_torch(model.state_dict()))
            state = opt.state_dict()
            topt.load_state_dict({**state, "state": {i: as_torch(s) for i, s in state["state"].items()}})
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tloss = torch.nn.functional.cross_entropy(ref(torch.tensor(xb.numpy())), torch.tensor(yb.numpy()))
            topt.zero_grad()
            tloss.backward()
            topt.step()
            assert abs(loss.item() - tloss.item()) < 1e-5 * tloss.item(), (name, step)
            for k, v in model.state_dict().items():
                assert rel_err(v.numpy(), ref.state_dict()[k].numpy()) < 1e-5, (name, step, k)
            losses.append(loss.item())
    # the loop trains: the last 5 of the 40 steps against the first 5 (from torch's seeded initialization; 20
    # SGD steps alone once lowered the loss by only 0.03 to 0.12, and by nothing from one unseeded start)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.1, losses


def test_device_memory_flat_over_500_steps(dev, rng):
    x = rng.standard_normal((96, 64)).astype(np.float32)
    y = rng.integers(0, 10, 96)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 10)).to(dev)
    opt = clnn.optim.Adam(model.parameters(), lr=1e-3)
    loader = clnn.data.DataLoader(x, y, batch_size=32, shuffle=True, seed=0, device=dev)
    in_use = []
    step = 0
    while step < 500:
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            del xb, yb, loss
            if step % 50 == 0:
                dev.synchronize()
                in_use.append(clnn.memory_stats(dev)["bytes_in_use"])
    assert max(in_use[1:]) <= in_use[1], in_use  # after warm-up, never more than at step 100


def _dropout_net() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 10))


def _compiled_dropout_net(dev) -> nn.Module:
    model = _dropout_net().to(dev)
    model.compile(optimizer=clnn.optim.Adam(model.parameters(), lr=1e-2, amsgrad=True), loss="cross_entropy",
                  metrics=["accuracy"])
    return model


_HALVING = nn.LearningRateScheduler(lambda epoch, lr: 1e-2 * 0.5**epoch)


def test_resume_in_a_new_process_repeats_the_uninterrupted_losses(dev, digits, tmp_path):
    """2 epochs, save, load in a fresh interpreter, 2 more: bit for bit the losses of 4 epochs in one go
    (optimizer state, epoch-dependent learning rate, shuffling and dropout all continue)."""
    (x, y), _ = digits
    x, y = x[:300], y[:300]
    clnn.manual_seed(11)
    whole = _compiled_dropout_net(dev).fit(x, y, epochs=4, batch_size=32, validation_split=0.2, verbose=0,
                                           callbacks=[_HALVING]).history
    clnn.manual_seed(11)
    model = _compiled_dropout_net(dev)
    first = model.fit(x, y, epochs=2, batch_size=32, validation_split=0.2, verbose=0, callbacks=[_HALVING])
    model.save(tmp_path / "ckpt.safetensors")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    script = textwrap.dedent(f"""
        import json, numpy as np, clnn
        from clnn import nn
        x, y = np.load({str(tmp_path / "x.npy")!r}), np.load({str(tmp_path / "y.npy")!r})
        model = nn.load({str(tmp_path / "ckpt.safetensors")!r})
        sched = nn.LearningRateScheduler(lambda epoch, lr: 1e-2 * 0.5**epoch)
        h = model.fit(x, y, epochs=4, initial_epoch=model.next_epoch, batch_size=32, validation_split=0.2,
                      verbose=0, callbacks=[sched])
        print(json.dumps({{"epoch": h.epoch, "history": h.history}}))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=os.environ,
                         timeout=600, check=False)
    assert run.returncode == 0, run.stderr
    second = json.loads(run.stdout.strip().splitlines()[-1])
    assert second["epoch"] == [2, 3]
    for k, values in whole.items():
        assert first.history[k] + second["history"][k] == values, k  # exact float equality
    assert whole["loss"][3] != whole["loss"][2]


def test_manual_seed_makes_fit_repeatable_and_fit_seed_overrides_shuffling(dev, digits):
    (x, y), _ = digits
    x, y = x[:200], y[:200]

    def run(global_seed, fit_seed=None, reseed=None):
        clnn.manual_seed(global_seed)
        model = _compiled_dropout_net(dev)
        if reseed is not None:
            clnn.manual_seed(reseed)
        losses = model.fit(x, y, epochs=2, batch_size=32, verbose=0, seed=fit_seed).history["loss"]
        return losses, model.state_dict()["4.weight"].numpy()

    base = run(5)
    same = run(5)
    assert base[0] == same[0]
    np.testing.assert_array_equal(base[1], same[1])
    assert run(6)[0] != base[0]

    def no_dropout(reseed, fit_seed):  # dropout off, so only the shuffling could differ
        clnn.manual_seed(5)
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).to(dev)
        model.compile(optimizer="adam", loss="cross_entropy")
        clnn.manual_seed(reseed)
        return model.fit(x, y, epochs=2, batch_size=32, verbose=0, seed=fit_seed).history["loss"]

    assert no_dropout(1, fit_seed=3) == no_dropout(2, fit_seed=3)
    assert no_dropout(1, fit_seed=None) != no_dropout(2, fit_seed=None)


def test_history_plot_saves_a_png(dev, digits, tmp_path, monkeypatch):
    (x, y), _ = digits
    history = _tiny_classifier(dev).fit(x[:128], y[:128], epochs=2, batch_size=64, validation_split=0.25,
                                         verbose=0)
    fig = history.plot(path=tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [ax.get_title() for ax in fig.axes] == ["loss", "accuracy"]
    assert [line.get_label() for line in fig.axes[0].lines] == ["train", "validation"]
    np.testing.assert_array_equal(fig.axes[0].lines[1].get_ydata(), history.history["val_loss"])
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]
    fig = history.plot(metrics=["accuracy"], path=tmp_path / "acc.png")
    assert [ax.get_title() for ax in fig.axes] == ["accuracy"]
    with pytest.raises(ValueError, match=r"metrics expects logged names .*; got 'auc'"):
        history.plot(metrics=["auc"], path=tmp_path / "x.png")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"History.plot needs matplotlib: pip install 'clnn\[plot\]'"):
        history.plot(path=tmp_path / "y.png")


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_fit_with_jit_compile_equals_eager_fit(dev, digits, precision):
    """Captured steps (one graph per batch shape: 200 samples in batches of 48 end with one of 8) train the
    same weights and log the same history, bit for bit, as eager steps: dropout, batch norm, accuracy,
    validation; evaluate and predict by replays give eager's values too."""
    (x, y), _ = digits
    x, y = x[:200], y[:200]

    def run(jit):
        clnn.manual_seed(7)
        model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                              nn.Dropout(0.3), nn.Linear(4 * 8 * 8, 10)).to(dev)
        model.compile(optimizer="adam", loss="cross_entropy", metrics=["accuracy"], precision=precision,
                      jit_compile=jit)
        history = model.fit(x, y, epochs=2, batch_size=48, verbose=0, validation_split=0.2)
        return (history.history, model.state_dict(), model.evaluate(x[:50], y[:50], batch_size=16),
                model.predict(x[:50], batch_size=16))

    eager, captured = run(False), run(True)
    assert eager[0] == captured[0] and len(set(eager[0]["loss"])) == 2
    assert eager[1].keys() == captured[1].keys()
    for k, v in eager[1].items():
        np.testing.assert_array_equal(captured[1][k].numpy(), v.numpy(), err_msg=k)
    assert eager[2] == captured[2]
    np.testing.assert_array_equal(captured[3], eager[3])


def test_jit_compile_refuses_what_it_cannot_capture(dev):
    model = _tiny_classifier(dev)
    with pytest.raises(TypeError, match="compile: jit_compile expects a bool; got 'yes'"):
        model.compile(jit_compile="yes")
    model.compile(jit_compile=True)
    x, y = np.ones((8, 1, 8, 8), np.float32), np.zeros(8, np.int64)
    with pytest.raises(ValueError, match="fit: distributed=True cannot run a captured step"):
        model.fit(x, y, verbose=0, distributed=True)
