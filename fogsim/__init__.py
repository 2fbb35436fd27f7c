"""fogsim: write a decentralized algorithm once, run it simulated or distributed.

>>> import numpy as np, fogsim as fs
>>> ctx = fs.init(size=8, topology=fs.topology.ring_graph)   # 8 simulated agents
>>> x = fs.local(lambda r: np.array([float(r)]))           # agent r holds [r]
>>> for _ in range(100):
...     x = fs.neighbor_allreduce(x)                        # x <- W x
>>> bool(np.allclose(x, 3.5))
True
>>> fs.shutdown()

In simulation (the default without a launcher) every agent-local value is stacked along
a leading agent axis; under ``mpiexec``/``fogrun`` each process is one agent. See
:func:`init`, :func:`neighbor_allreduce` and :mod:`fogsim.topology`.
"""

# ruff: noqa: F405 - __all__ names the ops that the star imports below give type checkers

import logging as _logging
import typing as _typing

if _typing.TYPE_CHECKING:  # the real imports, for type checkers and IDEs; at run time they are lazy
    from . import clock, spmd, timeline, topology

    # the public ops and the topology functions, as each module's __all__ names them
    from ._api import *  # noqa: F403
    from ._api_bytes import *  # noqa: F403
    from ._api_topology import *  # noqa: F403
    from ._api_windows import *  # noqa: F403
    from ._checkmodes import ModeReport, check_modes
    from ._context import Context
    from ._handles import Handle
    from ._rng import rng
    from ._stall import StallError
    from ._weightcheck import WeightWarning
    from .backends.sim._shapes import AgentShapeWarning
    from .timeline import timeline_context, timeline_end_activity, timeline_start_activity

from ._version import __version__

__all__ = [
    "__version__",
    "AgentShapeWarning",
    "allgather",
    "allgather_nonblocking",
    "allreduce",
    "allreduce_nonblocking",
    "barrier",
    "barrier_nonblocking",
    "broadcast",
    "broadcast_nonblocking",
    "bytes_sent",
    "check_modes",
    "clock",
    "Context",
    "get_win_version",
    "global_view",
    "Handle",
    "hierarchical_neighbor_allreduce",
    "hierarchical_neighbor_allreduce_nonblocking",
    "in_neighbor_machine_ranks",
    "in_neighbor_ranks",
    "init",
    "is_initialized",
    "is_machine_topology_weighted",
    "is_main_process",
    "is_topology_weighted",
    "load_machine_topology",
    "load_topology",
    "local",
    "local_rank",
    "local_size",
    "machine_rank",
    "machine_size",
    "ModeReport",
    "neighbor_allgather",
    "neighbor_allgather_nonblocking",
    "neighbor_allreduce",
    "neighbor_allreduce_nonblocking",
    "out_neighbor_machine_ranks",
    "out_neighbor_ranks",
    "poll",
    "rank",
    "rng",
    "set_asynchrony",
    "set_machine_topology",
    "set_topology",
    "set_win_ops_with_associated_p",
    "shutdown",
    "StallError",
    "size",
    "spmd",
    "timeline",
    "timeline_context",
    "timeline_end_activity",
    "timeline_start_activity",
    "topology",
    "vmap",
    "wait",
    "WeightWarning",
    "win_accumulate",
    "win_accumulate_nonblocking",
    "win_associated_p",
    "win_create",
    "win_free",
    "win_get",
    "win_get_nonblocking",
    "win_mutex",
    "win_names",
    "win_poll",
    "win_put",
    "win_put_nonblocking",
    "win_update",
    "win_update_then_collect",
    "win_wait",
]

# The public names are imported on first use (PEP 562), so that ``import fogsim.run`` (the
# fogrun launcher) and ``import fogsim._settings`` do not pay for numpy, scipy and networkx.
#: The public names that are not an op or a topology function (see _OPS), and their modules.
_MODULE_OF = dict(
    Context="._context",
    Handle="._handles",
    StallError="._stall",
    rng="._rng",
    check_modes="._checkmodes",
    ModeReport="._checkmodes",
    AgentShapeWarning=".backends.sim._shapes",
    topology=".topology",
    clock=".clock",
    spmd=".spmd",
    timeline=".timeline",
    timeline_context=".timeline",
    timeline_end_activity=".timeline",
    timeline_start_activity=".timeline",
    WeightWarning="._weightcheck",
)


#: The modules of the public ops and the topology functions. A public name that is not in
#: _MODULE_OF is found in the one whose __all__ lists it (``_api``, the first, is imported
#: by the others anyway), so a new op is named once here: in __all__.
_OPS = ("._api", "._api_windows", "._api_topology", "._api_bytes")


def __getattr__(name: str) -> object:
    import importlib

    module = _MODULE_OF.get(name)
    if module is None:
        if name == "__version__" or name not in __all__:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        for module in _OPS:
            ops = importlib.import_module(module, __name__)
            if name in ops.__all__:
                value = getattr(ops, name)
                break
        else:
            raise AttributeError(f"module {__name__!r} lists {name!r} but none of {_OPS} has it")
    else:
        value = importlib.import_module(module, __name__)
        if name not in ("topology", "timeline", "spmd", "clock"):
            value = getattr(value, name)
    globals()[name] = value  # later look-ups do not come here again
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


_logging.getLogger(__name__).addHandler(_logging.NullHandler())

# A rank of a fogrun job reports its uncaught exception, its warnings and its exit status to
# fogrun, which prints each distinct error and warning once (fogsim.run._hooks); elsewhere
# nothing changes.
from . import _settings as _fogsim_settings  # noqa: E402 - light: no numpy

if _fogsim_settings.environ().get("FOGSIM_RANK_DIR"):  # set by fogrun for its ranks only
    from .run import _hooks as _run_hooks

    _run_hooks.install_from_environ(_fogsim_settings.environ())
