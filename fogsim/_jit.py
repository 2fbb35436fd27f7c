"""Per-agent functions compiled with numba: ``fs.vmap(fn, jit=True)``, ``fs.local(fn, jit=True)``.

A :class:`JitFunction` compiles ``fn`` once (``numba.njit``, cached on disk where numba can
locate its source, ``nogil`` so the SPMD mode's agent threads run it side by side) and runs
it two ways:

* :meth:`JitFunction.call`: one agent's values (the distributed runtimes, SPMD mode);
* :meth:`JitFunction.stacked`: every agent of the simulator. Agent 0 is called from Python
  to learn the outputs' shapes and dtypes, the stacked outputs are allocated once, and a
  generated kernel runs the remaining agents in compiled code, a ``prange`` loop shared by
  numba's threads (``NUMBA_NUM_THREADS``, ``numba.set_num_threads``), on one thread too:
  there it ran 2-4x faster per agent than the same body in a plain ``range`` loop, for a
  compile about 1.4x as long (benchmarks/bench_kernels.py; the numbers are the same).

Torch CPU tensors go in as zero-copy numpy views and results come back as tensors; CUDA
tensors are refused with the way out (``.cpu()``). numba's compile errors become one
:class:`TypeError` naming the function, numba's reason and ``jit=False``.

numba is imported on the first call, so ``import fogsim`` does not pay for it.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._arrays import is_tensor, to_numpy

__all__ = ["JitFunction", "check_axes", "compiled"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def check_axes(in_axes: Any, nargs: int) -> list[int | None]:
    """Return ``in_axes`` as one entry per argument, each checked to be 0 or None."""
    axes = list(in_axes) if isinstance(in_axes, Sequence) else [in_axes] * nargs
    if len(axes) != nargs:
        raise ValueError(f"in_axes has {len(axes)} entries for {nargs} arguments")
    for k, ax in enumerate(axes):
        if ax not in (0, None):
            raise ValueError(f"in_axes[{k}] must be 0 or None, got {ax!r}")
    return axes


_RECENT: OrderedDict[tuple[Any, str], JitFunction] = OrderedDict()
_RECENT_LOCK = threading.Lock()
_RECENT_SIZE = 64


def compiled(fn: Callable[..., Any], api: str) -> JitFunction:
    """Return ``fn``'s :class:`JitFunction`, kept for the last ``_RECENT_SIZE`` functions:
    ``fs.vmap(fn, jit=True)`` made again, in a loop say, reuses the compiled kernels.

    Kept here, not on ``fn``: an attribute would travel wherever ``fn`` is pickled (numba
    pickles closures' functions for its cache keys, and a lock does not pickle). The
    references are strong, so the cache is bounded.
    """
    if not callable(fn):
        raise TypeError(f"{api}() takes a function, got {type(fn).__name__}")
    key = (fn, api)
    with _RECENT_LOCK:
        try:
            made = _RECENT.get(key)
        except TypeError:  # an unhashable callable: made afresh
            return JitFunction(fn, api)
        if made is None:
            made = _RECENT[key] = JitFunction(fn, api)
            if len(_RECENT) > _RECENT_SIZE:
                _RECENT.popitem(last=False)
        else:
            _RECENT.move_to_end(key)
        return made


class JitFunction:
    """``fn`` compiled with numba on first use; ``api`` names the call in messages."""

    def __init__(self, fn: Callable[..., Any], api: str) -> None:
        if not callable(fn):
            raise TypeError(f"{api}() takes a function, got {type(fn).__name__}")
        self.fn, self.api = fn, api
        self.name = getattr(fn, "__qualname__", None) or repr(fn)
        self._compiled: Any = None
        self._kernels: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.RLock()  # SPMD agents may make the first call together

    # -- one agent ------------------------------------------------------------------------
    def call(self, *args: Any) -> Any:
        """Return ``fn(*args)`` compiled, for one agent's values."""
        arrays, torch_out = _inputs(args, self._where())
        out = self._run(self._dispatcher(), arrays)
        outs = self._outputs(out)
        return _wrap(outs, torch_out, single=not isinstance(out, tuple))

    # -- every agent of a simulation ------------------------------------------------------
    def stacked(self, n: int, args: Sequence[Any], axes: Sequence[int | None]) -> Any:
        """Return ``fn`` over the ``n`` agents' slices of ``args`` (``axes`` as in vmap),
        stacked along a new leading axis."""
        arrays, torch_out = _inputs(args, self._where())
        for k, (a, ax) in enumerate(zip(arrays, axes, strict=True)):
            if ax == 0 and (np.ndim(a) == 0 or len(a) != n):
                got = "a scalar" if np.ndim(a) == 0 else f"{len(a)} entries on its agent axis"
                raise ValueError(f"{self._where()}: argument {k} has {got}, expected {n}")
        if n == 0:
            raise ValueError(f"{self._where()}: there are no agents to map over")
        first = self._run(
            self._dispatcher(), [a[0] if ax == 0 else a for a, ax in zip(arrays, axes, strict=True)]
        )
        outs0 = self._outputs(first)
        stacked = [np.empty((n, *np.shape(o)), dtype=np.asarray(o).dtype) for o in outs0]
        for s, o in zip(stacked, outs0, strict=True):
            s[0] = o
        if n > 1:
            kernel = self._kernel(
                tuple(axes), [np.ndim(o) for o in outs0], isinstance(first, tuple)
            )
            bad = np.zeros(1, dtype=np.int64)
            self._run(kernel, [n, *arrays, *stacked, bad])
            if bad[0]:
                raise ValueError(
                    f"{self._where()}: agent {bad[0]}'s outputs differ in shape from agent "
                    f"0's {[np.shape(o) for o in outs0]}; every agent's must be alike"
                )
        return _wrap(stacked, torch_out, single=not isinstance(first, tuple))

    def local_stacked(self, n: int, first: int = 0) -> Any:
        """Return ``fn(r)`` for the ``n`` ranks ``r`` from ``first`` on, stacked."""
        return self.stacked(n, [np.arange(first, first + n, dtype=np.int64)], [0])

    # -- compiling ------------------------------------------------------------------------
    def _where(self) -> str:
        return f"{self.api}(jit=True) of {self.name}"

    def _dispatcher(self) -> Any:
        if self._compiled is None:
            with self._lock:
                if self._compiled is None:
                    self._compiled = _njit(self.fn, nogil=True)
        return self._compiled

    def _kernel(self, axes: tuple[int | None, ...], ndims: list[int], is_tuple: bool) -> Any:
        """The loop over agents 1..n-1 for these argument axes and outputs, compiled."""
        key = (axes, tuple(ndims), is_tuple)
        kernel = self._kernels.get(key)
        if kernel is None:
            with self._lock:
                kernel = self._kernels.get(key)
                if kernel is None:
                    kernel = self._kernels[key] = _make_kernel(
                        self._dispatcher(), axes, ndims, is_tuple
                    )
        return kernel

    def _run(self, compiled: Any, args: Sequence[Any]) -> Any:
        """Call ``compiled``; numba's failure to compile becomes a short TypeError."""
        from numba.core.errors import NumbaError

        try:
            return compiled(*args)
        except NumbaError as exc:
            raise TypeError(
                f"{self._where()}: numba cannot compile it: {_reason(exc)}. "
                f"jit=False runs {self.name} uncompiled"
            ) from None

    def _outputs(self, out: Any) -> list[Any]:
        """The outputs of one call as a list, each checked to be a number or an array."""
        outs = list(out) if isinstance(out, tuple) else [out]
        for k, o in enumerate(outs):
            if not isinstance(o, (np.ndarray, np.generic, int, float, complex, bool)):
                which = f"output {k}" if isinstance(out, tuple) else "its result"
                raise TypeError(
                    f"{self._where()}: {which} is a {type(o).__name__}; per-agent functions "
                    f"compiled with jit=True return numbers, arrays or a tuple of them "
                    f"(jit=False runs {self.name} uncompiled)"
                )
        return outs


def _njit(fn: Callable[..., Any], **options: Any) -> Any:
    """``numba.njit(fn)``, cached on disk unless numba cannot locate ``fn``'s source."""
    import numba

    try:
        return numba.njit(cache=True, **options)(fn)
    except RuntimeError:  # "no locator available": defined in a REPL or by exec
        return numba.njit(**options)(fn)


def _make_kernel(inner: Any, axes: tuple[int | None, ...], ndims: list[int], is_tuple: bool) -> Any:
    """Generate and compile ``kernel(n, a0.., out0..)`` looping ``inner`` over agents."""
    import numba

    args = [f"a{k}" for k in range(len(axes))]
    outs = [f"out{k}" for k in range(len(ndims))]
    call = ", ".join(f"{a}[i]" if ax == 0 else a for a, ax in zip(args, axes, strict=True))
    lines = [
        f"def kernel(n, {', '.join(args + outs)}, bad):",
        "    for i in prange(1, n):",
        f"        r = inner({call})",
    ]
    for k, (name, ndim) in enumerate(zip(outs, ndims, strict=True)):
        value = f"r[{k}]" if is_tuple else "r"
        if ndim:  # a shape unlike agent 0's is reported, not raised inside the loop
            lines += [
                f"        if {value}.shape != {name}.shape[1:]:",
                "            bad[0] = i",
                "        else:",
                f"            {name}[i, ...] = {value}",
            ]
        else:
            lines.append(f"        {name}[i] = {value}")
    namespace: dict[str, Any] = {"inner": inner, "prange": numba.prange}
    exec("\n".join(lines), namespace)  # noqa: S102 - source built above from names only
    return numba.njit(parallel=True, nogil=True)(namespace["kernel"])


def _inputs(args: Sequence[Any], where: str) -> tuple[list[Any], bool]:
    """The arguments as numba takes them (tensors as numpy views), and whether any was a
    tensor (then results come back as tensors)."""
    out, torch_out = [], False
    for k, a in enumerate(args):
        if is_tensor(a):
            if a.device.type != "cpu":
                raise TypeError(
                    f"{where}: argument {k} is a tensor on {a.device}; jit=True runs on the "
                    f"CPU: pass x.cpu() (and move the result back), or use jit=False"
                )
            # to_numpy's conversion: zero-copy, bfloat16 widened to float32 (numpy has none)
            out.append(to_numpy(a.resolve_conj().resolve_neg(), f"{where}: argument {k}")[0])
            torch_out = True
        elif isinstance(a, list):
            out.append(np.asarray(a))  # numba's reflected lists are deprecated
        else:
            out.append(a)
    return out, torch_out


def _wrap(outs: list[Any], torch_out: bool, single: bool) -> Any:
    if torch_out:
        import torch

        outs = [torch.from_numpy(np.asarray(o)) for o in outs]
    return outs[0] if single else tuple(outs)


def _reason(exc: Exception) -> str:
    """numba's reason for failing in one line: what it says of the arguments, else the
    first line after its pipeline header."""
    lines = [_ANSI.sub("", s).strip() for s in str(exc).splitlines()]
    lines = [s for s in lines if s]
    for k, line in enumerate(lines):
        if line.startswith("This error may have been caused by the following argument"):
            return "; ".join(s.lstrip("- ") for s in lines[k + 1 :] if s.startswith("-"))
    body = [s for s in lines if not s.startswith(("Failed in ", "During:", "File ", "^"))]
    return body[0] if body else type(exc).__name__
