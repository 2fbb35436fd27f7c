"""Kernels of the combine step ``X <- W X`` and the runtimes' dispatch, compiled when possible.

``compiled`` tells whether the Cython extensions ``_kernels`` and ``_dispatch`` are in use;
without them the package runs on ``_fallback`` and ``_fallback_dispatch``, which give
bit-identical results more slowly. ``kernels`` is the kernel module in use and ``fallback``
the numpy one; ``dispatch`` and ``fallback_dispatch`` likewise for handles, the handle table
and tensor fusion (``FusionQueue``, ``FusedBatch``, ``pack``, ``combine_rows``).

``FOGSIM_PURE_PYTHON=1`` in the environment (see :mod:`fogsim._settings`) forces the twins
even when the extension is built (``compiled`` is then False), so that the same workload can
be run on both and compared bit for bit (``tests/test_pure_python.py``). It is read once,
when this module is first imported.
"""

from .. import _settings
from . import _fallback as fallback
from . import _fallback_dispatch as fallback_dispatch

if _settings.pure_python():
    kernels, dispatch, compiled = fallback, fallback_dispatch, False
else:
    try:
        from . import _dispatch as dispatch
        from . import _kernels as kernels
    except ImportError:
        kernels, dispatch, compiled = fallback, fallback_dispatch, False
    else:
        compiled = True

assemble_csr = kernels.assemble_csr
circulant_combine = kernels.circulant_combine
csr_combine = kernels.csr_combine
weighted_combine = kernels.weighted_combine
Handle = dispatch.Handle
HandleTable = dispatch.HandleTable
pack = dispatch.pack
layout_fingerprint = dispatch.layout_fingerprint
combine_rows = dispatch.combine_rows
FusionQueue = dispatch.FusionQueue
FusedBatch = dispatch.FusedBatch
format_trace_events = dispatch.format_trace_events
TraceOp = dispatch.TraceOp
TracePhase = dispatch.TracePhase
TraceRecorder = dispatch.TraceRecorder
trace_now_ns = dispatch.trace_now_ns

__all__ = [
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
    "format_trace_events",
    "dispatch",
    "fallback",
    "fallback_dispatch",
    "kernels",
    "layout_fingerprint",
    "pack",
    "trace_now_ns",
    "weighted_combine",
]
