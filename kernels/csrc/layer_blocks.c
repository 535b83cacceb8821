/* The fused decode layer's projections in GGUF block weights (layer.c): a projection is up to
 * RL_BLOCK_PARTS row-wise parts, each in its own block type (a Q4_K_M file mixes Q5_0 q/k rows with
 * Q8_0 v rows), each multiplied by gguf_matmul.c's rl_gguf_linear_into straight into its columns.
 * Rounding as the torch path (BlockLinear, then the residual add): y = add + (x W^T + b). */
#include "gguf_blocks.h"
#include "kernels.h"

#include <stdlib.h>

int64_t rl_block_rows(const rl_block_proj *p) {
    int64_t n = 0;
    for (int i = 0; i < p->parts; i++) n += p->rows[i];
    return n;
}

/* Each part writes its columns of y [T, N] (and reads add's) in place, its bias slice with it. */
int rl_block_linear(const rl_block_proj *p, const float *x, int T, const float *bias, const float *add, float *y,
                    int64_t K, int isa, int nthreads) {
    int64_t N = rl_block_rows(p), off = 0;
    for (int i = 0; i < p->parts; i++) {
        if (rl_gguf_linear_into(x, T, p->w[i], p->qtype[i], bias ? bias + off : NULL, add ? add + off : NULL,
                                y + off, N, GB_EPI_STORE, p->rows[i], K, isa, nthreads) != 0)
            return -1;
        off += p->rows[i];
    }
    return 0;
}

/* Rows [row0, row0 + n) of the projection when they lie in one part: that part's bytes from row0 and
 * its type; else NULL. */
static const uint8_t *rows_in_one_part(const rl_block_proj *p, int64_t row0, int64_t n, int64_t K, int *qtype) {
    for (int i = 0; i < p->parts; row0 -= p->rows[i], i++)
        if (row0 < p->rows[i]) {
            if (row0 + n > p->rows[i]) return NULL;
            *qtype = p->qtype[i];
            return p->w[i] + row0 * gb_row_bytes(p->qtype[i], K);
        }
    return NULL;
}

/* out [T, I] = silu(x Wg^T) * (x Wu^T), the gate rows first: the gate's result goes into out, then the
 * up projection's epilogue combines them, so no [T, 2I] intermediate is made (when each half lies in
 * one part, as the loaders build them). */
int rl_block_gate_up_silu(const rl_block_proj *p, const float *x, int T, float *out, int64_t K, int isa,
                          int nthreads) {
    int64_t I = rl_block_rows(p) / 2;
    int qg = 0, qu = 0;
    const uint8_t *wg = rows_in_one_part(p, 0, I, K, &qg), *wu = rows_in_one_part(p, I, I, K, &qu);
    if (!wg || !wu) {  /* a part straddles the gate/up boundary: through a [T, 2I] scratch */
        float *gu = malloc(sizeof(float) * (size_t)T * (size_t)(2 * I));
        int rc = gu ? rl_block_linear(p, x, T, NULL, NULL, gu, K, isa, nthreads) : -1;
        for (int t = 0; t < T && rc == 0; t++)
            for (int64_t i = 0; i < I; i++) out[t * I + i] = rl_silu(gu[t * 2 * I + i]) * gu[t * 2 * I + I + i];
        free(gu);
        return rc;
    }
    if (rl_gguf_linear_into(x, T, wg, qg, NULL, NULL, out, I, GB_EPI_STORE, I, K, isa, nthreads) != 0) return -1;
    return rl_gguf_linear_into(x, T, wu, qu, NULL, NULL, out, I, GB_EPI_SILU_MUL, I, K, isa, nthreads);
}
