/* clnn_shape.h: MAXD, the most dimensions a kernel's shape descriptor holds after the host merged what
 * it could (included, never built alone; clnn/kernels.py reads the value from here); group_elem, the element of
 * a grouped view a work-item of kernels.launch_by_rows maps; desc_t, kernels.descriptor's struct, and desc_row,
 * its offsets at a row; row_run, the run of a row one of kernels.launch_runs walks.
 */
#ifndef CLNN_SHAPE_H
#define CLNN_SHAPE_H
#define MAXD 8

/* x viewed as (outer, G, inner) and launched as rows (kernels.launch_by_rows): with inner > 1 a row of the inner
 * elements j per (o, c), else a row of the G groups c per o. No division per element, and work-items along a
 * row take neighbouring elements (GPUs: coalesced; CPUs: vector loads). */
typedef struct { size_t i; int o, c, j; } group_elem_t;

/* the work-item's element: its index i and coordinates (o, c, j); false past the grid */
inline bool group_elem(int outer, int G, int inner, group_elem_t *e) {
    const int col = get_global_id(0), row = get_global_id(1), cols = inner > 1 ? inner : G;
    if (col >= cols || row >= (inner > 1 ? outer * G : outer)) return false;
    e->i = (size_t)row * cols + col;
    e->o = inner > 1 ? row / G : row;
    e->c = inner > 1 ? row - e->o * G : col;
    e->j = inner > 1 ? col : 0;
    return true;
}

/* kernels.descriptor: a shape (outermost first, adjacent dims merged) and two operands' element strides in it */
typedef struct { int ndim; int shape[MAXD]; int s0[MAXD]; int s1[MAXD]; } desc_t;

/* the operands' offsets *o0, *o1 at row `row` of the descriptor's innermost dimension (rows: every index of the
 * outer ones, in order), and their strides *t0, *t1 along it */
inline void desc_row(const desc_t *d, int row, int *o0, int *o1, int *t0, int *t1) {
    const int last = max(d->ndim - 1, 0);
    int a = 0, b = 0;
    for (int k = last - 1; k >= 0; --k) {
        const int idx = row % d->shape[k];
        row /= d->shape[k];
        a += idx * d->s0[k];
        b += idx * d->s1[k];
    }
    *o0 = a;
    *o1 = b;
    *t0 = d->s0[last];
    *t1 = d->s1[last];
}

/* a run of kernels.launch_runs: the work-item's row and its columns [*j0, *j1); false past the grid */
inline bool row_run(int rows, int cols, int chunk, int *row, int *j0, int *j1) {
    const int chunks = (cols + chunk - 1) / chunk, item = get_global_id(0);
    *row = item / chunks;
    if (*row >= rows) return false;
    *j0 = (item - *row * chunks) * chunk;
    *j1 = min(*j0 + chunk, cols);
    return true;
}
#endif
