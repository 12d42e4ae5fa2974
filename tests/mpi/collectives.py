"""Run under mpiexec by tests/test_distributed.py: each collective against NumPy on every rank's inputs.

Every rank draws its inputs from (seed, rank), so each can rebuild every other rank's inputs for the check.
"""

import sys

import numpy as np

import clnn
from clnn import distributed as dist

seed = int(sys.argv[1])
dist.init()
dist.init()  # idempotent
rank, world = dist.rank(), dist.world_size()
assert dist.is_initialized() and world == int(sys.argv[2])


def inputs(r: int) -> list[np.ndarray]:
    g = np.random.default_rng((seed, r))
    # odd sizes, two dtypes in one bucket, a 0-d tensor
    return [g.standard_normal((3, 7)).astype(np.float32), g.standard_normal(13).astype(np.float32),
            g.integers(-50, 50, (5,)).astype(np.int64), np.float32(g.standard_normal())]


everyone = [inputs(r) for r in range(world)]
for op, ref in (("sum", np.sum), ("mean", np.mean), ("max", np.max)):
    floats = [clnn.tensor(a) for a in everyone[rank] if a.dtype.kind == "f"]
    dist.all_reduce(floats, op=op)
    want = [ref(np.stack([e[i] for e in everyone]), axis=0) for i in (0, 1, 3)]
    for t, w in zip(floats, want):
        np.testing.assert_allclose(t.numpy(), w, rtol=1e-6, atol=1e-6)
ints = clnn.tensor(everyone[rank][2])
dist.all_reduce([ints], op="sum")
np.testing.assert_array_equal(ints.numpy(), sum(e[2] for e in everyone))

# sub-buffers of one buffer back to back travel as one mapping of it; out of order, through staging
dev = clnn.device()
n0 = dev.base_align // 4
parent = dev.host_buffer(dev.base_align + 13 * 4)
views = [clnn.Tensor(parent.get_sub_region(0, n0 * 4), (n0,), np.dtype(np.float32), dev),
         clnn.Tensor(parent.get_sub_region(n0 * 4, 13 * 4), (13,), np.dtype(np.float32), dev)]
assert dist._region(views) is not None and dist._region(views[::-1]) is None
for order in (views, views[::-1]):
    mine = [np.random.default_rng((seed, rank, t.size)).standard_normal(t.size).astype(np.float32) for t in views]
    for t, a in zip(views, mine):
        dev.upload(t.data, a)
    dist.all_reduce(order, op="sum")
    for t in views:
        want = sum(np.random.default_rng((seed, r, t.size)).standard_normal(t.size).astype(np.float32)
                   for r in range(world))
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-6, atol=1e-6)

src = world - 1
bucket = [clnn.tensor(a) for a in everyone[rank]]
dist.broadcast(bucket, src=src)
for t, w in zip(bucket, everyone[src]):
    np.testing.assert_array_equal(t.numpy(), w)

gathered = dist.all_gather(clnn.tensor(everyone[rank][0]))
assert len(gathered) == world
for t, e in zip(gathered, everyone):
    np.testing.assert_array_equal(t.numpy(), e[0])

# the staging arrays are reused: a second, smaller reduction allocates nothing new
held = {k: id(v) for k, v in dist._staging.items()}
dist.all_reduce(clnn.tensor(everyone[rank][1]), op="sum")
assert {k: id(v) for k, v in dist._staging.items()} == held

for call, kind in ((lambda: dist.all_reduce(ints, op="mean"), TypeError),
                   (lambda: dist.all_reduce(ints, op="prod"), ValueError),
                   (lambda: dist.broadcast(ints, src=world), ValueError),
                   (lambda: dist.all_reduce([], op="sum"), ValueError)):
    try:
        call()
    except kind:
        pass
    else:
        raise AssertionError(f"expected {kind.__name__}")
mismatch = clnn.tensor(np.zeros(rank + 1, np.float32))
try:
    dist.all_gather(mismatch)
except ValueError as err:
    assert "same shape" in str(err)
else:
    raise AssertionError("all_gather accepted different shapes")
dist.barrier()
print(f"rank {rank}: ok")
