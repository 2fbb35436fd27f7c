"""The compiled core: combine kernels, handles, tensor fusion, the trace recorder.

Four Cython extension modules, each named for what it holds, and a pure-Python twin of each
that gives bit-identical results more slowly:

==============  ===============================================  =====================
module          holds                                            twin
==============  ===============================================  =====================
``_kernels``    the combine kernels ``X <- W X`` (dense rows,     ``_fallback``
                CSR whole or by row range, circulant; a
                :class:`Combiner` checks one matrix once for
                many steps) and CSR assembly
``_handles``    :class:`Handle`, :class:`HandleTable`            ``_fallback_handles``
``_fusion``     :class:`FusionQueue`, :class:`FusedBatch`,        ``_fallback_fusion``
                :func:`pack`, :func:`combine_rows`,
                :func:`layout_fingerprint`
``_trace``      :class:`TraceRecorder`, :class:`TraceOp`,         ``_fallback_trace``
                :class:`TracePhase`, :func:`format_trace_events`,
                :func:`trace_now_ns`
==============  ===============================================  =====================

``compiled`` tells whether the extensions are in use; ``kernels``, ``handles``, ``fusion``
and ``trace`` are the modules in use, ``fallback``, ``fallback_handles``,
``fallback_fusion`` and ``fallback_trace`` the twins. Without a build the package runs on
the twins.

``dispatch`` and ``fallback_dispatch`` gather the runtimes' parts (handles, fusion, trace) of
the implementation in use and of the twins, in one namespace each, for callers that take
them together (tests comparing both implementations name by name).

``FOGSIM_PURE_PYTHON=1`` in the environment (see :mod:`fogsim._settings`) forces the twins
even when the extension is built (``compiled`` is then False), so that the same workload can
be run on both and compared bit for bit (``tests/test_pure_python.py``). It is read once,
when this module is first imported.
"""

from types import ModuleType
from typing import TYPE_CHECKING

from .. import _settings
from . import _fallback as fallback
from . import _fallback_fusion as fallback_fusion
from . import _fallback_handles as fallback_handles
from . import _fallback_trace as fallback_trace

if TYPE_CHECKING:  # type checkers read the compiled modules' stubs; the twins match them
    from . import _fusion as fusion
    from . import _handles as handles
    from . import _kernels as kernels
    from . import _trace as trace

    compiled: bool
else:

    def _compiled() -> tuple[ModuleType, ModuleType, ModuleType, ModuleType] | None:
        """The compiled modules (kernels, handles, fusion, trace), or None when not built."""
        if _settings.pure_python():
            return None
        try:
            from . import _fusion, _handles, _kernels, _trace
        except ImportError:
            return None
        return _kernels, _handles, _fusion, _trace

    _modules = _compiled()
    compiled = _modules is not None
    kernels, handles, fusion, trace = _modules or (
        fallback,
        fallback_handles,
        fallback_fusion,
        fallback_trace,
    )


def _gather(name: str, *parts: ModuleType) -> ModuleType:
    """One namespace holding the public names of ``parts``."""
    gathered = ModuleType(name, f"The public names of {', '.join(p.__name__ for p in parts)}.")
    for part in parts:
        for attr in part.__all__:
            setattr(gathered, attr, getattr(part, attr))
    return gathered


dispatch = _gather(f"{__name__}.dispatch", handles, fusion, trace)
fallback_dispatch = _gather(
    f"{__name__}.fallback_dispatch", fallback_handles, fallback_fusion, fallback_trace
)
assemble_csr = kernels.assemble_csr
Combiner = kernels.Combiner
circulant_combine = kernels.circulant_combine
csr_combine = kernels.csr_combine
csr_combine_rows = kernels.csr_combine_rows
weighted_combine = kernels.weighted_combine
dicts_watch = kernels.dicts_watch
dicts_unchanged = kernels.dicts_unchanged
Handle = handles.Handle
HandleTable = handles.HandleTable
pack = fusion.pack
layout_fingerprint = fusion.layout_fingerprint
combine_rows = fusion.combine_rows
FusionQueue = fusion.FusionQueue
FusedBatch = fusion.FusedBatch
format_trace_events = trace.format_trace_events
TraceOp = trace.TraceOp
TracePhase = trace.TracePhase
TraceRecorder = trace.TraceRecorder
trace_now_ns = trace.trace_now_ns

__all__ = [
    "Combiner",
    "TraceOp",
    "TracePhase",
    "TraceRecorder",
    "FusedBatch",
    "FusionQueue",
    "Handle",
    "HandleTable",
    "assemble_csr",
    "combine_rows",
    "circulant_combine",
    "compiled",
    "csr_combine",
    "csr_combine_rows",
    "format_trace_events",
    "dicts_unchanged",
    "dicts_watch",
    "dispatch",
    "fallback",
    "fallback_dispatch",
    "fallback_fusion",
    "fallback_handles",
    "fallback_trace",
    "fusion",
    "handles",
    "kernels",
    "layout_fingerprint",
    "pack",
    "trace",
    "trace_now_ns",
    "weighted_combine",
]
