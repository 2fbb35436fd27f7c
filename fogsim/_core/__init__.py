"""Kernels of the combine step ``X <- W X``, compiled when possible.

``compiled`` tells whether the Cython extension ``_kernels`` is in use; without it the
package runs on ``_fallback``, which gives bit-identical results more slowly. ``kernels`` is
the module in use and ``fallback`` the numpy one.
"""

from . import _fallback as fallback

try:
    from ._kernels import assemble_csr, circulant_combine, csr_combine, weighted_combine
except ImportError:
    from ._fallback import assemble_csr, circulant_combine, csr_combine, weighted_combine

    kernels = fallback
    compiled = False
else:
    from . import _kernels as kernels

    compiled = True

__all__ = [
    "assemble_csr",
    "circulant_combine",
    "compiled",
    "csr_combine",
    "fallback",
    "kernels",
    "weighted_combine",
]
