/* Matrix times a few rows (decode): every weight row is read from memory once for all rows of x.
 *
 * A work item is a block of ~64 KB of weight rows: read from memory by the first group of x rows,
 * it stays in L2 while the other groups pass over it. Inside a block, register tiles of R weight
 * rows x BT x rows (R * BT <= 12 accumulators of 8 lanes) stream K. Measured on the 2-core AVX2
 * machine: ~22 GB/s at 1 row (93% of the read bandwidth); at 64 rows ~75% of the float32 square
 * matmul rate, above MKL's own sgemm at that size; past ~128 rows MKL wins
 * (parallel_layers.NATIVE_MAX_ROWS). (A K-chunked variant that reads each block from memory once
 * for all groups, accumulators spilled between chunks, measured 8-18% slower at 16-64 rows.) */
#include "kernels.h"
#include "pool.h"

#include <math.h>

#define MAX_TILE 4

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

typedef void (*tile_fn)(const float *, int64_t, const float *const *, int64_t, float *);
#define TILE(R, BT) \
    static void tile_##R##_##BT(const float *x, int64_t ldx, const float *const *w, int64_t K, float *res) { \
        dot_tile(x, ldx, w, K, R, BT, res); \
    }
TILE(1, 1) TILE(1, 2) TILE(1, 3) TILE(1, 4)
TILE(2, 1) TILE(2, 2) TILE(2, 3) TILE(2, 4)
TILE(3, 4) TILE(4, 1) TILE(4, 2) TILE(4, 3)
static const tile_fn TILES[5][5] = {  /* [R][BT] */
    {0}, {0, tile_1_1, tile_1_2, tile_1_3, tile_1_4}, {0, tile_2_1, tile_2_2, tile_2_3, tile_2_4},
    {0, 0, 0, 0, tile_3_4}, {0, tile_4_1, tile_4_2, tile_4_3, 0}};

/* weight rows per tile for bt x rows: 12 accumulators (measured: 3 x 4 is 1.2x faster than 2 x 4 at 64 rows) */
static inline int tile_rows(int bt) { return bt <= 3 ? 4 : 3; }

static int64_t block_rows(int64_t K) {  /* ~64 KB of weights per work item, a multiple of 12 rows */
    int64_t block = 65536 / (K * 4) / 12 * 12;
    return block < 12 ? 12 : block;
}

typedef struct {
    const float *x, *w, *bias, *add;
    float *y;
    int M;
    int64_t N, K, I, block;  /* I: gate/up width (0 for a plain linear) */
} gemv_job;

/* Rows [n0, n1) of the plain linear, every group of 4 x rows in turn. */
static void linear_block(void *ctx, int64_t item) {
    const gemv_job *j = ctx;
    int64_t n0 = item * j->block, n1 = n0 + j->block < j->N ? n0 + j->block : j->N;
    float res[MAX_TILE * MAX_TILE];
    for (int b0 = 0; b0 < j->M; b0 += MAX_TILE) {
        int bt = j->M - b0 < MAX_TILE ? j->M - b0 : MAX_TILE;
        for (int64_t n = n0; n < n1;) {
            int r = tile_rows(bt);
            while (n + r > n1) r = r == 3 ? 2 : r >> 1;  /* the block's tail: 2 or 1 rows */
            const float *rows[MAX_TILE];
            for (int i = 0; i < r; i++) rows[i] = j->w + (n + i) * j->K;
            TILES[r][bt](j->x + b0 * j->K, j->K, rows, j->K, res);
            for (int b = 0; b < bt; b++)
                for (int i = 0; i < r; i++) {
                    int64_t at = (int64_t)(b0 + b) * j->N + n + i;
                    float v = res[b * r + i];
                    if (j->bias) v += j->bias[n + i];
                    if (j->add) v += j->add[at];
                    j->y[at] = v;
                }
            n += r;
        }
    }
}

void rl_linear(const float *x, int M, const float *w, const float *bias, const float *add, float *y,
               int64_t N, int64_t K, int nthreads) {
    gemv_job j = {x, w, bias, add, y, M, N, K, 0, block_rows(K)};
    rl_parallel(linear_block, &j, (N + j.block - 1) / j.block, nthreads);
}

static inline float silu(float g) { return g / (1.0f + expf(-g)); }

/* Gate rows [n0, n1) and their up rows I + n: out[m, n] = silu(gate) * up. */
static void gate_up_block(void *ctx, int64_t item) {
    const gemv_job *j = ctx;
    int64_t n0 = item * j->block, n1 = n0 + j->block < j->I ? n0 + j->block : j->I;
    float res[MAX_TILE * MAX_TILE];
    for (int b0 = 0; b0 < j->M; b0 += 3) {  /* 3 x rows: tiles of 2 gate + 2 up rows, 12 accumulators */
        int bt = j->M - b0 < 3 ? j->M - b0 : 3;
        for (int64_t n = n0; n < n1;) {
            int half = n + 2 > n1 ? 1 : 2;  /* gate rows n.. and their up rows I + n.. in one tile */
            const float *rows[MAX_TILE];
            for (int i = 0; i < half; i++) {
                rows[i] = j->w + (n + i) * j->K;
                rows[half + i] = j->w + (j->I + n + i) * j->K;
            }
            TILES[2 * half][bt](j->x + b0 * j->K, j->K, rows, j->K, res);
            for (int b = 0; b < bt; b++)
                for (int i = 0; i < half; i++) {
                    const float *r = res + b * 2 * half;
                    j->y[(int64_t)(b0 + b) * j->I + n + i] = silu(r[i]) * r[half + i];
                }
            n += half;
        }
    }
}

void rl_gate_up_silu(const float *x, int M, const float *w, float *out, int64_t I, int64_t K, int nthreads) {
    gemv_job j = {x, w, 0, 0, out, M, 2 * I, K, I, block_rows(K) / 2};
    rl_parallel(gate_up_block, &j, (I + j.block - 1) / j.block, nthreads);
}
