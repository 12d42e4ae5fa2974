/* clnn_shape.h: MAXD, the most dimensions a kernel's shape descriptor holds after the host merged what
 * it could (included, never built alone; clnn/kernels.py reads the value from here).
 */
#ifndef CLNN_SHAPE_H
#define CLNN_SHAPE_H
#define MAXD 8
#endif
