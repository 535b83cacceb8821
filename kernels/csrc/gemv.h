/* The block driver of gemv.c, shared by its float32 weights and gemv_int8.c's int8 ones: a weight
 * kind supplies its register tiles and tiling parameters; the driver splits the weight rows into
 * ~64 KB work items and walks each with the tiles, every group of x rows in turn. */
#pragma once
#include <stdint.h>

#define RL_MAX_TILE 4

/* res[b * R + r] = dot(x + b * ldx, w[r]) over K (unscaled), for R weight rows and BT x rows. */
typedef void (*rl_tile_fn)(const float *x, int64_t ldx, const void *const *w, int64_t K, float *res);

typedef struct {
    rl_tile_fn tiles[RL_MAX_TILE + 1][RL_MAX_TILE + 1];  /* [R][BT]; NULL where a kind has no such tile */
    int esize;           /* bytes per weight */
    int block_multiple;  /* work items hold a multiple of this many rows */
    int rows_at_1;       /* plain-linear tile rows at 1 x row (else 4 at 2-3 rows) */
    int rows_at_4;       /* plain-linear tile rows at 4 x rows */
    int gate_up_at_1;    /* gate (and as many up) rows per gate/up tile at 1 x row (else 2) */
} rl_gemv_kind;

/* y[M, N] = (x[M, K] @ w[N, K]^T) (* scale[N]) (+ bias[N]) (+ add[M, N], which may alias y). */
void rl_gemv_linear(const rl_gemv_kind *kind, const float *x, int M, const void *w, const float *scale,
                    const float *bias, const float *add, float *y, int64_t N, int64_t K, int nthreads);
/* out[M, I] = silu(g) * u, g / u = (x @ w[:I]^T) / (x @ w[I:]^T) (each * its scale rows). */
void rl_gemv_gate_up_silu(const rl_gemv_kind *kind, const float *x, int M, const void *w, const float *scale,
                          float *out, int64_t I, int64_t K, int nthreads);
