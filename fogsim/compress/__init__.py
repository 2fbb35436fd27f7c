"""Compressors for decentralized communication.

Each compressor is a small object with ``compress(x, rng) -> payload``,
``decompress(payload) -> x_hat`` and ``payload_bytes(shape, dtype)``, the exact bytes a
payload takes on the wire (values plus indices or scales); ``compress_stacked`` and
``decompress_stacked`` do every simulated agent in one vectorized call, agent r drawing
from its own generator (``fs.rng()``), so every mode draws the same numbers. ``pack`` and
``unpack`` turn payloads into ``uint8`` buffers and back.
"""

from __future__ import annotations

from ._base import Compressor, Payload, pack, unpack
from ._simple import Identity, TopK, identity, top_k

__all__ = ["Compressor", "Identity", "Payload", "TopK", "identity", "pack", "top_k", "unpack"]
