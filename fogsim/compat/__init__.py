"""Compatibility layers: other libraries' APIs on top of fogsim.

* :mod:`fogsim.compat.bluefog`: BlueFog's names and semantics, so a BlueFog script runs
  after changing its import line to ``import fogsim.compat.bluefog as bf``.

Nothing is imported here: each layer is imported on its own.
"""

__all__: list[str] = []
