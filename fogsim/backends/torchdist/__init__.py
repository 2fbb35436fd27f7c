"""The torch.distributed runtime backend (``init(backend="torch")``).

One process per agent, started by torchrun or mpiexec/fogrun (see ``_world`` for how the
ranks meet): gloo moves CPU values (numpy arrays, CPU tensors), NCCL CUDA tensors.
Every op of :mod:`fogsim` has the MPI runtime's semantics and the simulator's bits;
window ops are refused with a clear error.
"""

from ._backend import TorchBackend

__all__ = ["TorchBackend"]
