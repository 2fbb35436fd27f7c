"""The MPI runtime backend (``init(backend="mpi")``, or any launch by mpiexec/fogrun)."""

from ._backend import MPIBackend

__all__ = ["MPIBackend"]
