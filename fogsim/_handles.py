"""Handles returned by the ``*_nonblocking`` ops (compiled in ``_core._handles``)."""

from ._core import Handle, HandleTable

__all__ = ["Handle", "HandleTable"]
