/* Matrix times a few rows (decode): every weight row is read from memory once for all rows of x.
 *
 * A work item is a block of ~64 KB of weight rows: read from memory by the first group of x rows,
 * it stays in L2 while the other groups pass over it. Inside a block, register tiles of R weight
 * rows x BT x rows (R * BT <= 12 accumulators of 8 lanes) stream K. At 1 row this streams the
 * weights near the read bandwidth; up to 64 rows it beats MKL's own sgemm (with AVX-512, 16-lane
 * tiles below); past ~128 rows MKL wins (model/parallel/layers.py: NATIVE_MAX_ROWS). (A K-chunked variant that
 * reads each block from memory once for all groups, accumulators spilled between chunks, was slower.)
 * The block driver below takes its tiles from a weight kind (gemv.h): F32 here, INT8 in gemv_int8.c. */
#include "gemv.h"
#include "kernels.h"
#include "pool.h"

#include <stdlib.h>

#define MAX_TILE RL_MAX_TILE

/* res[b * R + r] = dot(x + b * ldx, w[r]) over K, for R weight rows and BT x rows (both <= 4).
 * R and BT are constants at every call site, so the loops unroll into R * BT accumulators. */
static inline __attribute__((always_inline)) void dot_tile(const float *x, int64_t ldx, const float *const *w,
                                                           int64_t K, const int R, const int BT, float *res) {
    __m256 acc[MAX_TILE][MAX_TILE];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) acc[r][b] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 wv[MAX_TILE];
        for (int r = 0; r < R; r++) wv[r] = _mm256_loadu_ps(w[r] + k);
        for (int b = 0; b < BT; b++) {
            __m256 xv = _mm256_loadu_ps(x + b * ldx + k);
            for (int r = 0; r < R; r++) acc[r][b] = _mm256_fmadd_ps(wv[r], xv, acc[r][b]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) {
            float s = rl_hsum(acc[r][b]);
            for (int64_t kk = k; kk < K; kk++) s += w[r][kk] * x[b * ldx + kk];
            res[b * R + r] = s;
        }
}

#define TILE(R, BT) \
    static void tile_##R##_##BT(const float *x, int64_t ldx, const void *const *w, int64_t K, float *res) { \
        dot_tile(x, ldx, (const float *const *)w, K, R, BT, res); \
    }
TILE(1, 1) TILE(1, 2) TILE(1, 3) TILE(1, 4)
TILE(2, 1) TILE(2, 2) TILE(2, 3) TILE(2, 4)
TILE(3, 4) TILE(4, 1) TILE(4, 2) TILE(4, 3)
/* 4 weight rows x up to 3 x rows, 3 x 4 rows: 12 accumulators (measured: 3 x 4 is 1.2x faster than
 * 2 x 4 at 64 rows); gate/up tiles: 2 gate + 2 up rows */
static const rl_gemv_kind F32 = {
    .tiles = {{0}, {0, tile_1_1, tile_1_2, tile_1_3, tile_1_4}, {0, tile_2_1, tile_2_2, tile_2_3, tile_2_4},
              {0, 0, 0, 0, tile_3_4}, {0, tile_4_1, tile_4_2, tile_4_3, 0}},
    .esize = 4, .block_multiple = 12, .rows_at_1 = 4, .rows_at_4 = 3, .gate_up_at_1 = 2};

/* The plain linear's tiles at 2+ x rows in 16 lanes where the CPU has AVX-512F (compiled for it here
 * only, chosen at run time): 32 vector registers hold a 4 x 4 tile (16 accumulators, 4 weight
 * vectors, 1 x vector), so a step at 4+ rows loads 8 vectors per 16 FMAs instead of 7 per 12.
 * They beat the 8-lane tiles at 4-64 rows and match them at 2 (memory-bound; 1 row keeps the
 * 8-lane tiles). Sums in 16 lanes are
 * another order than the 8-lane ones, so results differ from them by float32 rounding. */
#define ZTARGET RL_TARGET("avx512f")
static inline __attribute__((always_inline)) ZTARGET void dot_tile16(const float *x, int64_t ldx,
                                                                     const float *const *w, int64_t K,
                                                                     const int R, const int BT, float *res) {
    __m512 acc[MAX_TILE][MAX_TILE];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) acc[r][b] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 wv[MAX_TILE];
        for (int r = 0; r < R; r++) wv[r] = _mm512_loadu_ps(w[r] + k);
        for (int b = 0; b < BT; b++) {
            __m512 xv = _mm512_loadu_ps(x + b * ldx + k);
            for (int r = 0; r < R; r++) acc[r][b] = _mm512_fmadd_ps(wv[r], xv, acc[r][b]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) {
            float s = _mm512_reduce_add_ps(acc[r][b]);
            for (int64_t kk = k; kk < K; kk++) s += w[r][kk] * x[b * ldx + kk];
            res[b * R + r] = s;
        }
}

#define ZTILE(R, BT) \
    static ZTARGET void ztile_##R##_##BT(const float *x, int64_t ldx, const void *const *w, int64_t K, float *res) { \
        dot_tile16(x, ldx, (const float *const *)w, K, R, BT, res); \
    }
ZTILE(1, 2) ZTILE(1, 3) ZTILE(1, 4)
ZTILE(2, 2) ZTILE(2, 3) ZTILE(2, 4)
ZTILE(3, 2) ZTILE(3, 3) ZTILE(3, 4)
ZTILE(4, 2) ZTILE(4, 3) ZTILE(4, 4)
static const rl_gemv_kind F32_Z = {
    .tiles = {{0}, {0, tile_1_1, ztile_1_2, ztile_1_3, ztile_1_4}, {0, tile_2_1, ztile_2_2, ztile_2_3, ztile_2_4},
              {0, 0, ztile_3_2, ztile_3_3, ztile_3_4}, {0, tile_4_1, ztile_4_2, ztile_4_3, ztile_4_4}},
    .esize = 4, .block_multiple = 12, .rows_at_1 = 4, .rows_at_4 = 4, .gate_up_at_1 = 2};

/* F32_Z where the CPU has AVX-512F, unless RADIXLM_NATIVE_AVX512=0 (the AVX2 tiles' numerics
 * everywhere); decided once. */
static const rl_gemv_kind *f32_kind(void) {
    static const rl_gemv_kind *kind;
    if (!kind) {
        const char *env = getenv("RADIXLM_NATIVE_AVX512");
        int off = env && env[0] == '0' && env[1] == 0;
        kind = !off && RL_X86 && rl_cpu_has_avx512f() ? &F32_Z : &F32;
    }
    return kind;
}

static inline int tile_rows(const rl_gemv_kind *kind, int bt) {
    return bt == 1 ? kind->rows_at_1 : bt <= 3 ? 4 : kind->rows_at_4;
}

/* the largest tile of at most r rows the kind has that fits the rows left in a block */
static inline int fit_rows(const rl_gemv_kind *kind, int r, int64_t left, int bt) {
    while (r > left || !kind->tiles[r][bt]) r--;
    return r;
}

static int64_t block_rows(const rl_gemv_kind *kind, int64_t K) {  /* ~64 KB of weights per work item */
    int64_t m = kind->block_multiple, block = 65536 / (K * kind->esize) / m * m;
    return block < m ? m : block;
}

typedef struct {
    const rl_gemv_kind *kind;
    const float *x, *scale, *bias, *add;
    const char *w;
    float *y;
    int M;
    int64_t N, K, I, block;  /* I: gate/up width (0 for a plain linear) */
} gemv_job;

static inline const void *row(const gemv_job *j, int64_t n) { return j->w + n * j->K * j->kind->esize; }

/* Rows [n0, n1) of the plain linear, every group of 4 x rows in turn. */
static void linear_block(void *ctx, int64_t item) {
    const gemv_job *j = ctx;
    int64_t n0 = item * j->block, n1 = n0 + j->block < j->N ? n0 + j->block : j->N;
    float res[MAX_TILE * MAX_TILE];
    for (int b0 = 0; b0 < j->M; b0 += MAX_TILE) {
        int bt = j->M - b0 < MAX_TILE ? j->M - b0 : MAX_TILE;
        for (int64_t n = n0; n < n1;) {
            int r = fit_rows(j->kind, tile_rows(j->kind, bt), n1 - n, bt);  /* the block's tail: fewer */
            const void *rows[MAX_TILE];
            for (int i = 0; i < r; i++) rows[i] = row(j, n + i);
            j->kind->tiles[r][bt](j->x + b0 * j->K, j->K, rows, j->K, res);
            for (int b = 0; b < bt; b++)
                for (int i = 0; i < r; i++) {
                    int64_t at = (int64_t)(b0 + b) * j->N + n + i;
                    float v = res[b * r + i];
                    if (j->scale) v *= j->scale[n + i];
                    if (j->bias) v += j->bias[n + i];
                    if (j->add) v += j->add[at];
                    j->y[at] = v;
                }
            n += r;
        }
    }
}

void rl_gemv_linear(const rl_gemv_kind *kind, const float *x, int M, const void *w, const float *scale,
                    const float *bias, const float *add, float *y, int64_t N, int64_t K, int nthreads) {
    gemv_job j = {kind, x, scale, bias, add, w, y, M, N, K, 0, block_rows(kind, K)};
    rl_parallel(linear_block, &j, (N + j.block - 1) / j.block, nthreads);
}

void rl_linear(const float *x, int M, const float *w, const float *bias, const float *add, float *y,
               int64_t N, int64_t K, int nthreads) {
    rl_gemv_linear(f32_kind(), x, M, w, NULL, bias, add, y, N, K, nthreads);
}

/* Gate rows [n0, n1) and their up rows I + n: out[m, n] = silu(gate) * up. */
static void gate_up_block(void *ctx, int64_t item) {
    const gemv_job *j = ctx;
    int64_t n0 = item * j->block, n1 = n0 + j->block < j->I ? n0 + j->block : j->I;
    float res[MAX_TILE * MAX_TILE];
    for (int b0 = 0; b0 < j->M; b0 += 3) {  /* 3 x rows: tiles of 2 gate + 2 up rows, 12 accumulators */
        int bt = j->M - b0 < 3 ? j->M - b0 : 3;
        for (int64_t n = n0; n < n1;) {
            int half = n + 2 > n1 ? 1 : bt == 1 ? j->kind->gate_up_at_1 : 2;  /* gate rows n.. and their up rows */
            const void *rows[MAX_TILE];
            for (int i = 0; i < half; i++) {
                rows[i] = row(j, n + i);
                rows[half + i] = row(j, j->I + n + i);
            }
            j->kind->tiles[2 * half][bt](j->x + b0 * j->K, j->K, rows, j->K, res);
            for (int b = 0; b < bt; b++)
                for (int i = 0; i < half; i++) {
                    const float *r = res + b * 2 * half;
                    float gate = r[i], up = r[half + i];
                    if (j->scale) gate *= j->scale[n + i], up *= j->scale[j->I + n + i];
                    j->y[(int64_t)(b0 + b) * j->I + n + i] = rl_silu(gate) * up;
                }
            n += half;
        }
    }
}

void rl_gemv_gate_up_silu(const rl_gemv_kind *kind, const float *x, int M, const void *w, const float *scale,
                          float *out, int64_t I, int64_t K, int nthreads) {
    gemv_job j = {kind, x, scale, 0, 0, w, out, M, 2 * I, K, I, block_rows(kind, K) / 2};
    rl_parallel(gate_up_block, &j, (I + j.block - 1) / j.block, nthreads);
}

/* gate/up keeps the 8-lane tiles: the 16-lane ones (2 gate + 2 up rows x 3 or 4 x rows) were slower at
 * 16-64 rows, and a 16-lane plain linear into a scratch [M, 2I] followed by silu(gate) * up no faster
 * (the scalar SiLU pass eats the gain). */
void rl_gate_up_silu(const float *x, int M, const float *w, float *out, int64_t I, int64_t K, int nthreads) {
    rl_gemv_gate_up_silu(&F32, x, M, w, NULL, out, I, K, nthreads);
}
