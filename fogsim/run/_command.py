"""Build the child's argument list and environment: pure functions, nothing is run here."""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence

from ._cli import Options
from ._mpi import OPENMPI, MPIInfo

__all__ = [
    "NO_MPI_MESSAGE",
    "LaunchError",
    "build_command",
    "env_changes",
    "is_python",
    "with_mpi4py",
]

NO_MPI_MESSAGE = (
    "no MPI found; install it with: pip install 'fogsim[mpi]' (mpi4py and the mpich wheel)"
)

# Open MPI refuses root, refuses more ranks than cores, and probes UCX (slow, noisy on
# laptops and containers); MPICH's Hydra needs none of this. Open MPI 5 launches with
# PRRTE and calls its shared-memory transport "sm"; Open MPI 4 launches with ORTE, calls it
# "vader" and stops at a stub telling so when asked for "sm".
_OPENMPI_LAPTOP = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    "OMPI_MCA_osc": "^ucx",
    "OMPI_MCA_pml": "ob1",
    "OMPI_MCA_btl": "self,sm",
}
_OPENMPI4_LAPTOP = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_osc": "^ucx",
    "OMPI_MCA_pml": "ob1",
    "OMPI_MCA_btl": "self,vader",
}
# Several ranks per host, each with a thread pool per core, would oversubscribe the cores.
_ONE_THREAD = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
#: Where the torch backend's ranks meet and which interfaces they listen on (the user's).
_RENDEZVOUS = frozenset({"MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"})

_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)*)?(\.exe)?")
_PLAIN_PYTHON = ("python", "python3")
# CPython's own options: flags without a value, and those taking one (-W arg, -X opt).
_FLAGS = frozenset("bBdEhiIOPqsSuvVxR")
_FLAGS_WITH_VALUE = frozenset("WX")
_LONG_WITH_VALUE = frozenset({"--check-hash-based-pycs"})


class LaunchError(RuntimeError):
    """A job that cannot be started; ``fogrun`` prints the message and exits with 2."""


def is_python(word: str) -> bool:
    """Return whether the command word ``word`` names a Python interpreter."""
    return word == sys.executable or bool(_PYTHON_NAME.fullmatch(os.path.basename(word)))


def _split_cluster(arg: str) -> tuple[list[str], list[str], bool]:
    # One short-option token of the interpreter ("-u", "-uc", "-Wignore", "-mpkg"): return
    # the tokens that stay with the interpreter, the program selector split off it
    # (["-c", "code"], ["-m"]) and whether the next word is this option's value.
    for j, ch in enumerate(arg[1:], start=1):
        if ch in "cm":
            value = [arg[j + 1 :]] if arg[j + 1 :] else []
            return ([arg[:j]] if j > 1 else []), ["-" + ch, *value], False
        if ch in _FLAGS_WITH_VALUE:
            return [arg], [], not arg[j + 1 :]
        if ch not in _FLAGS:
            break
    return [arg], [], False


def with_mpi4py(command: Sequence[str], *, reporting: bool = False) -> list[str]:
    """Return the Python command ``command`` run through ``python -m mpi4py``.

    ``-m mpi4py`` goes after the interpreter's own options (``-u``, ``-X dev``) and
    before the program (``script.py``, ``-m pkg``, ``-c code``, ``-``), so an uncaught
    exception on one rank calls ``MPI_Abort`` instead of leaving the others waiting.
    ``reporting`` (what fogrun uses) also runs the program through ``-m fogsim.run._rank``,
    which makes each rank report an uncaught exception to fogrun from the program's first
    line. A command already run through mpi4py is returned unchanged.
    """
    interpreter, program = _split_python(command)
    if program[:2] in (["-m", "mpi4py"], ["-m", "mpi4py.run"]):
        return [*interpreter, *program]
    if reporting:
        program = ["-m", "fogsim.run._rank", *program]
    return [*interpreter, "-m", "mpi4py", *program]


def with_bootstrap(command: Sequence[str]) -> list[str]:
    """Return the Python command ``command`` run through ``-m fogsim.run._rank`` (no MPI):
    what ``fogrun --sim --bluefog`` runs, so the BlueFog aliases exist before the program."""
    interpreter, program = _split_python(command)
    return [*interpreter, "-m", "fogsim.run._rank", *program]


def _split_python(command: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(interpreter and its options, the program and its arguments)`` of a Python command."""
    words = list(command)
    interpreter, program = [words[0]], None
    i = 1
    while i < len(words):
        arg = words[i]
        if arg in ("-", "--") or not arg.startswith("-"):
            break
        count = 1
        if arg.startswith("--"):
            count = 2 if arg in _LONG_WITH_VALUE else 1
        else:
            flags, selector, needs_value = _split_cluster(arg)
            if selector:
                interpreter += flags
                program = [*selector, *words[i + 1 :]]
                break
            count = 2 if needs_value else 1
        interpreter += words[i : i + count]
        i += count
    if program is None:
        # mpi4py's own parser knows no "--"; after the interpreter's options it only ends them.
        program = words[i + 1 :] if words[i : i + 1] == ["--"] else words[i:]
    return interpreter, program


def _interpreter(word: str) -> str:
    # A bare "python" would be looked up on PATH by mpiexec and may not be this venv's.
    return sys.executable if word in _PLAIN_PYTHON else word


def env_changes(
    options: Options, environ: Mapping[str, str], mpi: MPIInfo | None = None
) -> dict[str, str]:
    """Return the variables to set for the job, given the user's environment ``environ``.

    Defaults (thread counts, Open MPI's laptop settings) yield to variables the user set;
    what a ``fogrun`` option asks for (``--sim``, ``--shards``, ``--local-size``, ...) is
    always set.
    """
    defaults: dict[str, str] = {}
    explicit: dict[str, str] = {}
    if options.sim:
        explicit.update(FOGSIM_BACKEND="sim", FOGSIM_SIZE=str(options.np))
        if options.sharded or "FOGSIM_SHARDS" in environ:
            # plain --sim is one process: a FOGSIM_SHARDS left in the shell must not
            # make it wait for peers that were never launched
            explicit["FOGSIM_SHARDS"] = str(options.shards)
    elif options.spmd or options.check_modes:
        explicit["FOGSIM_SIZE"] = str(options.np)
    else:
        # One process per agent even for -np 1 (mpiexec alone picks MPI only above 1);
        # a user's FOGSIM_BACKEND (e.g. "torch") still wins.
        defaults["FOGSIM_BACKEND"] = "mpi"
    if not options.one_process:
        defaults.update(_ONE_THREAD)
        if mpi is not None and mpi.implementation == OPENMPI:
            older = mpi.major is not None and mpi.major < 5
            defaults.update(_OPENMPI4_LAPTOP if older else _OPENMPI_LAPTOP)
            if options.hosts:  # shared memory alone stays on one host
                defaults["OMPI_MCA_btl"] += ",tcp"
    if options.local_size is not None:
        explicit["FOGSIM_LOCAL_SIZE"] = str(options.local_size)
    if options.timeline_filename is not None:
        explicit["FOGSIM_TIMELINE"] = options.timeline_filename
    if options.bluefog:
        explicit["FOGSIM_BLUEFOG"] = environ.get("FOGSIM_BLUEFOG", "") or "1"
    changes = {k: v for k, v in defaults.items() if k not in environ}
    changes.update({k: v for k, v in explicit.items() if environ.get(k) != v})
    return changes


def _spmd_command(options: Options, command: list[str]) -> list[str]:
    flag = "--check-modes" if options.check_modes else "--spmd"
    if not is_python(command[0]) or len(command) < 2 or command[1].startswith("-"):
        raise LaunchError(
            f"{flag} runs a Python script once per agent, e.g. fogrun {flag} -np 4 python "
            f"script.py; got: {shlex.join(command)}"
        )
    module = "fogsim._checkmodes" if options.check_modes else "fogsim.spmd"
    args = [_interpreter(command[0]), "-m", module, "-np", str(options.np)]
    if options.local_size is not None:
        args += ["--local-size", str(options.local_size)]
    return [*args, "--", *command[1:]]


def _exported(env: Mapping[str, str], changes: Mapping[str, str]) -> list[str]:
    # Open MPI passes its launcher's environment to the ranks on this host only (Hydra
    # passes it to every host): name with -x what fogrun set and every FOGSIM_* setting, so
    # that ranks on other hosts run with the same options (FOGSIM_SEED, ...), and where the
    # torch backend's ranks meet and listen. Open MPI forwards its own OMPI_* variables;
    # PRTE_* ones are for the launcher itself.
    names = {name for name in env if name.startswith("FOGSIM_") or name in _RENDEZVOUS}
    names.update(name for name in changes if not name.startswith(("OMPI_", "PRTE_")))
    return sorted(names)


def _mpiexec_args(
    options: Options, mpi: MPIInfo, env: Mapping[str, str], changes: Mapping[str, str]
) -> list[str]:
    processes = options.shards if options.sharded else options.np
    args = [mpi.mpiexec, "-n", str(processes)]
    if options.hosts:
        args += ["--host" if mpi.implementation == OPENMPI else "-hosts", options.hosts]
    if mpi.exit_codes:  # how each rank ended: fogrun's exit status (fogsim.run._status)
        args.append("-print-all-exitcodes")
    if mpi.implementation == OPENMPI:
        for name in _exported(env, changes):
            args += ["-x", name]
    args += shlex.split(options.extra_mpi_flags)
    return args


def build_command(
    options: Options, environ: Mapping[str, str], mpi: MPIInfo | None = None
) -> tuple[list[str], dict[str, str]]:
    """Return the argument list and the complete environment of the job.

    Pure: ``environ`` is the user's environment (``fogsim._settings.environ()``) and
    ``mpi`` the launcher found by :func:`fogsim.run.find_mpi`; nothing is read or run.
    Raise `LaunchError` when MPI is needed (no ``--sim``/``--spmd``, or ``--sim --shards P``
    with P > 1) and ``mpi`` is None.
    """
    command = list(options.command)
    if options.spmd or options.check_modes:
        return _spmd_command(options, command), {**environ, **env_changes(options, environ)}
    if is_python(command[0]):
        command[0] = _interpreter(command[0])
        if not options.one_process:
            # the bootstrap needs fogsim: only where the ranks run fogrun's own interpreter
            command = with_mpi4py(command, reporting=command[0] == sys.executable)
        elif options.bluefog:
            command = with_bootstrap(command)
    changes = env_changes(options, environ, mpi)
    env = {**environ, **changes}
    if options.one_process:
        return command, env
    if mpi is None:
        raise LaunchError(NO_MPI_MESSAGE)
    return _mpiexec_args(options, mpi, env, changes) + command, env
