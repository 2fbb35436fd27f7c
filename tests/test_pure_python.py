"""The pure-Python twins of ``fogsim._core``, tested on purpose against the compiled extension.

``FOGSIM_PURE_PYTHON=1`` forces the twins (``_fallback``, ``_fallback_handles``, ...) even
where the extension is built. ``pure_python_job.py`` runs one workload over every kernel and
dispatch function the simulator and the runtimes use (static, dense, dynamic and weighted
neighbor averaging in float64 and float32, float16's refusal, the hierarchical ops, the flat,
local and decomposed allreduce, fused nonblocking calls, window ops, pack, combine_rows, the
layout fingerprint, timeline recording and formatting), once with the switch and once
without, in simulation, under ``fogrun -np 2`` (MPI and torch.distributed) and as SPMD
threads; the compiled code promises bit-identical results, so the saved results must match
byte for byte. The kernel-by-kernel comparisons are in test_core_kernels.py,
test_core_handles.py and test_core_fusion.py (the ``impl``, ``handles`` and ``fusion``
fixtures of conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fogsim import _settings
from tests import _jobs, environment

JOB = Path(__file__).with_name("pure_python_job.py")
TIMEOUT = 300  # a guard against a hang, far above the few seconds a run takes
# Results every launch mode must produce, so that a workload that skipped a part would fail.
EXPECTED = {
    "static-exp2-True-float64",
    "static-ring-False-float32",  # circulant combine
    "static-star-False-float64",
    "static-weighted-True-float32",  # CSR combine
    "dense-matrix",
    "self-and-src",
    "float16",
    "int-error",
    "dynamic-matrix",
    "dynamic-dicts",
    "hierarchical",
    "hierarchical-f32",
    "allreduce",
    "allreduce-local",
    "allreduce-decomposed",
    "allreduce-decomposed-f32",
    "fused-0",
    "fused-1",
    "fused-3",
    "fused-weights",
    "trace",
}
WINDOWS = {"win-accumulate", "win-p", "win-update", "win-get"}
DIRECT = {"pack", "combine-rows", "combine-rows-select", "trace-format", "layout-fingerprint"}
# launch mode: (ranks, fogrun options, backend argument of the job, expected extra results)
MODES = {
    "sim": (1, (), "sim", WINDOWS | DIRECT),
    "mpi": (2, ("--local-size", "1"), "mpi", WINDOWS),
    "torch": (2, ("--local-size", "1"), "torch", set()),
    "spmd": (4, ("--spmd", "--local-size", "2"), None, WINDOWS),
}


def _run(mode: str, prefix: Path, pure: bool) -> dict[str, dict[str, np.ndarray]]:
    """Run the job in ``mode``; check its exit code and report; return each rank's results."""
    ranks, options, backend, _ = MODES[mode]
    env = {"FOGSIM_PURE_PYTHON": "1" if pure else "0", "FOGSIM_TIMELINE": f"{prefix}trace"}
    args = [str(JOB), str(prefix), *([backend] if backend else [])]
    if mode == "sim":
        env.update(FOGSIM_SIZE="8", FOGSIM_LOCAL_SIZE="2")
        job = _jobs.python(*args, timeout=TIMEOUT, env=_jobs.job_env(**env))
    else:
        job = _jobs.fogrun(ranks, *args, options=options, timeout=TIMEOUT, env=env)
    job.check()  # exit code 0, not timed out
    tags = ["sim"] if mode == "sim" else [str(r) for r in range(ranks)]
    kernels = "_fallback" if pure else "_kernels"
    handles = "_fallback_handles" if pure else "_handles"
    for tag in tags:  # every rank says which implementation it ran on (lines may interleave)
        line = (
            f"compiled={not pure} kernels=fogsim._core.{kernels} "
            f"handles=fogsim._core.{handles} rank={tag} "
        )
        assert line in job.stdout, f"no {line!r}\n{job.describe()}"
    results = {}
    for tag in tags:
        with np.load(f"{prefix}{tag}.npz") as saved:
            results[tag] = {k: saved[k] for k in saved.files}
        assert bool(results[tag].pop("compiled")) is (not pure), job.describe()
    return results


@pytest.mark.parametrize(
    "mode", [pytest.param(m, marks=pytest.mark.mpi) if m in ("mpi", "torch") else m for m in MODES]
)
def test_pure_python_twins_give_the_compiled_results_byte_for_byte(mode, tmp_path):
    environment.require_compiled()  # else there is nothing to compare the twins with
    if mode == "torch":
        pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[dev]')")
    compiled = _run(mode, tmp_path / "compiled-", pure=False)
    pure = _run(mode, tmp_path / "pure-", pure=True)
    assert pure.keys() == compiled.keys()
    for tag, want in compiled.items():
        got = pure[tag]
        missing = (EXPECTED | MODES[mode][3]) - want.keys()
        assert not missing, f"{mode} rank {tag}: the workload did not produce {sorted(missing)}"
        assert got.keys() == want.keys(), tag
        for key, value in want.items():
            other = got[key]
            where = f"{mode} rank {tag}, {key}"
            assert (other.dtype, other.shape) == (value.dtype, value.shape), where
            assert other.tobytes() == value.tobytes(), f"{where}: the twins differ from compiled"


def test_the_switch_is_read_and_checked_by_settings():
    assert _settings.pure_python({}) is False
    assert _settings.pure_python({"FOGSIM_PURE_PYTHON": "0"}) is False
    assert _settings.pure_python({"FOGSIM_PURE_PYTHON": " 1 "}) is True
    assert _settings.load({"FOGSIM_PURE_PYTHON": "1"}).pure_python is True
    assert _settings.load({}).pure_python is False
    with pytest.raises(ValueError, match="FOGSIM_PURE_PYTHON='maybe'"):
        _settings.pure_python({"FOGSIM_PURE_PYTHON": "maybe"})
