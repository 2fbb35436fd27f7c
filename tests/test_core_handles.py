"""fogsim._core handles: a nonblocking op's handle and the table of those in flight (both
implementations)."""

import pytest


# -- handles ------------------------------------------------------------------------------
def test_wait_returns_the_result_once_and_releases(handles):
    calls = []
    table = handles.HandleTable()
    h = table.start("op", lambda: calls.append(1) or "result", lambda: False, "n")
    assert len(table) == 1 and h.op == "op" and h.name == "n"
    assert h.poll() is False
    assert "pending" in repr(h) and "name='n'" in repr(h)
    assert h.wait() == "result"
    assert calls == [1] and len(table) == 0
    assert "released" in repr(h)
    with pytest.raises(ValueError, match="already waited on"):
        h.wait()
    with pytest.raises(ValueError, match="already waited on"):
        h.poll()


def test_drain_completes_everything_and_keeps_results(handles):
    table = handles.HandleTable()
    order = []
    hs = [table.start("op", lambda k=k: order.append(k) or k * 10) for k in range(3)]
    table.drain()
    assert sorted(order) == [0, 1, 2] and len(table) == 0
    assert [h.poll() for h in hs] == [True] * 3
    assert [h.wait() for h in hs] == [0, 10, 20]
    assert sorted(order) == [0, 1, 2]  # finish ran once per handle


def test_a_failing_finish_leaves_the_table(handles):
    table = handles.HandleTable()

    def boom():
        raise RuntimeError("transfer failed")

    h = table.start("op", boom)
    with pytest.raises(RuntimeError, match="transfer failed"):
        h.wait()
    assert len(table) == 0


def test_completed_handles(handles):
    h = handles.Handle.completed("allreduce", 42, name="x")
    assert h.poll() is True and "done" in repr(h)
    assert h.wait() == 42
    untracked = handles.Handle("op", lambda: 5)
    assert untracked.poll() is True  # without test(), poll says wait() returns at once
    assert untracked.wait() == 5


def test_public_handle_is_the_compiled_one_when_built():
    import fogsim
    from fogsim import _core

    assert fogsim.Handle is _core.handles.Handle
    assert _core.handles is (_core.fallback_handles if not _core.compiled else _core._handles)


def test_a_failed_operation_raises_the_same_error_at_every_wait(handles):
    calls = []

    def finish():
        calls.append(1)
        raise ValueError("the transfer failed")

    table = handles.HandleTable()
    h = table.start("neighbor_allreduce", finish, lambda: False)
    table.drain()  # the failure does not stop shutdown's drain
    assert len(table) == 0 and h.poll() is True
    for _ in range(2):
        with pytest.raises(ValueError, match="the transfer failed"):
            h.wait()
    assert calls == [1]  # finished once, not retried
