"""Backends by name: each implements :class:`fogsim.backends.Backend` for one runtime."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ._base import Backend

__all__ = ["Backend", "available_backends", "create_backend", "register_backend"]

# name -> "module:attribute" (imported on first use, so `import fogsim` imports neither
# mpi4py nor torch) or an already imported factory.
_REGISTRY: dict[str, str | Callable[..., Backend]] = {
    "sim": "fogsim.backends.sim:SimBackend",
    "sim-sharded": "fogsim.backends.sim._sharded:ShardedSimBackend",  # init(shards=P), P > 1
    "mpi": "fogsim.backends.mpi:MPIBackend",
    "torch": "fogsim.backends.torchdist:TorchBackend",
    "spmd": "fogsim.spmd._backend:SpmdBackend",  # the agent threads of fogsim.spmd.run
}


def register_backend(name: str, factory: str | Callable[..., Backend]) -> None:
    """Register ``factory`` (a Backend subclass, or ``"module:attr"``) under ``name``."""
    if not isinstance(name, str) or not name:
        raise TypeError("backend name must be a non-empty string")
    _REGISTRY[name.lower()] = factory


def available_backends() -> list[str]:
    """Return the registered backend names."""
    return sorted(_REGISTRY)


def _resolve(name: str) -> Callable[..., Backend]:
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown backend {name!r}; available: {', '.join(available_backends())}"
        ) from None
    if isinstance(factory, str):
        module_name, _, attr = factory.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                raise ValueError(
                    f"backend {name!r} is not available in this fogsim build "
                    f"({module_name} is missing)"
                ) from exc
            raise ValueError(
                f"backend {name!r} needs {exc.name!r}, which is not installed"
            ) from exc
        factory = _REGISTRY[name] = getattr(module, attr)
    return factory


def create_backend(name: str, **options: Any) -> Backend:
    """Create the backend registered under ``name`` with ``options``."""
    return _resolve(name)(**options)
