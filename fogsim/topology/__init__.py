"""Topology as data: weighted communication graphs, weight rules, dynamic schedules, checks.

Weight convention
-----------------
``W[i, j]`` is the weight agent ``i`` applies to the value it receives from agent ``j``: row
``i`` holds agent i's receive weights and the diagonal holds the self weights, so neighbor
averaging of stacked agent values is ``X <- W X``, i.e. ``x_i <- w_ii x_i + sum_j w_ij x_j``.
Rows summing to 1 make ``W`` pull (row-stochastic) weights; columns summing to 1 make it push
(column-stochastic) weights.

As a networkx ``DiGraph`` the edge ``j -> i`` carries ``weight`` ``W[i, j]`` (information
flows from j to i) and a self loop ``i -> i`` carries the self weight. Nodes are ``0..n-1``.
The edges are the structurally nonzero entries: explicit zeros (and networkx edges of weight
0) are dropped. A graph without ``weight`` attributes gets weight 1.0 per edge, and an
undirected ``nx.Graph`` counts as the DiGraph with both directions.

This package holds data only: it imports numpy, scipy and networkx (lazily), never
communication code.
"""

from ._circulant import CirculantForm
from ._topology import Topology, as_topology
from .builders import (
    erdos_renyi_graph,
    exponential_graph,
    exponential_two_graph,
    fully_connected_graph,
    hypercube_graph,
    mesh_grid_2d_graph,
    random_geometric_graph,
    ring_graph,
    star_graph,
    symmetric_exponential_graph,
    torus_2d_graph,
)
from .checks import (
    is_column_stochastic,
    is_doubly_stochastic,
    is_row_stochastic,
    is_strongly_connected,
    mixing_time,
    rho,
    spectral_gap,
)
from .schedules import (
    DynamicStep,
    inner_outer_exponential_two,
    one_peer_exponential_two,
    one_peer_schedule,
    random_matching,
)
from .weights import (
    column_normalize,
    doubly_stochastic,
    max_degree_weights,
    metropolis_hastings_weights,
    row_normalize,
    uniform_weights,
)

__all__ = [
    "CirculantForm",
    "DynamicStep",
    "Topology",
    "as_topology",
    "column_normalize",
    "doubly_stochastic",
    "erdos_renyi_graph",
    "exponential_graph",
    "exponential_two_graph",
    "fully_connected_graph",
    "hypercube_graph",
    "inner_outer_exponential_two",
    "is_column_stochastic",
    "is_doubly_stochastic",
    "is_row_stochastic",
    "is_strongly_connected",
    "max_degree_weights",
    "mesh_grid_2d_graph",
    "metropolis_hastings_weights",
    "mixing_time",
    "one_peer_exponential_two",
    "one_peer_schedule",
    "random_geometric_graph",
    "random_matching",
    "rho",
    "ring_graph",
    "row_normalize",
    "spectral_gap",
    "star_graph",
    "symmetric_exponential_graph",
    "torus_2d_graph",
    "uniform_weights",
]
