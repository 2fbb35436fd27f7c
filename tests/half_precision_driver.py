"""Run under fogrun (``python -m tests.half_precision_driver``): every half-precision op on
this rank, against the same op simulated in a world of its own in this process, bit for bit;
then every window op (:func:`tests.test_half_precision._window_steps`), against the simulator
and against the float32 reference, and an integer window, which must be refused.

Prints ``rank R: N ops agree`` and ``rank R: K window runs agree``, or one line per op or
window step that differs.
"""

from __future__ import annotations

import sys

import numpy as np

import fogsim as fs
from tests.test_half_precision import (
    DTYPES,
    LOCAL,
    OPS,
    STEPS,
    N,
    _as_bits,
    _as_float32,
    _bits,
    _copy,
    _exact_value,
    _rounder,
    _setup,
    _value,
    _window_reference,
    _window_setup,
    _window_steps,
)


def _ops(r: int) -> list[str]:
    """Every op in every half dtype on this rank, against the simulator; return what differs."""
    _setup()
    mine = {}
    for lib, dtype in DTYPES:
        stacked = _value(lib, dtype, N)
        for name, op in OPS:
            out = op(stacked[r])
            assert type(out) is type(stacked) and out.dtype == stacked.dtype, (name, out.dtype)
            mine[lib, dtype, name] = _bits(out).copy()
    bad = []
    with fs.Context(backend="sim", size=N, local_size=LOCAL):
        _setup()
        for lib, dtype in DTYPES:
            stacked = _value(lib, dtype, N)
            for name, op in OPS:
                if not np.array_equal(mine[lib, dtype, name], _bits(op(stacked))[r]):
                    bad.append(f"rank {r}: {name} in {lib} {dtype} differs from the simulator")
    return bad or [f"rank {r}: {len(mine)} ops agree"]


def _windows(r: int) -> list[str]:
    """The window steps in every half dtype on this rank, against the simulator and the
    reference; an integer window must be refused. Return what differs."""
    _window_setup()
    mine = {}
    for lib, dtype in DTYPES:
        exact = _window_steps(_copy(_exact_value(lib, dtype)[r]), "exact")
        noisy = _window_steps(_copy(_value(lib, dtype, N)[r]), "noisy")
        mine[lib, dtype] = exact, noisy
    bad = []
    try:
        fs.win_create(np.zeros(3, dtype=np.int64), "int")
        bad.append(f"rank {r}: an int64 window was created")
    except TypeError as exc:
        if "x must be float32 or float64, got int64" not in str(exc):
            bad.append(f"rank {r}: an int64 window was refused with {exc}")
    with fs.Context(backend="sim", size=N):
        _window_setup()
        for (lib, dtype), (exact, noisy) in mine.items():
            like = _exact_value(lib, dtype)
            expect = _window_reference(np.asarray(_as_float32(like)), _rounder(lib, dtype))
            sim_noisy = _window_steps(_value(lib, dtype, N), "noisy")
            for step in STEPS:
                if step == "update_is_x":
                    if exact[step] is not True or noisy[step] is not True:
                        bad.append(f"rank {r}: win_update did not return x in {lib} {dtype}")
                    continue
                if not np.array_equal(exact[step], _as_bits(expect[step], like)[r]):
                    bad.append(
                        f"rank {r}: window {step} in {lib} {dtype} differs from the reference"
                    )
                if not np.array_equal(noisy[step], sim_noisy[step][r]):
                    bad.append(
                        f"rank {r}: window {step} in {lib} {dtype} differs from the simulator"
                    )
    return bad or [f"rank {r}: {len(mine)} window runs agree"]


def main() -> None:
    fs.init()
    r = fs.rank()
    assert fs.size() == N and fs.local_size() == LOCAL, (fs.size(), fs.local_size())
    lines = _ops(r) + _windows(r)
    sys.stdout.write("\n".join(lines) + "\n")  # one write
    sys.stdout.flush()
    fs.shutdown()


if __name__ == "__main__":
    main()
