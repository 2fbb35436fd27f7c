# cython: language_level=3
# Kernels other Cython modules may cimport: `from fogsim._core._kernels cimport ...`.
# They do no argument checking; the def wrappers in _kernels.pyx show what callers must
# guarantee (shapes, index ranges, out not aliasing x). Call them without the GIL. Every sum
# is formed in double (float64 weights, float32 data widened) and rounded to the data type
# once, when stored.

from libc.stdint cimport int32_t, int64_t

ctypedef fused real_t:
    float
    double

# out <- self_weight * x + sum_k weights[k] * ys[k]; out may be x itself.
cdef void weighted_combine_kernel(
    real_t[::1] out,
    double self_weight,
    const real_t[::1] x,
    const double[::1] weights,
    const real_t[:, ::1] ys,
) noexcept nogil

# The same for raw rows: out <- self_weight * x + sum_k weights[k] * y_k over m elements,
# with y_k = base + r * stride, r = select[k] (or k when select is NULL). Non-fused names so
# other modules can cimport them.
cdef void rows_combine_f64(
    double* out, Py_ssize_t m, double self_weight, const double* x, Py_ssize_t nk,
    const double* base, Py_ssize_t stride, const int64_t* select, const double* weights,
) noexcept nogil
cdef void rows_combine_f32(
    float* out, Py_ssize_t m, double self_weight, const float* x, Py_ssize_t nk,
    const float* base, Py_ssize_t stride, const int64_t* select, const double* weights,
) noexcept nogil

# out[i] <- self_weight[i] * x[i] + sum_{p in row i} data[p] * x[indices[p]], in p order,
# for start <= i < stop (0, n: every row); the other rows of out are left as they are.
cdef void csr_combine_kernel(
    const int64_t[::1] indptr,
    const int32_t[::1] indices,
    const double[::1] data,
    const double[::1] self_weight,
    const real_t[:, ::1] x,
    real_t[:, ::1] out,
    Py_ssize_t start,
    Py_ssize_t stop,
) noexcept nogil

# Circulant matrix: row i receives from (i + offsets[k]) % n, by ascending source index.
# weights is (K,) or, if weights_per_row, the (K, n) array flattened; likewise self_weight
# is (1,) or, if self_per_row, (n,).
cdef void circulant_combine_kernel(
    const int64_t[::1] offsets,
    const double[::1] weights,
    bint weights_per_row,
    const double[::1] self_weight,
    bint self_per_row,
    const real_t[:, ::1] x,
    real_t[:, ::1] out,
) noexcept nogil
