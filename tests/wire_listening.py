"""Which TCP sockets a process listens on, read from /proc; and a torch job that reports
the ones fogsim's torch backend opened (run by tests/test_wire_safety.py).

``python -m tests.wire_listening DIR`` (one process per rank, under fogrun or with
torchrun's variables) notes the sockets this process listens on, starts
``fogsim.init(backend="torch")``, runs a few ops (which make gloo's pairs and fogsim's
groups), and writes ``DIR/rank-<r>.json``: ``{"rank": r, "before": [...], "opened":
[[address, port], ...]}``, ``opened`` being the listening sockets that were not there
before. Sockets that were there before ``init`` are the MPI launcher's and the MPI
library's (under fogrun, MPI is started first), not fogsim's.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys

from fogsim import _settings

_LISTEN = "0A"  # the state column of /proc/net/tcp


def _address(hex_addr: str) -> str:
    """The address of a /proc/net/tcp{,6} column (``0100007F:1F90``, less the port)."""
    raw = bytes.fromhex(hex_addr)
    # the kernel prints each 32-bit word in host byte order (little-endian here)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(words) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, words)


def listening(pid: int | None = None) -> list[tuple[str, int, str]]:
    """Return ``(address, port, inode)`` of every TCP socket process ``pid`` listens on."""
    pid = os.getpid() if pid is None else pid
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == _LISTEN and cols[9] in inodes:
                    hex_addr, hex_port = cols[1].split(":")
                    found.append((_address(hex_addr), int(hex_port, 16), cols[9]))
    return found


def is_loopback(address: str) -> bool:
    """Whether ``address`` is a loopback address (an IPv4-mapped one too)."""
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def main() -> None:
    if _settings.load().launcher_size is not None:  # under fogrun: MPI's sockets open now
        from mpi4py import MPI

        MPI.COMM_WORLD.Barrier()
    before = listening()
    import numpy as np

    import fogsim as fs

    fs.init(backend="torch")
    x = np.full(3, float(fs.rank()))
    fs.allreduce(x)
    fs.neighbor_allreduce(x)
    fs.barrier()
    known = {inode for _, _, inode in before}
    opened = [[a, p] for a, p, inode in listening() if inode not in known]
    line = {"rank": fs.rank(), "before": [[a, p] for a, p, _ in before], "opened": opened}
    with open(os.path.join(sys.argv[1], f"rank-{fs.rank()}.json"), "w") as f:
        json.dump(line, f)
    fs.barrier()


if __name__ == "__main__":
    main()
