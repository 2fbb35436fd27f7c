"""Where the user called fogsim from: the first stack frame outside the package.

Warnings and reports point at the user's line (``file:line``), not at fogsim's internals.
"""

from __future__ import annotations

import os
import sys
from types import FrameType

__all__ = ["call_site", "user_frame", "user_stacklevel"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


#: file name -> whether its frames are fogsim's (or threading's), found once per file
_INSIDE: dict[str, bool] = {}


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost frame, from ``depth`` frames above the caller, outside fogsim."""
    frame: FrameType | None = sys._getframe(depth + 1)
    while frame is not None:
        filename = frame.f_code.co_filename
        inside = _INSIDE.get(filename)
        if inside is None:  # a string method per frame would cost the guards that read this
            inside = _INSIDE[filename] = filename.startswith(_PACKAGE) or filename.endswith(
                "threading.py"
            )
        if not inside:
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
