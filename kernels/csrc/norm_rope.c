/* RMSNorm (with the residual add fused in) and RoPE + KV store (into float32 or float16 pools), the glue
 * between a layer's matmuls. */
#include "kernels.h"
#include "pool.h"

#include <math.h>
#include <string.h>

#define NORM_ROWS_PER_ITEM 16

typedef struct {
    float *x;
    const float *add, *weight;
    float *y;
    int64_t rows, dim;
    float eps;
} norm_job;

/* out = weight * (h * (1 / sqrt(mean(h^2) + eps))), h = x (+ add), as HF's LlamaRMSNorm in float32. */
static void norm_rows(void *ctx, int64_t item) {
    const norm_job *j = ctx;
    int64_t end = (item + 1) * NORM_ROWS_PER_ITEM < j->rows ? (item + 1) * NORM_ROWS_PER_ITEM : j->rows;
    for (int64_t i = item * NORM_ROWS_PER_ITEM; i < end; i++) {
        float *h = j->x + i * j->dim, *o = j->y + i * j->dim;
        if (j->add)
            for (int64_t d = 0; d < j->dim; d++) h[d] += j->add[i * j->dim + d];
        __m256 acc = _mm256_setzero_ps();
        int64_t d = 0;
        for (; d + 8 <= j->dim; d += 8) {
            __m256 v = _mm256_loadu_ps(h + d);
            acc = _mm256_fmadd_ps(v, v, acc);
        }
        float ss = rl_hsum(acc);
        for (; d < j->dim; d++) ss += h[d] * h[d];
        float inv = 1.0f / sqrtf(ss / (float)j->dim + j->eps);
        for (d = 0; d < j->dim; d++) o[d] = j->weight[d] * (h[d] * inv);
    }
}

void rl_rmsnorm_threads(float *x, const float *add, const float *weight, float *y, int64_t rows, int64_t dim,
                        float eps, int nthreads) {
    norm_job j = {x, add, weight, y, rows, dim, eps};
    rl_parallel(norm_rows, &j, (rows + NORM_ROWS_PER_ITEM - 1) / NORM_ROWS_PER_ITEM, nthreads);
}

void rl_rmsnorm(float *x, const float *add, const float *weight, float *y, int64_t rows, int64_t dim, float eps) {
    rl_rmsnorm_threads(x, add, weight, y, rows, dim, eps, 1);
}

/* Rotate-half RoPE in place on `heads` heads of D at row stride ld, cos/sin [T, D]:
 * (a, b) -> (a cos - b sin, b cos + a sin), rounded as torch's x * cos + rotate_half(x) * sin. */
static void rope_heads(float *x, int64_t ld, int64_t T, int heads, int D, const float *cos_, const float *sin_) {
    int half = D / 2;
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < heads; h++) {
            float *v = x + t * ld + (int64_t)h * D;
            const float *c = cos_ + t * D, *s = sin_ + t * D;
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[half + i];
                v[i] = a * c[i] + (-b) * s[i];
                v[half + i] = b * c[half + i] + a * s[half + i];
            }
        }
}

typedef struct {
    float *qkv;
    int64_t ld, T;
    int H, Hkv, D;
    const float *cos_, *sin_;
    const int64_t *loc;
    void *k_pool, *v_pool;  /* float32, or float16 (kv_half) */
    int kv_half;
} rope_job;

/* dst[0..n) = src as float16, rounded to nearest even (torch's .to(float16)), 8 lanes at a time */
static void store_half(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(src[i]), _MM_FROUND_TO_NEAREST_INT), 0);
}

#define ROPE_TOKENS_PER_ITEM 16

static void rope_store_tokens(void *ctx, int64_t item) {
    const rope_job *j = ctx;
    int64_t t0 = item * ROPE_TOKENS_PER_ITEM, n = j->T - t0 < ROPE_TOKENS_PER_ITEM ? j->T - t0 : ROPE_TOKENS_PER_ITEM;
    float *rows = j->qkv + t0 * j->ld;
    const float *c = j->cos_ + t0 * j->D, *s = j->sin_ + t0 * j->D;
    rope_heads(rows, j->ld, n, j->H, j->D, c, s);
    rope_heads(rows + (int64_t)j->H * j->D, j->ld, n, j->Hkv, j->D, c, s);
    int64_t row = (int64_t)j->Hkv * j->D;
    for (int64_t t = 0; t < n; t++) {
        const float *k = rows + t * j->ld + (int64_t)j->H * j->D;
        int64_t at = j->loc[t0 + t] * row;
        if (j->kv_half) {
            store_half((uint16_t *)j->k_pool + at, k, row);
            store_half((uint16_t *)j->v_pool + at, k + row, row);
        } else {
            memcpy((float *)j->k_pool + at, k, sizeof(float) * (size_t)row);
            memcpy((float *)j->v_pool + at, k + row, sizeof(float) * (size_t)row);
        }
    }
}

void rl_rope_store_kv_threads(float *qkv, int64_t ld, int64_t T, int H, int Hkv, int D, const float *cos_,
                              const float *sin_, const int64_t *loc, void *k_pool, void *v_pool, int nthreads,
                              int kv_half) {
    rope_job j = {qkv, ld, T, H, Hkv, D, cos_, sin_, loc, k_pool, v_pool, kv_half};
    rl_parallel(rope_store_tokens, &j, (T + ROPE_TOKENS_PER_ITEM - 1) / ROPE_TOKENS_PER_ITEM, nthreads);
}

void rl_rope_store_kv(float *qkv, int64_t ld, int64_t T, int H, int Hkv, int D, const float *cos_,
                      const float *sin_, const int64_t *loc, void *k_pool, void *v_pool, int kv_half) {
    rl_rope_store_kv_threads(qkv, ld, T, H, Hkv, D, cos_, sin_, loc, k_pool, v_pool, 1, kv_half);
}
