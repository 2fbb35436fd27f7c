"""Teaching demos built on the public API (``import fogsim as fs``), runnable in both modes.

* :mod:`fogsim.demos.fish_school`: a school of fish on a dynamic proximity graph estimates a
  predator's position by diffusion, then escapes or encircles it.
* :mod:`fogsim.demos.heterogeneity`: scikit-learn's digits split over 16 agents with
  Dirichlet label skew; DGD's error floor against gradient tracking and exact diffusion,
  and decentralized SGD's accuracy by topology (notebook 08).

Nothing here is imported by ``import fogsim``.
"""

__all__ = ["fish_school", "heterogeneity"]
