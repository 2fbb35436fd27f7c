"""fogsim._core fusion: pack, combine_rows, the fusion queue and its batches (both
implementations)."""

import numpy as np
import pytest

from fogsim._core import _fallback


# -- pack ---------------------------------------------------------------------------------
def test_pack_places_bytes_and_zeroes_gaps(fusion):
    a = np.arange(3, dtype=np.float64)
    b = np.array([1.5], dtype=np.float32)
    c = np.arange(4, dtype=np.int16).reshape(2, 2)
    out = np.full(48, 0xFF, dtype=np.uint8)
    fusion.pack(out, [a, b, c], [0, 24, 32])
    assert bytes(out[:24]) == a.tobytes()
    assert bytes(out[24:28]) == b.tobytes() and not out[28:32].any()
    assert bytes(out[32:40]) == c.tobytes() and not out[40:].any()


@pytest.mark.parametrize("offsets", [[0, 4], [0, 30], [8]])
def test_pack_refuses_overlaps_overruns_and_count_mismatch(fusion, offsets):
    arrays = [np.zeros(2), np.zeros(2)]  # 16 bytes each
    refused = r"pack: (2 arrays but 1 offsets|array 1 \(16 bytes at offset (4|30)\) overlaps)"
    with pytest.raises(ValueError, match=refused):
        fusion.pack(np.zeros(40, np.uint8), arrays, offsets)


# -- combine_rows -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_combine_rows_matches_weighted_combine_bitwise(fusion, dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 7)).astype(dtype)
    ys = rng.standard_normal((4, 35)).astype(dtype)
    w = rng.random(4)
    expected = _fallback.weighted_combine(np.empty(35, dtype), 0.3, x.reshape(-1), w, ys)
    # the rows of ys sit at byte offset 16 of wider rows, in another order, picked by select
    pad = 16 // x.itemsize
    recv = np.zeros((4, 35 + 2 * pad), dtype)
    perm = np.array([2, 0, 3, 1])
    recv[perm, pad : pad + 35] = ys
    raw = recv.view(np.uint8)
    out = np.empty_like(x)
    fusion.combine_rows(out, 0.3, x, w, raw, 16, perm.astype(np.int64))
    assert out.tobytes() == expected.tobytes()
    # without select, rows in order; recv of the data dtype with the row axis first
    out2 = np.empty_like(x)
    fusion.combine_rows(out2, 0.3, x, w, ys.reshape(4, 5, 7))
    assert out2.tobytes() == expected.tobytes()


def test_combine_rows_long_vectors_and_many_rows(fusion):
    rng = np.random.default_rng(4)
    m, k = 5000, 7  # more than one block of the kernel and more than one pass of terms
    x, ys, w = rng.standard_normal(m), rng.standard_normal((k, m)), rng.random(k)
    expected = _fallback.weighted_combine(np.empty(m), 0.5, x, w, ys)
    out = fusion.combine_rows(np.empty(m), 0.5, x, w, ys)
    assert out.tobytes() == expected.tobytes()


def test_combine_rows_without_terms_scales_x(fusion):
    x = np.arange(4.0)
    out = fusion.combine_rows(np.empty(4), 0.5, x, np.empty(0), np.empty((0, 4)))
    assert out.tolist() == [0.0, 0.5, 1.0, 1.5]


@pytest.mark.parametrize(
    "args, error, match",
    [
        (dict(x=np.zeros(3, np.float32)), TypeError, "out and x must be .* of one format and size"),
        (
            dict(out=np.zeros(3, np.int64), x=np.zeros(3, np.int64)),
            TypeError,
            "out and x must be float64",
        ),
        (dict(weights=np.ones(2, np.float32)), TypeError, "weights must be float64"),
        (dict(select=np.array([0, 5])), ValueError, r"select\[1\] = 5 is not a row"),
        (dict(select=np.array([0])), ValueError, "select must be int64 with one entry per weight"),
        (dict(weights=np.ones(4)), ValueError, "4 weights but 2 rows"),
        (dict(offset=4), ValueError, "24 bytes at offset 4 do not fit aligned"),
        (dict(offset=8), ValueError, "24 bytes at offset 8 do not fit aligned"),
    ],
)
def test_combine_rows_refuses_bad_arguments(fusion, args, error, match):
    kw = dict(
        out=np.empty(3),
        self_weight=0.5,
        x=np.zeros(3),
        weights=np.ones(2),
        recv=np.zeros((2, 3)),
        offset=0,
        select=None,
    )
    kw.update(args)
    with pytest.raises(error, match=match):
        fusion.combine_rows(**kw)


# -- fusion queue -------------------------------------------------------------------------
class _Done:
    """A request that completed at once (what a transfer looks like once it arrived)."""

    def Wait(self):  # noqa: N802 - the MPI request's names
        pass

    def Test(self):  # noqa: N802
        return True


class _Plan:
    def __init__(self, self_weight, weights, select=None, fingerprint=0, static=True):
        self.self_weight, self.weights, self.select = self_weight, weights, select
        self.fingerprint, self.static = fingerprint, static


def _queue(fusion, handles, threshold, batches):
    """A queue whose flush 'receives' two neighbors that sent 2x and 3x our own bytes."""

    def flush(entries, nbytes, layout, error):
        assert error is None
        assert layout == fusion.layout_fingerprint([(e.arr, e.plan) for e in entries])
        send = np.empty(nbytes, np.uint8)
        fusion.pack(send, [e.arr for e in entries], [e.offset for e in entries])
        recv = np.stack([send, send]).copy()
        for row, factor in enumerate((2.0, 3.0)):
            for e in entries:
                view = recv[row, e.offset : e.offset + e.arr.nbytes].view(e.arr.dtype)
                view *= factor
        batches.append([e.offset for e in entries])
        fusion.FusedBatch(entries, send, recv, _Done())

    table = handles.HandleTable()
    return fusion.FusionQueue(threshold, flush, table), table


def test_fusion_queue_combines_every_entry_from_one_message(fusion, handles):
    batches = []
    queue, table = _queue(fusion, handles, 1 << 20, batches)
    plan = _Plan(0.5, np.array([0.25, 0.25]))
    values = [np.arange(3.0), np.ones((2, 2), np.float32), np.array(4.0)]
    handles = [queue.add(v, plan) for v in values]
    assert len(queue) == 3 and queue.nbytes == 24 + 16 + 8 and batches == []
    assert handles[1].poll() is True  # polling sends the queue
    assert batches == [[0, 24, 40]] and len(queue) == 0
    for v, h in zip(values, handles, strict=True):
        got = h.wait()
        assert got.dtype == v.dtype and got.shape == v.shape
        assert (
            got.tobytes()
            == (
                v * v.dtype.type(0.5) + v * 2 * v.dtype.type(0.25) + v * 3 * v.dtype.type(0.25)
            ).tobytes()
        )
    assert len(table) == 0


def test_fusion_queue_flushes_before_overflow_and_sends_big_ones_alone(fusion, handles):
    batches = []
    queue, _ = _queue(fusion, handles, 32, batches)
    plan = _Plan(1.0, np.array([0.0, 0.0]))
    small = [queue.add(np.zeros(2), plan) for _ in range(2)]  # 16 + 16 bytes: fits
    assert batches == []
    third = queue.add(np.zeros(1), plan)  # would overflow: the first two go first
    assert batches == [[0, 16]]
    big = queue.add(np.zeros(8), plan)  # 64 bytes: flushes the third, then goes alone
    assert batches == [[0, 16], [0], [0]]
    for h in [*small, third, big]:
        h.wait()


def test_fusion_queue_wraps_results_and_selects_rows(fusion, handles):
    batches = []
    queue, _ = _queue(fusion, handles, 1 << 20, batches)
    plan = _Plan(0.0, np.array([1.0]), select=np.array([1], np.int64))  # only the 3x row
    h = queue.add(np.array([1.0, 2.0]), plan, wrap=lambda a: ("wrapped", a.tolist()))
    assert h.wait() == ("wrapped", [3.0, 6.0])


def test_a_refused_batch_fails_every_handle_in_it(fusion, handles):
    def refuse(entries, nbytes, layout, error):
        raise ValueError("ranks disagree: rank 0 has float64 (3,), rank 1 has float64 (4,)")

    table = handles.HandleTable()
    queue = fusion.FusionQueue(1 << 20, refuse, table)
    plan = _Plan(1.0, np.array([0.5]))
    handles = [queue.add(np.zeros(3), plan) for _ in range(3)]
    with pytest.raises(ValueError, match="ranks disagree"):
        handles[1].wait()  # sends the queue, which is refused
    assert handles[0].poll() is True  # no transfer to wait for: waiting raises at once
    for h in (handles[0], handles[2]):
        with pytest.raises(ValueError, match="ranks disagree"):
            h.wait()
    assert len(table) == 0


def test_layout_fingerprint_tells_layouts_apart_and_is_the_same_compiled_or_not():
    from fogsim._core import fallback_fusion, fusion

    a, b = _Plan(0.5, np.ones(2), fingerprint=12345), _Plan(0.5, np.ones(2), fingerprint=777)
    layouts = [
        [(np.zeros(3), a)],
        [(np.zeros(4), a)],
        [(np.zeros((3, 1)), a)],
        [(np.zeros(3, np.float32), a)],
        [(np.zeros(3, ">f8"), a)],
        [(np.zeros(3), b)],
        [(np.zeros(3), _Plan(0.5, np.ones(2), fingerprint=12345, static=False))],
        [(np.zeros(3), a), (np.zeros(4), a)],
        [(np.zeros(4), a), (np.zeros(3), a)],
        [(np.zeros(3), a), (None, None)],
        [(np.array(1.0), a)],
        [],
    ]
    seen = {fusion.layout_fingerprint(entries) for entries in layouts}
    assert len(seen) == len(layouts)
    for entries in layouts:
        fp = fusion.layout_fingerprint(entries)
        assert fp == fallback_fusion.layout_fingerprint(entries)
        assert 0 <= fp < 1 << 62


def test_fusion_queue_passes_the_layout_only_when_checked_and_the_first_error(fusion, handles):
    calls = []

    def flush(entries, nbytes, layout, error):
        calls.append((layout, error))
        fusion.FusedBatch(
            entries, np.empty(nbytes, np.uint8), np.zeros((0, nbytes), np.uint8), _Done()
        )

    queue = fusion.FusionQueue(1 << 20, flush, handles.HandleTable())
    plan = _Plan(1.0, np.empty(0), fingerprint=5)
    x, y = np.ones(3), np.ones((2, 2), np.float32)
    for h in [queue.add(x, plan, check=False), queue.add(y, plan, check=False)]:
        h.wait()
    assert calls.pop() == (None, None)
    handles = [queue.add(x, plan, check=False), queue.add(y, plan)]
    for h in handles:
        h.wait()
    assert calls.pop() == (fusion.layout_fingerprint([(x, plan), (y, plan)]), None)
    first, second = object(), object()
    queue.add(x, plan)
    queue.add(None, None, error=first)
    queue.add(None, None, error=second)
    queue.flush()
    assert calls.pop() == (
        fusion.layout_fingerprint([(x, plan), (None, None), (None, None)]),
        first,
    )


def test_a_batch_whose_wait_fails_fails_every_entry(fusion, handles):
    class Pending(_Done):
        def Test(self):  # noqa: N802
            return False

    tested = []

    def flush(entries, nbytes, layout, error):
        def wait(test, block):
            assert test() is False
            raise ValueError("ranks disagree: the agreement beside the data failed")

        fusion.FusedBatch(
            entries,
            np.empty(nbytes, np.uint8),
            np.zeros((1, nbytes), np.uint8),
            Pending(),
            wait,
            lambda: tested.append(1) or False,
        )

    table = handles.HandleTable()
    queue = fusion.FusionQueue(1 << 20, flush, table)
    plan = _Plan(1.0, np.array([0.5]))
    handles = [queue.add(np.zeros(2), plan) for _ in range(3)]
    assert handles[0].poll() is False and tested == [1]  # the batch's own test decides
    with pytest.raises(ValueError, match="beside the data"):
        handles[1].wait()
    assert handles[0].poll() is True
    table.drain()  # a failed operation does not stop the drain; wait() still raises it
    assert len(table) == 0
    for h in (handles[0], handles[2]):
        with pytest.raises(ValueError, match="beside the data"):
            h.wait()


@pytest.mark.parametrize("recording", [True, False])
def test_a_batch_records_its_wait_and_combine_on_the_running_timeline(fusion, handles, recording):
    class Timeline:  # what a batch uses of fogsim.timeline.Timeline
        def __init__(self):
            self.now, self.phases = 100, []

        def clock_ns(self):
            self.now += 1
            return self.now

        def since(self, name, start):
            self.phases.append((name, start))
            return self.clock_ns()

    tl, looked_up = Timeline(), []

    def running():  # looked up when the batch completes, not when it is sent
        looked_up.append(1)
        return tl if recording else None

    def flush(entries, nbytes, layout, error):
        recv = np.zeros((1, nbytes), np.uint8)
        fusion.FusedBatch(entries, np.empty(nbytes, np.uint8), recv, _Done(), None, None, running)

    queue = fusion.FusionQueue(1 << 20, flush, handles.HandleTable())
    handles = [queue.add(np.ones(2), _Plan(0.5, np.array([0.5]))) for _ in range(2)]
    queue.flush()
    assert looked_up == []
    assert [h.wait().tolist() for h in handles] == [[0.5, 0.5]] * 2
    assert looked_up == [1]  # once per batch
    if recording:  # the wait from the first clock reading, then the combine from its end
        assert tl.phases == [("COMMUNICATE", 101), ("FUSION_COPY_OUT", 102)]
    else:
        assert tl.phases == []


def test_a_waited_batch_leaves_no_reference_cycle_behind(fusion, handles):
    # Entries refer to their batch; a batch that kept its entries after completing would
    # leave one cycle per batch to the garbage collector, whose full collections then cost
    # milliseconds in a loop of fused calls.
    import gc

    batches = []
    queue, table = _queue(fusion, handles, 1 << 20, batches)
    plan = _Plan(0.5, np.array([0.25, 0.25]))
    values = [np.arange(3.0), np.ones(4, np.float32)]
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            handles = [queue.add(v, plan) for v in values]
            for h in handles:
                h.wait()
            del handles
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_add_static_queues_plain_float_arrays_only(fusion, handles):
    batches = []
    queue, table = _queue(fusion, handles, 1 << 20, batches)
    x = np.arange(4.0)
    assert queue.add_static(x) is None  # no static plan yet
    queue.static_plan = _Plan(0.5, np.array([0.25, 0.25]))
    refused = [x.astype(np.int64), x[::2], x.astype(">f8"), x.tolist(), np.ma.masked_array(x)]
    assert all(queue.add_static(v) is None for v in refused) and len(queue) == 0
    handles = [queue.add_static(x), queue.add_static(x.astype(np.float32))]
    assert len(queue) == 2 and len(table) == 2
    for h, v in zip(handles, [x, x.astype(np.float32)], strict=True):
        got = h.wait()
        half, quarter = v.dtype.type(0.5), v.dtype.type(0.25)
        assert got.tobytes() == (v * half + v * 2 * quarter + v * 3 * quarter).tobytes()
