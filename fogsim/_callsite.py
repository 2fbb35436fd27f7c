"""Where the user called fogsim from: the first stack frame outside the package.

Warnings and reports point at the user's line (``file:line``), not at fogsim's internals.
"""

from __future__ import annotations

import os
import sys
from types import FrameType

__all__ = ["call_site", "user_frame", "user_stacklevel"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost frame, from ``depth`` frames above the caller, outside fogsim."""
    frame: FrameType | None = sys._getframe(depth + 1)
    while frame is not None and (
        frame.f_code.co_filename.startswith(_PACKAGE)
        or frame.f_code.co_filename.endswith("threading.py")
    ):
        frame = frame.f_back
    return frame


def call_site() -> str:
    """``file:line`` of the user's call (the innermost frame outside fogsim)."""
    frame = user_frame(2)
    return "?" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning issued by the caller point at the user's line."""
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
