/* radixlm's native CPU decode kernels: float32 (weights float32, or int8 with per-row scales:
 * gemv_int8.c; the KV pools float32 or float16), written in x86-64 AVX2 + FMA + F16C intrinsics (elsewhere SIMDe's, rl_simd.h).
 *
 * Built on first use into one shared library from every .c file here (kernels/cpu_native.py's toolchain(),
 * on x86-64 cc -O3 -mavx2 -mfma -mf16c -ffp-contract=off -pthread; threads: pool.h) and called through ctypes with raw pointers to
 * contiguous tensors. Numerics: float32 throughout; dot products accumulate in 8 lanes (another
 * summation order than MKL: results agree to float32 rounding); elementwise code has no FMA
 * contraction, so RoPE matches torch's mul/mul/add exactly. */
#pragma once
#include "rl_simd.h"
#include <math.h>
#include <stdint.h>

#define RL_ABI_VERSION 9

static inline float rl_hsum(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* gemv.c: y[M, N] = x[M, K] @ w[N, K]^T (+ bias[N]) (+ add[M, N], which may alias y). */
void rl_linear(const float *x, int M, const float *w, const float *bias, const float *add, float *y,
               int64_t N, int64_t K, int nthreads);
/* gemv.c: out[M, I] = silu(x @ w[:I]^T) * (x @ w[I:]^T) for the fused gate/up weight w [2I, K]. */
void rl_gate_up_silu(const float *x, int M, const float *w, float *out, int64_t I, int64_t K, int nthreads);

static inline float rl_silu(float g) { return g / (1.0f + expf(-g)); }

/* gemv_int8.c: the same two with int8 weights w [N, K] and float32 scales [N]: y = (x @ w^T) * scale (+ ...). */
void rl_linear_i8(const float *x, int M, const int8_t *w, const float *scale, const float *bias, const float *add,
                  float *y, int64_t N, int64_t K, int nthreads);
void rl_gate_up_silu_i8(const float *x, int M, const int8_t *w, const float *scale, float *out, int64_t I, int64_t K,
                        int nthreads);

/* layer_blocks.c: a projection in GGUF block weights (gguf_blocks.h types): up to RL_BLOCK_PARTS row-wise
 * parts (parts = 0: not block weights). rl_block_linear: y[T, N] = add + (x W^T + bias) (bias, add may be
 * NULL; add may alias y); rl_block_gate_up_silu: out[T, I] of a fused gate/up [2I, K]. Both return 0, or -1
 * (no memory, a bad type). isa: gguf_matmul.c's. */
#define RL_BLOCK_PARTS 3
typedef struct {
    const void *w[RL_BLOCK_PARTS];
    int qtype[RL_BLOCK_PARTS];
    int64_t rows[RL_BLOCK_PARTS];
    int parts;
} rl_block_proj;
int64_t rl_block_rows(const rl_block_proj *p);
int rl_block_linear(const rl_block_proj *p, const float *x, int T, const float *bias, const float *add, float *y,
                    int64_t K, int isa, int nthreads);
int rl_block_gate_up_silu(const rl_block_proj *p, const float *x, int T, float *out, int64_t K, int isa,
                          int nthreads);

/* norm_rope.c: y = weight * rmsnorm(x) per row (x += add first, in place, when add is given); y may be x. */
void rl_rmsnorm(float *x, const float *add, const float *weight, float *y, int64_t rows, int64_t dim, float eps);
void rl_rmsnorm_threads(float *x, const float *add, const float *weight, float *y, int64_t rows, int64_t dim,
                        float eps, int nthreads);
/* norm_rope.c: RoPE on the q and k heads of the fused rows qkv [T, ld], then k, v to pool rows loc; the
 * pools hold float32, or float16 (kv_half: rounded to nearest even, as torch's .to(float16)). */
void rl_rope_store_kv(float *qkv, int64_t ld, int64_t T, int H, int Hkv, int D, const float *cos_,
                      const float *sin_, const int64_t *loc, void *k_pool, void *v_pool, int kv_half);
void rl_rope_store_kv_threads(float *qkv, int64_t ld, int64_t T, int H, int Hkv, int D, const float *cos_,
                              const float *sin_, const int64_t *loc, void *k_pool, void *v_pool, int nthreads,
                              int kv_half);

/* attention.c: decode attention over the paged pools [slots, Hkv, D] (float32, or float16 with kv_half:
 * widened on load, float32 arithmetic); q [bs, H, D] at row stride ldq;
 * the first `shared` slots of every request are the same (attended once for the whole batch). */
void rl_decode_attention(const float *q, int64_t ldq, const void *k_pool, const void *v_pool,
                         const int64_t *kv_indptr, const int64_t *kv_indices, int bs, int H, int Hkv, int D,
                         int64_t shared, float scale, float *out, int nthreads, int kv_half);
/* attention.c: cascade attention of `rows` query rows q [rows, H, D] (row stride ldq): every row sees the
 * `shared` slots at `prefix`, then its own keys at indices[starts[r], ends[r]) (an extend's causal
 * suffix); shared >= 1. out [rows, H, D]. Pools as rl_decode_attention's. */
void rl_cascade_attention(const float *q, int64_t ldq, const void *k_pool, const void *v_pool,
                          const int64_t *prefix, int64_t shared, const int64_t *starts, const int64_t *ends,
                          const int64_t *indices, int rows, int H, int Hkv, int D, float scale, float *out,
                          int nthreads, int kv_half);
