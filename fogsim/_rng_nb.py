"""Draws from many numpy ``Generator``\\ s at once in compiled code (numba); private.

:class:`fogsim.StackedGenerator` holds one generator per simulated agent, and calling a
method on each in a Python loop costs about a microsecond per agent and call. Here one
numba loop calls each generator's own C bit generator (numpy's ``bitgen_t``, reached
through ``BitGenerator.capsule``: its ``state`` and its ``next_uint64`` / ``next_double``
function pointers) and runs numpy's own algorithms on the raw draws (the 256-step
ziggurat of ``random_standard_normal``, numba's port of it, with numpy's tables), so
agent ``r``'s row holds exactly the numbers ``generators[r].standard_normal(size)`` would
have returned, and each generator's state afterwards is the one that call leaves.

Imported only when a stacked draw is large enough to pay for numba (see ``fogsim._rng``),
so ``import fogsim`` does not import numba. The generators' locks are not taken: the
simulator calls them from one thread.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic
from numba.np.random._constants import (  # numpy's ziggurat tables, as numba ships them
    fi_double,
    ki_double,
    wi_double,
    ziggurat_nor_inv_r,
    ziggurat_nor_r,
)

__all__ = ["bitgen_addresses", "random", "standard_normal"]

# bitgen_t (numpy/random/bitgen.h): state, next_uint64, next_uint32, next_double, next_raw
_NEXT_UINT64 = 1
_NEXT_DOUBLE = 3

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def bitgen_addresses(generators: Sequence[np.random.Generator]) -> np.ndarray:
    """Return the address of each generator's ``bitgen_t``, valid while the generators live."""
    return np.fromiter(
        (_capsule_pointer(g.bit_generator.capsule, b"BitGenerator") for g in generators),
        dtype=np.uintp,
        count=len(generators),
    )


def _next(field: int, result: types.Type) -> Any:  # a numba intrinsic (untyped in numba)
    """Return an intrinsic calling field ``field`` of the ``bitgen_t`` at an address."""

    @intrinsic
    def call(typingctx, address):  # type: ignore[no-untyped-def]
        def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
            void_ptr = ir.IntType(8).as_pointer()
            fields = builder.inttoptr(args[0], void_ptr.as_pointer())
            state = builder.load(fields)
            slot = builder.gep(fields, [ir.Constant(ir.IntType(32), field)])
            fnty = ir.FunctionType(context.get_value_type(result), [void_ptr])
            fn = builder.bitcast(builder.load(slot), fnty.as_pointer())
            return builder.call(fn, [state])

        return result(types.uintp), codegen

    return call


_next_uint64 = _next(_NEXT_UINT64, types.uint64)
_next_double = _next(_NEXT_DOUBLE, types.float64)


@njit(nogil=True, cache=True)
def _normal(bitgen):  # type: ignore[no-untyped-def]
    # numpy's 256-step ziggurat for normals, step for step: the same numbers.
    while True:
        r = _next_uint64(bitgen)
        idx = r & 0xFF
        r >>= 8
        sign = r & 0x1
        rabs = (r >> 1) & 0x000FFFFFFFFFFFFF
        x = rabs * wi_double[idx]
        if sign & 0x1:
            x = -x
        if rabs < ki_double[idx]:
            return x
        if idx == 0:
            while True:
                xx = -ziggurat_nor_inv_r * np.log1p(-_next_double(bitgen))
                yy = -np.log1p(-_next_double(bitgen))
                if yy + yy > xx * xx:
                    if (rabs >> 8) & 0x1:
                        return -(ziggurat_nor_r + xx)
                    return ziggurat_nor_r + xx
        elif (fi_double[idx - 1] - fi_double[idx]) * _next_double(bitgen) + fi_double[idx] < np.exp(
            -0.5 * x * x
        ):
            return x


@njit(nogil=True, cache=True)
def _normal_rows(bitgens, out):  # type: ignore[no-untyped-def]
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = _normal(bitgens[i])


@njit(nogil=True, cache=True)
def _uniform_rows(bitgens, out):  # type: ignore[no-untyped-def]
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = _next_double(bitgens[i])


def standard_normal(bitgens: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Return each generator's ``standard_normal(shape)`` stacked, ``(n, *shape)``."""
    out = np.empty((bitgens.shape[0], int(np.prod(shape, dtype=np.int64))))
    _normal_rows(bitgens, out)
    return out.reshape(bitgens.shape[0], *shape)


def random(bitgens: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Return each generator's ``random(shape)`` (float64) stacked, ``(n, *shape)``."""
    out = np.empty((bitgens.shape[0], int(np.prod(shape, dtype=np.int64))))
    _uniform_rows(bitgens, out)
    return out.reshape(bitgens.shape[0], *shape)
