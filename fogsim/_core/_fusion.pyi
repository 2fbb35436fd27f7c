# Signatures of the compiled module; the implementations are in _fusion.pyx.
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._handles import Handle, HandleTable

__all__ = [
    "FusedBatch",
    "FusedEntry",
    "FusionQueue",
    "combine_rows",
    "layout_fingerprint",
    "pack",
]

class FusedEntry(Handle):
    arr: Any
    wrap: Callable[[Any], Any] | None
    error: Exception | None
    plan: Any
    self_weight: float
    weights: Any
    select: Any
    offset: int
    check: bool
    batch: FusedBatch | None

class FusedBatch:
    entries: list[FusedEntry]
    send: Any
    recv: Any
    request: Any
    done: bool
    def __init__(
        self,
        entries: list[FusedEntry],
        send: Any,
        recv: Any,
        request: Any,
        wait: Callable[..., Any] | None = None,
        test: Callable[[], bool] | None = None,
        trace: Callable[[], Any] | None = None,
    ) -> None: ...
    def test(self) -> bool: ...
    def complete(self) -> None: ...

class FusionQueue:
    threshold: int
    static_plan: Any
    def __init__(
        self,
        threshold: int,
        flush_fn: Callable[[list[FusedEntry], int, int | None, Exception | None], Any],
        table: HandleTable,
    ) -> None: ...
    def __len__(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    def add_static(self, arr: Any) -> Handle | None: ...
    def add(
        self,
        arr: Any,
        plan: Any,
        wrap: Callable[[Any], Any] | None = None,
        error: Exception | None = None,
        check: bool = True,
        name: str | None = None,
    ) -> Handle: ...
    def flush(self) -> None: ...

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
