"""``bluefog.common`` on fogsim: its ``topology_util`` (the graph builders and helpers)."""

from .. import topology_util

__all__ = ["topology_util"]
