"""The types BlueFog's API here takes beyond fogsim's own (:mod:`fogsim._types`).

Aliases, as fogsim's are: the API reference shows the alias's name with its meaning here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["Tensor"]

#: A tensor that an op updates in place (``allreduce_``, ``broadcast_``, the value
#: ``win_create`` registers): a torch tensor (BlueFog's type) or a numpy array, stacked
#: along a leading agent axis in simulation. The other ops take any ``ArrayLike``.
Tensor = Union[np.ndarray, "torch.Tensor"]
