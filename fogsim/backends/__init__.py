"""Backends by name: each implements :class:`fogsim.backends.Backend` for one runtime.

A backend is one world (:class:`Backend`) composed of parts, each a protocol declared once:
:class:`Collectives`, :class:`Neighbors`, :class:`Machines` and :class:`WindowPart`; it
declares what it can do in its :class:`Capabilities`.

Transports by name too: what the processes of one job open among themselves (the sharded
simulator's processes move rows over one), each a runtime ``Transport``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .. import _settings
from ._base import Backend
from ._parts import Capabilities, Collectives, Machines, Neighbors
from ._transports import OpenedTransport
from ._windows import WindowPart

__all__ = [
    "Backend",
    "Capabilities",
    "Collectives",
    "Machines",
    "Neighbors",
    "WindowPart",
    "available_backends",
    "available_transports",
    "create_backend",
    "OpenedTransport",
    "open_transport",
    "register_backend",
    "register_transport",
]

# name -> "module:attribute" (imported on first use, so `import fogsim` imports neither
# mpi4py nor torch) or an already imported factory.
_REGISTRY: dict[str, str | Callable[..., Backend]] = {
    "sim": "fogsim.backends.sim:SimBackend",
    "sim-sharded": "fogsim.backends.sim._sharded:ShardedSimBackend",  # init(shards=P), P > 1
    "mpi": "fogsim.backends.mpi:MPIBackend",
    "torch": "fogsim.backends.torchdist:TorchBackend",
    "spmd": "fogsim.spmd._backend:SpmdBackend",  # the agent threads of fogsim.spmd.run
}


# name -> "module:attribute" of a function of the settings that opens the transport
# (imported on first use, as the backends are) or an already imported one.
_TRANSPORTS: dict[str, str | Callable[[_settings.Settings], OpenedTransport]] = {
    "mpi": "fogsim.backends._transports:open_mpi",
    "torch": "fogsim.backends._transports:open_torch",
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
        factory = _REGISTRY[name] = _load(factory, f"backend {name!r}")
    return factory


def _load(where: str, what: str) -> Any:
    """Import ``where`` (``"module:attribute"``) and return the attribute; raise a
    ValueError naming ``what`` when its module, or what it needs, is not installed."""
    module_name, _, attr = where.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ValueError(
                f"{what} is not available in this fogsim build ({module_name} is missing)"
            ) from exc
        raise ValueError(f"{what} needs {exc.name!r}, which is not installed") from exc
    return getattr(module, attr)


def create_backend(name: str, **options: Any) -> Backend:
    """Create the backend registered under ``name`` with ``options``."""
    return _resolve(name)(**options)


def register_transport(
    name: str, opener: str | Callable[[_settings.Settings], OpenedTransport]
) -> None:
    """Register ``opener`` (a function of the settings returning a transport, or
    ``"module:attr"`` naming one) under ``name``."""
    if not isinstance(name, str) or not name:
        raise TypeError("transport name must be a non-empty string")
    _TRANSPORTS[name.lower()] = opener


def available_transports() -> list[str]:
    """Return the registered transport names."""
    return sorted(_TRANSPORTS)


def open_transport(name: str, settings: _settings.Settings) -> OpenedTransport:
    """Open the transport registered under ``name`` among this job's processes (the
    caller frees it)."""
    try:
        opener = _TRANSPORTS[name]
    except KeyError:
        raise ValueError(
            f"unknown transport {name!r}; available: {', '.join(available_transports())}"
        ) from None
    if isinstance(opener, str):
        opener = _TRANSPORTS[name] = _load(opener, f"transport {name!r}")
    return opener(settings)
