# Signatures of the compiled module; the implementations are in _kernels.pyx.
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = [
    "Combiner",
    "assemble_csr",
    "circulant_combine",
    "csr_combine",
    "csr_combine_rows",
    "dicts_unchanged",
    "dicts_watch",
    "weighted_combine",
]

class Combiner:
    n: int
    @staticmethod
    def circulant(
        offsets: np.ndarray, weights: np.ndarray, self_weight: np.ndarray, n: int
    ) -> Combiner: ...
    @staticmethod
    def csr(
        indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, self_weight: np.ndarray, n: int
    ) -> Combiner: ...
    def apply(self, x: np.ndarray, out: np.ndarray) -> np.ndarray: ...

def weighted_combine(
    out: np.ndarray, self_weight: float, x: np.ndarray, weights: np.ndarray, ys: np.ndarray
) -> np.ndarray: ...
def csr_combine(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    self_weight: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
) -> np.ndarray: ...
def csr_combine_rows(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    self_weight: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
    start: int,
    stop: int,
) -> np.ndarray: ...
def circulant_combine(
    offsets: np.ndarray,
    weights: np.ndarray,
    self_weight: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
) -> np.ndarray: ...
def assemble_csr(
    n: int,
    rows: Sequence[Mapping[int, float] | Sequence[int] | np.ndarray | None],
    argname: str = "src_weights",
    allow_self: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
def dicts_watch(rows: object) -> tuple[tuple[dict[int, float], ...], np.ndarray] | None: ...
def dicts_unchanged(rows: object, watched: object) -> bool: ...
