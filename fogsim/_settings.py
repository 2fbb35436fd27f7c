"""Runtime options read from the environment, validated in one place.

This is the only module of fogsim that reads ``os.environ``. Every ``FOGSIM_*`` variable
is listed here with its meaning:

``FOGSIM_BACKEND``
    Backend name used by :func:`fogsim.init` when none is given (``sim``, ``mpi``, ``torch``).
``FOGSIM_SIZE``
    Number of simulated agents used by :func:`fogsim.init` when no size is given.
``FOGSIM_SEED``
    Seed used by :func:`fogsim.init` when no seed is given.
``FOGSIM_LOCAL_SIZE``
    Agents per (emulated) machine.
``FOGSIM_SHARDS``
    Processes a simulation is sharded over (set by ``fogrun --sim --shards P``): with
    ``P > 1``, ``init(backend="sim")`` in each of the P launched processes holds one
    contiguous block of the agents (see :mod:`fogsim.backends.sim._sharded`).
``FOGSIM_SHARD_TRANSPORT``
    How a sharded simulation's processes talk: ``mpi`` (default under an MPI launcher) or
    ``torch`` (torch.distributed; the default under torchrun).
``FOGSIM_FUSION_THRESHOLD``
    Bytes up to which queued nonblocking tensors are fused into one message (0: off).
``FOGSIM_TIMELINE``
    File prefix of the per-rank Chrome-trace timeline (``PREFIX<rank>.json``).
``FOGSIM_RANK_DIR``
    Set by ``fogrun``: a directory where each rank records its process id, so that
    ``fogrun`` can name the rank behind a process the MPI launcher reports dead, and its
    uncaught exception, which ``fogrun`` prints once per distinct error.
``FOGSIM_STALL_TIMEOUT``
    Seconds a rank may wait in a collective before it reports which ranks have not
    reached it (default 60; ``0``: never, and waits block without polling).
``FOGSIM_STALL_ACTION``
    ``raise`` (default: report, then raise `fogsim.StallError`) or ``warn`` (report
    once and keep waiting).
``FOGSIM_CHECK_WEIGHTS``
    What averaging weights that are neither row- nor column-stochastic get (see
    :mod:`fogsim._weightcheck`): ``warn`` (default: a `fogsim.WeightWarning` once per
    call site), ``error`` (a ValueError) or ``off``.
``FOGSIM_BLUEFOG``
    Set by ``fogrun --bluefog``: ``1`` registers fogsim's BlueFog layer as the modules
    ``bluefog``, ``bluefog.torch`` and ``bluefog.common`` before the script runs (``force``:
    even where a real BlueFog is installed; see :mod:`fogsim.run._bluefog`).
``FOGSIM_CHECK_MODES``
    Set by the mode checker (``fogrun --check-modes``) in the runs it records: the
    optimizer wrappers of :mod:`fogsim.optim` then communicate as they do in one process
    (whole steps in ``step()``, one fused message per dtype) in every mode, so that the
    runs make the same ops (see :func:`checking_modes`).
``FOGSIM_TORCH_PORT``
    TCP port of the torch backend's rendezvous (wins over ``MASTER_PORT``).
``FOGSIM_PURE_PYTHON``
    ``1``: run on the pure-Python twins of the compiled kernels and dispatch
    (:mod:`fogsim._core`) even when the extension is built, to test them against it
    (``0`` or unset: the compiled extension when it is built). Read when
    :mod:`fogsim._core` is first imported.

Variables set by MPI launchers (``PMI_SIZE``, ``OMPI_COMM_WORLD_SIZE``, ...) are read to
tell whether the process was started by ``mpiexec``/``fogrun`` with more than one process.
The torch backend also reads torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT`` and ``TORCHELASTIC_USE_AGENT_STORE``, gloo's
``GLOO_SOCKET_IFNAME`` (to leave an interface the user named alone; see
:mod:`fogsim.backends.torchdist._world`), and a job id (``SLURM_JOB_ID``/``SLURM_STEP_ID``,
``PMIX_NAMESPACE``, ``OMPI_MCA_ess_base_jobid``) from which it derives a default port.
:func:`export` is the one place fogsim writes a variable, for a library that reads it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "DEFAULT_FUSION_THRESHOLD",
    "DEFAULT_SIM_SIZE",
    "DEFAULT_STALL_TIMEOUT",
    "Settings",
    "checking_modes",
    "environ",
    "export",
    "load",
    "pure_python",
]

#: Agents simulated when neither ``size=`` nor ``FOGSIM_SIZE`` says otherwise.
DEFAULT_SIM_SIZE = 16
#: Default fusion buffer: neighbor ops have O(1) latency, so a small buffer pays off.
DEFAULT_FUSION_THRESHOLD = 8 << 20
#: Seconds a rank waits in a collective before it reports a stall.
DEFAULT_STALL_TIMEOUT = 60.0

_BACKENDS = ("sim", "mpi", "torch")
# (size variable, rank variable) pairs set by common MPI launchers.
_LAUNCHER_VARS = (
    ("PMI_SIZE", "PMI_RANK"),  # MPICH / Hydra
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),  # Open MPI
    ("PMIX_SIZE", "PMIX_RANK"),
    ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK"),  # MVAPICH
)
# Variables naming the job, so that its processes can derive the same default port.
_JOB_ID_VARS = ("SLURM_JOB_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid")


@dataclass(frozen=True)
class Settings:
    """Validated runtime options (see the module docstring for the variables)."""

    backend: str | None = None
    size: int | None = None
    seed: int | None = None
    local_size: int | None = None
    fusion_threshold: int = DEFAULT_FUSION_THRESHOLD
    timeline: str | None = None
    launcher_size: int | None = None
    launcher_rank: int | None = None
    torch_rank: int | None = None  # torchrun's RANK
    torch_world_size: int | None = None  # torchrun's WORLD_SIZE
    torch_local_world_size: int | None = None  # torchrun's LOCAL_WORLD_SIZE
    torch_agent_store: bool = False  # TORCHELASTIC_USE_AGENT_STORE=True: torchrun's store
    gloo_socket_ifname: str | None = None  # GLOO_SOCKET_IFNAME, read by torch's gloo
    master_addr: str | None = None
    master_port: int | None = None
    torch_port: int | None = None  # FOGSIM_TORCH_PORT
    rank_dir: str | None = None  # FOGSIM_RANK_DIR
    stall_timeout: float | None = DEFAULT_STALL_TIMEOUT  # None: never
    stall_warn_only: bool = False
    job_id: str | None = None
    pure_python: bool = False  # FOGSIM_PURE_PYTHON
    check_weights: str = "warn"  # FOGSIM_CHECK_WEIGHTS: warn, error or off
    shards: int | None = None  # FOGSIM_SHARDS
    shard_transport: str | None = None  # FOGSIM_SHARD_TRANSPORT: mpi or torch

    @property
    def launched(self) -> bool:
        """Whether an MPI launcher started this process with more than one process."""
        return self.launcher_size is not None and self.launcher_size > 1

    @property
    def torchrun(self) -> bool:
        """Whether torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR/PORT) are all set."""
        return None not in (
            self.torch_rank,
            self.torch_world_size,
            self.master_addr,
            self.master_port,
        )


def _int(environ: Mapping[str, str], name: str, minimum: int) -> int | None:
    text = environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum}")
    return value


def _int_or(environ: Mapping[str, str], name: str, minimum: int, default: int) -> int:
    value = _int(environ, name, minimum)
    return default if value is None else value


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the options from ``environ`` (default: ``os.environ``)."""
    env = os.environ if environ is None else environ
    backend = env.get("FOGSIM_BACKEND", "").strip().lower() or None
    if backend is not None and backend not in _BACKENDS:
        raise ValueError(f"FOGSIM_BACKEND={backend!r} is not one of {', '.join(_BACKENDS)}")
    launcher_size = launcher_rank = None
    for size_var, rank_var in _LAUNCHER_VARS:
        launcher_size = _int(env, size_var, 1)
        if launcher_size is not None:
            launcher_rank = _int(env, rank_var, 0)
            break
    return Settings(
        backend=backend,
        size=_int(env, "FOGSIM_SIZE", 1),
        seed=_int(env, "FOGSIM_SEED", 0),
        local_size=_int(env, "FOGSIM_LOCAL_SIZE", 1),
        fusion_threshold=_int_or(env, "FOGSIM_FUSION_THRESHOLD", 0, DEFAULT_FUSION_THRESHOLD),
        timeline=env.get("FOGSIM_TIMELINE", "").strip() or None,
        launcher_size=launcher_size,
        launcher_rank=launcher_rank,
        torch_rank=_int(env, "RANK", 0),
        torch_world_size=_int(env, "WORLD_SIZE", 1),
        torch_local_world_size=_int(env, "LOCAL_WORLD_SIZE", 1),
        torch_agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").strip() == "True",
        gloo_socket_ifname=env.get("GLOO_SOCKET_IFNAME", "").strip() or None,
        master_addr=env.get("MASTER_ADDR", "").strip() or None,
        master_port=_port(env, "MASTER_PORT"),
        torch_port=_port(env, "FOGSIM_TORCH_PORT"),
        rank_dir=env.get("FOGSIM_RANK_DIR", "").strip() or None,
        stall_timeout=_stall_timeout(env),
        stall_warn_only=_stall_action(env) == "warn",
        job_id=_job_id(env),
        pure_python=pure_python(env),
        check_weights=_check_weights(env),
        shards=_int(env, "FOGSIM_SHARDS", 1),
        shard_transport=_shard_transport(env),
    )


def pure_python(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``FOGSIM_PURE_PYTHON`` forces the pure-Python twins of :mod:`fogsim._core`.

    Only this variable is read (not the others ``load`` validates), so that importing the
    kernels never fails on an unrelated setting.
    """
    env = os.environ if environ is None else environ
    text = env.get("FOGSIM_PURE_PYTHON", "").strip()
    if text.lower() in ("", "0", "false", "no", "off"):
        return False
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"FOGSIM_PURE_PYTHON={text!r} is not 1 (pure-Python twins) or 0 (compiled)")


def checking_modes(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a run the mode checker records (``FOGSIM_CHECK_MODES``)."""
    env = os.environ if environ is None else environ
    return bool(env.get("FOGSIM_CHECK_MODES", "").strip())


def _shard_transport(environ: Mapping[str, str]) -> str | None:
    text = environ.get("FOGSIM_SHARD_TRANSPORT", "").strip().lower()
    if text in ("", "mpi", "torch"):
        return text or None
    raise ValueError(f"FOGSIM_SHARD_TRANSPORT={text!r} is not mpi or torch")


def _stall_timeout(environ: Mapping[str, str]) -> float | None:
    text = environ.get("FOGSIM_STALL_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_STALL_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"FOGSIM_STALL_TIMEOUT={text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"FOGSIM_STALL_TIMEOUT={text} must be a finite number >= 0 (0: never)")
    return value or None


def _stall_action(environ: Mapping[str, str]) -> str:
    action = environ.get("FOGSIM_STALL_ACTION", "").strip().lower() or "raise"
    if action not in ("raise", "warn"):
        raise ValueError(f"FOGSIM_STALL_ACTION={action!r} is not 'raise' or 'warn'")
    return action


def _check_weights(environ: Mapping[str, str]) -> str:
    mode = environ.get("FOGSIM_CHECK_WEIGHTS", "").strip().lower() or "warn"
    if mode not in ("warn", "error", "off"):
        raise ValueError(f"FOGSIM_CHECK_WEIGHTS={mode!r} is not 'warn', 'error' or 'off'")
    return mode


def _port(environ: Mapping[str, str], name: str) -> int | None:
    value = _int(environ, name, 1)
    if value is not None and value > 65535:
        raise ValueError(f"{name}={value} is not a TCP port (1-65535)")
    return value


def _job_id(environ: Mapping[str, str]) -> str | None:
    for name in _JOB_ID_VARS:
        value = environ.get(name, "").strip()
        if value:
            step = environ.get("SLURM_STEP_ID", "").strip() if name == "SLURM_JOB_ID" else ""
            return f"{value}.{step}" if step else value
    return None


def environ() -> dict[str, str]:
    """Return a copy of the process environment (for launchers building a child's)."""
    return dict(os.environ)


def export(name: str, value: str) -> None:
    """Set ``name`` to ``value`` in this process's environment, for a library that reads
    it there (torch's gloo reads ``GLOO_SOCKET_IFNAME`` whenever it makes a group)."""
    os.environ[name] = value
