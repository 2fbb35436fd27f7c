"""Where the user called fogsim from: the first stack frame outside the package.

Warnings and reports point at the user's line (``file:line``), not at fogsim's internals.
"""

from __future__ import annotations

import os
import sys
from types import FrameType

__all__ = ["INSIDE", "call_site", "inside", "user_frame", "user_stacklevel"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


#: file name -> whether its frames are fogsim's (or threading's), found once per file
INSIDE: dict[str, bool] = {}


def inside(filename: str) -> bool:
    """Whether frames of ``filename`` are fogsim's own (or threading's), kept in :data:`INSIDE`
    (a hot loop reads the dictionary first: a string method per frame would cost the guards
    that read this)."""
    known = INSIDE.get(filename)
    if known is None:
        known = INSIDE[filename] = filename.startswith(_PACKAGE) or filename.endswith(
            "threading.py"
        )
    return known


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost frame, from ``depth`` frames above the caller, outside fogsim."""
    frame: FrameType | None = sys._getframe(depth + 1)
    while frame is not None:
        filename = frame.f_code.co_filename
        known = INSIDE.get(filename)
        if not (inside(filename) if known is None else known):
            return frame
        frame = frame.f_back
    return None


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
