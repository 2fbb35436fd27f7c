"""``bluefog.torch`` on fogsim: ``import fogsim.compat.bluefog.torch as bf``.

The same names as :mod:`fogsim.compat.bluefog` (this module forwards to it), under the
module path BlueFog code imports (``bluefog.torch``; see :func:`fogsim.compat.bluefog.install`).
"""

from __future__ import annotations

from typing import Any

from .. import bluefog as _bluefog
from ..bluefog import *  # noqa: F403 - BlueFog's names, one module deeper

__all__ = list(_bluefog.__all__)


def __getattr__(name: str) -> Any:
    return getattr(_bluefog, name)  # names imported on first use (the optimizers)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_bluefog.__dir__()))
