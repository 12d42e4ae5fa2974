/* clnn_shape.h: MAXD, the most dimensions a kernel's shape descriptor holds after the host merged what
 * it could (included, never built alone; clnn/kernels.py reads the value from here); GROUP_ID, a work-group's
 * index in a grid kernels.launch may cut into several launches; FOR_GROUP_ELEMS, the
 * elements of a grouped view a work-item of kernels.launch_by_rows maps; desc_t, kernels.descriptor's struct,
 * and desc_row, its offsets at a row; FOR_RUNS, the runs of rows a work-item of kernels.launch_runs walks.
 */
#ifndef CLNN_SHAPE_H
#define CLNN_SHAPE_H
#define MAXD 8

/* GROUP_ID(d): the work-group's index along d in the whole grid. kernels.launch cuts a grid with more work-groups
 * along y or z than the device runs (CUDA's 65,535 on NVIDIA) into launches at global offsets, and get_group_id
 * counts from each launch's offset (get_global_id includes it). */
#define GROUP_ID(d) (get_group_id(d) + get_global_offset(d) / get_local_size(d))

/* x viewed as (outer, G, inner) and launched as rows (kernels.launch_by_rows): with inner > 1 a row of the inner
 * elements j per (o, c), else a row of the G groups c per o. No division per element, and work-items along a
 * row take neighbouring elements (GPUs: coalesced; CPUs: vector loads). An element: its index i in x and its
 * coordinates (o, c, j). */
typedef struct { size_t i; int o, c, j; } group_elem_t;

/* FOR_GROUP_ELEMS(outer, G, inner, e, BODY): BODY for each element e (a group_elem_t) of this work-item. Without
 * GROUP_WALK, the work-item's one element, its coordinates worked out in a branch per kind of row, so that the
 * compiler sees a row's group as uniform where inner > 1 (Intel's runtime gathered the parameters of a group chosen
 * by a select per lane); with GROUP_WALK (tuning's storage row: PoCL), a run of up to GROUP_WALK elements of a row,
 * walked in a loop the compiler vectorizes (kernels.launch_by_rows launches a work-item per run). PoCL vectorizes
 * across work-items no code that tests its index against the row's end: batch norm's apply over 16x96x27x27 took
 * 2.1 ms so, 0.13 walked. BODY must not return. */
#ifndef GROUP_WALK
#define GROUP_WALK 0
#endif
#if GROUP_WALK
#define FOR_GROUP_ELEMS(outer, G, inner, e, ...)                                                            \
    do {                                                                                                    \
        const int cols_ = (inner) > 1 ? (inner) : (G), rows_ = (inner) > 1 ? (outer) * (G) : (outer);       \
        const int runs_ = (cols_ + GROUP_WALK - 1) / GROUP_WALK, item_ = get_global_id(0);                  \
        const int row_ = item_ / runs_, j0_ = (item_ - row_ * runs_) * GROUP_WALK;                          \
        if (row_ >= rows_) break;                                                                           \
        const int j1_ = min(j0_ + GROUP_WALK, cols_);                                                       \
        group_elem_t e;                                                                                     \
        e.o = (inner) > 1 ? row_ / (G) : row_;                                                              \
        const size_t base_ = (size_t)row_ * cols_;                                                          \
        if ((inner) > 1) {                                                                                  \
            e.c = row_ - e.o * (G);                                                                         \
            for (int j_ = j0_; j_ < j1_; ++j_) {                                                            \
                e.i = base_ + j_;                                                                           \
                e.j = j_;                                                                                   \
                __VA_ARGS__                                                                                 \
            }                                                                                               \
        } else {                                                                                            \
            e.j = 0;                                                                                        \
            for (int j_ = j0_; j_ < j1_; ++j_) {                                                            \
                e.i = base_ + j_;                                                                           \
                e.c = j_;                                                                                   \
                __VA_ARGS__                                                                                 \
            }                                                                                               \
        }                                                                                                   \
    } while (0)
#else
#define FOR_GROUP_ELEMS(outer, G, inner, e, ...)                                                            \
    do {                                                                                                    \
        const int col_ = get_global_id(0), row_ = get_global_id(1);                                         \
        group_elem_t e;                                                                                     \
        if ((inner) > 1) {                                                                                  \
            if (col_ >= (inner) || row_ >= (outer) * (G)) break;                                            \
            e.i = (size_t)row_ * (inner) + col_;                                                            \
            e.o = row_ / (G);                                                                               \
            e.c = row_ - e.o * (G);                                                                         \
            e.j = col_;                                                                                     \
            __VA_ARGS__                                                                                     \
        } else {                                                                                            \
            if (col_ >= (G) || row_ >= (outer)) break;                                                      \
            e.i = (size_t)row_ * (G) + col_;                                                                \
            e.o = row_;                                                                                     \
            e.c = col_;                                                                                     \
            e.j = 0;                                                                                        \
            __VA_ARGS__                                                                                     \
        }                                                                                                   \
    } while (0)
#endif

/* kernels.descriptor: a shape (outermost first, adjacent dims merged) and two operands' element strides in it */
typedef struct { int ndim; int shape[MAXD]; int s0[MAXD]; int s1[MAXD]; } desc_t;

/* the operands' offsets *o0, *o1 at row `row` of the descriptor's innermost dimension (rows: every index of the
 * outer ones, in order), and their strides *t0, *t1 along it. The loop runs to the constant MAXD, so that every
 * index into d is a constant: indexed at run time, GPU compilers copy the descriptor to each work-item's stack (in
 * clang's NVPTX build of copy and binary, 104 bytes of local memory a work-item) */
inline void desc_row(const desc_t *d, int row, int *o0, int *o1, int *t0, int *t1) {
    const int last = max(d->ndim - 1, 0);
    int a = 0, b = 0;
#pragma unroll
    for (int k = MAXD - 1; k >= 0; --k) {
        if (k == last) {
            *t0 = d->s0[k];
            *t1 = d->s1[k];
        }
        if (k >= last) continue;
        const int idx = row % d->shape[k];
        row /= d->shape[k];
        a += idx * d->s0[k];
        b += idx * d->s1[k];
    }
    *o0 = a;
    *o1 = b;
}

/* kernels.launch_runs' work-item: a run [j0, j1) of one row (chunk < cols), or whole rows row .. end - 1 (chunk >=
 * cols: chunk / cols of them, CPUs' short rows); per row the operands' offsets o0, o1 and strides t0, t1 along it.
 * The next row's offsets step along the dimension outside the rows (wrap long, steps step0, step1; at, the row's
 * index in it), and desc_row works them out again only where that dimension wraps: no division per row. */
typedef struct { int row, end, j0, j1, o0, o1, t0, t1, at, wrap, step0, step1; } run_t;

inline bool run_first(const desc_t *d, int rows, int cols, int chunk, run_t *w) {
    const int item = get_global_id(0);
    if (chunk >= cols) {
        const int per = max(chunk / max(cols, 1), 1);
        w->row = item * per;
        w->end = min(w->row + per, rows);
        w->j0 = 0;
        w->j1 = cols;
    } else {
        const int chunks = (cols + chunk - 1) / chunk;
        w->row = item / chunks;
        w->end = w->row + 1;
        w->j0 = (item - w->row * chunks) * chunk;
        w->j1 = min(w->j0 + chunk, cols);
    }
    if (w->row >= rows) return false;
    desc_row(d, w->row, &w->o0, &w->o1, &w->t0, &w->t1);
    if (w->end - w->row > 1) { /* the stepping's state, where there is a next row (CPUs) */
        w->wrap = 1;
        w->step0 = w->step1 = 0;
#pragma unroll
        for (int k = 0; k < MAXD; ++k) /* constant indices (desc_row's comment) */
            if (k == d->ndim - 2) {
                w->wrap = d->shape[k];
                w->step0 = d->s0[k];
                w->step1 = d->s1[k];
            }
        w->at = w->row % w->wrap;
    }
    return true;
}

inline bool run_next(const desc_t *d, run_t *w) {
    if (++w->row >= w->end) return false;
    if (++w->at < w->wrap) {
        w->o0 += w->step0;
        w->o1 += w->step1;
    } else {
        w->at = 0;
        desc_row(d, w->row, &w->o0, &w->o1, &w->t0, &w->t1);
    }
    return true;
}

/* FOR_RUNS(d, rows, cols, chunk, w, BODY): BODY for each run w (a run_t) of this work-item */
#define FOR_RUNS(d, rows, cols, chunk, w, ...)                                                              \
    do {                                                                                                    \
        run_t w;                                                                                            \
        if (run_first(&(d), rows, cols, chunk, &w)) do { __VA_ARGS__ } while (run_next(&(d), &w));          \
    } while (0)
#endif
