"""Recurrent layers: one LSTM or GRU layer over a whole sequence, both directions (``kernels_cl/rnn.cl``).

Per direction the input projection of every time step is one GEMM; each step is then two launches, the
recurrent GEMM ``h_{t-1} @ W_hh^T + b_hh`` and a fused gate kernel that writes ``h_t`` (and ``c_t``)
straight into the output sequence and the running state. The backward (BPTT) is one graph node per layer:
per step a gate-backward kernel and the GEMM carrying the gradient to ``h_{t-1}``, then the weight
gradients as single GEMMs over all steps and the bias gradients as column sums.

An LSTM with a projection (``proj_size`` P, weight W_hr) adds one GEMM per step, ``h_t = h'_t @ W_hr^T`` of
the gate kernel's ``h'_t = o * tanh(c_t)``, and its backward one, ``dh'_t = dh_t @ W_hr``. The gate kernel then
runs as a one-direction layer over h': its output is the (T, B, H) sequence of h' (dW_hr's operand), its final
state outputs are the running state itself, and its copy of h'_{t-1} (unused) lands in the output's slot of
step t, which the same work-item then overwrites with h'_t. One buffer copy per step gathers the projected
states, after h_0, in time order, so every step's h_{t-1} (dW_hh's operand) is one contiguous slab.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import kernels, tuning
from ..device import Device
from ..kernels import defines, launch_1d
from ..profiler import profiled
from ..tensor import Tensor, is_grad_enabled
from ._core import empty, record
from .creation import zeros
from .matmul import GemmPlan, b_as_rows, gemm_raw, plan
from .norm import channel_sum
from .shape import cat, getitem, strided_copy

RNN_SAVE, RNN_LAST, RNN_DY = (kernels.op_codes("rnn.cl", "RNN_")[k] for k in ("save", "last", "dy"))
GATES = {"lstm": 4, "gru": 3}

# (W_ih (G*H, I), W_hh (G*H, R), b_ih (G*H,) or None, b_hh (G*H,) or None, W_hr (P, H) or None) of one direction;
# R, the state's width, is P with the LSTM's projection W_hr, else H
Weights = tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor | None]


def _record_outputs(outs: Sequence[Tensor], inputs: tuple[Tensor, ...],
                    backward: Callable[[list[Tensor | None]], Sequence[Tensor | None]], name: str) -> None:
    """Make ``outs`` the outputs of one graph node: ``backward`` gets one gradient (or None) per output.

    The engine's nodes have one output, so each output gets a small node that hands its gradient to a
    shared one-element token; the token's node (run after all of them, as the graph is walked in
    topological order) is the real backward.
    """
    if not (is_grad_enabled() and any(t.requires_grad for t in inputs)):
        return
    token = zeros((1,), dtype=outs[0].dtype, device=outs[0].device)
    zero = token.detach()
    got: dict[int, Tensor] = {}
    record(token, inputs, lambda _: backward([got.pop(i, None) for i in range(len(outs))]), name)

    def stash(i: int) -> Callable[[Tensor], tuple[Tensor]]:
        def hand_over(g: Tensor) -> tuple[Tensor]:
            got[i] = g
            return (zero,)
        return hand_over

    for i, out in enumerate(outs):
        record(out, (token,), stash(i), f"{name}_output")


def _state(s: Tensor | None, d: int, b: int, n: int, like: Tensor) -> Tensor:
    """A fresh (B, n) copy of direction ``d`` of the (D, B, n) state ``s``, zeros without one."""
    return getitem(s.detach(), d) if s is not None else zeros((b, n), dtype=like.dtype, device=like.device)


def _stack(parts: list[Tensor]) -> Tensor:
    """(B, H) tensors (or (1, B, H)) as one (D, B, H)."""
    parts = [p.reshape(1, *p.shape[-2:]) for p in parts]
    return parts[0] if len(parts) == 1 else cat(parts)


def _units(dev: Device, dtype: np.dtype, hidden: int) -> int:
    """rnn.cl's RNN_VW: tuning's ``rnn`` VW where it divides ``hidden`` and storage is float32 or float64, else 1."""
    vw = int(tuning.params(dev, "rnn")["VW"])
    return vw if hidden % vw == 0 and np.dtype(dtype) in (np.float32, np.float64) else 1


def _as_rows(w: Tensor, how: GemmPlan) -> tuple[Tensor, tuple[int, int, int]]:
    """The operand ``w^T`` of a recurrent step's product ``h @ w^T`` planned ``how``, and its strides: for gemm_rows
    (CPUs), which reads B's rows as vectors, w^T copied to rows once for all the steps; else ``w`` read transposed."""
    out_features, in_features = w.shape
    transposed = (0, 1, in_features)
    return b_as_rows(w, transposed, 1, in_features, out_features) if how.kernel == "rows" else (w, transposed)


@profiled
def rnn_layer(mode: str, x: Tensor, h0: Tensor | None, c0: Tensor | None, weights: Sequence[Weights]
              ) -> tuple[Tensor, Tensor, Tensor | None]:
    """One ``mode`` ("lstm" or "gru") layer over the sequence ``x``, as PyTorch's, in each direction given.

    ``weights`` holds one :data:`Weights` per direction (forward, then reverse), W_hr (LSTM only) in all or
    none. The caller (:class:`clnn.nn.LSTM`, :class:`clnn.nn.GRU`) validates shapes, dtypes and devices.

    Shapes: x (T, B, I), h0 (D, B, R) and c0 (D, B, H) or None (zeros) -> output (T, B, D*R), h_n (D, B, R),
    c_n (D, B, H) for the LSTM (None for the GRU). Differentiable in x, h0, c0 and every weight.
    """
    t_len, batch, n_in = x.shape
    dirs, (gh, r), proj = len(weights), weights[0][1].shape, weights[0][4] is not None
    hid, dev, dt = gh // GATES[mode], x.device, x.dtype
    lstm = mode == "lstm"
    candidates = (x, h0, c0, *(w for ws in weights for w in ws))
    inputs = tuple(t for t in candidates if t is not None)
    save = is_grad_enabled() and any(t.requires_grad for t in inputs)
    y = empty((t_len, batch, dirs * r), dt, dev)
    hn = empty((dirs, batch, r), dt, dev)
    cn = empty((dirs, batch, hid), dt, dev) if lstm else None
    vw = _units(dev, dt, hid)
    items = batch * hid // vw  # the gate kernels' work-items
    step = kernels.kernel(dev, "rnn.cl", f"{mode}_step", defines(dt, RNN_VW=vw))
    how = plan(dev, dt, 1, batch, gh, r, max_splits=1)  # one launch per recurrent GEMM
    how_p = plan(dev, dt, 1, batch, r, hid, max_splits=1) if proj else None
    state_bytes = batch * r * dt.itemsize  # of one (B, R) state
    saved = []
    for d, (w_ih, w_hh, b_ih, b_hh, w_hr) in enumerate(weights):
        w_hh_t, hh_strides = _as_rows(w_hh, how)  # W_hh^T (and W_hr^T) for every step's product
        w_hr_t, hr_strides = _as_rows(w_hr, how_p) if proj else (None, None)
        xp = gemm_raw(x, (0, n_in, 1), w_ih, (0, 1, n_in), 1, t_len * batch, gh, n_in,
                      beta=float(b_ih is not None), c=b_ih, c_strides=(0, 0, 1))
        h = _state(h0, d, batch, r, x)
        c = _state(c0, d, batch, hid, x) if lstm else None
        act = empty((t_len, batch, 4 * hid), dt, dev) if save else xp
        hprev = empty((t_len, batch, hid), dt, dev) if save and not proj else xp
        cprev = empty((t_len, batch, hid), dt, dev) if save and lstm else xp
        order = range(t_len) if d == 0 else range(t_len - 1, -1, -1)
        where = (np.int32(1), np.int32(0)) if proj else (np.int32(dirs), np.int32(d))  # the kernel's (D, d)
        hf = hf_t = None
        if proj:  # h' of every step, the running h', and h_0 with each step's h in time order
            hf, hf_t = empty((t_len, batch, hid), dt, dev), zeros((batch, hid), dtype=dt, device=dev)
            hs, at = empty((t_len + 1, batch, r), dt, dev), int(d == 0)  # h_t in row t + at, h_0 first or last
            dev.copy(hs.data, h.data, state_bytes, dst_offset=(1 - at) * t_len * state_bytes)
        for s, t in enumerate(order):
            hp = gemm_raw(h, (0, r, 1), w_hh_t, hh_strides, 1, batch, gh, r,
                          beta=float(b_hh is not None), c=b_hh, c_strides=(0, 0, 1), how=how)
            flags = np.int32((RNN_SAVE if save else 0) | (RNN_LAST if s == t_len - 1 else 0))
            sizes = (np.int32(batch), np.int32(hid), np.int32(t), *where, flags)
            if proj:
                launch_1d(dev, step, items, *sizes, xp.data, hp.data, hf_t.data, c.data, hf.data, hf_t.data,
                          c.data, act.data, hf.data, cprev.data)
                h = gemm_raw(hf_t, (0, hid, 1), w_hr_t, hr_strides, 1, batch, r, hid, how=how_p)
                dev.copy(hs.data, h.data, state_bytes, dst_offset=(t + at) * state_bytes)
            elif lstm:
                launch_1d(dev, step, items, *sizes, xp.data, hp.data, h.data, c.data, y.data, hn.data,
                          cn.data, act.data, hprev.data, cprev.data)
            else:
                launch_1d(dev, step, items, *sizes, xp.data, hp.data, h.data, y.data, hn.data, act.data,
                          hprev.data)
        if proj:
            strided_copy(hs, y, (t_len, batch, r), (batch * r, r, 1), (batch * dirs * r, dirs * r, 1),
                         src_offset=at * batch * r, dst_offset=d * r)
            dev.copy(hn.data, h.data, state_bytes, dst_offset=d * state_bytes)
            dev.copy(cn.data, c.data, c.nbytes, dst_offset=d * c.nbytes)
            if save:  # h_{t-1} of every step t in time order: the rows of hs other than h_t's
                hprev = empty((t_len, batch, r), dt, dev)
                dev.copy(hprev.data, hs.data, t_len * state_bytes, src_offset=(1 - at) * state_bytes)
        saved.append((act, hprev, cprev, order, hf))

    def backward(grads: list[Tensor | None]) -> list[Tensor | None]:
        gy, ghn, gcn = grads if lstm else (*grads, None)
        back = kernels.kernel(dev, "rnn.cl", f"{mode}_step_bwd", defines(dt, RNN_VW=vw))
        how_b = plan(dev, dt, 1, batch, r, gh, max_splits=1)
        how_pb = plan(dev, dt, 1, batch, hid, r, max_splits=1) if proj else None
        rows = t_len * batch
        gx, dh0, dc0, dw = None, [], [], []
        for d, ((w_ih, w_hh, b_ih, b_hh, w_hr), (act, hprev, cprev, order, hf)) in enumerate(zip(weights, saved)):
            dh = _state(ghn, d, batch, r, x)  # the gradient reaching h_t through the recurrence
            dc = _state(gcn, d, batch, hid, x) if lstm else None
            dg = empty((t_len, batch, gh), dt, dev)
            dgx = dg if lstm else empty((t_len, batch, gh), dt, dev)
            dgc = empty((batch, gh), dt, dev)
            dhz = None if lstm else empty((batch, hid), dt, dev)
            flags = np.int32(RNN_DY if gy is not None else 0)
            dy = (gy if gy is not None else dg).data
            where = (np.int32(1), np.int32(0)) if proj else (np.int32(dirs), np.int32(d))
            gyd = dhs = None
            if proj:  # the kernel's dy is the output's gradient taken through W_hr; dhs keeps each step's dh
                gyd = getitem(gy.detach(), (slice(None), slice(None), slice(d * r, (d + 1) * r))) if gy is not None \
                    else None
                gyf = None if gyd is None else gemm_raw(gyd, (0, r, 1), w_hr, (0, hid, 1), 1, rows, hid, r)
                dy = dy if gyf is None else gyf.data  # gyf, held until the loop's launches are queued
                dhs = empty((t_len, batch, r), dt, dev)
            for t in reversed(order):
                sizes = (np.int32(batch), np.int32(hid), np.int32(t), *where, flags)
                dhf = dh
                if proj:
                    dev.copy(dhs.data, dh.data, state_bytes, dst_offset=t * state_bytes)
                    dhf = gemm_raw(dh, (0, r, 1), w_hr, (0, hid, 1), 1, batch, hid, r, how=how_pb)
                if lstm:
                    launch_1d(dev, back, items, *sizes, act.data, cprev.data, dy, dhf.data, dc.data, dg.data,
                              dgc.data)
                else:
                    launch_1d(dev, back, items, *sizes, act.data, hprev.data, dy, dh.data, dgx.data, dg.data,
                              dgc.data, dhz.data)
                dh = gemm_raw(dgc, (0, gh, 1), w_hh, (0, r, 1), 1, batch, r, gh,
                              beta=0.0 if lstm else 1.0, c=dhz, how=how_b)  # dh_{t-1} = dgc @ W_hh (+ dh_t z)
            dh0.append(dh)
            dc0.append(dc)
            if x.requires_grad:  # summed over directions through the GEMM's addend
                gx = gemm_raw(dgx, (0, gh, 1), w_ih, (0, n_in, 1), 1, rows, n_in, gh, beta=float(gx is not None), c=gx)
            dw += [
                gemm_raw(dgx, (0, 1, gh), x, (0, n_in, 1), 1, gh, n_in, rows).reshape(gh, n_in),
                gemm_raw(dg, (0, 1, gh), hprev, (0, r, 1), 1, gh, r, rows).reshape(gh, r),
                channel_sum(dgx, rows, gh, 1) if b_ih is not None else None,
                channel_sum(dg, rows, gh, 1) if b_hh is not None else None,
                gemm_raw(dhs if gyd is None else dhs + gyd, (0, 1, r), hf, (0, hid, 1), 1, r, hid, rows
                         ).reshape(r, hid) if proj else None,
            ]
        every = (gx.reshape(x.shape) if gx is not None else None, _stack(dh0) if h0 is not None else None,
                 _stack(dc0) if c0 is not None else None, *dw)
        return [gi for t, gi in zip(candidates, every) if t is not None]

    _record_outputs([y, hn] + ([cn] if lstm else []), inputs, backward, mode)
    return y, hn, cn
