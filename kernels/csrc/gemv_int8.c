/* Int8 weights times a few float32 rows (int8 weight-only decode): gemv.c's block driver (each
 * weight row read from memory once for all rows of x, ~64 KB blocks of weight rows per work item,
 * register tiles of R weight rows x BT x rows, gemv.h) with these tiles over int8 [N, K] weights
 * and one float32 scale per output row:
 *
 *   y[m, n] = scale[n] * sum_k x[m, k] * q[n, k]  (+ bias[n]) (+ add[m, n])
 *
 * Per 8 weights: sign-extend to int32 (vpmovsxbd), convert to float (exact: |q| <= 127), one FMA
 * per x row; the scale once per output. So the sums are float32 in 8 lanes, as gemv.c's, and agree
 * with F.linear(x, q.float()) * scale to float32 rounding. (Integer dot products would need the
 * activations quantized too, which is not this format's contract: int16 activations measured
 * 1.3x faster here, at 2.7e-5 relative error instead of 5e-7.) On the 2-core Zen 1 host the
 * conversion bounds the compute (~4 weights per cycle per core) and, from DRAM, the weight
 * stream's memory parallelism: the tile loop prefetches the next tile's rows. */
#include "gemv.h"
#include "kernels.h"

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
 * prefetching them (software, one line per row per 64 features) measured 1.35x at 1 row from DRAM.
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

#define TILE(R, BT) \
    static void tile_##R##_##BT(const float *x, int64_t ldx, const void *const *w, int64_t K, float *res) { \
        dot_tile_i8(x, ldx, (const int8_t *const *)w, K, R, BT, res); \
    }
TILE(1, 1) TILE(2, 1)
TILE(1, 2) TILE(2, 2) TILE(4, 2)
TILE(1, 3) TILE(2, 3) TILE(4, 3)
TILE(1, 4) TILE(2, 4) TILE(3, 4)
/* At 1 x row, 2-row tiles (1 gate + 1 up row for gate/up): fewer concurrent row streams measured
 * faster from DRAM (1.15x 8-row tiles, 1.05x 4-row ones); else 8-12 accumulators. */
static const rl_gemv_kind INT8 = {
    .tiles = {{0}, {0, tile_1_1, tile_1_2, tile_1_3, tile_1_4}, {0, tile_2_1, tile_2_2, tile_2_3, tile_2_4},
              {0, 0, 0, 0, tile_3_4}, {0, 0, tile_4_2, tile_4_3, 0}},
    .esize = 1, .block_multiple = 24, .rows_at_1 = 2, .gate_up_at_1 = 1};

void rl_linear_i8(const float *x, int M, const int8_t *w, const float *scale, const float *bias, const float *add,
                  float *y, int64_t N, int64_t K, int nthreads) {
    rl_gemv_linear(&INT8, x, M, w, scale, bias, add, y, N, K, nthreads);
}

void rl_gate_up_silu_i8(const float *x, int M, const int8_t *w, const float *scale, float *out, int64_t I, int64_t K,
                        int nthreads) {
    rl_gemv_gate_up_silu(&INT8, x, M, w, scale, out, I, K, nthreads);
}
