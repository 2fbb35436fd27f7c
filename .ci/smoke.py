"""Check an installed fogsim from outside the source tree: metadata, compiled kernels, every mode.

    python .ci/smoke.py          # run from any directory, with the venv's bin on PATH

Used by ``.ci/wheel`` (the wheel in a fresh venv) and by cibuildwheel's ``test-command``.
It checks that fogsim is imported from an installation, not from this checkout; that
``fogsim.__version__`` is the distribution's version; that the compiled ``_core`` modules
load; that ``py.typed`` and the stubs were installed; that ``fogsim`` and ``fogrun`` are on
``PATH``; and then runs one consensus script simulated (8 agents), as SPMD threads (8 agents,
the same numbers bit for bit) and under ``fogrun -np 2`` (the numbers of 2 simulated agents,
bit for bit). Quiet on success (one line); any failure exits non-zero saying what failed.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

import fogsim as fs
import fogsim.spmd

STEPS = 60
CHECKOUT = Path(__file__).resolve().parents[1]


def consensus() -> np.ndarray:
    """Average agent r's ``[r, r**2]`` with its neighbors STEPS times; return all agents' values."""
    x = fs.local(lambda r: np.array([float(r), float(r) ** 2]))
    for _ in range(STEPS):
        x = fs.neighbor_allreduce(x)
    return np.asarray(fs.global_view(x))


def simulated(n: int) -> np.ndarray:
    """The consensus of ``n`` agents stacked in this process."""
    fs.init(backend="sim", size=n)
    try:
        return consensus()
    finally:
        fs.shutdown()


def spmd_agent() -> np.ndarray:
    fs.init()
    return consensus()


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"smoke: FAILED: {what}")


def run_quietly(cmd: list[str], what: str, timeout: float = 180) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FOGSIM_")}
    env.update(NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    check(proc.returncode == 0, f"{what} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout + proc.stderr


def check_installation() -> None:
    where = Path(fs.__file__).resolve().parent
    site = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    check(not site.isdisjoint(where.parents), f"fogsim not imported from site-packages: {where}")
    check(CHECKOUT not in where.parents, f"fogsim imported from the checkout ({where})")
    version = importlib.metadata.version("fogsim")
    check(fs.__version__ == version, f"fogsim.__version__ {fs.__version__} != {version}")
    import fogsim._core as core

    check(core.compiled, "the compiled _core extension did not load (running on the twins)")
    for module in (core.kernels, core.handles, core.fusion, core.trace):
        check(Path(str(module.__file__)).suffix in (".so", ".pyd"), f"{module} is not compiled")
    check((where / "py.typed").is_file(), "py.typed is not installed")
    stubs = sorted(p.name for p in (where / "_core").glob("*.pyi"))
    check(len(stubs) == 4, f"expected the four _core stubs, found {stubs}")
    check(not list(where.rglob("*.c")), "generated .c files were installed")
    for command in ("fogsim", "fogrun"):
        path = shutil.which(command)
        check(path is not None, f"{command} is not on PATH")
        run_quietly([str(path), "--help"], f"{command} --help", timeout=60)


def main() -> None:
    start = time.perf_counter()
    if sys.argv[1:2] == ["--job"]:  # one rank of the fogrun job below
        fs.init()
        values = consensus()
        if fs.is_main_process():
            np.save(sys.argv[2], values)
        return
    check_installation()

    eight = simulated(8)
    average = np.array([3.5, 17.5])  # the mean of r and of r**2 over r = 0..7
    check(np.allclose(eight, average, rtol=0, atol=1e-12), f"simulated consensus: {eight}")

    threads = fogsim.spmd.run(spmd_agent, size=8)
    check(len(threads) == 8, f"SPMD returned {len(threads)} results, not 8")
    check(all(np.array_equal(t, eight) for t in threads), "SPMD differs from the simulator")

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fogrun.npy"
        fogrun = [str(shutil.which("fogrun")), "-np", "2", "--timeout", "120"]
        run_quietly([*fogrun, sys.executable, __file__, "--job", str(out)], "fogrun -np 2")
        check(out.is_file(), "fogrun -np 2 wrote no result")
        mpi = np.load(out)
    two = simulated(2)
    check(np.array_equal(mpi, two), f"fogrun -np 2 gave {mpi.tolist()}, simulated {two.tolist()}")

    seconds = time.perf_counter() - start
    print(f"smoke: fogsim {fs.__version__} (compiled) from {Path(fs.__file__).parent}: ok")
    print(f"smoke: simulated, SPMD (8 agents) and fogrun -np 2 agree, in {seconds:.1f} s")


if __name__ == "__main__":
    main()
