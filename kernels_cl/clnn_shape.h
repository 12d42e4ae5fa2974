/* clnn_shape.h: MAXD, the most dimensions a kernel's shape descriptor holds after the host merged what
 * it could (included, never built alone; clnn/ops/_core.py mirrors the value).
 */
#ifndef CLNN_SHAPE_H
#define CLNN_SHAPE_H
#define MAXD 8
#endif
