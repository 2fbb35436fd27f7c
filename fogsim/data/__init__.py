"""Data across agents: per-agent batches of each agent's shard, the same in every mode."""

from __future__ import annotations

from ._loader import AgentLoader

__all__ = ["AgentLoader"]
