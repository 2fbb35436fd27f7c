# Streaming (non-temporal) stores for large outputs: verbatim C, included by _kernels.pyx.

cdef extern from *:
    """
    #include <string.h>
    #if defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2)
    #include <emmintrin.h>
    #define FOGSIM_HAVE_STREAM 1
    #else
    #define FOGSIM_HAVE_STREAM 0
    #endif

    /* Sources are prefetched this many bytes ahead: one thread's memory bandwidth is bound by
       the misses in flight, and with the hardware prefetcher alone a streamed three-term sum
       ran about 1.3x memcpy instead of 1.1x. */
    #define FOGSIM_AHEAD 2048

    #if FOGSIM_HAVE_STREAM
    #define FOGSIM_ALIGNED(p) (((size_t)(p) & 15) == 0)
    #define FOGSIM_PREFETCH(p) _mm_prefetch((const char *)(p) + FOGSIM_AHEAD, _MM_HINT_T0)

    /* float32 data is summed in double: four floats are a pair of double vectors, loaded
       widened (exactly) and stored narrowed (rounded once, to nearest). */
    typedef struct { __m128d lo, hi; } fogsim_d4;

    static CYTHON_INLINE fogsim_d4 fogsim_d4_load_f32(const float *p) {
        __m128 v = _mm_loadu_ps(p);
        fogsim_d4 r;
        r.lo = _mm_cvtps_pd(v);
        r.hi = _mm_cvtps_pd(_mm_movehl_ps(v, v));
        return r;
    }

    static CYTHON_INLINE fogsim_d4 fogsim_d4_load_f64(const double *p) {
        fogsim_d4 r;
        r.lo = _mm_loadu_pd(p);
        r.hi = _mm_loadu_pd(p + 2);
        return r;
    }

    static CYTHON_INLINE fogsim_d4 fogsim_d4_set1(double v) {
        fogsim_d4 r;
        r.lo = r.hi = _mm_set1_pd(v);
        return r;
    }

    static CYTHON_INLINE fogsim_d4 fogsim_d4_mul(fogsim_d4 a, fogsim_d4 b) {
        fogsim_d4 r;
        r.lo = _mm_mul_pd(a.lo, b.lo);
        r.hi = _mm_mul_pd(a.hi, b.hi);
        return r;
    }

    static CYTHON_INLINE fogsim_d4 fogsim_d4_add(fogsim_d4 a, fogsim_d4 b) {
        fogsim_d4 r;
        r.lo = _mm_add_pd(a.lo, b.lo);
        r.hi = _mm_add_pd(a.hi, b.hi);
        return r;
    }

    static CYTHON_INLINE void fogsim_d4_stream_f32(float *p, fogsim_d4 v) {
        _mm_stream_ps(p, _mm_movelh_ps(_mm_cvtpd_ps(v.lo), _mm_cvtpd_ps(v.hi)));
    }
    #else
    /* Without SSE2 the "vectors" are single elements (of double) and every store is plain. */
    #define FOGSIM_ALIGNED(p) 1
    #define FOGSIM_PREFETCH(p) ((void)0)
    #define FOGSIM_S_LOAD(p) ((double)*(p))
    #define FOGSIM_S_SET1(v) (v)
    #define FOGSIM_S_MUL(a, b) ((a) * (b))
    #define FOGSIM_S_ADD(a, b) ((a) + (b))
    #define FOGSIM_S_STORE_F64(p, v) (*(p) = (v))
    #define FOGSIM_S_STORE_F32(p, v) (*(p) = (float)(v))
    #endif

    /* One element stored without reading its cache line (MOVNTI, any alignment) where the
       target has it, plainly elsewhere. */
    static CYTHON_INLINE void fogsim_put_f64(double *p, double v) {
    #if FOGSIM_HAVE_STREAM && defined(_MSC_VER) && defined(_M_X64)
        __int64 bits;
        memcpy(&bits, &v, sizeof bits);
        _mm_stream_si64x((__int64 *)p, bits);
    #elif FOGSIM_HAVE_STREAM && defined(__x86_64__)
        long long bits;
        memcpy(&bits, &v, sizeof bits);
        _mm_stream_si64((long long *)p, bits);
    #else
        *p = v;
    #endif
    }

    static CYTHON_INLINE void fogsim_put_f32(float *p, float v) {
    #if FOGSIM_HAVE_STREAM
        int bits;
        memcpy(&bits, &v, sizeof bits);
        _mm_stream_si32((int *)p, bits);
    #else
        *p = v;
    #endif
    }

    /* Orders the streaming stores (weakly ordered) before whatever follows. */
    static CYTHON_INLINE void fogsim_stream_fence(void) {
    #if FOGSIM_HAVE_STREAM
        _mm_sfence();
    #endif
    }

    /* FOGSIM_DEFINE(SUF, T, V, LANES, LOAD, LOADD, SET1, MUL, ADD, STORE) defines for element
       type T summed in double (V: a vector of LANES doubles; LOAD widens LANES elements of
       T to V, LOADD loads LANES doubles, STORE narrows V to T and stores it streaming):

       fogsim_pass_stream_SUF(cnt, dst, acc, x0, w0, nt, src, w, beyond):
           dst[c] <- (T)((x0 ? w0 * x0[c] : acc[c]) + w[0] * src[0][c] + ...
                         + w[nt-1] * src[nt-1][c])
           for c < cnt, left to right in double, 0 <= nt <= 3 (nt >= 1 without x0); acc and
           the weights are double, so float32 data is rounded once, when stored;
       fogsim_pass_w_stream_SUF: the same with one weight per element, w0[c] and w[t][c].

       Every element gets the operations of the plain loops of _kernels.pyx, in their order.
       dst is written with streaming stores only: vectors from its first 16-byte aligned element
       on, single elements (fogsim_put_SUF) before and after. x0 and the sources are prefetched
       FOGSIM_AHEAD bytes ahead, past cnt if beyond (where they go on), else only within it. */

    #define FOGSIM_VSTEP(V, LOAD, MUL, ADD, STORE, FIRST, NT, WA, WB, WE)                     \\
        {                                                                                    \\
            V v_ = FIRST;                                                                    \\
            if ((NT) > 0) v_ = ADD(v_, MUL(WA, LOAD(s0 + c)));                                \\
            if ((NT) > 1) v_ = ADD(v_, MUL(WB, LOAD(s1 + c)));                                \\
            if ((NT) > 2) v_ = ADD(v_, MUL(WE, LOAD(s2 + c)));                                \\
            STORE(dst + c, v_);                                                              \\
        }

    /* One cache line of dst (four vectors) per iteration, then single vectors. */
    #define FOGSIM_VLOOP(V, LANES, LOAD, MUL, ADD, STORE, FIRST, PF_FIRST, NT, WA, WB, WE)    \\
        for (; c + 4 * (LANES) <= cnt;) {                                                    \\
            if (c < pf_stop) {                                                               \\
                PF_FIRST;                                                                    \\
                if ((NT) > 0) FOGSIM_PREFETCH(s0 + c);                                       \\
                if ((NT) > 1) FOGSIM_PREFETCH(s1 + c);                                       \\
                if ((NT) > 2) FOGSIM_PREFETCH(s2 + c);                                       \\
            }                                                                                \\
            FOGSIM_VSTEP(V, LOAD, MUL, ADD, STORE, FIRST, NT, WA, WB, WE) c += (LANES);       \\
            FOGSIM_VSTEP(V, LOAD, MUL, ADD, STORE, FIRST, NT, WA, WB, WE) c += (LANES);       \\
            FOGSIM_VSTEP(V, LOAD, MUL, ADD, STORE, FIRST, NT, WA, WB, WE) c += (LANES);       \\
            FOGSIM_VSTEP(V, LOAD, MUL, ADD, STORE, FIRST, NT, WA, WB, WE) c += (LANES);       \\
        }                                                                                    \\
        for (; c + (LANES) <= cnt; c += (LANES))                                             \\
            FOGSIM_VSTEP(V, LOAD, MUL, ADD, STORE, FIRST, NT, WA, WB, WE)

    /* The vector loop specialized for each number of terms (VW0 and W*: vector weights). */
    #define FOGSIM_VSWITCH(V, LANES, LOAD, LOADD, MUL, ADD, STORE, VW0, WA, WB, WE)           \\
        if (x0) {                                                                            \\
            switch (nt) {                                                                    \\
            case 0:                                                                          \\
                FOGSIM_VLOOP(V, LANES, LOAD, MUL, ADD, STORE, MUL(VW0, LOAD(x0 + c)),        \\
                             FOGSIM_PREFETCH(x0 + c), 0, WA, WB, WE)                         \\
                break;                                                                       \\
            case 1:                                                                          \\
                FOGSIM_VLOOP(V, LANES, LOAD, MUL, ADD, STORE, MUL(VW0, LOAD(x0 + c)),        \\
                             FOGSIM_PREFETCH(x0 + c), 1, WA, WB, WE)                         \\
                break;                                                                       \\
            case 2:                                                                          \\
                FOGSIM_VLOOP(V, LANES, LOAD, MUL, ADD, STORE, MUL(VW0, LOAD(x0 + c)),        \\
                             FOGSIM_PREFETCH(x0 + c), 2, WA, WB, WE)                         \\
                break;                                                                       \\
            default:                                                                         \\
                FOGSIM_VLOOP(V, LANES, LOAD, MUL, ADD, STORE, MUL(VW0, LOAD(x0 + c)),        \\
                             FOGSIM_PREFETCH(x0 + c), 3, WA, WB, WE)                         \\
            }                                                                                \\
        } else {                                                                             \\
            switch (nt) {                                                                    \\
            case 1:                                                                          \\
                FOGSIM_VLOOP(V, LANES, LOAD, MUL, ADD, STORE, LOADD(acc + c), (void)0, 1,    \\
                             WA, WB, WE)                                                     \\
                break;                                                                       \\
            case 2:                                                                          \\
                FOGSIM_VLOOP(V, LANES, LOAD, MUL, ADD, STORE, LOADD(acc + c), (void)0, 2,    \\
                             WA, WB, WE)                                                     \\
                break;                                                                       \\
            default:                                                                         \\
                FOGSIM_VLOOP(V, LANES, LOAD, MUL, ADD, STORE, LOADD(acc + c), (void)0, 3,    \\
                             WA, WB, WE)                                                     \\
            }                                                                                \\
        }

    /* Single elements while COND holds. */
    #define FOGSIM_SLOOP(SUF, T, COND, W0, WA, WB, WE)                                        \\
        for (; (COND); c++) {                                                                \\
            double v_ = x0 ? (W0) * (double)x0[c] : acc[c];                                  \\
            if (nt > 0) v_ = v_ + (WA) * (double)s0[c];                                      \\
            if (nt > 1) v_ = v_ + (WB) * (double)s1[c];                                      \\
            if (nt > 2) v_ = v_ + (WE) * (double)s2[c];                                      \\
            fogsim_put_##SUF(dst + c, (T)v_);                                                \\
        }

    #define FOGSIM_DEFINE(SUF, T, V, LANES, LOAD, LOADD, SET1, MUL, ADD, STORE)               \\
    static CYTHON_INLINE void fogsim_pass_stream_##SUF(                                      \\
            Py_ssize_t cnt, T *dst, const double *acc, const T *x0, double w0,              \\
            Py_ssize_t nt, const T **src, const double *w, int beyond) {                     \\
        const T *s0 = nt > 0 ? src[0] : NULL;                                                \\
        const T *s1 = nt > 1 ? src[1] : NULL;                                                \\
        const T *s2 = nt > 2 ? src[2] : NULL;                                                \\
        double a = nt > 0 ? w[0] : 0, b = nt > 1 ? w[1] : 0, e = nt > 2 ? w[2] : 0;         \\
        Py_ssize_t c = 0;                                                                    \\
        Py_ssize_t pf_stop = beyond ? cnt : cnt - FOGSIM_AHEAD / (Py_ssize_t)sizeof(T);      \\
        FOGSIM_SLOOP(SUF, T, c < cnt && !FOGSIM_ALIGNED(dst + c), w0, a, b, e)                \\
        {                                                                                    \\
            V va_ = SET1(a), vb_ = SET1(b), ve_ = SET1(e), vw_ = SET1(w0);                   \\
            FOGSIM_VSWITCH(V, LANES, LOAD, LOADD, MUL, ADD, STORE, vw_, va_, vb_, ve_)       \\
        }                                                                                    \\
        FOGSIM_SLOOP(SUF, T, c < cnt, w0, a, b, e)                                           \\
    }                                                                                        \\
                                                                                             \\
    static CYTHON_INLINE void fogsim_pass_w_stream_##SUF(                                    \\
            Py_ssize_t cnt, T *dst, const double *acc, const T *x0, const double *w0,       \\
            Py_ssize_t nt, const T **src, const double **w, int beyond) {                    \\
        const T *s0 = nt > 0 ? src[0] : NULL;                                                \\
        const T *s1 = nt > 1 ? src[1] : NULL;                                                \\
        const T *s2 = nt > 2 ? src[2] : NULL;                                                \\
        const double *a = nt > 0 ? w[0] : NULL;                                              \\
        const double *b = nt > 1 ? w[1] : NULL;                                              \\
        const double *e = nt > 2 ? w[2] : NULL;                                              \\
        Py_ssize_t c = 0;                                                                    \\
        Py_ssize_t pf_stop = beyond ? cnt : cnt - FOGSIM_AHEAD / (Py_ssize_t)sizeof(T);      \\
        FOGSIM_SLOOP(SUF, T, c < cnt && !FOGSIM_ALIGNED(dst + c), w0[c], a[c], b[c], e[c])    \\
        FOGSIM_VSWITCH(V, LANES, LOAD, LOADD, MUL, ADD, STORE, LOADD(w0 + c), LOADD(a + c),  \\
                       LOADD(b + c), LOADD(e + c))                                           \\
        FOGSIM_SLOOP(SUF, T, c < cnt, w0[c], a[c], b[c], e[c])                               \\
    }

    #if FOGSIM_HAVE_STREAM
    FOGSIM_DEFINE(f64, double, __m128d, 2, _mm_loadu_pd, _mm_loadu_pd, _mm_set1_pd, _mm_mul_pd,
                  _mm_add_pd, _mm_stream_pd)
    FOGSIM_DEFINE(f32, float, fogsim_d4, 4, fogsim_d4_load_f32, fogsim_d4_load_f64,
                  fogsim_d4_set1, fogsim_d4_mul, fogsim_d4_add, fogsim_d4_stream_f32)
    #else
    FOGSIM_DEFINE(f64, double, double, 1, FOGSIM_S_LOAD, FOGSIM_S_LOAD, FOGSIM_S_SET1,
                  FOGSIM_S_MUL, FOGSIM_S_ADD, FOGSIM_S_STORE_F64)
    FOGSIM_DEFINE(f32, float, double, 1, FOGSIM_S_LOAD, FOGSIM_S_LOAD, FOGSIM_S_SET1,
                  FOGSIM_S_MUL, FOGSIM_S_ADD, FOGSIM_S_STORE_F32)
    #endif
    """
    void fogsim_stream_fence() noexcept nogil
    void fogsim_pass_stream_f64(
        Py_ssize_t cnt, double* dst, const double* acc, const double* x0, double w0,
        Py_ssize_t nt, const double** src, const double* w, int beyond) noexcept nogil
    void fogsim_pass_stream_f32(
        Py_ssize_t cnt, float* dst, const double* acc, const float* x0, double w0,
        Py_ssize_t nt, const float** src, const double* w, int beyond) noexcept nogil
    void fogsim_pass_w_stream_f64(
        Py_ssize_t cnt, double* dst, const double* acc, const double* x0, const double* w0,
        Py_ssize_t nt, const double** src, const double** w, int beyond) noexcept nogil
    void fogsim_pass_w_stream_f32(
        Py_ssize_t cnt, float* dst, const double* acc, const float* x0, const double* w0,
        Py_ssize_t nt, const float** src, const double** w, int beyond) noexcept nogil
