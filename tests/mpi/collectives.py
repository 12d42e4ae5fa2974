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

# sub-buffers of one buffer travel as one mapping of it: back to back in order, it is the message; in another
# order or around a gap, NumPy gathers them from it, and the gap (another tensor's memory) is left untouched
dev = clnn.device()
n0, a = dev.base_align // 4, dev.base_align
parent = dev.host_buffer(2 * a + 13 * 4)
views = [clnn.Tensor(parent.get_sub_region(0, a), (n0,), np.dtype(np.float32), dev),
         clnn.Tensor(parent.get_sub_region(a, 13 * 4), (13,), np.dtype(np.float32), dev),
         clnn.Tensor(parent.get_sub_region(2 * a, 13 * 4), (13,), np.dtype(np.float32), dev)]
assert dist._span(views[:2])[3] is None and dist._span(views[1::-1])[3] is not None
assert dist._span([views[0], clnn.tensor(np.ones(3, np.float32))]) is None  # two buffers: staged on the device
for order, untouched in ((views[:2], views[2]), (views[1::-1], views[2]), ([views[2], views[0]], views[1])):
    held = np.random.default_rng((seed, world + rank)).standard_normal(untouched.size).astype(np.float32)
    dev.upload(untouched.data, held)
    mine = [np.random.default_rng((seed, rank, i)).standard_normal(t.size).astype(np.float32)
            for i, t in enumerate(order)]
    for t, m in zip(order, mine):
        dev.upload(t.data, m)
    dist.all_reduce(order, op="sum")
    for i, t in enumerate(order):
        want = sum(np.random.default_rng((seed, r, i)).standard_normal(t.size).astype(np.float32)
                   for r in range(world))
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(untouched.numpy(), held)

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
held = {k: id(buf) for k, (_, buf) in dist._staging.items()}
dist.all_reduce(clnn.tensor(everyone[rank][1]), op="sum")
assert {k: id(buf) for k, (_, buf) in dist._staging.items()} == held

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
