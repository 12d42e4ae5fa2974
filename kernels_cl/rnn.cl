/* rnn.cl: the gate arithmetic of one LSTM or GRU time step, forward and backward; the GEMMs around it
 * (all steps' input projection, each step's recurrent product) are gemm.cl's.
 *
 * Layout (contiguous): T time steps, batch B, hidden size H, D directions, this launch's direction d;
 * G gates per cell in PyTorch's order (LSTM 4: i, f, g, o; GRU 3: r, z, n). One work-item per (b, j),
 * global size B * H; each reads and writes only its own (b, j) elements of the (B, H) state buffers,
 * so they are updated in place.
 * Forward, step t:
 *   xp     (T, B, G*H)  x_t @ W_ih^T + b_ih for every step (one GEMM before the loop)
 *   hp     (B, G*H)     h_{t-1} @ W_hh^T + b_hh, this step's recurrent GEMM
 *   h, c   (B, H)       the running state: h_{t-1}, c_{t-1} in, h_t, c_t out (c unused by the GRU)
 *   y      (T, B, D*H)  the layer's output: h_t goes to y[t, b, d*H + j]
 *   hn, cn (D, B, H)    the final state, written under RNN_LAST
 *   under RNN_SAVE, what the backward reads:
 *     act   (T, B, 4H)  LSTM: i, f, g, o after their nonlinearities; GRU: r, z, n and W_hn h_{t-1} + b_hn
 *     hprev (T, B, H)   h_{t-1} (the operand of the weight gradient dW_hh = sum_t dgh_t^T h_{t-1})
 *     cprev (T, B, H)   c_{t-1} (LSTM)
 *   LSTM: c_t = f c_{t-1} + i g, h_t = o tanh(c_t);
 *   GRU:  n = tanh(xp_n + r (W_hn h_{t-1} + b_hn)), h_t = (1 - z) n + z h_{t-1}.
 * Backward, step t (steps in reverse order of the forward's):
 *   dy (T, B, D*H) the output's gradient, read under RNN_DY; dh (B, H) the gradient reaching h_t through
 *   the recurrence (the previous backward GEMM's result, or h_n's gradient)
 *   LSTM: dc (B, H) in place: the gradient reaching c_t in, c_{t-1}'s out; writes the pre-activation
 *     gate gradients to dg (T, B, 4H) and this step's copy dgc (B, 4H): dh_{t-1} = dgc @ W_hh
 *   GRU: writes dgx (T, B, 3H) (gradients of the input projection), dg (T, B, 3H) (of the recurrent
 *     product; r's and z's equal dgx's, n's is dgx's times r), dgc (B, 3H) (dg's step) and dhz (B, H),
 *     the direct path dh_t z to h_{t-1}: dh_{t-1} = dgc @ W_hh + dhz
 * Defines: the element type (clnn_dtype.h).
 */
#include "clnn_dtype.h"

#define RNN_SAVE 1
#define RNN_LAST 2
#define RNN_DY 4

inline real sigm(real x) { return 1 / (1 + exp(-x)); }

__kernel void lstm_step(int B, int H, int t, int D, int d, int flags, __global const store_t *xp,
                        __global const store_t *hp, __global store_t *h, __global store_t *c, __global store_t *y,
                        __global store_t *hn, __global store_t *cn, __global store_t *act,
                        __global store_t *hprev, __global store_t *cprev) {
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, j = id - b * H;
    size_t g0 = (size_t)b * 4 * H + j, x0 = (size_t)t * B * 4 * H + g0;  // gate i of (b, j); f, g, o follow by H
    real i = sigm(LOAD(xp, x0) + LOAD(hp, g0));
    real f = sigm(LOAD(xp, x0 + H) + LOAD(hp, g0 + H));
    real g = tanh(LOAD(xp, x0 + 2 * H) + LOAD(hp, g0 + 2 * H));
    real o = sigm(LOAD(xp, x0 + 3 * H) + LOAD(hp, g0 + 3 * H));
    real c_prev = LOAD(c, id);
    real c_new = f * c_prev + i * g;
    real h_new = o * tanh(c_new);
    if (flags & RNN_SAVE) {
        size_t s = (size_t)t * B * H + id;
        STORE(hprev, s, LOAD(h, id));
        STORE(cprev, s, c_prev);
        STORE(act, x0, i);
        STORE(act, x0 + H, f);
        STORE(act, x0 + 2 * H, g);
        STORE(act, x0 + 3 * H, o);
    }
    STORE(h, id, h_new);
    STORE(c, id, c_new);
    STORE(y, ((size_t)t * B + b) * D * H + (size_t)d * H + j, h_new);
    if (flags & RNN_LAST) {
        STORE(hn, (size_t)d * B * H + id, h_new);
        STORE(cn, (size_t)d * B * H + id, c_new);
    }
}

__kernel void gru_step(int B, int H, int t, int D, int d, int flags, __global const store_t *xp,
                       __global const store_t *hp, __global store_t *h, __global store_t *y, __global store_t *hn,
                       __global store_t *act, __global store_t *hprev) {
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, j = id - b * H;
    size_t g0 = (size_t)b * 3 * H + j, x0 = (size_t)t * B * 3 * H + g0;  // gate r of (b, j); z, n follow by H
    real r = sigm(LOAD(xp, x0) + LOAD(hp, g0));
    real z = sigm(LOAD(xp, x0 + H) + LOAD(hp, g0 + H));
    real hn_lin = LOAD(hp, g0 + 2 * H);
    real n = tanh(LOAD(xp, x0 + 2 * H) + r * hn_lin);
    real h_prev = LOAD(h, id);
    real h_new = (1 - z) * n + z * h_prev;
    if (flags & RNN_SAVE) {
        size_t a0 = (size_t)(t * B + b) * 4 * H + j;
        STORE(hprev, (size_t)t * B * H + id, h_prev);
        STORE(act, a0, r);
        STORE(act, a0 + H, z);
        STORE(act, a0 + 2 * H, n);
        STORE(act, a0 + 3 * H, hn_lin);
    }
    STORE(h, id, h_new);
    STORE(y, ((size_t)t * B + b) * D * H + (size_t)d * H + j, h_new);
    if (flags & RNN_LAST) STORE(hn, (size_t)d * B * H + id, h_new);
}

__kernel void lstm_step_bwd(int B, int H, int t, int D, int d, int flags, __global const store_t *act,
                            __global const store_t *cprev, __global const store_t *dy, __global const store_t *dh,
                            __global store_t *dc, __global store_t *dg, __global store_t *dgc) {
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, j = id - b * H;
    size_t g0 = (size_t)b * 4 * H + j, x0 = (size_t)t * B * 4 * H + g0;
    real i = LOAD(act, x0), f = LOAD(act, x0 + H), g = LOAD(act, x0 + 2 * H), o = LOAD(act, x0 + 3 * H);
    real c_prev = LOAD(cprev, (size_t)t * B * H + id);
    real tc = tanh(f * c_prev + i * g);
    real dht = LOAD(dh, id);
    if (flags & RNN_DY) dht += LOAD(dy, ((size_t)t * B + b) * D * H + (size_t)d * H + j);
    real dct = LOAD(dc, id) + dht * o * (1 - tc * tc);
    real di = dct * g * i * (1 - i);
    real df = dct * c_prev * f * (1 - f);
    real dgg = dct * i * (1 - g * g);
    real dout = dht * tc * o * (1 - o);
    STORE(dc, id, dct * f);
    STORE(dg, x0, di);
    STORE(dg, x0 + H, df);
    STORE(dg, x0 + 2 * H, dgg);
    STORE(dg, x0 + 3 * H, dout);
    STORE(dgc, g0, di);
    STORE(dgc, g0 + H, df);
    STORE(dgc, g0 + 2 * H, dgg);
    STORE(dgc, g0 + 3 * H, dout);
}

__kernel void gru_step_bwd(int B, int H, int t, int D, int d, int flags, __global const store_t *act,
                           __global const store_t *hprev, __global const store_t *dy, __global const store_t *dh,
                           __global store_t *dgx, __global store_t *dg, __global store_t *dgc,
                           __global store_t *dhz) {
    int id = get_global_id(0);
    if (id >= B * H) return;
    int b = id / H, j = id - b * H;
    size_t a0 = (size_t)(t * B + b) * 4 * H + j;
    real r = LOAD(act, a0), z = LOAD(act, a0 + H), n = LOAD(act, a0 + 2 * H), hn_lin = LOAD(act, a0 + 3 * H);
    real h_prev = LOAD(hprev, (size_t)t * B * H + id);
    real dht = LOAD(dh, id);
    if (flags & RNN_DY) dht += LOAD(dy, ((size_t)t * B + b) * D * H + (size_t)d * H + j);
    real dn = dht * (1 - z) * (1 - n * n);                    // through n's pre-activation
    real dr = dn * hn_lin * r * (1 - r);
    real dz = dht * (h_prev - n) * z * (1 - z);
    size_t g0 = (size_t)b * 3 * H + j, x0 = (size_t)t * B * 3 * H + g0;
    STORE(dgx, x0, dr);
    STORE(dgx, x0 + H, dz);
    STORE(dgx, x0 + 2 * H, dn);
    STORE(dg, x0, dr);
    STORE(dg, x0 + H, dz);
    STORE(dg, x0 + 2 * H, dn * r);
    STORE(dgc, g0, dr);
    STORE(dgc, g0 + H, dz);
    STORE(dgc, g0 + 2 * H, dn * r);
    STORE(dhz, id, dht * z);
}
