/* rnn.cl: the gate arithmetic of one LSTM or GRU time step, forward and backward; the GEMMs around it
 * (all steps' input projection, each step's recurrent product) are gemm.cl's.
 *
 * Layout (contiguous): T time steps, batch B, hidden size H, D directions, this launch's direction d;
 * G gates per cell in PyTorch's order (LSTM 4: i, f, g, o; GRU 3: r, z, n). One work-item per RNN_VW units
 * (b, j .. j + RNN_VW) of a batch row, global size B * H / RNN_VW; each reads and writes only its own elements of
 * the (B, H) state buffers, so they are updated in place.
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
 * Defines: the element type (clnn_dtype.h); RNN_VW, the units a work-item takes in vectors (1; where H % RNN_VW ==
 * 0, float32 or float64 storage only: CPUs, whose PoCL calls exp and tanh once an element otherwise).
 */
#include "clnn_dtype.h"

#define RNN_SAVE 1
#define RNN_LAST 2
#define RNN_DY 4

/* vec, RNN_VW reals; VLOAD(p, o) and VSTORE(p, o, v), the vector at element o of p */
#if RNN_VW > 1
typedef CLNN_CAT(REAL_T, RNN_VW) vec;
#if VEC_LANES
VEC_LANE_IO(rv, vec, real, RNN_VW)
#define VLOAD(p, o) rv_load(0, (p) + (o))
#define VSTORE(p, o, v) rv_store(v, 0, (p) + (o))
#else
#define VLOAD(p, o) CLNN_CAT(vload, RNN_VW)(0, (p) + (o))
#define VSTORE(p, o, v) CLNN_CAT(vstore, RNN_VW)(v, 0, (p) + (o))
#endif
#else
typedef real vec;
#define VLOAD(p, o) LOAD(p, o)
#define VSTORE(p, o, v) STORE(p, o, v)
#endif

#define SIGM(x) (1 / (1 + exp(-(x))))

/* this work-item's batch row b and first unit j, and id, their offset in a (B, H) buffer; returns past the range */
#define UNITS                                         \
    const int hv = H / RNN_VW, w = get_global_id(0); \
    if (w >= B * hv) return;                          \
    const int b = w / hv, j = (w - b * hv) * RNN_VW, id = b * H + j

__kernel void lstm_step(int B, int H, int t, int D, int d, int flags, __global const store_t *xp,
                        __global const store_t *hp, __global store_t *h, __global store_t *c, __global store_t *y,
                        __global store_t *hn, __global store_t *cn, __global store_t *act,
                        __global store_t *hprev, __global store_t *cprev) {
    UNITS;
    size_t g0 = (size_t)b * 4 * H + j, x0 = (size_t)t * B * 4 * H + g0;  // gate i of (b, j); f, g, o follow by H
    vec i = SIGM(VLOAD(xp, x0) + VLOAD(hp, g0));
    vec f = SIGM(VLOAD(xp, x0 + H) + VLOAD(hp, g0 + H));
    vec g = tanh(VLOAD(xp, x0 + 2 * H) + VLOAD(hp, g0 + 2 * H));
    vec o = SIGM(VLOAD(xp, x0 + 3 * H) + VLOAD(hp, g0 + 3 * H));
    vec c_prev = VLOAD(c, id);
    vec c_new = f * c_prev + i * g;
    vec h_new = o * tanh(c_new);
    if (flags & RNN_SAVE) {
        size_t s = (size_t)t * B * H + id;
        VSTORE(hprev, s, VLOAD(h, id));
        VSTORE(cprev, s, c_prev);
        VSTORE(act, x0, i);
        VSTORE(act, x0 + H, f);
        VSTORE(act, x0 + 2 * H, g);
        VSTORE(act, x0 + 3 * H, o);
    }
    VSTORE(h, id, h_new);
    VSTORE(c, id, c_new);
    VSTORE(y, ((size_t)t * B + b) * D * H + (size_t)d * H + j, h_new);
    if (flags & RNN_LAST) {
        VSTORE(hn, (size_t)d * B * H + id, h_new);
        VSTORE(cn, (size_t)d * B * H + id, c_new);
    }
}

__kernel void gru_step(int B, int H, int t, int D, int d, int flags, __global const store_t *xp,
                       __global const store_t *hp, __global store_t *h, __global store_t *y, __global store_t *hn,
                       __global store_t *act, __global store_t *hprev) {
    UNITS;
    size_t g0 = (size_t)b * 3 * H + j, x0 = (size_t)t * B * 3 * H + g0;  // gate r of (b, j); z, n follow by H
    vec r = SIGM(VLOAD(xp, x0) + VLOAD(hp, g0));
    vec z = SIGM(VLOAD(xp, x0 + H) + VLOAD(hp, g0 + H));
    vec hn_lin = VLOAD(hp, g0 + 2 * H);
    vec n = tanh(VLOAD(xp, x0 + 2 * H) + r * hn_lin);
    vec h_prev = VLOAD(h, id);
    vec h_new = (1 - z) * n + z * h_prev;
    if (flags & RNN_SAVE) {
        size_t a0 = (size_t)(t * B + b) * 4 * H + j;
        VSTORE(hprev, (size_t)t * B * H + id, h_prev);
        VSTORE(act, a0, r);
        VSTORE(act, a0 + H, z);
        VSTORE(act, a0 + 2 * H, n);
        VSTORE(act, a0 + 3 * H, hn_lin);
    }
    VSTORE(h, id, h_new);
    VSTORE(y, ((size_t)t * B + b) * D * H + (size_t)d * H + j, h_new);
    if (flags & RNN_LAST) VSTORE(hn, (size_t)d * B * H + id, h_new);
}

__kernel void lstm_step_bwd(int B, int H, int t, int D, int d, int flags, __global const store_t *act,
                            __global const store_t *cprev, __global const store_t *dy, __global const store_t *dh,
                            __global store_t *dc, __global store_t *dg, __global store_t *dgc) {
    UNITS;
    size_t g0 = (size_t)b * 4 * H + j, x0 = (size_t)t * B * 4 * H + g0;
    vec i = VLOAD(act, x0), f = VLOAD(act, x0 + H), g = VLOAD(act, x0 + 2 * H), o = VLOAD(act, x0 + 3 * H);
    vec c_prev = VLOAD(cprev, (size_t)t * B * H + id);
    vec tc = tanh(f * c_prev + i * g);
    vec dht = VLOAD(dh, id);
    if (flags & RNN_DY) dht += VLOAD(dy, ((size_t)t * B + b) * D * H + (size_t)d * H + j);
    vec dct = VLOAD(dc, id) + dht * o * (1 - tc * tc);
    vec di = dct * g * i * (1 - i);
    vec df = dct * c_prev * f * (1 - f);
    vec dgg = dct * i * (1 - g * g);
    vec dout = dht * tc * o * (1 - o);
    VSTORE(dc, id, dct * f);
    VSTORE(dg, x0, di);
    VSTORE(dg, x0 + H, df);
    VSTORE(dg, x0 + 2 * H, dgg);
    VSTORE(dg, x0 + 3 * H, dout);
    VSTORE(dgc, g0, di);
    VSTORE(dgc, g0 + H, df);
    VSTORE(dgc, g0 + 2 * H, dgg);
    VSTORE(dgc, g0 + 3 * H, dout);
}

__kernel void gru_step_bwd(int B, int H, int t, int D, int d, int flags, __global const store_t *act,
                           __global const store_t *hprev, __global const store_t *dy, __global const store_t *dh,
                           __global store_t *dgx, __global store_t *dg, __global store_t *dgc,
                           __global store_t *dhz) {
    UNITS;
    size_t a0 = (size_t)(t * B + b) * 4 * H + j;
    vec r = VLOAD(act, a0), z = VLOAD(act, a0 + H), n = VLOAD(act, a0 + 2 * H), hn_lin = VLOAD(act, a0 + 3 * H);
    vec h_prev = VLOAD(hprev, (size_t)t * B * H + id);
    vec dht = VLOAD(dh, id);
    if (flags & RNN_DY) dht += VLOAD(dy, ((size_t)t * B + b) * D * H + (size_t)d * H + j);
    vec dn = dht * (1 - z) * (1 - n * n);                    // through n's pre-activation
    vec dr = dn * hn_lin * r * (1 - r);
    vec dz = dht * (h_prev - n) * z * (1 - z);
    size_t g0 = (size_t)b * 3 * H + j, x0 = (size_t)t * B * 3 * H + g0;
    VSTORE(dgx, x0, dr);
    VSTORE(dgx, x0 + H, dz);
    VSTORE(dgx, x0 + 2 * H, dn);
    VSTORE(dg, x0, dr);
    VSTORE(dg, x0 + H, dz);
    VSTORE(dg, x0 + 2 * H, dn * r);
    VSTORE(dgc, g0, dr);
    VSTORE(dgc, g0 + H, dz);
    VSTORE(dgc, g0 + 2 * H, dn * r);
    VSTORE(dhz, id, dht * z);
}
