"""Teaching demos built on the public API (``import fogsim as fs``), runnable in both modes.

* :mod:`fogsim.demos.fish_school`: a school of fish on a dynamic proximity graph estimates a
  predator's position by diffusion, then escapes or encircles it.

Nothing here is imported by ``import fogsim``.
"""

__all__ = ["fish_school"]
