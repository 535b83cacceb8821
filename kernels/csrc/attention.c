/* Decode attention straight from the paged KV pools: no gather copy, no padding.
 *
 * Online softmax over chunks of ATTN_CHUNK keys: each chunk's K rows stay in L1 while every query
 * row of the task scores them. A task is one (request, KV head) with its G query heads, or, when
 * the batch shares a prefix of `shared` slots (a radix-cache prefix), a cascade in two phases:
 * (1) one KV head and up to CASCADE_PIECE_ROWS of the batch's query rows over the prefix, whose K/V
 * are then read once per piece instead of once per request; (2) each request, all its heads at once,
 * continues that softmax state over its own suffix (whole pool rows per slot). With at least
 * CASCADE_TRANSPOSE_ROWS query rows, each prefix chunk is transposed once ([D, CHUNK]) and every row
 * scores 8 keys per FMA with no horizontal sum per (row, key); scores, softmax and P.V then run per
 * register tile of TILE_ROWS rows, so a loaded K or V vector feeds TILE_ROWS FMAs.
 * `rl_cascade_attention` runs the same two phases for the rows of an extend (each query's own keys
 * end at itself: causal). The pools hold float32 or float16 (kv_half): softmax_chunks.c's two builds. */
#include "kernels.h"
#include "pool.h"
#include "softmax_chunks.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const float *q;
    const void *k_pool, *v_pool;   /* float32, or float16 (attend: rl_attend_keys_f16) */
    rl_attend_fn attend;
    const int64_t *indptr, *indices;
    int64_t ldq, shared;
    int bs, H, Hkv, D, heads_per_task;
    float scale;
    float *out;
    const int64_t *prefix;         /* a cascade's shared slots (`shared` of them) */
    const int64_t *starts, *ends;  /* a cascade's rows: own keys indices[starts[b], ends[b]); NULL: from indptr */
    float *state;  /* a cascade's phase-1 softmax state, one block per KV head */
    int piece_rows;  /* phase 1: query rows per task */
} attn_job;

#define CASCADE_PIECE_ROWS 192  /* phase-1 rows per task: their state (~100 KB at D 64) stays in L2 */
#define MAX_TASK_ROWS 32  /* query rows of one (request, KV heads) task: its state lives on the stack */

/* One request and `heads_per_task` of its KV heads (all of them when the batch is big enough: a slot's
 * heads are adjacent in the pool, so they are read as one row), over its whole context. */
static void attend_request(void *ctx, int64_t task) {
    const attn_job *j = ctx;
    int G = j->H / j->Hkv, tasks_per_req = j->Hkv / j->heads_per_task;
    int b = (int)(task / tasks_per_req), h0 = (int)(task % tasks_per_req) * j->heads_per_task;
    int rows = j->heads_per_task * G;
    float buf[STATE_FLOATS(MAX_TASK_ROWS, 256)];  /* D <= 256: checked by the caller */
    softmax_state st = rl_new_state(buf, rows, j->D);
    const float *q[MAX_TASK_ROWS];
    int64_t off[MAX_TASK_ROWS];
    for (int r = 0; r < rows; r++) {
        q[r] = j->q + b * j->ldq + (int64_t)(h0 * G + r) * j->D;
        off[r] = (int64_t)(h0 + r / G) * j->D;
    }
    j->attend(q, off, rows, j->k_pool, j->v_pool, (int64_t)j->Hkv * j->D, (int64_t)j->heads_per_task * j->D,
                   j->indices + j->indptr[b], j->indptr[b + 1] - j->indptr[b], j->D, j->scale, st, NULL);
    for (int r = 0; r < rows; r++) rl_finish_row(&st, r, j->D, j->out + ((int64_t)b * j->H + h0 * G + r) * j->D);
}

/* Phase 1 of a cascade: one KV head and a piece of `piece_rows` of its query rows (rows b * G + g of the
 * batch) over the shared prefix, read once for the piece. The state is left in `state` (one block of
 * STATE_FLOATS(bs * G, D) per KV head). A piece's state stays in L2 while every prefix chunk passes
 * through it; all rows of a long extend at once would stream their state from DRAM once per chunk. */
static void cascade_prefix(void *ctx, int64_t task) {
    const attn_job *j = ctx;
    int G = j->H / j->Hkv, rows = j->bs * G, pieces = (rows + j->piece_rows - 1) / j->piece_rows;
    int kvh = (int)(task / pieces), r0 = (int)(task % pieces) * j->piece_rows;
    int nr = rows - r0 < j->piece_rows ? rows - r0 : j->piece_rows;
    float *kt = nr >= CASCADE_TRANSPOSE_ROWS ? malloc(sizeof(float) * (size_t)j->D * ATTN_CHUNK) : NULL;
    const float **q = malloc(sizeof(float *) * (size_t)nr);
    int64_t *off = malloc(sizeof(int64_t) * (size_t)nr);
    if (!q || !off || (nr >= CASCADE_TRANSPOSE_ROWS && !kt)) abort();
    softmax_state st = rl_state_rows(j->state + kvh * STATE_FLOATS(rows, j->D), rows, j->D, r0, nr);
    for (int r = 0; r < nr; r++) {
        q[r] = j->q + ((r0 + r) / G) * j->ldq + (kvh * G + (r0 + r) % G) * j->D;
        off[r] = kvh * j->D;
    }
    j->attend(q, off, nr, j->k_pool, j->v_pool, (int64_t)j->Hkv * j->D, j->D, j->prefix, j->shared, j->D,
                   j->scale, st, kt);
    free(off);
    free(q);
    free(kt);
}

/* Phase 2 of a cascade: one request and `heads_per_task` of its KV heads continue phase 1's state over
 * the request's own suffix. A task reads its suffix slots as whole rows (every head it covers at once),
 * where one task per KV head would read each slot's row in pieces, one DRAM miss per piece. */
static void cascade_suffix(void *ctx, int64_t task) {
    const attn_job *j = ctx;
    int G = j->H / j->Hkv, tasks_per_req = j->Hkv / j->heads_per_task;
    int b = (int)(task / tasks_per_req), h0 = (int)(task % tasks_per_req) * j->heads_per_task;
    int rows = j->heads_per_task * G, D = j->D;
    int64_t head_block = STATE_FLOATS(j->bs * G, D);
    float buf[STATE_FLOATS(MAX_TASK_ROWS, 256)];  /* D <= 256: checked by the caller */
    softmax_state st = rl_new_state(buf, rows, D);
    const float *q[MAX_TASK_ROWS];
    int64_t off[MAX_TASK_ROWS];
    for (int r = 0; r < rows; r++) {
        int kvh = h0 + r / G, hr = b * G + r % G;  /* the row in its head's phase-1 state */
        const float *hs = j->state + kvh * head_block;
        memcpy(st.acc + (int64_t)r * D, hs + (int64_t)hr * D, sizeof(float) * (size_t)D);
        st.m[r] = hs[(int64_t)j->bs * G * D + hr];
        st.l[r] = hs[(int64_t)j->bs * G * (D + 1) + hr];
        q[r] = j->q + b * j->ldq + (int64_t)(h0 * G + r) * D;
        off[r] = (int64_t)kvh * D;
    }
    int64_t start = j->starts ? j->starts[b] : j->indptr[b] + j->shared, end = j->ends ? j->ends[b] : j->indptr[b + 1];
    j->attend(q, off, rows, j->k_pool, j->v_pool, (int64_t)j->Hkv * D, (int64_t)j->heads_per_task * D,
                   j->indices + start, end - start, D, j->scale, st, NULL);
    for (int r = 0; r < rows; r++) rl_finish_row(&st, r, D, j->out + ((int64_t)b * j->H + h0 * G + r) * D);
}

/* KV heads per (request, heads) task: whole requests when there are enough of them to share out;
 * else halve the heads per task while it fits. */
static int heads_per_task(int bs, int H, int Hkv, int nthreads) {
    int G = H / Hkv;
    for (int hpt = Hkv; hpt >= 1; hpt /= 2)
        if (Hkv % hpt == 0 && hpt * G <= MAX_TASK_ROWS && (bs >= 2 * nthreads || hpt == 1)) return hpt;
    return 1;
}

/* Both phases of a cascade over the job's rows (bs of them, H heads each). */
static void run_cascade(attn_job *j, int nthreads) {
    int rows = j->bs * (j->H / j->Hkv);
    int pieces = (rows + CASCADE_PIECE_ROWS - 1) / CASCADE_PIECE_ROWS;
    j->piece_rows = (rows + pieces - 1) / pieces;  /* pieces of equal size, at most CASCADE_PIECE_ROWS */
    j->state = malloc(sizeof(float) * (size_t)(j->Hkv * STATE_FLOATS(rows, j->D)));
    if (!j->state) abort();
    rl_parallel(cascade_prefix, j, (int64_t)j->Hkv * ((rows + j->piece_rows - 1) / j->piece_rows), nthreads);
    rl_parallel(cascade_suffix, j, (int64_t)j->bs * (j->Hkv / j->heads_per_task), nthreads);
    free(j->state);
}

void rl_decode_attention(const float *q, int64_t ldq, const void *k_pool, const void *v_pool,
                         const int64_t *kv_indptr, const int64_t *kv_indices, int bs, int H, int Hkv, int D,
                         int64_t shared, float scale, float *out, int nthreads, int kv_half) {
    /* the scores in log2 units: softmax weights are then powers of 2 (exp2_8) */
    attn_job j = {q, k_pool, v_pool, kv_half ? rl_attend_keys_f16 : rl_attend_keys_f32, kv_indptr, kv_indices, ldq, shared, bs, H, Hkv, D, 1, scale * LOG2E, out,
                  kv_indices + kv_indptr[0], NULL, NULL, NULL, 0};
    j.heads_per_task = heads_per_task(bs, H, Hkv, nthreads);
    if (shared > 0 && bs > 1) {
        run_cascade(&j, nthreads);
        return;
    }
    rl_parallel(attend_request, &j, (int64_t)bs * (Hkv / j.heads_per_task), nthreads);
}

void rl_cascade_attention(const float *q, int64_t ldq, const void *k_pool, const void *v_pool,
                          const int64_t *prefix, int64_t shared, const int64_t *starts, const int64_t *ends,
                          const int64_t *indices, int rows, int H, int Hkv, int D, float scale, float *out,
                          int nthreads, int kv_half) {
    attn_job j = {q, k_pool, v_pool, kv_half ? rl_attend_keys_f16 : rl_attend_keys_f32, NULL, indices, ldq, shared, rows, H, Hkv, D, 1, scale * LOG2E, out,
                  prefix, starts, ends, NULL, 0};
    j.heads_per_task = heads_per_task(rows, H, Hkv, nthreads);
    run_cascade(&j, nthreads);
}
