"""The MPI runtime backend (``init(backend="mpi")``, or any launch by mpiexec/fogrun).

``MPIBackend`` is imported on first use, so that importing this package does not import
mpi4py (which starts MPI). The protocol it follows is ``fogsim.backends._runtime``'s,
over ``MpiTransport`` (``_transport``).
"""

__all__ = ["MPIBackend"]


def __getattr__(name: str) -> object:
    if name == "MPIBackend":
        from ._backend import MPIBackend

        return MPIBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
