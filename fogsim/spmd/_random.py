"""Per-agent random state in SPMD mode: numpy's and torch's global generators, per agent.

An MPI rank is a process, so ``np.random.seed(rank)`` or ``torch.manual_seed(rank)`` in it
seeds that rank's own generator. The agents of :func:`fogsim.spmd.run` are threads of one
process and would share one; while a run is active, the calls below made in an agent
thread act on that agent's own state instead, so the agents draw what the MPI ranks draw.
Other threads (the one that called ``run`` included) keep the process-wide generators, and
everything is put back when the last active run ends.

numpy
    Every function of numpy's legacy module-level API (``np.random.seed``, ``rand``,
    ``randn``, ``randint``, ``normal``, ``choice``, ``shuffle``, ``get_state``, ...,
    ``get_bit_generator``/``set_bit_generator``) and ``numpy.random.mtrand._rand`` (the
    global ``RandomState``, as code that looks it up when it draws gets it, e.g. through a
    ``check_random_state(None)``) dispatch to the calling agent's ``RandomState``. An
    agent's state starts as a fresh ``np.random.RandomState()``, seeded from OS entropy as
    a new process is; only draws after a seed can therefore be compared with MPI. What was
    bound before the run keeps the global state: ``from numpy.random import rand`` in a
    module imported earlier, or an object that stored the global ``RandomState`` (scipy's
    ``scipy.stats.norm`` and the other distribution instances); pass those a
    ``random_state`` of the agent's own. A script run by :func:`fogsim.spmd.run_path`
    imports during the run and is covered.
torch (only once the program imports it: fogsim never imports torch itself)
    ``torch.manual_seed``, ``seed``, ``initial_seed``, ``get_rng_state`` and
    ``set_rng_state`` (also as ``torch.random.*``, so ``torch.random.fork_rng`` follows)
    use the agent's own CPU ``torch.Generator`` (fresh: seeded from entropy, as torch seeds
    a new process). The functions that draw from the default CPU generator, ``torch.rand``,
    ``randn``, ``randint``, ``randperm``, ``normal``, ``bernoulli``, ``multinomial``,
    ``poisson``, the ``*_like`` ones, the in-place ``Tensor`` samplers (``uniform_``,
    ``normal_``, ``random_``, ...: the ones ``nn.Linear`` and friends use to initialize),
    ``torch.nn.init`` and the dropout functions of ``torch.nn.functional``, run with the
    agent's state loaded into the default generator under one lock, and store it back
    (about 10-15 us a call: the agents' draws take turns, and each copies two states).
    Not covered: CUDA generators (``manual_seed`` in an agent seeds its CPU state only),
    C++ code reaching the default generator by other routes, and threads an agent starts.
"""

from __future__ import annotations

import functools
import importlib.abc
import sys
import threading
from typing import Any

import numpy as np
import numpy.random.mtrand as _mtrand

__all__ = ["enter_agent", "leave_agent", "start", "stop"]


class _Local(threading.local):
    def __init__(self) -> None:
        self.agent = False  # this thread runs an SPMD agent
        self.numpy: np.random.RandomState | None = None
        self.torch: Any = None  # the agent's torch.Generator, made on first use
        self.swapped = False  # the agent's torch state is loaded in the default generator


_local = _Local()
_install_lock = threading.Lock()
_runs = 0  # active SPMD runs; the patches are in place while it is > 0
_patched: list[tuple[Any, str, bool, Any]] = []  # (owner, name, owned the name, old value)
_torch_patched = False
_torch_lock = threading.RLock()  # one agent at a time uses the default torch generator
_global_rand = _mtrand._rand


def start() -> None:
    """Give each agent thread its own random state, from now until the matching :func:`stop`."""
    global _runs
    with _install_lock:
        _runs += 1
        if _runs == 1:
            _install()


def stop() -> None:
    """End one run's use of the per-agent states; the last one puts numpy and torch back."""
    global _runs, _torch_patched
    with _install_lock:
        _runs -= 1
        if _runs == 0:
            if _HOOK in sys.meta_path:
                sys.meta_path.remove(_HOOK)
            while _patched:
                owner, name, owned, old = _patched.pop()
                if owned:
                    setattr(owner, name, old)
                else:
                    delattr(owner, name)
            _torch_patched = False


def enter_agent() -> None:
    """Mark the running thread as an agent: from now on it draws from states of its own."""
    _local.agent, _local.numpy, _local.torch, _local.swapped = True, None, None, False


def leave_agent() -> None:
    """Drop the running thread's per-agent states."""
    _local.agent, _local.numpy, _local.torch, _local.swapped = False, None, None, False


def _patch(owner: Any, name: str, value: Any) -> None:
    _patched.append((owner, name, name in vars(owner), vars(owner).get(name)))
    setattr(owner, name, value)


def _install() -> None:
    _install_numpy()
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "default_generator"):
        _install_torch(torch)
    else:
        sys.meta_path.insert(0, _HOOK)


# -- numpy ----------------------------------------------------------------------------------
def _numpy_state() -> np.random.RandomState:
    if not _local.agent:
        return _global_rand
    state = _local.numpy
    if state is None:
        state = _local.numpy = np.random.RandomState()
    return state


class _AgentRandomState(np.random.RandomState):
    """Stands in for numpy's global ``RandomState``: every attribute is the agent's."""

    def __getattribute__(self, name: str) -> Any:
        return getattr(_numpy_state(), name)


def _numpy_method(name: str, original: Any) -> Any:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(_numpy_state(), name)(*args, **kwargs)

    return call


def _set_bit_generator(bitgen: Any) -> None:
    if _local.agent:
        _local.numpy = np.random.RandomState(bitgen)
    else:
        _ORIGINAL_SET_BIT_GENERATOR(bitgen)


_ORIGINAL_SET_BIT_GENERATOR = _mtrand.set_bit_generator


def _install_numpy() -> None:
    # The module-level functions are bound methods of the global RandomState, or functions
    # that read the module global ``_rand`` (seed, sample, get_bit_generator): replacing
    # both routes every one of them.
    for module in (np.random, _mtrand):
        for name, value in list(vars(module).items()):
            if getattr(value, "__self__", None) is _global_rand:
                _patch(module, name, _numpy_method(name, value))
        _patch(module, "set_bit_generator", _set_bit_generator)
    _patch(_mtrand, "_rand", _AgentRandomState())


# -- torch ----------------------------------------------------------------------------------
_TORCH_SAMPLERS = (
    "rand",
    "randn",
    "randint",
    "randperm",
    "normal",
    "bernoulli",
    "multinomial",
    "poisson",
    "rand_like",
    "randn_like",
    "randint_like",
)
_TENSOR_SAMPLERS = (
    "uniform_",
    "normal_",
    "random_",
    "bernoulli_",
    "bernoulli",
    "exponential_",
    "geometric_",
    "log_normal_",
    "cauchy_",
    "multinomial",
)
_INIT_FUNCTIONS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "sparse_",
)
_DROPOUTS = (
    "dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "alpha_dropout",
    "feature_alpha_dropout",
    "rrelu",
)


def _torch_generator() -> Any:
    gen = _local.torch
    if gen is None:
        import torch

        gen = _local.torch = torch.Generator()
        gen.seed()  # torch seeds a new process's default generator from entropy
    return gen


def _sampler(original: Any) -> Any:
    """``original`` run with the agent's torch state in the default generator."""

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not _local.agent:
            with _torch_lock:  # never while an agent's state is loaded
                return original(*args, **kwargs)
        if _local.swapped:  # called from another sampler: the agent's state is in place
            return original(*args, **kwargs)
        gen = _torch_generator()
        with _torch_lock:
            default = sys.modules["torch"].default_generator
            saved = default.get_state()
            default.set_state(gen.get_state())
            _local.swapped = True
            try:
                return original(*args, **kwargs)
            finally:
                _local.swapped = False
                gen.set_state(default.get_state())
                default.set_state(saved)

    return call


def _seeding(name: str, original: Any) -> Any:
    def agent_call(*args: Any) -> Any:
        gen = _torch_generator()
        if name == "manual_seed":
            return gen.manual_seed(int(args[0]))
        if name == "get_rng_state":
            return gen.get_state()
        if name == "set_rng_state":
            return gen.set_state(args[0])
        return getattr(gen, name)()  # seed, initial_seed

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _local.agent:
            return agent_call(*args, *kwargs.values())
        return original(*args, **kwargs)

    return call


def _install_torch(torch: Any) -> None:
    global _torch_patched
    if _torch_patched:
        return
    _torch_patched = True
    for name in ("manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state"):
        _patch(torch.random, name, _seeding(name, getattr(torch.random, name)))
        # torch's own name may be another object (torch._dynamo wraps torch.manual_seed
        # once it is imported): patch it on its own, around what it is now
        if hasattr(torch, name):
            _patch(torch, name, _seeding(name, getattr(torch, name)))
    import torch.nn.functional as F  # noqa: N812 - torch's own name; imported with torch

    for owner, names in (
        (torch, _TORCH_SAMPLERS),
        (torch.Tensor, _TENSOR_SAMPLERS),
        (torch.nn.init, _INIT_FUNCTIONS),
        (F, _DROPOUTS),
    ):
        for name in names:
            original = getattr(owner, name, None)
            if original is not None:
                _patch(owner, name, _sampler(original))


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Patches torch when an agent imports it during a run (fogsim never imports it)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader: Any = spec.loader  # Any: its exec_module is replaced on the instance below
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_then_patch(module: Any) -> None:
            exec_module(module)
            with _install_lock:
                if _runs:
                    _install_torch(module)

        loader.exec_module = exec_then_patch
        return spec


_HOOK = _TorchImportHook()
