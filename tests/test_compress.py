"""fogsim.compress: payload sizes, round trips, and each compressor checked against its paper."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import fogsim.compress as fc
from fogsim._rng import StackedGenerator, agent_generator
from tests import environment

SEED = 7
# A deviation past this many standard errors fails (about 6e-7 two-sided for a normal mean).
Z = 5.0


def stacked_rng(n: int, seed: int = SEED) -> StackedGenerator:
    return StackedGenerator([agent_generator(seed, r) for r in range(n)])


def every_compressor(shape: tuple[int, ...]) -> list[fc.Compressor]:
    """One of each compressor that takes values of ``shape``."""
    made: list[fc.Compressor] = [
        fc.identity(),
        fc.top_k(1),
        fc.top_k(0.3),
        fc.random_k(2),
        fc.random_k(0.5, scale=False),
        fc.qsgd(1),
        fc.qsgd(7),
        fc.qsgd(16),
        fc.qsgd(300),
        fc.qsgd(40_000),
        fc.qsgd(7, scaled=True),
        fc.scaled_sign(),
    ]
    if len(shape) >= 2:
        made += [fc.power_sgd(rank=1), fc.power_sgd(rank=min(shape[0], 2))]
    return made


SHAPES = [(5,), (9,), (16,), (3, 4), (4, 3, 2)]
CASES = [(c, shape) for shape in SHAPES for c in every_compressor(shape)]
IDS = [f"{c!r}-{shape}" for c, shape in CASES]


def values(shape: tuple[int, ...], dtype: Any = np.float64, n: int | None = None) -> np.ndarray:
    full = shape if n is None else (n, *shape)
    return np.random.default_rng(11).standard_normal(full).astype(dtype)


# -- payload sizes, wire format, dtypes, stacked == per agent -------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("comp", "shape"), CASES, ids=IDS)
def test_payload_bytes_exact_and_pack_round_trip(comp, shape, dtype):
    comp = copy.deepcopy(comp)
    x = values(shape, dtype)
    payload = comp.compress(x, agent_generator(SEED, 0))
    buf = fc.pack(payload)
    assert buf.dtype == np.uint8
    assert len(buf) == comp.payload_bytes(shape, dtype)
    back = fc.unpack(comp, buf, shape, dtype)
    assert all(np.array_equal(a, b) for a, b in zip(back.parts, payload.parts, strict=True))
    x_hat = comp.decompress(back)
    assert x_hat.shape == shape and x_hat.dtype == np.dtype(dtype)
    assert np.array_equal(x_hat, comp.decompress(payload))


@pytest.mark.parametrize(("comp", "shape"), CASES, ids=IDS)
def test_stacked_rows_equal_each_agents_own_call(comp, shape):
    n = 4
    x = values(shape, n=n)
    # one object per agent, as on MPI ranks (PowerSGD keeps a warm start per object)
    twin, per_agent = copy.deepcopy(comp), [copy.deepcopy(comp) for _ in range(n)]
    stacked_gen, gens = stacked_rng(n), [agent_generator(SEED, r) for r in range(n)]
    for _ in range(3):  # later calls continue each agent's stream (and warm start)
        stacked = twin.compress_stacked(x, stacked_gen)
        x_hat = twin.decompress_stacked(stacked)
        assert x_hat.shape == (n, *shape)
        for r in range(n):
            own = per_agent[r].compress(x[r], gens[r])
            for a, b in zip(stacked.parts, own.parts, strict=True):
                assert a[r].dtype == b.dtype and np.array_equal(a[r], b)
            assert np.array_equal(x_hat[r], per_agent[r].decompress(own))
        packed = fc.pack(stacked)
        assert packed.shape == (n, comp.payload_bytes(shape))
        back = fc.unpack(comp, packed, shape, np.float64, stacked=True)
        assert np.array_equal(twin.decompress_stacked(back), x_hat)


def test_payload_sizes_for_the_issue_table():
    d, f64 = 10**4, np.float64
    assert fc.identity().payload_bytes(d, f64) == 8 * d
    # 10^4 entries: indices fit 2 bytes
    assert fc.top_k(0.01).payload_bytes(d, f64) == 100 * (8 + 2)
    assert fc.top_k(0.1).payload_bytes(d, f64) == 1000 * (8 + 2)
    assert fc.top_k(0.01, value_dtype=np.float32).payload_bytes(d, f64) == 100 * (4 + 2)
    assert fc.random_k(0.01).payload_bytes(d, f64) == 100 * (8 + 2)
    assert fc.qsgd(7).payload_bytes(d, f64) == 8 + d // 2  # 4 bits an entry
    assert fc.qsgd(16).payload_bytes(d, f64) == 8 + d  # int8
    assert fc.qsgd(1000).payload_bytes(d, f64) == 8 + 2 * d  # int16
    assert fc.scaled_sign().payload_bytes(d, f64) == 8 + d // 8
    assert fc.scaled_sign().payload_bytes(9, np.float32) == 4 + 2
    assert fc.power_sgd(rank=4).payload_bytes((100, 100), f64) == 8 * 4 * 200


@pytest.mark.parametrize(
    "d, width", [(1, 1), (256, 1), (257, 2), (65536, 2), (65537, 4)], ids=lambda v: str(v)
)
@pytest.mark.parametrize("make", [fc.top_k, fc.random_k], ids=["top_k", "random_k"])
def test_sparse_indices_take_the_fewest_bytes_that_hold_every_index(make, d, width):
    comp = make(1)
    assert comp.payload_bytes(d, np.float32) == 4 + width
    x = np.zeros(d)
    x[-1] = -3.0  # the last index, the largest an index must hold
    rng = np.random.default_rng(0)
    payload = comp.compress(x, rng)
    assert payload.parts[1].dtype.itemsize == width
    assert payload.parts[1].dtype.kind == "u"
    buf = fc.pack(payload)
    assert buf.size == comp.payload_bytes(d, np.float64)
    back = comp.decompress(fc.unpack(comp, buf, d, np.float64))
    assert np.array_equal(back, comp.decompress(payload))
    if make is fc.top_k:
        assert np.array_equal(back, x)


@pytest.mark.parametrize("make", [fc.top_k, fc.random_k], ids=["top_k", "random_k"])
def test_values_sent_in_float32_come_back_in_the_values_dtype(make):
    x = np.random.default_rng(1).standard_normal((5, 40))
    rng = stacked_rng(5)
    full = make(0.25).compress_stacked(x, rng)
    rng = stacked_rng(5)
    half = make(0.25, value_dtype=np.float32).compress_stacked(x, rng)
    assert half.parts[0].dtype == np.float32
    assert np.array_equal(half.parts[1], full.parts[1])  # the same entries
    assert np.array_equal(half.parts[0], full.parts[0].astype(np.float32))
    x_hat = make(0.25, value_dtype="float32").decompress_stacked(half)
    assert x_hat.dtype == np.float64
    kept = x_hat != 0
    scale = 40 / 10 if make is fc.random_k else 1.0  # random_k is unbiased: d/k on receipt
    np.testing.assert_allclose(x_hat[kept], scale * x[kept], rtol=2**-24)
    assert make(10, value_dtype=np.float32).payload_bytes(40) == 10 * (4 + 1)


@pytest.mark.parametrize("bad", [np.int32, np.float16, "complex128"])
def test_value_dtype_must_be_float32_or_float64(bad):
    with pytest.raises(TypeError, match="value_dtype"):
        fc.top_k(3, value_dtype=bad)
    with pytest.raises(TypeError, match="value_dtype"):
        fc.random_k(3, value_dtype=bad)
    with pytest.raises(TypeError, match="value_dtype"):
        fc.top_k(3, value_dtype="no such dtype")


def test_torch_tensors_in_tensors_out():
    torch = pytest.importorskip("torch")
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(4, 6, dtype=dtype, generator=torch.Generator().manual_seed(0))
        for comp in every_compressor((4, 6)):
            twin = copy.deepcopy(comp)
            payload = comp.compress(x, agent_generator(SEED, 0))
            x_hat = comp.decompress(payload)
            assert isinstance(x_hat, torch.Tensor) and x_hat.dtype == dtype
            ref = twin.decompress(twin.compress(x.numpy(), agent_generator(SEED, 0)))
            assert isinstance(ref, np.ndarray) and np.array_equal(x_hat.numpy(), ref)
            back = fc.unpack(comp, fc.pack(payload), (4, 6), x.numpy().dtype, like=x)
            assert isinstance(comp.decompress(back), torch.Tensor)
            stacked = comp.compress_stacked(x[None], stacked_rng(1))
            assert isinstance(comp.decompress_stacked(stacked), torch.Tensor)


# -- each compressor against its paper ------------------------------------------------------------
def test_top_k_keeps_the_largest_magnitudes():
    x = values((50,), n=3)
    k = 7
    x_hat = fc.top_k(k).decompress_stacked(fc.top_k(k).compress_stacked(x))
    for r in range(3):
        kept = np.flatnonzero(x_hat[r])
        assert len(kept) == k
        assert np.array_equal(x_hat[r, kept], x[r, kept])
        assert np.abs(x[r, kept]).min() >= np.delete(np.abs(x[r]), kept).max()


def mean_over_seeds(comp: fc.Compressor, x: np.ndarray, draws: int) -> np.ndarray:
    """Every draw of ``C(x)``: ``draws`` agents holding x, each with its own generator."""
    rows = np.broadcast_to(x, (draws, *x.shape))
    return comp.decompress_stacked(comp.compress_stacked(rows, stacked_rng(draws)))


@pytest.mark.parametrize("k", [1, 5])
def test_random_k_is_unbiased_and_keeps_k_uniform_entries(k):
    x, draws = values((20,)), 20_000
    d = x.size
    samples = mean_over_seeds(fc.random_k(k), x, draws)
    assert np.all(np.count_nonzero(samples, axis=1) == k)
    # each entry is x_i d/k with probability k/d: variance x_i^2 (d/k - 1)
    se = np.abs(x) * np.sqrt((d / k - 1) / draws)
    assert np.all(np.abs(samples.mean(axis=0) - x) <= Z * se + 1e-12)
    # unscaled (CHOCO's rand_k): E[C(x)] = (k/d) x, the same entries chosen
    plain = mean_over_seeds(fc.random_k(k, scale=False), x, draws)
    assert np.array_equal(plain != 0, samples != 0)
    assert np.allclose(plain * (d / k), samples, rtol=1e-15, atol=0)


def qsgd_moments(x: np.ndarray, s: int) -> tuple[np.ndarray, float]:
    """QSGD's per-entry variance and ``E||Q(x) - x||^2``, from the definition."""
    norm = np.linalg.norm(x)
    frac = np.abs(x) * s / norm % 1.0
    per_entry = (norm / s) ** 2 * frac * (1 - frac)
    return per_entry, float(per_entry.sum())


@pytest.mark.parametrize("s", [1, 4, 7, 16])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_qsgd_is_unbiased_with_its_variance_bound(s, dtype):
    x, draws = values((40,), dtype), 20_000
    d, x64 = x.size, x.astype(np.float64)
    comp = fc.qsgd(s)
    samples = mean_over_seeds(comp, x, draws).astype(np.float64)
    assert samples.dtype == np.float64
    norm = np.linalg.norm(x64)
    per_entry, total = qsgd_moments(x64, s)
    # the paper's bound (Lemma 3.1) holds for this x, and the samples have that variance
    bound = min(d / s**2, np.sqrt(d) / s) * norm**2
    assert total <= bound
    sq_err = ((samples - x64) ** 2).sum(axis=1)
    assert abs(sq_err.mean() - total) <= Z * sq_err.std() / np.sqrt(draws)
    # unbiased: each entry's mean within a few standard errors (its own variance)
    rounding = 4 * np.finfo(dtype).eps * norm
    se = np.sqrt(per_entry / draws)
    assert np.all(np.abs(samples.mean(axis=0) - x64) <= Z * se + rounding)
    # and the whole vector's mean error within the bound's share: E||mean - x||^2 <= bound/N
    assert ((samples.mean(axis=0) - x64) ** 2).sum() <= Z**2 * bound / draws
    # every sample is on the grid: |Q_i| = ||x|| l / s with l in 0..s, sign of x_i
    levels = np.abs(samples) / (norm / s)
    assert np.allclose(levels, np.round(levels), atol=1e-4) and levels.max() <= s + 1e-4
    assert np.all((samples == 0) | (np.sign(samples) == np.sign(x64)))


def test_qsgd_zero_vector_and_levels_on_the_wire():
    comp = fc.qsgd(7)
    zero = comp.compress_stacked(np.zeros((3, 9)), stacked_rng(3))
    assert np.array_equal(comp.decompress_stacked(zero), np.zeros((3, 9)))
    # a value on the grid (s |x_i| / ||x|| whole) is sent exactly: -7..7 in 4 bits, odd d
    for x in ([6.0, -3.0, 2.0, 0.0, 0.0], [-7.0, 0.0, 0.0], [0.0, 7.0]):
        payload = comp.compress(np.array(x), agent_generator(1, 0))
        assert payload.parts[0][0] == 7.0
        assert np.array_equal(comp.decompress(payload), x)


def qsgd_tau(d: int, s: int) -> float:
    """QSGD's variance factor (Alistarh et al. 2017, Lemma 3.1): ``min(d/s^2, sqrt(d)/s)``."""
    return min(d / s**2, np.sqrt(d) / s)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scaled_qsgd_is_plain_qsgd_divided_by_one_plus_tau(dtype):
    x = values((3, 50), dtype, n=4)
    tau = qsgd_tau(150, 7)
    plain, scaled = fc.qsgd(7), fc.qsgd(7, scaled=True)
    p_plain = plain.compress_stacked(x, stacked_rng(4))
    p_scaled = scaled.compress_stacked(x, stacked_rng(4))
    # the same draws, the same payload: only the receiver's reading differs
    assert all(np.array_equal(a, b) for a, b in zip(p_plain.parts, p_scaled.parts, strict=True))
    assert scaled.payload_bytes((3, 50), dtype) == plain.payload_bytes((3, 50), dtype)
    got = scaled.decompress_stacked(p_scaled)
    assert got.dtype == dtype
    assert np.array_equal(got, plain.decompress_stacked(p_plain) / dtype(1 + tau))
    one = scaled.decompress(scaled.compress(x[0], agent_generator(SEED, 0)))
    assert np.array_equal(one, got[0])
    assert repr(scaled) == "QSGD(s=7, scaled=True)"
    assert repr(plain) == "QSGD(s=7, scaled=False)"


def test_scaled_qsgd_is_a_contraction_where_plain_qsgd_is_none():
    # CHOCO (Koloskova et al. 2019) needs E||C(x) - x||^2 <= (1 - delta) ||x||^2, delta > 0:
    # d = 10^4, s = 7 gives tau = sqrt(d)/s ~ 14, and Q(x)/(1 + tau) has delta = 1/(1 + tau)
    d, s, draws = 10_000, 7, 64
    x = values((d,))
    tau = qsgd_tau(d, s)
    norm2 = float(x @ x)

    def sq_errors(comp: fc.Compressor) -> np.ndarray:
        return ((mean_over_seeds(comp, x, draws) - x) ** 2).sum(axis=1) / norm2

    plain, scaled = sq_errors(fc.qsgd(s)), sq_errors(fc.qsgd(s, scaled=True))
    assert plain.mean() - Z * plain.std() / np.sqrt(draws) > 1  # no contraction
    assert scaled.mean() + Z * scaled.std() / np.sqrt(draws) <= 1 - 1 / (1 + tau)


def test_scaled_sign_is_the_mean_magnitude_times_the_sign():
    for dtype in (np.float32, np.float64):
        x = values((3, 13), dtype)
        x[0, 2] = 0.0
        comp = fc.scaled_sign()
        x_hat = comp.decompress(comp.compress(x))
        scale = np.abs(x.astype(np.float64)).sum() / x.size
        assert x_hat.dtype == dtype
        assert np.allclose(x_hat, scale * np.where(x >= 0, 1.0, -1.0), rtol=4 * np.finfo(dtype).eps)
        assert len(np.unique(np.abs(x_hat))) == 1


def test_power_sgd_is_exact_on_low_rank_matrices():
    gen = np.random.default_rng(3)
    for r in (1, 3):
        m = gen.standard_normal((3, 12, r)) @ gen.standard_normal((3, r, 9))
        comp = fc.power_sgd(rank=r)
        rng = stacked_rng(3)
        for _ in range(3):  # warm-started calls stay exact
            x_hat = comp.decompress_stacked(comp.compress_stacked(m, rng))
            assert np.allclose(x_hat, m, atol=1e-12 * np.abs(m).max())


def test_power_sgd_error_decreases_over_calls_towards_the_best_rank_r():
    gen = np.random.default_rng(4)
    u, _ = np.linalg.qr(gen.standard_normal((30, 20)))
    v, _ = np.linalg.qr(gen.standard_normal((20, 20)))
    sv = 0.7 ** np.arange(20)
    m = (u * sv) @ v.T
    r = 3
    best = np.sqrt((sv[r:] ** 2).sum())
    comp, rng = fc.power_sgd(rank=r), agent_generator(SEED, 0)
    errors = []
    for _ in range(25):
        x_hat = comp.decompress(comp.compress(m, rng))
        errors.append(np.linalg.norm(x_hat - m))
    assert all(b <= a * (1 + 1e-12) for a, b in zip(errors, errors[1:], strict=False))
    assert errors[0] > best * 1.01 and errors[-1] <= best * (1 + 1e-6)
    comp.reset()  # a fresh start draws a fresh Q from the generator and starts over
    assert np.linalg.norm(comp.decompress(comp.compress(m, rng)) - m) > errors[-1]


def test_power_sgd_warm_start_is_per_row_count_and_shape():
    comp = fc.power_sgd(rank=1)
    a, b = values((4, 5)), values((5, 4))
    comp.compress(a, agent_generator(SEED, 0))
    comp.compress_stacked(a[None].repeat(2, 0), stacked_rng(2))
    comp.compress(b, agent_generator(SEED, 0))
    assert len(comp._q) == 3
    # later calls draw nothing: the generators are left as they were
    gen = agent_generator(SEED, 0)
    state = gen.bit_generator.state
    comp.compress(a, gen)
    assert gen.bit_generator.state == state


# -- bad input ------------------------------------------------------------------------------------
untyped: Any = fc  # the bad arguments below are what the signatures forbid


@pytest.mark.parametrize(
    ("make", "error", "argname"),
    [
        (lambda: untyped.top_k(0), ValueError, "k"),
        (lambda: untyped.top_k(-3), ValueError, "k"),
        (lambda: untyped.top_k(1.5), ValueError, "k"),
        (lambda: untyped.top_k("3"), TypeError, "k"),
        (lambda: untyped.random_k(0), ValueError, "k"),
        (lambda: untyped.random_k(-0.5), ValueError, "k"),
        (lambda: untyped.random_k(None), TypeError, "k"),
        (lambda: untyped.random_k(True), TypeError, "k"),
        (lambda: untyped.random_k(2, scale="yes"), TypeError, "scale"),
        (lambda: untyped.qsgd(0), ValueError, "s"),
        (lambda: untyped.qsgd(-4), ValueError, "s"),
        (lambda: untyped.qsgd(2.5), TypeError, "s"),
        (lambda: untyped.qsgd(2**31), ValueError, "s"),
        (lambda: untyped.qsgd(7, scaled=1), TypeError, "scaled"),
        (lambda: untyped.qsgd(7, scaled="yes"), TypeError, "scaled"),
        (lambda: untyped.power_sgd(rank=0), ValueError, "rank"),
        (lambda: untyped.power_sgd(rank=1.0), TypeError, "rank"),
    ],
)
def test_bad_arguments_name_themselves(make, error, argname):
    with pytest.raises(error, match=rf"\b{argname}\b"):
        make()


def test_k_larger_than_the_value_is_refused():
    for comp in (fc.top_k(6), fc.random_k(6)):
        with pytest.raises(ValueError, match=r"k=6"):
            comp.payload_bytes(5)
        with pytest.raises(ValueError, match=r"k=6"):
            comp.compress(np.ones(5), agent_generator(0, 0))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.complex128, np.float16, np.bool_])
@pytest.mark.parametrize(("comp", "shape"), CASES[:13], ids=IDS[:13])
def test_non_float_values_are_refused(comp, shape, dtype):
    x = np.ones(shape, dtype=dtype)
    with pytest.raises(TypeError, match=r"\bx\b.*float32 or float64"):
        comp.compress(x, agent_generator(0, 0))
    with pytest.raises(TypeError, match=r"\bx\b"):
        comp.compress_stacked(x[None], stacked_rng(1))
    with pytest.raises(TypeError, match=r"dtype"):
        comp.payload_bytes(shape, dtype)


def test_non_float_tensors_are_refused():
    torch = pytest.importorskip("torch")
    for dtype in (torch.int64, torch.complex64, torch.bfloat16, torch.float16):
        with pytest.raises(TypeError, match=r"\bx\b"):
            fc.qsgd().compress(torch.ones(4, dtype=dtype), agent_generator(0, 0))


def test_meta_tensors_hold_no_values_to_compress():
    torch = pytest.importorskip("torch")
    meta = torch.ones(2, 4, device="meta")
    for comp in (fc.top_k(1), fc.qsgd(7)):
        with pytest.raises(TypeError, match=r"\bx\b.*meta"):
            comp.compress(meta[0], agent_generator(0, 0))
        with pytest.raises(TypeError, match=r"\bx\b.*meta"):
            comp.compress_stacked(meta, stacked_rng(2))
        buf = fc.pack(comp.compress(np.ones(4), agent_generator(0, 0)))
        with pytest.raises(TypeError, match=r"\blike\b.*meta"):
            fc.unpack(comp, buf, (4,), np.float64, like=meta[0])


def cuda_or_skip() -> Any:
    """torch, if it sees a CUDA GPU; else skip (hardware this machine lacks)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(environment.needs_hardware("a CUDA GPU"))
    return torch


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cuda_tensors_compress_on_the_host_and_come_back_on_their_device(dtype):
    torch = cuda_or_skip()
    x = values((4, 6), dtype, n=3)
    on_gpu = torch.from_numpy(x).to("cuda")
    for comp in every_compressor((4, 6)):
        twin = copy.deepcopy(comp)
        payload = comp.compress(on_gpu[0], agent_generator(SEED, 0))
        got = comp.decompress(payload)
        assert got.device.type == "cuda" and got.dtype == on_gpu.dtype
        ref = twin.decompress(twin.compress(x[0], agent_generator(SEED, 0)))
        assert np.array_equal(got.cpu().numpy(), ref)
        back = fc.unpack(comp, fc.pack(payload), (4, 6), dtype, like=on_gpu[0])
        assert comp.decompress(back).device.type == "cuda"
        stacked = comp.decompress_stacked(comp.compress_stacked(on_gpu, stacked_rng(3)))
        assert stacked.device.type == "cuda"
        ref = twin.decompress_stacked(twin.compress_stacked(x, stacked_rng(3)))
        assert np.array_equal(stacked.cpu().numpy(), ref)


def test_randomized_compressors_need_one_generator_per_row():
    for comp in (fc.random_k(1), fc.qsgd(), fc.power_sgd()):
        with pytest.raises(TypeError, match=r"rng"):
            comp.compress(np.ones((3, 3)))
        with pytest.raises(TypeError, match=r"rng"):
            comp.compress_stacked(np.ones((2, 3, 3)), agent_generator(0, 0))
        with pytest.raises(ValueError, match=r"rng"):
            comp.compress_stacked(np.ones((2, 3, 3)), stacked_rng(3))
    one = fc.qsgd().compress_stacked(np.ones((1, 3)), agent_generator(0, 0))
    assert one.parts[1].shape == (1, 3)


def test_power_sgd_refuses_vectors_and_too_high_a_rank():
    comp = fc.power_sgd(rank=2)
    with pytest.raises(ValueError, match=r"\bx\b.*2 dimensions"):
        comp.compress(np.ones(6), agent_generator(0, 0))
    with pytest.raises(ValueError, match=r"\bshape\b"):
        comp.payload_bytes(6)
    with pytest.raises(ValueError, match=r"rank=2"):
        comp.compress(np.ones((1, 6)), agent_generator(0, 0))
    with pytest.raises(ValueError, match=r"rank=2"):
        comp.payload_bytes((6, 1))


def test_public_names():
    assert set(fc.__all__) == {
        "Compressor",
        "Payload",
        "pack",
        "unpack",
        "Identity",
        "TopK",
        "RandomK",
        "QSGD",
        "ScaledSign",
        "PowerSGD",
        "identity",
        "top_k",
        "random_k",
        "qsgd",
        "scaled_sign",
        "power_sgd",
        "CompressedGossip",
        "compressed_neighbor_allreduce",
    }
