"""Build the compiled kernels; the project metadata lives in pyproject.toml."""

import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

if sys.platform == "win32":
    # MSVC does not contract a*b+c into an FMA under /fp:precise (VS 2022 and later).
    compile_args = ["/O2", "/fp:precise"]
else:
    # No -march=native or -ffast-math: results must stay bit-identical to numpy, so no FMA
    # contraction (GCC contracts by default wherever the target has FMA, e.g. aarch64).
    # Functions and loops on cache-line boundaries: without, a kernel's speed on short rows
    # moved by 15% with where unrelated code placed it (the CSR loop on 10^4 rows of 8).
    compile_args = ["-O3", "-ffp-contract=off", "-falign-functions=64", "-falign-loops=64"]

extensions = [
    Extension(
        f"fogsim._core.{name}",
        [f"fogsim/_core/{name}.pyx"],
        extra_compile_args=compile_args,
        # _fusion reads arrays through numpy's C API (its per-tensor fast path)
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
    for name in ("_kernels", "_handles", "_fusion", "_trace")
]

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": 3}))
