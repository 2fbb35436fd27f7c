"""fs.vmap(fn, jit=True) and fs.local(fn, jit=True) in the simulator, as a numba user writes.

The per-agent functions below are written the way numba's documentation shows nopython
code (loops over scalars, ``np.empty``, ``@``, ``np.linalg.solve``, ``while`` loops with a
tolerance); each compiled result is checked against the same function uncompiled
(``jit=False``) and against a numpy reference that never goes through fogsim.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special
import torch

import fogsim as fs

N = 257  # not a power of two, more than one agent per numba thread


@pytest.fixture
def sim():
    fs.init(size=N)
    yield
    fs.shutdown()


def lsq_grad(A, x, b):
    return A.T @ (A @ x - b)


def lsq_grad_loops(A, x, b):
    m, d = A.shape
    r = np.empty(m)
    for i in range(m):
        s = -b[i]
        for j in range(d):
            s += A[i, j] * x[j]
        r[i] = s
    g = np.zeros(d)
    for i in range(m):
        for j in range(d):
            g[j] += A[i, j] * r[i]
    return g


def newton_sqrt(a):
    x = a if a > 1.0 else 1.0
    while abs(x * x - a) > 1e-13 * a:
        x = 0.5 * (x + a / x)
    return x


def newton_logistic(H0, x0, y, lam):
    """Minimize sum log(1 + exp(-y_i h_i . x)) + lam/2 |x|^2 by Newton's method, a
    data-dependent number of steps; return the minimizer and the step count."""
    x = x0.copy()
    steps = 0
    for _ in range(50):
        z = y * (H0 @ x)
        p = 1.0 / (1.0 + np.exp(z))
        g = -(H0.T @ (y * p)) + lam * x
        w = p * (1.0 - p)
        H = (H0.T * w) @ H0 + lam * np.eye(x.shape[0])
        step = np.linalg.solve(H, g)
        x = x - step
        steps += 1
        if np.sqrt(step @ step) < 1e-12:
            break
    return x, steps


def data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, 4, 4)), rng.standard_normal((N, 4)), rng.standard_normal((N, 4))


def test_matrix_algebra_and_explicit_loops_match_numpy(sim):
    A, x, b = data()
    want = np.einsum("nji,nj->ni", A, np.einsum("nij,nj->ni", A, x) - b)
    for fn in (lsq_grad, lsq_grad_loops):
        got = fs.vmap(fn, jit=True)(A, x, b)
        assert isinstance(got, np.ndarray) and got.shape == (N, 4) and got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got, fs.vmap(fn)(A, x, b), rtol=1e-13, atol=1e-13)


def test_a_scalar_data_dependent_newton_loop(sim):
    values = np.linspace(0.01, 1e6, N)
    roots = fs.vmap(newton_sqrt, jit=True)(values)
    assert roots.shape == (N,)
    np.testing.assert_allclose(roots, np.sqrt(values), rtol=1e-12)
    np.testing.assert_allclose(roots, fs.vmap(newton_sqrt)(values), rtol=1e-14)


def test_several_outputs_come_back_as_a_tuple_of_stacked_arrays(sim):
    rng = np.random.default_rng(3)
    H = rng.standard_normal((N, 12, 3))
    y = np.sign(rng.standard_normal((N, 12)))
    x0 = np.zeros((N, 3))
    compiled = fs.vmap(newton_logistic, in_axes=(0, 0, 0, None), jit=True)
    x, steps = compiled(H, x0, y, 0.1)
    assert x.shape == (N, 3) and steps.shape == (N,) and steps.dtype.kind == "i"
    assert steps.min() >= 2 and steps.max() < 50  # the loop ran to its tolerance
    x_py, steps_py = fs.vmap(newton_logistic, in_axes=(0, 0, 0, None))(H, x0, y, 0.1)
    np.testing.assert_allclose(x, x_py, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(steps, steps_py)
    # the minimizer's gradient vanishes, checked in numpy for a few agents
    for i in (0, N // 2, N - 1):
        z = y[i] * (H[i] @ x[i])
        g = -(H[i].T @ (y[i] / (1 + np.exp(z)))) + 0.1 * x[i]
        assert np.abs(g).max() < 1e-9


def test_in_axes_none_passes_the_argument_whole(sim):
    A, x, _ = data(1)
    M = A[0]
    got = fs.vmap(lambda M, x: M @ x, in_axes=(None, 0), jit=True)(M, x)
    np.testing.assert_allclose(got, x @ M.T, rtol=1e-13)
    scaled = fs.vmap(lambda x, s: x * s, in_axes=(0, None), jit=True)(x, 3.0)
    np.testing.assert_array_equal(scaled, 3.0 * x)


def test_n_d_outputs_keep_their_shape(sim):
    _, x, _ = data(2)
    outer = fs.vmap(lambda v: np.outer(v, v), jit=True)(x)
    assert outer.shape == (N, 4, 4)
    np.testing.assert_allclose(outer, x[:, :, None] * x[:, None, :], rtol=1e-15)


def test_local_builds_per_agent_data_compiled(sim):
    def row(r):
        out = np.empty(3)
        for k in range(3):
            out[k] = np.sin(r + k)
        return out

    got = fs.local(row, jit=True)
    np.testing.assert_allclose(got, fs.local(row), rtol=1e-15)
    assert got.shape == (N, 3)
    ranks, squares = fs.local(lambda r: (r, r * r), jit=True)
    np.testing.assert_array_equal(ranks, np.arange(N))
    np.testing.assert_array_equal(squares, np.arange(N) ** 2)


def test_torch_tensors_in_give_tensors_out(sim):
    A, x, b = data(4)
    want = fs.vmap(lsq_grad, jit=True)(A, x, b)
    got = fs.vmap(lsq_grad, jit=True)(torch.from_numpy(A), torch.from_numpy(x), b)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
    np.testing.assert_array_equal(got.numpy(), want)
    x32 = torch.from_numpy(x).float().requires_grad_()
    doubled = fs.vmap(lambda v: v * 2, jit=True)(x32)
    assert isinstance(doubled, torch.Tensor) and doubled.dtype == torch.float32
    np.testing.assert_array_equal(doubled.numpy(), 2 * x32.detach().numpy())


def test_bfloat16_tensors_are_computed_in_float32(sim):
    x = torch.linspace(-2, 2, N * 2).reshape(N, 2).to(torch.bfloat16)
    got = fs.vmap(lambda v: v + v + v, jit=True)(x)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    torch.testing.assert_close(got, x.float() * 3.0, rtol=0, atol=0)


def test_tensors_off_the_cpu_are_refused_naming_the_cpu_copy(sim):
    meta = torch.empty((N, 4), device="meta")
    with pytest.raises(TypeError, match=r"\.cpu\(\)") as info:
        fs.vmap(lambda v: v * 2, jit=True)(meta)
    assert "jit=False" in str(info.value)


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs hardware this machine lacks: a CUDA GPU (this torch sees none)",
)
def test_cuda_tensors_are_refused_naming_the_cpu_copy(sim):
    with pytest.raises(TypeError, match=r"cuda.*\.cpu\(\)"):
        fs.vmap(lambda v: v * 2, jit=True)(torch.ones((N, 2), device="cuda"))


def test_an_uncompilable_function_names_itself_numba_and_jit_false(sim):
    def calls_scipy(x):
        return scipy.special.expit(x)  # a Python library numba does not know

    with pytest.raises(TypeError) as info:
        fs.vmap(calls_scipy, jit=True)(np.zeros((N, 2)))
    message = str(info.value)
    assert "calls_scipy" in message and "jit=False" in message and "numba" in message
    assert "expit" in message  # numba's reason, in one line
    assert "\n" not in message and len(message) < 600
    assert info.value.__cause__ is None and info.value.__suppress_context__
    np.testing.assert_array_equal(fs.vmap(calls_scipy)(np.zeros((N, 2))), 0.5)


def test_arguments_numba_cannot_type_are_refused_the_same_way(sim):
    dicts = [{"a": np.ones(2)} for _ in range(N)]
    with pytest.raises(TypeError, match=r"<lambda>.*numba.*dict.*jit=False"):
        fs.vmap(lambda d: d["a"].sum(), jit=True)(dicts)


def test_results_that_are_not_numbers_or_arrays_are_refused(sim):
    def returns_a_dict(x):
        return {"x": x}

    with pytest.raises(TypeError, match=r"returns_a_dict.*numbers, arrays or a tuple"):
        fs.vmap(returns_a_dict, jit=True)(np.ones((N, 2)))


def test_outputs_that_change_shape_between_agents_are_refused(sim):
    def ragged(r):
        return np.ones(1 + r % 2)

    with pytest.raises(ValueError, match=r"ragged.*differ in shape"):
        fs.local(ragged, jit=True)


def test_arguments_without_one_entry_per_agent_are_refused(sim):
    with pytest.raises(ValueError, match=r"argument 1 has 3 entries.*expected 257"):
        fs.vmap(lsq_grad, jit=True)(np.ones((N, 2, 2)), np.ones((3, 2)), np.ones((N, 2)))
    with pytest.raises(ValueError, match=r"in_axes has 2 entries for 3 arguments"):
        fs.vmap(lsq_grad, in_axes=(0, 0), jit=True)(*data())
    with pytest.raises(TypeError, match=r"vmap\(\) takes a function"):
        fs.vmap(3, jit=True)


def test_numba_threads_give_the_same_numbers():
    numba = pytest.importorskip("numba")
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs hardware this machine lacks: 2 cores for numba's threads")
    fs.init(size=N)
    try:
        A, x, b = data(5)
        before = numba.get_num_threads()
        try:
            numba.set_num_threads(1)
            one = fs.vmap(lsq_grad_loops, jit=True)(A, x, b)
            numba.set_num_threads(2)
            two = fs.vmap(lsq_grad_loops, jit=True)(A, x, b)
        finally:
            numba.set_num_threads(before)
        np.testing.assert_array_equal(one, two)
    finally:
        fs.shutdown()


def test_the_function_is_left_as_it_was(sim):
    """Nothing is stored on ``fn``: it pickles as before, into numba's own cache keys too."""
    import pickle

    def twice(v):
        return 2.0 * v

    before = dict(twice.__dict__)
    fs.vmap(twice, jit=True)(np.ones((N, 2)))
    fs.local(newton_sqrt, jit=True)
    assert twice.__dict__ == before and newton_sqrt.__dict__ == {}
    assert pickle.loads(pickle.dumps(newton_sqrt)) is newton_sqrt
