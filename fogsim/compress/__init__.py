"""Compressors for decentralized communication.

Each compressor is a small object with ``compress(x, rng) -> payload``,
``decompress(payload) -> x_hat`` and ``payload_bytes(shape, dtype)``, the exact bytes a
payload takes on the wire (values plus indices or scales); ``compress_stacked`` and
``decompress_stacked`` do every simulated agent in one vectorized call, agent r drawing
from its own generator (``fs.rng()``), so every mode draws the same numbers. ``pack`` and
``unpack`` turn payloads into ``uint8`` buffers and back.

========================  ======================================================  ========
compressor                payload (d entries of x's dtype, b bytes each)          unbiased
========================  ======================================================  ========
``identity()``            d values                                                yes
``top_k(k)``              k values, k indices (uint8/16/32: the smallest that     no
                          holds d - 1); ``value_dtype=np.float32`` halves values
``random_k(k)``           as top_k (values scaled by d/k on receipt)              yes
``qsgd(s)``               the norm, d signed levels (4 bits if s <= 7, else int)  yes
``scaled_sign()``         the mean magnitude, d sign bits                         no
``power_sgd(rank=r)``     P (m x r) and Q (n x r) of an m x n matrix              no
========================  ======================================================  ========

``qsgd(s, scaled=True)`` sends the same payload and divides by ``1 + tau`` on receipt (a
contraction, biased: the QSGD that CHOCO's error feedback needs).

Compressed gossip: ``fs.neighbor_allreduce(x, compressor=C)`` (one compressed exchange,
:func:`compressed_neighbor_allreduce`) and :class:`CompressedGossip` (CHOCO-gossip, with
error feedback), the same numbers in every mode.
"""

from __future__ import annotations

from ._base import Compressor, Payload, pack, unpack
from ._gossip import CompressedGossip, compressed_neighbor_allreduce
from ._low_rank import PowerSGD, power_sgd
from ._quantize import QSGD, ScaledSign, qsgd, scaled_sign
from ._random_k import RandomK, random_k
from ._simple import Identity, TopK, identity, top_k

__all__ = [
    "QSGD",
    "CompressedGossip",
    "Compressor",
    "Identity",
    "Payload",
    "PowerSGD",
    "RandomK",
    "ScaledSign",
    "TopK",
    "compressed_neighbor_allreduce",
    "identity",
    "pack",
    "power_sgd",
    "qsgd",
    "random_k",
    "scaled_sign",
    "top_k",
    "unpack",
]
