/* The fused decode layer's projections in GGUF block weights (layer.c): a projection is up to
 * RL_BLOCK_PARTS row-wise parts, each in its own block type (a Q4_K_M file mixes Q5_0 q/k rows with
 * Q8_0 v rows), each multiplied by gguf_matmul.c's rl_gguf_linear into a scratch and scattered into
 * its columns. Rounding as the torch path (BlockLinear, then the residual add): y = add + (x W^T + b). */
#include "kernels.h"

#include <stdlib.h>

int rl_gguf_linear(const float *x, int M, const uint8_t *w, int qtype, const float *bias, float *y, int64_t N,
                   int64_t K, int isa, int nthreads);

int64_t rl_block_rows(const rl_block_proj *p) {
    int64_t n = 0;
    for (int i = 0; i < p->parts; i++) n += p->rows[i];
    return n;
}

int rl_block_linear(const rl_block_proj *p, const float *x, int T, const float *bias, const float *add, float *y,
                    int64_t K, int isa, int nthreads) {
    int64_t N = rl_block_rows(p), off = 0;
    if (p->parts == 1 && !add) return rl_gguf_linear(x, T, p->w[0], p->qtype[0], bias, y, N, K, isa, nthreads);
    float *tmp = malloc(sizeof(float) * (size_t)T * (size_t)N);
    if (!tmp) return -1;
    for (int i = 0; i < p->parts; i++) {
        int64_t n = p->rows[i];
        if (rl_gguf_linear(x, T, p->w[i], p->qtype[i], NULL, tmp, n, K, isa, nthreads) != 0) {
            free(tmp);
            return -1;
        }
        for (int t = 0; t < T; t++)
            for (int64_t c = 0; c < n; c++) {
                float v = tmp[t * n + c] + (bias ? bias[off + c] : 0.0f);
                y[t * N + off + c] = add ? add[t * N + off + c] + v : v;
            }
        off += n;
    }
    free(tmp);
    return 0;
}

int rl_block_gate_up_silu(const rl_block_proj *p, const float *x, int T, float *out, int64_t K, int isa,
                          int nthreads) {
    int64_t I = rl_block_rows(p) / 2;
    float *gu = malloc(sizeof(float) * (size_t)T * (size_t)(2 * I));
    if (!gu) return -1;
    int rc = rl_block_linear(p, x, T, NULL, NULL, gu, K, isa, nthreads);
    for (int t = 0; t < T && rc == 0; t++)
        for (int64_t i = 0; i < I; i++) out[t * I + i] = rl_silu(gu[t * 2 * I + i]) * gu[t * 2 * I + I + i];
    free(gu);
    return rc;
}
