# Signatures of the compiled module; the implementations are in _handles.pyx.
from collections.abc import Callable
from typing import Any

__all__ = ["Handle", "HandleTable"]

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
