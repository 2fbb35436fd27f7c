"""Public ops routed in one place (fogsim._routing): each op and its _nonblocking twin have
the public signature, refuse a call that does not fit it with a TypeError naming the op,
and record their timeline span under the call's name (or the op's own)."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import fogsim as fs
from fogsim import _api, _api_windows, _routing  # noqa: F401 - their ops are declared on import
from fogsim import timeline as TL
from tests.test_timeline import check_trace

ROUTED = {  # op -> (timeline label, has a _nonblocking twin)
    "allreduce": ("ALLREDUCE", True),
    "neighbor_allreduce": ("NEIGHBOR_ALLREDUCE", True),
    "hierarchical_neighbor_allreduce": ("HIERARCHICAL_NEIGHBOR_ALLREDUCE", True),
    "allgather": ("ALLGATHER", True),
    "broadcast": ("BROADCAST", True),
    "neighbor_allgather": ("NEIGHBOR_ALLGATHER", True),
    "barrier": ("BARRIER", True),
    "win_create": ("WIN_CREATE", False),
    "win_free": ("WIN_FREE", False),
    "win_put": ("WIN_PUT", True),
    "win_accumulate": ("WIN_ACCUMULATE", True),
    "win_get": ("WIN_GET", True),
    "win_update": ("WIN_UPDATE", False),
    "win_update_then_collect": ("WIN_UPDATE_THEN_COLLECT", False),
}


@pytest.fixture
def world():
    fs.init(backend="sim", size=4)
    yield
    TL.stop()
    fs.shutdown()


@pytest.mark.parametrize("op", sorted(ROUTED))
def test_twin_has_the_public_signature(op):
    fn = getattr(fs, op)
    assert fn.__name__ == op and fn.__doc__
    _, twin = ROUTED[op]
    if not twin:
        assert not hasattr(fs, op + "_nonblocking")
        return
    nb = getattr(fs, op + "_nonblocking")
    assert nb.__name__ == op + "_nonblocking"
    assert f":func:`{op}`" in nb.__doc__
    params = inspect.signature(fn).parameters
    assert inspect.signature(nb).parameters == params
    assert inspect.signature(nb).return_annotation == "Handle"


def test_a_call_that_does_not_fit_names_the_public_op(world):
    x = fs.local(lambda r: np.full(2, float(r)))
    with pytest.raises(TypeError, match=r"broadcast\(\) missing 1 required positional"):
        fs.broadcast(x)
    with pytest.raises(TypeError, match=r"allgather\(\) got an unexpected keyword argument"):
        fs.allgather(x, root=0)
    with pytest.raises(TypeError, match=r"win_put_nonblocking\(\) missing"):
        fs.win_put_nonblocking(x)


def test_spans_are_named_by_the_call_or_the_op(world, tmp_path):
    TL.start(str(tmp_path / "t"))
    x = fs.local(lambda r: np.full(2, float(r)))
    fs.allgather(x, name="g")  # name by keyword
    fs.broadcast(x, 1, "b")  # name by position
    fs.wait(fs.neighbor_allgather_nonblocking(x))
    fs.win_create(x, "w")
    fs.win_put(x, "w")
    fs.wait(fs.win_get_nonblocking("w"))
    fs.win_free("w")
    fs.barrier()
    TL.stop()
    events = check_trace(tmp_path / "t.json")
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    seen = {(e["name"], tracks.get(e["tid"])) for e in events if e["ph"] in ("B", "X")}
    for pair in [
        ("ALLGATHER", "g"),
        ("BROADCAST", "b"),
        ("ENQUEUE_NEIGHBOR_ALLGATHER", "enqueue_neighbor_allgather"),
        ("WIN_CREATE", "w"),
        ("WIN_PUT", "w"),
        ("ENQUEUE_WIN_GET", "w"),
        ("WIN_FREE", "w"),
        ("BARRIER", "barrier"),
    ]:
        assert pair in seen, (pair, sorted(seen))


def test_variants_and_checks_are_routed_too(world, tmp_path):
    TL.start(str(tmp_path / "t"))
    x = fs.local(lambda r: np.full(2, float(r)))
    handle = fs.allreduce_nonblocking(x, name="h", is_hierarchical_local=True)
    assert handle.poll() and handle.name == "h" and handle.op == "allreduce"
    np.testing.assert_array_equal(fs.wait(handle), fs.allreduce(x, is_hierarchical_local=True))
    fs.allreduce(x, algorithm="decomposed", factors=(2, 2))
    fs.wait(fs.allreduce_nonblocking(x))
    w = np.full((4, 4), 0.5)  # columns sum to 2: meant here, so no WeightWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = fs.neighbor_allreduce(x, src_weights=w, check_weights=False)
        fs.wait(fs.neighbor_allreduce_nonblocking(x, src_weights=w, check_weights=False))
    np.testing.assert_allclose(y, np.broadcast_to(0.5 * x.sum(0), x.shape))
    with pytest.warns(fs.WeightWarning):
        fs.neighbor_allreduce(x, src_weights=w)
    fs.wait(fs.neighbor_allreduce_nonblocking(x, name="n"))
    with pytest.raises(TypeError, match="check_weights must be a bool"):
        fs.neighbor_allreduce(x, check_weights=1)
    with pytest.raises(TypeError, match="is_hierarchical_local must be a bool"):
        fs.allreduce_nonblocking(x, is_hierarchical_local=1)
    TL.stop()
    events = check_trace(tmp_path / "t.json")
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    seen = {(e["name"], tracks.get(e["tid"])) for e in events if e["ph"] in ("B", "X")}
    for pair in [
        ("ALLREDUCE_LOCAL", "h"),
        ("ALLREDUCE_LOCAL", "allreduce"),
        ("ALLREDUCE_DECOMPOSED", "allreduce"),
        ("ENQUEUE_ALLREDUCE", "allreduce"),
        ("NEIGHBOR_ALLREDUCE", "neighbor_allreduce"),
        ("ENQUEUE_NEIGHBOR_ALLREDUCE", "n"),
    ]:
        assert pair in seen, (pair, sorted(seen))


class _Parts:
    """A world whose parts are the part protocols themselves: a route then returns the
    protocol's declaration of the method it calls."""

    from fogsim.backends._parts import Collectives as collectives
    from fogsim.backends._parts import Machines as machines
    from fogsim.backends._parts import Neighbors as neighbors
    from fogsim.backends._windows import WindowPart as windows


def _parameters(method):
    return [p.name for p in inspect.signature(method).parameters.values()][1:]  # after self


@pytest.mark.parametrize("declared", _routing.DECLARED_OPS, ids=lambda d: d.name)
def test_each_route_reaches_a_part_method_with_the_public_parameters(declared):
    # The runner hands the part method the op's positional parameters in declared order.
    public = [
        p.name
        for p in declared.signature.parameters.values()
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    ]
    method = declared.route(_Parts)
    assert method.__name__ == declared.name
    assert _parameters(method) == public
    if callable(declared.twin):
        twin = declared.twin(_Parts)
        assert twin.__name__ == declared.name + "_nonblocking"
        assert _parameters(twin) == public


def test_hot_ops_keep_their_public_signature_errors():
    fs.init(size=4)
    x = np.ones((4, 2))
    with pytest.raises(TypeError, match="neighbor_allreduce_nonblocking"):
        fs.neighbor_allreduce_nonblocking(x, bogus=1)
    with pytest.raises(TypeError, match="allreduce"):
        fs.allreduce(x, True, None, True)  # is_hierarchical_local is keyword-only
    fs.shutdown()


# What each public parameter's type says an agent passes, and how the simulator's method
# must then hold every agent's argument (for SPMD agents and the sharded simulator, which
# read it from the method's annotations instead of having code per op).
_STACKING_OF_PUBLIC_TYPE = {
    "ArrayLike": {"VALUE", "VALUES"},
    "SelfWeight": {"SELF_WEIGHT"},
    "Weights": {"WEIGHTS", "MACHINE_WEIGHTS"},
    "Ranks": {"RANKS"},
}


@pytest.mark.parametrize(
    "declared",
    [d for d in _routing.DECLARED_OPS if not d.name.startswith("win_")],
    ids=lambda d: d.name,
)
def test_the_simulators_method_declares_how_each_agents_argument_stacks(declared):
    from fogsim.backends._stacking import parameters

    fs.init(backend="sim", size=4)
    try:
        method = declared.route(fs._context.current().backend)
        stacking = {p.name: p.stacking.name for p in parameters(method)}
    finally:
        fs.shutdown()
    for p in declared.signature.parameters.values():
        if p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            continue
        if p.name == "name":
            assert stacking[p.name] == "NAME"
            continue
        wanted = _STACKING_OF_PUBLIC_TYPE.get(str(p.annotation), {"SAME"})
        assert stacking[p.name] in wanted, (p.name, p.annotation, stacking[p.name])
