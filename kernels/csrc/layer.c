/* A whole decoder layer of a decode step in one call (the Llama family: pre-norm attention, then
 * pre-norm SwiGLU MLP, residual adds fused into the o and down matmuls):
 *
 *   x = rmsnorm(h) * ln1;  qkv = x Wqkv^T (+ b);  [q, k = per-head rmsnorm (Qwen3)];  RoPE q, k;
 *   store k, v at loc;  a = attention(q, pool);  h += a Wo^T (+ b);  x = rmsnorm(h) * ln2;
 *   h += (silu(x Wg^T) * (x Wu^T)) Wd^T (+ b)
 *
 * The four projections' weights are float32, or int8 with float32 per-row scales (s_* not NULL:
 * gemv_int8.c), or GGUF block weights (blocks[p].parts > 0: layer_blocks.c), each on its own.
 * h [T, hidden] is updated in place; the KV pools hold float32 or float16 (S->kv_half), the math is float32.
 * The step's `times` (may be NULL) accumulates each phase's seconds, for the profile benchmark: RL_PHASES
 * entries in the order of rl_phase. */
#include "kernels.h"
#include "pool.h"

#include <stdlib.h>
#include <time.h>

enum rl_phase { PH_NORM, PH_QKV, PH_ROPE_STORE, PH_ATTN, PH_O, PH_GATE_UP, PH_DOWN, RL_PHASES };

typedef struct {  /* one layer's parameters: pointers into the model's tensors (biases, q/k norms may be NULL) */
    const float *ln1, *ln2;
    const void *w_qkv;  /* the w_* are float32, or int8 where their scales s_* are given */
    const float *b_qkv;
    const void *w_o;
    const float *b_o;
    const void *w_gate_up, *w_down;
    const float *b_down, *q_norm, *k_norm;
    const float *s_qkv, *s_o, *s_gate_up, *s_down;  /* int8 weights' per-row scales, or NULL (float32 weights) */
    float eps, scale;  /* RMSNorm epsilon, attention softmax scale */
    int hidden, H, Hkv, D, inter;
    int isa;                    /* gguf_matmul.c's instruction set for the block weights */
    rl_block_proj blocks[4];    /* qkv, o, gate_up, down as GGUF block weights where parts > 0 */
} rl_layer;

typedef struct {  /* one decode step's batch, the same for every layer */
    const float *cos_, *sin_;                         /* [T, D] */
    const int64_t *loc, *kv_indptr, *kv_indices;      /* [T], [T + 1], [total_kv] */
    double *times;                                    /* RL_PHASES seconds accumulated, or NULL */
    int64_t shared;                                   /* leading slots every request shares */
    int T, nthreads;
    int kv_half;                                      /* the pools hold float16 (else float32) */
} rl_step;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void lap(double *times, enum rl_phase phase, double *t) {
    if (!times) return;
    double t1 = now();
    times[phase] += t1 - *t;
    *t = t1;
}

int rl_layer_phases(void) { return RL_PHASES; }

/* y = x w^T (+ b) (+ add) for a float32 weight, an int8 one with its scales s, or block weights bw */
static void linear(const float *x, int T, const void *w, const float *s, const rl_block_proj *bw, int isa,
                   const float *b, const float *add, float *y, int64_t N, int64_t K, int nt) {
    if (bw->parts) {
        if (rl_block_linear(bw, x, T, b, add, y, K, isa, nt) != 0) abort();
    } else if (s)
        rl_linear_i8(x, T, w, s, b, add, y, N, K, nt);
    else
        rl_linear(x, T, w, b, add, y, N, K, nt);
}

void rl_decode_layer(const rl_layer *L, const rl_step *S, float *h, void *k_pool, void *v_pool) {
    int T = S->T, nt = S->nthreads;
    int64_t q = (int64_t)L->H * L->D, kv = (int64_t)L->Hkv * L->D, ld = q + 2 * kv;
    float *x = malloc(sizeof(float) * (size_t)T * (L->hidden + ld + q + L->inter));
    if (!x) abort();
    float *qkv = x + (int64_t)T * L->hidden, *attn = qkv + T * ld, *act = attn + T * q;
    double *times = S->times, t = times ? now() : 0.0;
    rl_rmsnorm(h, NULL, L->ln1, x, T, L->hidden, L->eps);
    lap(times, PH_NORM, &t);
    linear(x, T, L->w_qkv, L->s_qkv, &L->blocks[0], L->isa, L->b_qkv, NULL, qkv, ld, L->hidden, nt);
    lap(times, PH_QKV, &t);
    if (L->q_norm)
        for (int i = 0; i < T; i++) {
            rl_rmsnorm(qkv + i * ld, NULL, L->q_norm, qkv + i * ld, L->H, L->D, L->eps);
            rl_rmsnorm(qkv + i * ld + q, NULL, L->k_norm, qkv + i * ld + q, L->Hkv, L->D, L->eps);
        }
    rl_rope_store_kv(qkv, ld, T, L->H, L->Hkv, L->D, S->cos_, S->sin_, S->loc, k_pool, v_pool, S->kv_half);
    lap(times, PH_ROPE_STORE, &t);
    rl_decode_attention(qkv, ld, k_pool, v_pool, S->kv_indptr, S->kv_indices, T, L->H, L->Hkv, L->D, S->shared,
                        L->scale, attn, nt, S->kv_half);
    lap(times, PH_ATTN, &t);
    linear(attn, T, L->w_o, L->s_o, &L->blocks[1], L->isa, L->b_o, h, h, L->hidden, q, nt);
    lap(times, PH_O, &t);
    rl_rmsnorm(h, NULL, L->ln2, x, T, L->hidden, L->eps);
    lap(times, PH_NORM, &t);
    if (L->blocks[2].parts) {
        if (rl_block_gate_up_silu(&L->blocks[2], x, T, act, L->hidden, L->isa, nt) != 0) abort();
    } else if (L->s_gate_up)
        rl_gate_up_silu_i8(x, T, L->w_gate_up, L->s_gate_up, act, L->inter, L->hidden, nt);
    else
        rl_gate_up_silu(x, T, L->w_gate_up, act, L->inter, L->hidden, nt);
    lap(times, PH_GATE_UP, &t);
    linear(act, T, L->w_down, L->s_down, &L->blocks[3], L->isa, L->b_down, h, h, L->hidden, L->inter, nt);
    lap(times, PH_DOWN, &t);
    free(x);
}

int rl_abi_version(void) { return RL_ABI_VERSION; }
