"""The vectorized simulator backend (``init(backend="sim")``)."""

from ._backend import SimBackend

__all__ = ["SimBackend"]
