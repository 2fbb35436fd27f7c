"""The BlueFog paper's listings and documents' snippets run with only their imports changed.

Each file in tests/listings/ holds one listing as printed, between ``# --- listing ... as
printed ---`` and ``# --- end of listing ---`` markers, with the harness the paper leaves
out around it; it ends by checking convergence and printing ``LISTING OK`` on rank 0 (or
raising). Here every listing runs in SPMD mode (threads of this process, 4 and 8 agents)
and under fogrun (4 MPI processes), and for the synchronous listings both modes' final
iterates (saved by ``--out``) agree to 1e-10.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import fogsim.spmd
from tests import environment
from tests._jobs import fogrun_path

pytest.importorskip("torch", reason="the listings use torch tensors")
# topology_dynamic_exp2 uses BlueFog's earlier keywords on purpose (test_the_old_keywords_warn)
pytestmark = pytest.mark.filterwarnings("ignore:neighbor_allreduce.*deprecated:DeprecationWarning")

LISTINGS = Path(__file__).parent / "listings"
SEEDS = environment.SEEDS  # ../shared/seeds beside the checkout

#: listing file -> (what its LISTING OK line reports, whether its agents run in lock step
#: under MPI too, so that SPMD and MPI final iterates agree)
CASES = {
    "listing1_dgd": ("dgd_rel_err", True),
    "listing2_fish_school": ("mh_average_err", True),
    "listing3_async_push_sum": ("push_sum_err", False),  # asynchronous under MPI
    "listing4_optimizer_wrapper": ("model_disagreement", True),
    "listing5_nonblocking": ("step_err", True),
    "listing6_exact_diffusion": ("ed_rel_err", True),
    "listing7_push_sum_gradient_tracking": ("gt_rel_err", True),
    "topology_static_ring": ("ring_consensus_err", True),
    "topology_dynamic_exp2": ("exp2_consensus_err", True),
}
OK = re.compile(r"LISTING OK .*?(\w+)=([0-9.e+-]+) checksum=(\S+)")


def ok_line(out: str, metric: str) -> tuple[float, float]:
    """Return (the metric, the checksum) of the one LISTING OK line in ``out``."""
    lines = [m for m in OK.finditer(out)]
    assert len(lines) == 1, out[-3000:]
    assert lines[0].group(1) == metric, lines[0].group(0)
    return float(lines[0].group(2)), float(lines[0].group(3))


def run_spmd(name: str, size: int, out: Path, capsys) -> tuple[float, float]:
    capsys.readouterr()
    fogsim.spmd.run_path(LISTINGS / f"{name}.py", size=size, argv=["--out", str(out)], timeout=60)
    return ok_line(capsys.readouterr().out, CASES[name][0])


@pytest.mark.parametrize("size", [4, 8])
@pytest.mark.parametrize("name", sorted(CASES))
def test_listing_in_spmd_mode(name, size, tmp_path, capsys):
    value, _ = run_spmd(name, size, tmp_path / "x.npy", capsys)
    assert np.load(tmp_path / "x.npy").shape[0] == size
    assert value >= 0


@pytest.mark.mpi
@pytest.mark.parametrize("name", sorted(CASES))
def test_listing_under_fogrun_equals_spmd(name, tmp_path, capsys):
    metric, synchronous = CASES[name]
    run = fogrun_path(LISTINGS / f"{name}.py", 4, "--out", str(tmp_path / "mpi.npy"), timeout=90)
    assert run.returncode == 0, run.stderr[-3000:]
    ok_line(run.stdout, metric)
    if synchronous:
        run_spmd(name, 4, tmp_path / "spmd.npy", capsys)
        mpi, spmd = np.load(tmp_path / "mpi.npy"), np.load(tmp_path / "spmd.npy")
        np.testing.assert_allclose(mpi, spmd, rtol=0, atol=1e-10)


def test_the_old_keywords_warn(tmp_path, capsys):
    with pytest.warns(DeprecationWarning, match="neighbor_weights is deprecated"):
        run_spmd("topology_dynamic_exp2", 4, tmp_path / "x.npy", capsys)


# -- the timeline document's command: bfrun -np 4 --timeline-filename /path/to/prefix python
@pytest.mark.mpi
def test_timeline_command_writes_one_trace_per_rank(tmp_path):
    prefix = tmp_path / "timeline_filename"
    run = fogrun_path(
        LISTINGS / "listing1_dgd.py", 4, options=("--timeline-filename", str(prefix)), timeout=90
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for rank in range(4):
        trace = json.loads((tmp_path / f"timeline_filename{rank}.json").read_text())
        names = {e.get("name") for e in trace["traceEvents"]}  # "E" events have none
        assert {"NEIGHBOR_ALLREDUCE", "COMMUNICATE"} <= names, names


def test_timeline_in_spmd_mode(tmp_path, monkeypatch, capsys):
    from fogsim import timeline
    from tests.test_timeline import check_trace

    monkeypatch.setenv("FOGSIM_TIMELINE", str(tmp_path / "t"))
    run_spmd("listing1_dgd", 4, tmp_path / "x.npy", capsys)
    assert sorted(p.name for p in tmp_path.glob("t*.json")) == [f"t{r}.json" for r in range(4)]
    for r in range(4):  # one trace per agent, as per MPI rank, each valid and nested
        events = check_trace(tmp_path / f"t{r}.json")
        assert {e["pid"] for e in events} == {r}
        assert "NEIGHBOR_ALLREDUCE" in {e.get("name") for e in events}
    assert timeline.active is None  # the run's end closed every agent's timeline


# -- the listings are the printed ones -------------------------------------------------------
def marked_blocks(text: str) -> list[str]:
    """Return the code between the ``as printed`` markers of a listing file."""
    return re.findall(
        r"^# --- .* as printed.* ---\n(.*?)^# --- end of listing ---", text, flags=re.M | re.S
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_listing_code_is_as_printed(name):
    """Every code line between the markers is a line of the paper or documents.

    The seeds are text extracted from PDFs and web pages (indentation lost, comments
    apart from their code), so each stripped line, its comment cut off, must appear in
    them once the two import lines are changed back. The seeds sit in ``../shared/seeds``
    beside the checkout (they do in CI, where this test must run).
    """
    if not SEEDS.is_dir():
        environment.missing(f"the seed documents are not at {SEEDS}")
    seeds = " ".join(p.read_text() for p in SEEDS.glob("*.txt"))
    seeds = " ".join(seeds.split())
    blocks = marked_blocks((LISTINGS / f"{name}.py").read_text())
    assert blocks
    for block in blocks:
        for line in block.splitlines():
            code = line.split(" #")[0].strip().removesuffix("\\").strip()  # Listing 4's fix
            if not code or code.startswith("#"):
                continue
            code = code.replace("import fogsim.compat.bluefog as bf", "import bluefog.torch as bf")
            code = code.replace("from fogsim.compat.bluefog import", "from bluefog.common import")
            assert " ".join(code.split()) in seeds, line
