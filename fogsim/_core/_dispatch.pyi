# Signatures of the compiled module; the implementations are in _dispatch.pyx.
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["Handle", "HandleTable", "combine_rows", "layout_fingerprint", "pack"]

class Handle:
    op: str
    name: str | None
    def __init__(
        self,
        op: str,
        finish: Callable[[], Any] | None,
        test: Callable[[], bool] | None = None,
        name: str | None = None,
    ) -> None: ...
    @classmethod
    def completed(cls, op: str, result: Any, name: str | None = None) -> Handle: ...
    def poll(self) -> bool: ...
    def complete(self) -> None: ...
    def wait(self) -> Any: ...

class HandleTable:
    def start(
        self,
        op: str,
        finish: Callable[[], Any],
        test: Callable[[], bool] | None = None,
        name: str | None = None,
    ) -> Handle: ...
    def drain(self) -> None: ...
    def __len__(self) -> int: ...

def layout_fingerprint(entries: Sequence[tuple[Any, Any]]) -> int: ...
def pack(out: Any, arrays: Sequence[np.ndarray], offsets: Sequence[int]) -> Any: ...
def combine_rows(
    out: np.ndarray,
    self_weight: float,
    x: np.ndarray,
    weights: np.ndarray,
    recv: np.ndarray,
    offset: int = 0,
    select: np.ndarray | None = None,
) -> np.ndarray: ...
