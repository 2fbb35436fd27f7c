"""Run under fogrun (``python -m tests.half_precision_driver``): every half-precision op on
this rank, against the same op simulated in a world of its own in this process, bit for bit.

Prints ``rank R: N ops agree`` or one line per op that differs.
"""

from __future__ import annotations

import sys

import numpy as np

import fogsim as fs
from tests.test_half_precision import DTYPES, LOCAL, OPS, N, _bits, _setup, _value


def main() -> None:
    fs.init()
    r = fs.rank()
    assert fs.size() == N and fs.local_size() == LOCAL, (fs.size(), fs.local_size())
    _setup()
    mine = {}
    for lib, dtype in DTYPES:
        stacked = _value(lib, dtype, N)
        for name, op in OPS:
            out = op(stacked[r])
            assert type(out) is type(stacked) and out.dtype == stacked.dtype, (name, out.dtype)
            mine[lib, dtype, name] = _bits(out).copy()
    with fs.Context(backend="sim", size=N, local_size=LOCAL):
        _setup()
        bad = []
        for lib, dtype in DTYPES:
            stacked = _value(lib, dtype, N)
            for name, op in OPS:
                if not np.array_equal(mine[lib, dtype, name], _bits(op(stacked))[r]):
                    bad.append(f"rank {r}: {name} in {lib} {dtype} differs from the simulator")
    sys.stdout.write(("\n".join(bad) or f"rank {r}: {len(mine)} ops agree") + "\n")  # one write
    sys.stdout.flush()
    fs.shutdown()


if __name__ == "__main__":
    main()
