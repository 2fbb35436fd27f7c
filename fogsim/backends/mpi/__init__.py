"""The MPI runtime backend (``init(backend="mpi")``, or any launch by mpiexec/fogrun).

``MPIBackend`` is imported on first use, so that other backends can reuse the pure helpers
of ``_plan`` and ``_agree`` without importing mpi4py (which starts MPI).
"""

__all__ = ["MPIBackend"]


def __getattr__(name: str) -> object:
    if name == "MPIBackend":
        from ._backend import MPIBackend

        return MPIBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
