"""DataLoader(shard=(rank, world)): every rank's share of an epoch, compared with the unsharded order."""

import numpy as np
import pytest

from clnn.data import DataLoader


def shares(n: int, world: int, bs: int, epoch: int, **kw) -> list[list[np.ndarray]]:
    """Each rank's batches of sample ids for ``epoch``."""
    x = np.arange(n, dtype=np.int64)
    out = []
    for rank in range(world):
        loader = DataLoader(x, batch_size=bs, shuffle=True, seed=11, shard=(rank, world), **kw)
        loader.set_epoch(epoch)
        out.append([b.numpy() for b in loader])
        assert len(out[-1]) == len(loader)
    return out


@pytest.mark.parametrize(("n", "world", "bs"), [(12, 2, 3), (30, 3, 5), (7, 1, 2), (13, 2, 4), (11, 3, 1)])
def test_shards_cover_the_data_once_per_epoch(n, world, bs):
    for epoch in (0, 1):
        ranks = shares(n, world, bs, epoch)
        assert len({len(r) for r in ranks}) == 1  # the same number of steps everywhere
        seen = np.concatenate([b for r in ranks for b in r])
        pad = -(-n // world) * world - n  # repeated samples that make the shares equal
        assert sorted(set(seen.tolist())) == list(range(n)) and len(seen) == n + pad
        # the ranks' k-th batches together are the unsharded k-th batch of bs * world
        whole = DataLoader(np.arange(n), batch_size=bs * world, shuffle=True, seed=11)
        whole.set_epoch(epoch)
        for k, b in enumerate(whole):
            together = np.concatenate([r[k] for r in ranks])
            if len(together) == len(b.numpy()):
                assert sorted(together.tolist()) == sorted(b.numpy().tolist())
    assert not np.array_equal(np.concatenate(shares(n, world, bs, 0)[0]), np.concatenate(shares(n, world, bs, 1)[0])) \
        or n // world <= 1


def test_drop_last_cuts_to_equal_shares():
    ranks = shares(13, 3, 2, 0, drop_last=True)
    seen = np.concatenate([b for r in ranks for b in r])
    assert len(seen) == len(set(seen.tolist())) == 12 and {len(r) for r in ranks} == {2}


@pytest.mark.parametrize(("shard", "kind"), [((2, 2), ValueError), ((0, 0), ValueError), ([0, 2], TypeError),
                                             ((-1, 2), ValueError), ((0, 1.5), TypeError)])
def test_bad_shard(shard, kind):
    with pytest.raises(kind, match="shard"):
        DataLoader(np.zeros(4), batch_size=2, shard=shard)
