"""fs.vmap(fn, jit=True) and fs.local(fn, jit=True) give the simulator's numbers in every mode.

This file is also the job: from the repository root, ``fogrun [--sim|--spmd] -np N python
tests/test_jit_modes.py OUT.npz`` builds per-agent data with ``fs.local(..., jit=True)``, runs
compiled per-agent functions (matrix algebra, a data-dependent Newton loop, several outputs,
``in_axes=None``, torch tensors) inside a few rounds of neighbor averaging, and the main
process saves every agent's values, compiled and uncompiled.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest


def agent_data(r):
    A = np.empty((3, 3))
    for i in range(3):
        for j in range(3):
            A[i, j] = np.cos(1.0 + r + 3 * i + j) + (3.0 if i == j else 0.0)
    return A, np.sin(np.arange(3) + r)


def local_step(A, x, b, step):
    g = A.T @ (A @ x - b)
    return x - step * g, np.sqrt(g @ g)


def newton_cbrt(a):
    x = 1.0 + abs(a)
    while abs(x * x * x - a) > 1e-13 * (1.0 + abs(a)):
        x = x - (x * x * x - a) / (3.0 * x * x)
    return x


def job(out: str) -> None:
    import torch

    import fogsim as fs
    from fogsim import topology as T

    fs.init(topology=T.ring_graph)
    saved = {}
    for jit in (True, False):
        A, b = fs.local(agent_data, jit=jit)
        x = fs.local(lambda r: np.zeros(3))
        step = fs.vmap(local_step, in_axes=(0, 0, 0, None), jit=jit)
        for _ in range(5):
            x, norm = step(A, x, b, 0.05)
            x = fs.neighbor_allreduce(x)
        roots = fs.vmap(newton_cbrt, jit=jit)(fs.local(lambda r: r - 1.5))
        M = np.arange(9.0).reshape(3, 3)
        shared = fs.vmap(lambda M, v: M @ v, in_axes=(None, 0), jit=jit)(M, x)
        tensor = fs.vmap(lambda v: v * v, jit=jit)(torch.as_tensor(x))
        key = "jit" if jit else "python"
        saved[f"{key}.x"] = fs.global_view(x)
        saved[f"{key}.norm"] = fs.global_view(norm)
        saved[f"{key}.roots"] = fs.global_view(roots)
        saved[f"{key}.shared"] = fs.global_view(shared)
        saved[f"{key}.tensor"] = fs.global_view(np.asarray(tensor))
        saved[f"{key}.tensor_is_tensor"] = fs.global_view(
            np.array(float(isinstance(tensor, torch.Tensor)))
        )
    try:
        fs.vmap(lambda d: d["a"], in_axes=None, jit=True)({"a": np.ones(2)})
    except TypeError as exc:
        message = str(exc)
    else:
        message = "no error"
    refused = "<lambda>" in message and "jit=False" in message
    saved["refused_everywhere"] = fs.global_view(np.array(float(refused)))
    if fs.is_main_process():
        np.savez(out, **saved)
    fs.shutdown()


MODES = {
    "sim": (["--sim"], {}),
    "spmd": (["--spmd"], {}),
    "mpi": ([], {}),
    "torch": ([], {"FOGSIM_BACKEND": "torch"}),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from tests import _jobs  # here: the job runs this file as a script, without the package

    tmp = tmp_path_factory.mktemp("jit")
    cache: dict[str, dict[str, np.ndarray]] = {}

    def get(mode: str) -> dict[str, np.ndarray]:
        if mode not in cache:
            options, env = MODES[mode]
            out = tmp / f"jit-{mode}.npz"
            _jobs.fogrun_path(
                Path(__file__),
                4,
                str(out),
                options=tuple(options),
                timeout=240,
                env=env,
            ).check()
            with np.load(out) as saved:
                cache[mode] = dict(saved)
        return cache[mode]

    return get


def test_the_simulator_compiled_gives_the_uncompiled_numbers(results):
    got = results("sim")
    for name in ("x", "norm", "roots", "shared", "tensor"):
        np.testing.assert_allclose(got[f"jit.{name}"], got[f"python.{name}"], rtol=1e-13)
    np.testing.assert_allclose(np.cbrt(np.arange(4) - 1.5), got["jit.roots"], rtol=1e-12)
    assert got["jit.x"].shape == (4, 3) and got["jit.norm"].shape == (4,)
    assert got["jit.tensor_is_tensor"].all() and got["python.tensor_is_tensor"].all()
    assert got["refused_everywhere"].all()


@pytest.mark.parametrize(
    "mode",
    [
        "spmd",
        pytest.param("mpi", marks=pytest.mark.mpi),
        pytest.param("torch", marks=pytest.mark.mpi),
    ],
)
def test_every_mode_gives_the_simulators_numbers(results, mode):
    simulated, other = results("sim"), results(mode)
    assert set(simulated) == set(other)
    for key in simulated:
        np.testing.assert_allclose(other[key], simulated[key], rtol=1e-12, atol=1e-14, err_msg=key)


if __name__ == "__main__":
    job(sys.argv[1])
