"""BlueFog's errors: where BlueFog 0.3 raises, the BlueFog layer raises what a BlueFog test
expecting it accepts (the same type or a subclass), on every rank, and the job goes on.

The expected types are read from BlueFog's source, not from fogsim: ``mpi_ops.py``'s
``_check_function`` (ValueError for a tensor type it has no kernel for and for a
non-contiguous tensor), ``_allreduce_nonblocking`` (an ``assert`` that averaged tensors are
floats), ``_neighbor_allreduce_nonblocking`` and ``win_update`` (ValueError for weights of a
wrong form or for in-neighbors that are not), ``win_put``/``win_accumulate``/``win_get``
(ValueError for ranks that are not out-/in-neighbors), ``win_free``/``win_update`` of an
unknown window (a dict lookup: KeyError), ``win_lock`` (ValueError), ``basics.py``'s
``set_topology`` (TypeError for a non-DiGraph), and its C++ core (the name of an op still
in flight: ``invalid_argument``, which reaches Python as ValueError).
"""

from __future__ import annotations

import pytest

from tests._jobs import fogrun_script

SCRIPT = """
import sys
import networkx as nx
import torch
import bluefog.torch as bf
from bluefog.common import topology_util

bf.init()
r, n = bf.rank(), bf.size()
x = torch.ones(3) * r
ins, outs = bf.in_neighbor_ranks(), bf.out_neighbor_ranks()
not_in = [k for k in range(n) if k not in ins and k != r]
not_out = [k for k in range(n) if k not in outs and k != r]
lines = []

def expect(case, exc_type, fn):
    try:
        fn()
    except exc_type:
        lines.append(f"{case} ok")
    except BaseException as exc:
        lines.append(f"{case} WRONG {type(exc).__name__}: {exc}")
    else:
        lines.append(f"{case} WRONG no error")

def in_flight():
    h = bf.allreduce_nonblocking(x, name="same")
    try:
        bf.neighbor_allreduce(x, name="same")
    finally:
        bf.synchronize(h)

expect("set_topology-not-a-graph", TypeError, lambda: bf.set_topology("ring"))
expect("self-weight-alone", ValueError, lambda: bf.neighbor_allreduce(x, self_weight=0.5))
expect("src-weights-alone", ValueError,
       lambda: bf.neighbor_allreduce(x, src_weights={k: 0.5 for k in ins}))
expect("src-weights-not-dict", ValueError,
       lambda: bf.neighbor_allreduce(x, self_weight=0.5, src_weights=[0.5]))
expect("self-weight-not-float", ValueError,
       lambda: bf.neighbor_allreduce(x, self_weight=1, src_weights={k: 0.0 for k in ins}))
expect("src-not-in-neighbor", ValueError,
       lambda: bf.neighbor_allreduce(x, self_weight=0.5, src_weights={not_in[0]: 0.5}))
expect("dst-repeated", ValueError,
       lambda: bf.neighbor_allreduce(x, self_weight=0.5, src_weights={ins[0]: 0.5},
                                     dst_weights=[outs[0], outs[0]]))
expect("dst-without-weights", ValueError, lambda: bf.neighbor_allreduce(x, dst_weights=[outs[0]]))
expect("average-of-ints", AssertionError, lambda: bf.allreduce(torch.ones(3, dtype=torch.int32)))
expect("average-of-ints-nonblocking", AssertionError,
       lambda: bf.allreduce_nonblocking(torch.ones(3, dtype=torch.int64)))
expect("non-contiguous", ValueError, lambda: bf.allreduce(torch.ones(4, 4).t()))
expect("non-contiguous-gather", ValueError, lambda: bf.neighbor_allgather(torch.ones(4, 4).t()))
expect("complex-type", ValueError, lambda: bf.allreduce(torch.ones(3, dtype=torch.complex64)))
expect("bool-type", ValueError, lambda: bf.allgather(torch.ones(3, dtype=torch.bool)))
expect("bool-type-broadcast", ValueError,
       lambda: bf.broadcast_(torch.ones(3, dtype=torch.bool), 0))
expect("name-in-flight", ValueError, in_flight)
expect("topology-check", ValueError,
       lambda: bf.neighbor_allreduce(x, self_weight=0.5, src_weights={(r - 1) % n: 0.5},
                                     dst_weights=[(r + 2) % n]))
expect("win-lock-unknown", ValueError, lambda: bf.win_lock("nope").__enter__())
expect("win-free-unknown", KeyError, lambda: bf.win_free("nope"))
expect("win-update-unknown", KeyError, lambda: bf.win_update("nope"))
bf.win_create(x.clone(), "w")
expect("win-put-not-out", ValueError, lambda: bf.win_put(x, "w", dst_weights={not_out[0]: 1.0}))
expect("win-accumulate-not-out", ValueError,
       lambda: bf.win_accumulate(x, "w", dst_weights={not_out[0]: 1.0}))
expect("win-get-not-in", ValueError, lambda: bf.win_get("w", src_weights={not_in[0]: 1.0}))
expect("win-update-self-alone", ValueError, lambda: bf.win_update("w", self_weight=0.5))
expect("win-update-weights-not-dict", ValueError,
       lambda: bf.win_update("w", self_weight=0.5, neighbor_weights=[1.0]))
expect("win-update-self-not-float", ValueError,
       lambda: bf.win_update("w", self_weight=1, neighbor_weights={k: 0.0 for k in ins}))
expect("win-update-not-in", ValueError,
       lambda: bf.win_update("w", self_weight=0.5, neighbor_weights={not_in[0]: 0.5}))
bf.win_free("w")
# the job goes on: every rank raised alike, so the ranks are still in step
h = bf.allreduce_nonblocking(x, name="same")  # the name is free again after synchronize
total = bf.synchronize(h)
lines.append(f"after {float(total[0]) == (n - 1) / 2}")
sys.stdout.write("".join(f"rank {r} {line}\\n" for line in lines))
"""

CASES = [line.split('"')[1] for line in SCRIPT.splitlines() if line.startswith('expect("')]


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["mpi", "spmd"])
def test_bluefog_errors_on_every_rank(tmp_path, mode):
    options = ("--bluefog",) if mode == "mpi" else ("--bluefog", "--spmd")
    job = fogrun_script(tmp_path, SCRIPT, 4, options=options, timeout=150)
    job.check()
    lines = job.stdout.splitlines()
    assert len(CASES) == 27
    for rank in range(4):
        mine = [line.split(" ", 2)[2] for line in lines if line.startswith(f"rank {rank} ")]
        assert mine[-1] == "after True", job.describe()
        wrong = [line for line in mine[:-1] if not line.endswith(" ok")]
        assert not wrong, (rank, wrong)
        assert [line.split()[0] for line in mine[:-1]] == CASES
