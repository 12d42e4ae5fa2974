/* broken.cl: a deliberately wrong kernel, the planted bug that proves the Oclgrind check catches
 * errors (tests/test_oclgrind.py::test_planted_bugs_are_caught). Never built by clnn itself.
 *
 * reverse_tiles: y[i] = x[i - l + (TILE - 1 - l)] (each tile of TILE elements reversed through local
 * memory), with two bugs:
 *   1. no barrier between the local-memory write and the read of another work-item's element:
 *      a read-write data race within the work-group;
 *   2. the range guard reads `i <= n`: the work-item with i == n writes one element past the end of y.
 * Launch with a local size of TILE and a global size above n.
 */
#define TILE 16

__kernel void reverse_tiles(int n, __global const float *x, __global float *y) {
    __local float tile[TILE];
    int i = get_global_id(0), l = get_local_id(0);
    tile[l] = i < n ? x[i] : 0.0f;
    /* missing: barrier(CLK_LOCAL_MEM_FENCE); */
    if (i <= n) y[i] = tile[TILE - 1 - l];
}
