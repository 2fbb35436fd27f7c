"""The modelled time of each op against the number of GPUs (:func:`scaling_table`) and its
plot (:func:`plot_allreduce_scaling`), on :meth:`~fogsim.hierarchy.cost.Network.cluster`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..topology import exponential_two_graph, one_peer_exponential_two
from .cost import (
    Network,
    decomposed_allreduce_time,
    hierarchical_neighbor_allreduce_time,
    neighbor_allreduce_time,
    one_level_allreduce_time,
    schedule_time,
    two_level_allreduce_time,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["plot_allreduce_scaling", "scaling_table"]

# -- scaling --------------------------------------------------------------------------------
_CURVES = {
    "ring": "ring all-reduce (Eq. 6)",
    "two_level": "two-level all-reduce (Eq. 7)",
    "decomposed": "decomposed all-reduce (Eq. 9)",
    "neighbor_exp2": "neighbor allreduce, exponential-2",
    "one_peer": "one-peer exponential-2 (average step)",
    "hierarchical": "hierarchical neighbor allreduce, exp-2 machines",
}


def scaling_table(
    gpus_per_machine: int,
    machine_counts: Sequence[int],
    nbytes: float,
    intra: Mapping[str, float] | None = None,
    inter: Mapping[str, float] | None = None,
    kind: str = "fat_tree",
) -> list[dict[str, Any]]:
    """Return seconds per op on :meth:`Network.cluster` for each machine count.

    Each row holds ``gpus`` and the time of every curve of :func:`plot_allreduce_scaling`:
    ``ring``, ``two_level``, ``decomposed``, ``neighbor_exp2``, ``one_peer``, ``hierarchical``.
    """
    rows = []
    for machines in machine_counts:
        net = Network.cluster(gpus_per_machine, machines, intra, inter, kind)
        p = net.size
        period = max(1, (p - 1).bit_length())  # one cycle of the one-peer schedule
        rows.append(
            {
                "gpus": p,
                "ring": one_level_allreduce_time(net, nbytes),
                "two_level": two_level_allreduce_time(net, nbytes),
                "decomposed": decomposed_allreduce_time(net, nbytes),
                "neighbor_exp2": neighbor_allreduce_time(net, nbytes, exponential_two_graph(p)),
                "one_peer": schedule_time(
                    net, nbytes, itertools.islice(one_peer_exponential_two(p), period)
                ),
                "hierarchical": hierarchical_neighbor_allreduce_time(
                    net, nbytes, exponential_two_graph(machines)
                ),
            }
        )
    return rows


def plot_allreduce_scaling(
    gpus_per_machine: int,
    machine_counts: Sequence[int],
    nbytes: float,
    intra: Mapping[str, float] | None = None,
    inter: Mapping[str, float] | None = None,
    kind: str = "fat_tree",
    ax: Axes | None = None,
) -> Axes:
    """Plot the modelled time of one op against the number of GPUs; return the axes.

    Ring, two-level and decomposed all-reduce, neighbor allreduce on the exponential-2
    graph, the one-peer exponential-2 schedule's average step, and hierarchical neighbor
    allreduce over the exponential-2 graph of machines (:func:`scaling_table`).
    """
    import matplotlib.pyplot as plt

    rows = scaling_table(gpus_per_machine, machine_counts, nbytes, intra, inter, kind)
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.8))
    gpus = [row["gpus"] for row in rows]
    for key, label in _CURVES.items():
        ax.plot(gpus, [1e3 * row[key] for row in rows], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("modelled time per op (ms)")
    ax.set_title(f"{nbytes / 2**20:g} MiB per GPU, {gpus_per_machine} GPUs per machine ({kind})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return ax
