"""One test body for every Transport: point-to-point, small collectives and agreement.

Run by tests/test_runtime_transport.py over the in-process transport (threads), over
MpiTransport (under mpiexec) and over TorchTransport (gloo, under mpiexec). ``exercise``
returns a list of failures (empty: the transport conforms); a rank never raises out of it
unless the transport itself breaks.
"""

from __future__ import annotations

import sys

import numpy as np

from fogsim.backends._runtime import Request, Transport
from fogsim.backends._runtime.agree import LocalError, agree, fingerprint


def _raised(fn) -> BaseException | None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test inspects what was raised
        return exc
    return None


def exercise(t: Transport) -> list[str]:
    """Exercise ``t`` (every rank calls this, in step); return what went wrong here."""
    bad: list[str] = []
    r, n = t.rank, t.size
    if not isinstance(t, Transport):
        bad.append("not a Transport")
    # a ring exchange in several dtypes, two messages per pair with one tag: in order
    right, left = (r + 1) % n, (r - 1) % n
    for dtype in (np.float64, np.float32, np.float16, np.int64, np.uint8):
        first = (np.arange(7) + 10 * r).astype(dtype)
        second = (np.arange(7) * 2 + 10 * r).astype(dtype)
        got1, got2 = np.empty_like(first), np.empty_like(second)
        reqs = [
            t.irecv(got1, left, tag=3),
            t.irecv(got2, left, tag=3),
            t.isend(first, right, tag=3),
            t.isend(second, right, tag=3),
        ]
        if not all(isinstance(q, Request) for q in reqs):
            bad.append("a request lacks test()/wait()")
        for q in reqs:
            q.wait()
        if not all(q.test() for q in reqs):
            bad.append("a waited request does not test complete")
        want1 = (np.arange(7) + 10 * left).astype(dtype)
        want2 = (np.arange(7) * 2 + 10 * left).astype(dtype)
        if not (np.array_equal(got1, want1) and np.array_equal(got2, want2)):
            bad.append(f"ring exchange of {np.dtype(dtype)}: {got1} {got2}")
    # tags keep messages apart: send tag 2 then tag 1, receive tag 1 first
    a, b = np.full(3, 1.0 + r), np.full(3, -1.0 - r)
    ga, gb = np.empty(3), np.empty(3)
    sends = [t.isend(a, right, tag=2), t.isend(b, right, tag=1)]
    t.irecv(gb, left, tag=1).wait()
    t.irecv(ga, left, tag=2).wait()
    for q in sends:
        q.wait()
    if not (np.all(ga == 1.0 + left) and np.all(gb == -1.0 - left)):
        bad.append(f"tags mixed up: {ga} {gb}")
    # one batch: a buffer to each side, one from each side, in several dtypes
    for dtype in (np.float64, np.float32, np.int32):
        to_right, to_left = np.full(5, 3 * r + 1, dtype), np.full(5, 3 * r + 2, dtype)
        from_left, from_right = np.empty(5, dtype), np.empty(5, dtype)
        batch = t.exchange(
            [(to_right, right), (to_left, left)], [(from_left, left), (from_right, right)], tag=5
        )
        if not isinstance(batch, Request):
            bad.append("exchange's request lacks test()/wait()")
        batch.wait()
        if not batch.test():
            bad.append("a waited exchange does not test complete")
        # with 2 ranks left is right: the two messages from it arrive in the order sent
        if not (np.all(from_left == 3 * left + 1) and np.all(from_right == 3 * right + 2)):
            bad.append(f"exchange of {np.dtype(dtype)}: {from_left} {from_right}")
    t.exchange([], [], tag=5).wait()  # an empty batch completes
    # small collectives
    flags = np.array([r, -r, 7, r % 2], dtype=np.int64)
    t.iallreduce_max(flags).wait()
    if flags.tolist() != [n - 1, 0, 7, int(n > 1)]:
        bad.append(f"iallreduce_max gave {flags.tolist()}")
    value = {"rank": r, "of": [n, None, True, 0.5], "name": f"r\u00e9{r}"}
    want = [{"rank": k, "of": [n, None, True, 0.5], "name": f"r\u00e9{k}"} for k in range(n)]
    if t.allgather_json(value) != want:
        bad.append("allgather_json is not by rank")
    if t.allgather_json(["x" * (1000 * r), r]) != [["x" * (1000 * k), k] for k in range(n)]:
        bad.append("allgather_json of lengths that differ by rank")
    if t.allgather_json(("tuple", r)) != [["tuple", k] for k in range(n)]:
        bad.append("allgather_json does not give a tuple back as JSON's list")
    send = np.array([[r, k] for k in range(n)], dtype=np.float64)  # block k goes to rank k
    recv = np.full((n, 2), -1.0)
    t.alltoall(send, recv)
    if recv.tolist() != [[float(k), float(r)] for k in range(n)]:
        bad.append(f"alltoall gave {recv.tolist()}")
    t.barrier()
    # agreement (the shared protocol) over this transport
    if _raised(lambda: agree(t, fingerprint("same", 1), None, "x")) is not None:
        bad.append("agree raised with equal fingerprints")
    exc = _raised(lambda: agree(t, fingerprint("shape", r == 0), None, f"shape {r == 0}"))
    if n == 1 and exc is not None:  # one rank always agrees with itself
        bad.append(f"a single rank disagreed: {exc!r}")
    elif n > 1 and not (
        isinstance(exc, ValueError)
        and "ranks disagree" in str(exc)
        and "rank 0 has shape True" in str(exc)
    ):
        bad.append(f"differing fingerprints: {exc!r}")
    err = LocalError(TypeError("weights must be numbers")) if r == n - 1 else None
    exc = _raised(lambda: agree(t, fingerprint("same"), err, "x"))
    if not (type(exc) is TypeError and str(exc) == f"rank {n - 1}: weights must be numbers"):
        bad.append(f"one rank's error: {exc!r}")
    # still in step afterwards
    if t.allgather_json(r * r) != [k * k for k in range(n)]:
        bad.append("out of step after the agreements")
    return bad


def main(kind: str) -> None:
    """Run :func:`exercise` on this process's transport (under mpiexec); print one line."""
    from mpi4py import MPI

    if kind == "mpi":
        from fogsim.backends.mpi._transport import MpiTransport

        transport: Transport = MpiTransport(MPI.COMM_WORLD.Dup(), MPI)
    else:
        import torch.distributed as dist

        from fogsim.backends.torchdist._transport import TorchTransport

        comm = MPI.COMM_WORLD
        port = comm.bcast(int(sys.argv[2]) if comm.Get_rank() == 0 else None)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=comm.Get_rank(),
            world_size=comm.Get_size(),
        )
        transport = TorchTransport(None, comm.Get_size(), comm.Get_rank())
    bad = exercise(transport)
    sys.stdout.write(f"rank {transport.rank} {kind} {'ok' if not bad else bad}\n")
    if kind == "torch":
        transport.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
