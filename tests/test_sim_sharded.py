"""The sharded simulator: one stacked-agent script, launched on P processes, gives the
numbers of one process, each process holding only its block of the agents.

This file is also the job: ``fogrun -np P python -m tests.test_sim_sharded OUT.json``.
Each process runs :func:`script` twice: in the world ``fs.init(backend="sim", size=N)``
starts (sharded over the P launched processes) and in a one-process simulator of the same
N agents (``fs.Context``, made by hand, is never sharded), then compares its block's rows.
Neighbour averaging, gathers and broadcasts must agree bit for bit; sums (allreduce, the
machine sums of local_allreduce) to 1e-12 relative.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fogsim as fs
from fogsim import topology as T
from fogsim.backends.sim import _torchops
from tests import _jobs

#: (agents, agents per machine): N divisible by P = 2 and 4, and not.
WORLDS = ((64, 4), (50, 5))
#: Cases compared to 1e-12 relative; all others must be equal bit for bit.
SUMS = ("allreduce", "allreduce_sum", "local_allreduce", "local_allreduce_sum", "device")


def cube_root_of_rank(r):
    """A per-agent function numba compiles (Newton's iteration for the cube root of r + 1)."""
    y = 1.0
    for _ in range(30):
        y = y - (y * y * y - (r + 1.0)) / (3.0 * y * y)
    return y


def script(n: int) -> dict[str, np.ndarray]:
    """The ops under test, written once for the stacked agents of the current world."""
    out: dict[str, np.ndarray] = {}
    ranks = fs.rank()
    x = fs.local(lambda r: np.random.default_rng(r).standard_normal(3))
    out["ranks"] = np.asarray(ranks, dtype=float)
    out["rng"] = fs.rng().standard_normal(2)
    out["vmap"] = fs.vmap(lambda v, c: v * c + 1.0, in_axes=(0, None))(ranks, 0.5)
    out["local_jit"] = fs.local(cube_root_of_rank, jit=True)
    out["exp2"] = fs.neighbor_allreduce(x)
    y = x
    for _ in range(3):  # the consensus loop: each result is the next input
        y = fs.neighbor_allreduce(y)
    out["exp2_three_steps"] = y
    fs.set_topology(T.ring_graph(n))
    out["ring"] = fs.neighbor_allreduce(x)
    out["ring_scalar_x"] = fs.neighbor_allreduce(np.arange(len(ranks), dtype=float) + ranks[0])
    fs.set_topology(T.metropolis_hastings_weights(T.erdos_renyi_graph(n, 0.2, seed=3)), True)
    out["weighted"] = fs.neighbor_allreduce(x)
    fs.set_topology(T.ring_graph(n))
    sw = fs.local(lambda r: 0.5 + 0.01 * (r % 7))
    src = fs.local(lambda r: {(r - 1) % n: 0.3, (r + 1) % n: 0.2 - 0.01 * (r % 7)})
    out["src_weights"] = fs.neighbor_allreduce(x, self_weight=sw, src_weights=src)
    world_src = [{(r - 1) % n: 0.25, (r + 1) % n: 0.25} for r in range(n)]
    out["src_weights_world"] = fs.neighbor_allreduce(x, self_weight=0.5, src_weights=world_src)
    dst = fs.local(lambda r: {(r + 1) % n: 0.5, (r - 1) % n: 0.5})  # push: r sends to r+-1
    pull = fs.local(lambda r: {(r - 1) % n: 1.0, (r + 1) % n: 1.0})
    out["push"] = fs.neighbor_allreduce(x, self_weight=0.0, src_weights=pull, dst_weights=dst)
    schedule = T.one_peer_exponential_two(n)
    z = x
    for _ in range(4):  # a dynamic topology: one Topology per step
        z = fs.neighbor_allreduce(z, src_weights=next(schedule).weights)
    out["dynamic"] = z
    _torchops.use_device_path(True)  # the path of CUDA tensors, on CPU ones (no GPU here)
    try:
        out["device"] = fs.neighbor_allreduce(torch.from_numpy(x)).numpy()
    finally:
        _torchops.use_device_path(False)
    handle = fs.neighbor_allreduce_nonblocking(x)
    out["nonblocking"] = fs.wait(handle)
    fs.set_topology(T.exponential_two_graph(n))
    out["neighbor_allgather"] = fs.neighbor_allgather(x)
    src_ranks = fs.local(lambda r: [(r + 1) % n])
    dst_ranks = fs.local(lambda r: [(r - 1) % n])
    out["neighbor_allgather_ranks"] = fs.neighbor_allgather(x, src_ranks, dst_ranks)
    out["allreduce"] = fs.allreduce(x)
    out["allreduce_sum"] = fs.allreduce(x, average=False)
    out["broadcast_last"] = fs.broadcast(x, n - 1)
    out["broadcast_first"] = fs.broadcast(x, 0)
    out["allgather"] = fs.allgather(x)
    out["global_view"] = fs.global_view(x)[None].repeat(len(ranks), axis=0)
    out["hierarchical"] = fs.hierarchical_neighbor_allreduce(x)
    out["local_allreduce"] = fs.allreduce(x, is_hierarchical_local=True)
    out["local_allreduce_sum"] = fs.allreduce(x, average=False, is_hierarchical_local=True)
    return out


def compare(n: int, k: int) -> dict[str, object]:
    """Run the script sharded and in one process; report this process's comparison."""
    ctx = fs.init(backend="sim", size=n, local_size=k, seed=1)
    lo, hi = int(fs.rank()[0]), int(fs.rank()[-1]) + 1
    sharded = script(n)
    with fs.Context(backend="sim", size=n, local_size=k, seed=1):
        whole = script(n)
    report: dict[str, object] = {
        "block": [lo, hi],
        "size": fs.size(),
        "main": fs.is_main_process(),
        "shards": ctx.backend.shards,
        "held": int(fs.local(lambda r: np.zeros(2)).shape[0]),
    }
    same = report["same"] = {}
    for case, value in sharded.items():
        want = whole[case][lo:hi]
        got = np.asarray(value)
        if case in SUMS:
            same[case] = bool(np.allclose(got, want, rtol=1e-12, atol=1e-14))
        else:
            same[case] = got.shape == want.shape and bool(np.array_equal(got, want))
    report["refusals"] = refusals()
    return report


def refusals() -> list[str]:
    """What needs every agent in one process says so, naming the op."""
    said = []
    for op, call in (
        ("win_create", lambda: fs.win_create(fs.local(lambda r: np.zeros(2)), "w")),
        ("set_asynchrony", lambda: fs.set_asynchrony()),
    ):
        try:
            call()
        except NotImplementedError as exc:
            said.append(op if op in str(exc) and "sharded" in str(exc) else f"{op}: {exc}")
    return said


def job(out: str) -> None:
    from mpi4py import MPI

    reports = {f"{n}": compare(n, k) for n, k in WORLDS}
    fs.init(backend="sim", size=12)
    fs.timeline.start(str(Path(out).parent / "trace"))  # one file per process
    fs.neighbor_allreduce(fs.local(lambda r: np.ones(2)))
    fs.timeline.stop()
    gathered = MPI.COMM_WORLD.gather(reports, root=0)
    if MPI.COMM_WORLD.Get_rank() == 0:
        Path(out).write_text(json.dumps(gathered))
    fs.shutdown()


@pytest.mark.mpi
@pytest.mark.parametrize("parts,transport", [(2, "mpi"), (4, "mpi"), (3, "torch")])
def test_the_script_sharded_gives_one_processs_numbers(tmp_path, parts, transport):
    out = tmp_path / "report.json"
    env = {"FOGSIM_SHARD_TRANSPORT": transport}
    _jobs.fogrun(parts, "-m", "tests.test_sim_sharded", str(out), timeout=240, env=env).check()
    reports = json.loads(out.read_text())
    assert len(reports) == parts
    traces = sorted(p.name for p in tmp_path.glob("trace*.json"))
    assert traces == [f"trace-shard{p}.json" for p in range(parts)]
    for p, block in enumerate(np.array_split(np.arange(12), parts)):  # its own agents
        events = json.loads((tmp_path / f"trace-shard{p}.json").read_text())["traceEvents"]
        pids = {e["pid"] for e in events if "pid" in e}
        assert block[0] in pids and pids <= set(block.tolist())
    for n, _k in WORLDS:
        blocks = [r[str(n)]["block"] for r in reports]
        assert blocks[0][0] == 0 and blocks[-1][1] == n  # contiguous blocks cover the world
        assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:], strict=False))
        assert max(hi - lo for lo, hi in blocks) - min(hi - lo for lo, hi in blocks) <= 1
        assert [r[str(n)]["main"] for r in reports].count(True) == 1
        for (lo, hi), r in zip(blocks, reports, strict=True):
            report = r[str(n)]
            assert report["size"] == n and report["shards"] == parts
            assert report["held"] == hi - lo < n  # each process holds only its block
            assert len(report["same"]) == 26
            wrong = [case for case, ok in report["same"].items() if not ok]
            assert not wrong, f"N={n}, block {lo}..{hi}: differ from one process: {wrong}"
            assert report["refusals"] == ["win_create", "set_asynchrony"]


if __name__ == "__main__":
    job(sys.argv[1])
