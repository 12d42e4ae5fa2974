"""Run under mpiexec by tests/test_distributed.py. argv: "mismatch" or "raise".

mismatch: rank 1 builds a wider layer; DistributedDataParallel must raise on every rank, naming it.
raise: the last rank raises while the others wait in a collective; the job must end, not hang.
"""

import sys
import time

import clnn
import clnn.nn as nn
from clnn import distributed as dist

dist.init()
rank, world = dist.rank(), dist.world_size()
if sys.argv[1] == "mismatch":
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 5 if rank == 1 else 2))
    try:
        nn.DistributedDataParallel(model)
    except ValueError as err:
        assert "'2.weight' of shape (2, 3)" in str(err) and "(5, 3), float32 on rank 1" in str(err), err
        print(f"rank {rank}: ok")
else:
    if rank == world - 1:
        time.sleep(0.5)
        raise RuntimeError("boom on purpose")
    dist.all_reduce(clnn.ones(3), op="sum")
