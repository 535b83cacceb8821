/* Int8 weights times a few float32 rows (int8 weight-only decode): gemv.c's block driver (each
 * weight row read from memory once for all rows of x, ~64 KB blocks of weight rows per work item,
 * register tiles of R weight rows x BT x rows, gemv.h) with these tiles over int8 [N, K] weights
 * and one float32 scale per output row:
 *
 *   y[m, n] = scale[n] * sum_k x[m, k] * q[n, k]  (+ bias[n]) (+ add[m, n])
 *
 * Past X16_MAX_ROWS rows, per 8 weights: sign-extend to int32 (vpmovsxbd), convert to float (exact:
 * |q| <= 127), one FMA per x row; the scale once per output. So the sums are float32 in 8 lanes, as
 * gemv.c's, and agree with F.linear(x, q.float()) * scale to float32 rounding. At 1-8 rows that
 * conversion, not the FMAs, bounds the compute, so there the activations are quantized per row to
 * int16 (X16 below: faster, least at 1 row, where the weight stream's memory parallelism also
 * counts; relative error ~1e-5 of the row's largest |x| per activation, far below the int8 weights' own). The tile loops
 * prefetch the next tile's rows. */
#include "gemv.h"
#include "kernels.h"

#include <math.h>
#include <stdlib.h>

#define MAX_R RL_MAX_TILE
#define MAX_BT RL_MAX_TILE

static inline __m256 load8_i8(const int8_t *p) {  /* 8 int8 -> 8 float32 */
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* acc[r][b] += q[r][k..k+8) * x_b[0..8): each weight vector used at once (R * BT accumulators + 1 register) */
static inline __attribute__((always_inline)) void fma_step(const float *x, int64_t ldx, const int8_t *const *w,
                                                           int64_t k, const int R, const int BT,
                                                           __m256 acc[MAX_R][MAX_BT]) {
    for (int r = 0; r < R; r++) {
        __m256 wv = load8_i8(w[r] + k);
        for (int b = 0; b < BT; b++) acc[r][b] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + b * ldx), acc[r][b]);
    }
}

/* res[b * R + r] = dot(x + b * ldx, q[r]) over K (unscaled), for R weight rows and BT x rows. Rows are
 * K apart in memory (a tile's rows are consecutive), so the next tile's rows start R * K further on:
 * prefetching them (software, one line per row per 64 features) is faster at 1 row from DRAM.
 * (gate/up tiles interleave gate and up rows: there it fetches two tiles ahead.) */
static inline __attribute__((always_inline)) void dot_tile_i8(const float *x, int64_t ldx, const int8_t *const *w,
                                                              int64_t K, const int R, const int BT, float *res) {
    __m256 acc[MAX_R][MAX_BT];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) acc[r][b] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 64 <= K; k += 64) {  /* a cache line of each row, and the same line of the next tile's rows */
        for (int r = 0; r < R; r++) _mm_prefetch((const char *)(w[r] + R * K + k), _MM_HINT_T0);
        for (int64_t kk = k; kk < k + 64; kk += 8) fma_step(x + kk, ldx, w, kk, R, BT, acc);
    }
    for (; k + 8 <= K; k += 8) fma_step(x + k, ldx, w, k, R, BT, acc);
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) {
            float s = rl_hsum(acc[r][b]);
            for (int64_t kk = k; kk < K; kk++) s += (float)w[r][kk] * x[b * ldx + kk];
            res[b * R + r] = s;
        }
}

/* The tiles (R weight rows, BT x rows) of both int8 kinds, and their table: at 1 x row, 2-row tiles
 * (1 gate + 1 up row for gate/up): fewer concurrent row streams are faster from DRAM than 4- or
 * 8-row tiles; else 8-12 accumulators. */
#define INT8_TILES(T) T(1, 1) T(2, 1) T(1, 2) T(2, 2) T(4, 2) T(1, 3) T(2, 3) T(4, 3) T(1, 4) T(2, 4) T(3, 4)
#define INT8_KIND(p) {                                                                                   \
    .tiles = {{0}, {0, p##1_1, p##1_2, p##1_3, p##1_4}, {0, p##2_1, p##2_2, p##2_3, p##2_4},               \
              {0, 0, 0, 0, p##3_4}, {0, 0, p##4_2, p##4_3, 0}},                                            \
    .esize = 1, .block_multiple = 24, .rows_at_1 = 2, .rows_at_4 = 3, .gate_up_at_1 = 1}

#define TILE(R, BT) \
    static void tile_##R##_##BT(const float *x, int64_t ldx, const void *const *w, int64_t K, float *res) { \
        dot_tile_i8(x, ldx, (const int8_t *const *)w, K, R, BT, res); \
    }
INT8_TILES(TILE)
static const rl_gemv_kind INT8 = INT8_KIND(tile_);

/* Activations as int16 (X16), for a few x rows: at 1-8 rows the int8 -> float conversion above, not
 * the FMAs, bounds the compute; with x quantized per row to int16 (symmetric, one float32 scale per
 * row, relative error <= 0.5 / qmax of the row's largest |x|: ~1.5e-5) 16 weights sign-extend to int16
 * in one op and `vpmaddwd` multiplies and pair-adds them with 16 activations into int32 lanes, exactly.
 * The quantized rows use x's own layout (row b at x + b * K floats: its K int16 values zero-padded to
 * a multiple of 16, its scale in the row's last float), so gemv.c's driver walks them unchanged. */
#define X16_MIN_K 32   /* room for the padded int16 row and its scale in K floats */
#define X16_MAX_ROWS 8

static inline int64_t k16(int64_t K) { return (K + 15) / 16 * 16; }

/* |x q| bound such that no int32 lane overflows: a lane sums K16 / 16 pairs of 127 * qmax products. */
static int x16_qmax(int64_t K) {
    int64_t bound = (int64_t)2147483647 / (254 * (k16(K) / 16));
    return bound < 32767 ? (int)bound : 32767;
}

/* xq rows (x16 layout above) from x [M, K] float32. */
static void quantize_x16(const float *x, int M, int64_t K, float *xq) {
    int qmax = x16_qmax(K);
    for (int b = 0; b < M; b++) {
        const float *xr = x + (int64_t)b * K;
        int16_t *q = (int16_t *)(xq + (int64_t)b * K);
        float amax = 0.0f;
        for (int64_t k = 0; k < K; k++) amax = fabsf(xr[k]) > amax ? fabsf(xr[k]) : amax;
        float scale = amax / qmax, inv = amax > 0.0f ? qmax / amax : 0.0f;
        __m256 iv = _mm256_set1_ps(inv);
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
            __m256i lo = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xr + k), iv));
            __m256i hi = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xr + k + 8), iv));
            /* packs works per 128-bit lane: [lo0-3 hi0-3 lo4-7 hi4-7] -> in order */
            __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
            _mm256_storeu_si256((__m256i *)(q + k), p);
        }
        for (; k < K; k++) q[k] = (int16_t)lrintf(xr[k] * inv);
        for (; k < k16(K); k++) q[k] = 0;
        xq[(int64_t)b * K + K - 1] = scale;
    }
}

static inline float hsum_i32(__m256i v) { return rl_hsum(_mm256_cvtepi32_ps(v)); }

/* res[b * R + r] = scale_b * sum_k xq_b[k] * q[r][k] for R weight rows and BT x16 rows. */
static inline __attribute__((always_inline)) void dot_tile_x16(const float *x, int64_t ldx, const int8_t *const *w,
                                                               int64_t K, const int R, const int BT, float *res) {
    __m256i acc[MAX_R][MAX_BT];
    const int16_t *xb[MAX_BT];
    for (int b = 0; b < BT; b++) xb[b] = (const int16_t *)(x + b * ldx);
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) acc[r][b] = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 64 <= K; k += 64) {  /* a cache line of each row, and the same line of the next tile's rows */
        for (int r = 0; r < R; r++) _mm_prefetch((const char *)(w[r] + R * K + k), _MM_HINT_T0);
        for (int64_t kk = k; kk < k + 64; kk += 16)
            for (int r = 0; r < R; r++) {
                __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w[r] + kk)));
                for (int b = 0; b < BT; b++)
                    acc[r][b] = _mm256_add_epi32(acc[r][b], _mm256_madd_epi16(
                        wv, _mm256_loadu_si256((const __m256i *)(xb[b] + kk))));
            }
    }
    for (; k + 16 <= K; k += 16)
        for (int r = 0; r < R; r++) {
            __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w[r] + k)));
            for (int b = 0; b < BT; b++)
                acc[r][b] = _mm256_add_epi32(acc[r][b], _mm256_madd_epi16(wv, _mm256_loadu_si256((const __m256i *)(xb[b] + k))));
        }
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) {
            int32_t tail = 0;
            for (int64_t kk = k; kk < K; kk++) tail += (int32_t)w[r][kk] * xb[b][kk];
            res[b * R + r] = (hsum_i32(acc[r][b]) + (float)tail) * x[b * ldx + K - 1];
        }
}

#define TILE_X16(R, BT) \
    static void tile16_##R##_##BT(const float *x, int64_t ldx, const void *const *w, int64_t K, float *res) { \
        dot_tile_x16(x, ldx, (const int8_t *const *)w, K, R, BT, res); \
    }
INT8_TILES(TILE_X16)
static const rl_gemv_kind INT8_X16 = INT8_KIND(tile16_);

/* The x the int8 kernels read, and their kind: x16 rows (a new buffer, freed by the caller) for a few
 * rows of a long enough K, else x itself. */
static const float *x_for(const float *x, int M, int64_t K, const rl_gemv_kind **kind, float **owned) {
    *owned = NULL;
    *kind = &INT8;
    if (M > X16_MAX_ROWS || K < X16_MIN_K) return x;
    *owned = aligned_alloc(64, ((size_t)M * (size_t)K * sizeof(float) + 63) / 64 * 64);
    if (!*owned) return x;
    quantize_x16(x, M, K, *owned);
    *kind = &INT8_X16;
    return *owned;
}

void rl_linear_i8(const float *x, int M, const int8_t *w, const float *scale, const float *bias, const float *add,
                  float *y, int64_t N, int64_t K, int nthreads) {
    const rl_gemv_kind *kind;
    float *owned;
    const float *xk = x_for(x, M, K, &kind, &owned);
    rl_gemv_linear(kind, xk, M, w, scale, bias, add, y, N, K, nthreads);
    free(owned);
}

void rl_gate_up_silu_i8(const float *x, int M, const int8_t *w, const float *scale, float *out, int64_t I, int64_t K,
                        int nthreads) {
    const rl_gemv_kind *kind;
    float *owned;
    const float *xk = x_for(x, M, K, &kind, &owned);
    rl_gemv_gate_up_silu(kind, xk, M, w, scale, out, I, K, nthreads);
    free(owned);
}
