"""Sharded steps over MPI: each process moves only its boundary rows and combines its block.

This file is also the job: ``fogrun -np P python -m tests.test_sim_shards_mpi OUT.npz
[mpi|torch]``. Every process holds one block of the agents' values, exchanges the halo
over the runtime's MPI transport or its torch.distributed (gloo) one and combines its
rows, once with ``exchange_halo`` then ``apply_shard`` and once overlapped
(``exchange_into`` then ``combine_overlapped``); the main process gathers the blocks and
saves them with the one-process result, which the test compares bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests import _jobs
from tests.test_sim_shards import plans

SIZES = (50, 64)


def transport_of(kind: str, comm):
    """The runtime's transport of ``kind`` among the job's processes."""
    if kind == "torch":
        from fogsim import _settings
        from fogsim.backends.torchdist import _world
        from fogsim.backends.torchdist._transport import TorchTransport

        rank, size = _world.start(_settings.load())
        group, _ = _world.new_groups(rank, size)
        return TorchTransport(group, size, rank)
    from mpi4py import MPI

    from fogsim.backends.mpi._transport import MpiTransport

    return MpiTransport(comm.Dup(), MPI)


def job(out: str, kind: str) -> None:
    from mpi4py import MPI

    from fogsim.backends.sim._plan import apply_plan
    from fogsim.backends.sim._shards import (
        apply_shard,
        combine_overlapped,
        exchange_halo,
        exchange_into,
        shard_plan,
    )

    comm = MPI.COMM_WORLD
    transport = transport_of(kind, comm)
    me, parts = comm.Get_rank(), comm.Get_size()
    saved: dict[str, Any] = {}  # Any: np.savez's stub types its keywords as allow_pickle
    for n in SIZES:
        x = np.random.default_rng(n).standard_normal((n, 3))  # every process draws all,
        for name, plan in plans(n):  # but combines only its own block
            shard = shard_plan(plan, n, parts, me)
            value = x[shard.lo : shard.hi].copy()
            moved = 0
            for step in range(3):  # three steps: X <- W X, each on the last one's blocks
                request, halo = exchange_halo(transport, shard, value, tag=step)
                request.wait()
                moved += len(halo)
                value = apply_shard(shard, value, halo)
            # the same steps overlapped: the halo lands in the rows after the block while
            # the interior rows are combined
            b, h = shard.size, len(shard.halo)
            x_ext = np.zeros((b + h, 3))
            out_ext = np.zeros((b + h, 3))
            x_ext[:b] = x[shard.lo : shard.hi]
            for step in range(3):
                request = exchange_into(transport, shard, x_ext, tag=3 + step)
                combine_overlapped(shard, x_ext, out_ext, request)
                x_ext, out_ext = out_ext, x_ext
            overlapped = comm.gather(x_ext[:b].copy(), root=0)
            blocks = comm.gather(value, root=0)
            counts = comm.gather((shard.size, moved, len(shard.halo)), root=0)
            if me == 0:
                assert blocks is not None and overlapped is not None
                whole = x
                for _ in range(3):
                    whole = apply_plan(plan, whole, np.empty_like(whole))
                saved[f"{name}/{n}/sharded"] = np.concatenate(blocks)
                saved[f"{name}/{n}/overlapped"] = np.concatenate(overlapped)
                saved[f"{name}/{n}/whole"] = whole
                saved[f"{name}/{n}/counts"] = np.array(counts)
    if me == 0:
        np.savez(out, **saved)
    comm.Barrier()


@pytest.mark.mpi
@pytest.mark.parametrize("kind,parts", [("mpi", 2), ("mpi", 4), ("torch", 3)])
def test_blocks_moving_their_halos_give_one_processs_numbers(
    tmp_path: Path, kind: str, parts: int
) -> None:
    out = tmp_path / f"shards-{kind}-{parts}.npz"
    _jobs.fogrun(parts, "-m", "tests.test_sim_shards_mpi", str(out), kind, timeout=120).check()
    with np.load(out) as saved:
        got = dict(saved)
    assert len(got) == 4 * len(SIZES) * len(list(plans(8)))
    for key in (k for k in got if k.endswith("/sharded")):
        base = key.removesuffix("/sharded")
        np.testing.assert_array_equal(got[key], got[base + "/whole"], err_msg=base)
        np.testing.assert_array_equal(got[base + "/overlapped"], got[base + "/whole"], base)
        counts = got[base + "/counts"]
        n = int(base.split("/")[1])
        # every process held only its block, and received only its halo each step
        assert counts[:, 0].sum() == n and counts[:, 0].max() <= -(-n // parts)
        np.testing.assert_array_equal(counts[:, 1], 3 * counts[:, 2])
        if base.startswith("ring/"):
            assert (counts[:, 2] == 2).all()  # a ring block reads two boundary rows


if __name__ == "__main__":
    job(sys.argv[1], sys.argv[2])
