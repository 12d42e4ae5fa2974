"""Quick start: list the OpenCL devices, then multiply two matrices on the default one and check
the product against NumPy."""

import time

import numpy as np

import clnn


def main() -> None:
    print(clnn.device_table())
    dev = clnn.device()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 384)).astype(np.float32)
    b = rng.standard_normal((384, 256)).astype(np.float32)
    start = time.perf_counter()
    c = (clnn.tensor(a, device=dev) @ clnn.tensor(b, device=dev)).numpy()
    elapsed = time.perf_counter() - start
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
    print(f"\nmatmul 512x384 @ 384x256 on {dev}: {elapsed * 1e3:.1f} ms (first call builds kernels), "
          f"relative error vs NumPy {err:.1e}")
    if err > 1e-5:
        raise SystemExit("the product does not match NumPy")


if __name__ == "__main__":
    main()
