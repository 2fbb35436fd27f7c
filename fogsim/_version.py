"""fogsim's version, the one place it is written (pyproject.toml reads it at build time)."""

__version__ = "0.1.0"
