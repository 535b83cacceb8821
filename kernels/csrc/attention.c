/* Decode attention straight from the paged KV pools: no gather copy, no padding.
 *
 * Online softmax over chunks of ATTN_CHUNK keys: each chunk's K rows stay in L1 while every query
 * row of the task scores them. A task is one (request, KV head) with its G query heads, or, when
 * the batch shares a prefix of `shared` slots (a radix-cache prefix), one KV head with every
 * request's query rows: the prefix K/V are then read once for the whole batch (cascade), and each
 * request continues the same softmax state over its own suffix. With at least CASCADE_TRANSPOSE_ROWS
 * query rows, each prefix chunk is transposed once ([D, CHUNK]) and every row scores 8 keys per FMA
 * with no horizontal sum per (row, key): batch 64 over a 1,700-token prefix (16 heads, 4 KV heads,
 * D 64) takes 12.5 ms per layer instead of 18.6. */
#include "kernels.h"
#include "pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ATTN_CHUNK 64
#define CASCADE_TRANSPOSE_ROWS 16  /* query rows from which a transposed prefix chunk pays (one copy, all rows) */

typedef struct {
    float *acc, *m, *l, *score;  /* per query row: acc [D], running max, running sum; score [rows, CHUNK] */
} softmax_state;

#define PREFETCH 8  /* keys ahead: a context's slots are scattered over the pool (random DRAM rows) */

static inline void prefetch_row(const float *row, int64_t n) {  /* n floats, a cache line at a time */
    for (int64_t d = 0; d < n; d += 16) _mm_prefetch((const char *)(row + d), _MM_HINT_T0);
}

/* exp(x) for 8 lanes (Cephes' expf: x = n ln2 + r, degree-5 polynomial in r, 2^n through the exponent
 * bits); within ~2 ulp of expf for x in [-87, 88] (decode scores are x - max <= 0). */
static inline __m256 exp8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* s[0..n) = exp(s - mx) in place; returns their sum. */
static float exp_sub_sum(float *s, int n, float mx) {
    __m256 m8 = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
    int t = 0;
    for (; t + 8 <= n; t += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), m8));
        _mm256_storeu_ps(s + t, e);
        acc = _mm256_add_ps(acc, e);
    }
    float sum = rl_hsum(acc);
    for (; t < n; t++) {
        s[t] = expf(s[t] - mx);
        sum += s[t];
    }
    return sum;
}

/* o[0..D) = o * corr + sum_t p[t] v_t over the chunk's V rows, 64 lanes of o in registers at a time;
 * `ahead` (or NULL): prefetch `span` floats of the slot PREFETCH keys on from there. */
static void accumulate_v(float *o, float corr, const float *p, int cn, const float *v_base, int64_t stride,
                         const int64_t *slots, int D, const float *ahead, int64_t span) {
    __m256 cv = _mm256_set1_ps(corr);
    int d0 = 0;
    for (; d0 + 64 <= D; d0 += 64) {
        __m256 a[8];
        for (int i = 0; i < 8; i++) a[i] = _mm256_mul_ps(_mm256_loadu_ps(o + d0 + 8 * i), cv);
        for (int t = 0; t < cn; t++) {
            const float *v = v_base + slots[t] * stride + d0;
            if (ahead && d0 == 0 && t + PREFETCH < cn) prefetch_row(ahead + slots[t + PREFETCH] * stride, span);
            __m256 pt = _mm256_set1_ps(p[t]);
            for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(pt, _mm256_loadu_ps(v + 8 * i), a[i]);
        }
        for (int i = 0; i < 8; i++) _mm256_storeu_ps(o + d0 + 8 * i, a[i]);
    }
    for (; d0 < D; d0 += 8) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(o + d0), cv);
        for (int t = 0; t < cn; t++)
            a = _mm256_fmadd_ps(_mm256_set1_ps(p[t]), _mm256_loadu_ps(v_base + slots[t] * stride + d0), a);
        _mm256_storeu_ps(o + d0, a);
    }
}

/* kt[d * ATTN_CHUNK + t] = key t's lane d (one head's rows at `off`), zero past `cn`: a query then
 * scores 8 keys per FMA, with no horizontal sum per (query, key). */
static void transpose_chunk(float *kt, const float *k_pool, int64_t stride, int64_t off, const int64_t *slots,
                            int cn, int64_t next, int D) {
    for (int t = 0; t < cn; t++) {
        const float *k = k_pool + slots[t] * stride + off;
        if (t + PREFETCH < next) prefetch_row(k_pool + slots[t + PREFETCH] * stride + off, D);
        for (int d = 0; d < D; d++) kt[d * ATTN_CHUNK + t] = k[d];
    }
    for (int d = 0; d < D; d++)
        for (int t = cn; t < ATTN_CHUNK; t++) kt[d * ATTN_CHUNK + t] = 0.0f;
}

/* score[r * CHUNK + t] = scale * q[r] . key t for the transposed chunk `kt` (8 accumulators of 8 keys). */
static void score_transposed(const float *const *q, int nq, const float *kt, int D, float scale, float *score) {
    __m256 sc = _mm256_set1_ps(scale);
    for (int r = 0; r < nq; r++) {
        __m256 a[ATTN_CHUNK / 8];
        for (int i = 0; i < ATTN_CHUNK / 8; i++) a[i] = _mm256_setzero_ps();
        for (int d = 0; d < D; d++) {
            __m256 qd = _mm256_broadcast_ss(q[r] + d);
            const float *row = kt + (int64_t)d * ATTN_CHUNK;
            for (int i = 0; i < ATTN_CHUNK / 8; i++) a[i] = _mm256_fmadd_ps(qd, _mm256_loadu_ps(row + 8 * i), a[i]);
        }
        for (int i = 0; i < ATTN_CHUNK / 8; i++) _mm256_storeu_ps(score + r * ATTN_CHUNK + 8 * i, _mm256_mul_ps(a[i], sc));
    }
}

/* Continue rows [0, nq) of `st` over the keys at `slots[0..n)`: row r is query q[r] of the KV head whose
 * rows start `off[r]` floats into a pool row (pools [slots, stride floats]); a slot's `span` floats
 * from off[0] hold every head the rows read (prefetched together). `kt` (D x CHUNK floats, or NULL):
 * every row reads one head (off[r] == off[0]) and there are enough rows to pay for transposing each
 * chunk once (the cascade prefix). */
static void attend_keys(const float *const *q, const int64_t *off, int nq, const float *k_pool, const float *v_pool,
                        int64_t stride, int64_t span, const int64_t *slots, int64_t n, int D, float scale,
                        softmax_state st, float *kt) {
    for (int64_t c0 = 0; c0 < n; c0 += ATTN_CHUNK) {
        int cn = n - c0 < ATTN_CHUNK ? (int)(n - c0) : ATTN_CHUNK;
        if (kt) {
            transpose_chunk(kt, k_pool, stride, off[0], slots + c0, cn, n - c0, D);
            score_transposed(q, nq, kt, D, scale, st.score);
        } else {
            for (int t = 0; t < cn; t++) {
                const float *k = k_pool + slots[c0 + t] * stride;
                if (c0 + t + PREFETCH < n) prefetch_row(k_pool + slots[c0 + t + PREFETCH] * stride + off[0], span);
                for (int r = 0; r < nq; r++) {
                    __m256 a = _mm256_setzero_ps();
                    for (int d = 0; d < D; d += 8)
                        a = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + d), _mm256_loadu_ps(k + off[r] + d), a);
                    st.score[r * ATTN_CHUNK + t] = rl_hsum(a) * scale;
                }
            }
        }
        for (int t = 0; t < cn && t < PREFETCH; t++) prefetch_row(v_pool + slots[c0 + t] * stride + off[0], span);
        for (int r = 0; r < nq; r++) {
            float *s = st.score + r * ATTN_CHUNK, mx = st.m[r];
            for (int t = 0; t < cn; t++) mx = s[t] > mx ? s[t] : mx;
            float corr = expf(st.m[r] - mx);  /* exp(-inf) = 0 on the first chunk */
            st.l[r] = st.l[r] * corr + exp_sub_sum(s, cn, mx);
            st.m[r] = mx;
            accumulate_v(st.acc + (int64_t)r * D, corr, s, cn, v_pool + off[r], stride, slots + c0, D,
                         r == 0 ? v_pool + off[0] : NULL, span);
        }
    }
}

static void finish_row(const softmax_state *st, int r, int D, float *out) {
    float inv = st->l[r] > 0.0f ? 1.0f / st->l[r] : 0.0f;  /* no keys: zeros */
    for (int d = 0; d < D; d++) out[d] = st->acc[(int64_t)r * D + d] * inv;
}

typedef struct {
    const float *q, *k_pool, *v_pool;
    const int64_t *indptr, *indices;
    int64_t ldq, shared;
    int bs, H, Hkv, D, heads_per_task;
    float scale;
    float *out;
} attn_job;

#define MAX_TASK_ROWS 32  /* query rows of one (request, KV heads) task: its state lives on the stack */

/* rows x (acc D + m + l + score CHUNK) floats, zeroed, m = -inf */
static softmax_state new_state(float *buf, int rows, int D) {
    softmax_state st = {buf, buf + (int64_t)rows * D, buf + (int64_t)rows * (D + 1), buf + (int64_t)rows * (D + 2)};
    memset(buf, 0, sizeof(float) * rows * (D + 2));
    for (int r = 0; r < rows; r++) st.m[r] = -INFINITY;
    return st;
}

/* One request and `heads_per_task` of its KV heads (all of them when the batch is big enough: a slot's
 * heads are adjacent in the pool, so they are read as one row), over its whole context. */
static void attend_request(void *ctx, int64_t task) {
    const attn_job *j = ctx;
    int G = j->H / j->Hkv, tasks_per_req = j->Hkv / j->heads_per_task;
    int b = (int)(task / tasks_per_req), h0 = (int)(task % tasks_per_req) * j->heads_per_task;
    int rows = j->heads_per_task * G;
    float buf[MAX_TASK_ROWS * (256 + 2 + ATTN_CHUNK)];  /* D <= 256: checked by the caller */
    softmax_state st = new_state(buf, rows, j->D);
    const float *q[MAX_TASK_ROWS];
    int64_t off[MAX_TASK_ROWS];
    for (int r = 0; r < rows; r++) {
        q[r] = j->q + b * j->ldq + (int64_t)(h0 * G + r) * j->D;
        off[r] = (int64_t)(h0 + r / G) * j->D;
    }
    attend_keys(q, off, rows, j->k_pool, j->v_pool, (int64_t)j->Hkv * j->D, (int64_t)j->heads_per_task * j->D,
                j->indices + j->indptr[b], j->indptr[b + 1] - j->indptr[b], j->D, j->scale, st, NULL);
    for (int r = 0; r < rows; r++) finish_row(&st, r, j->D, j->out + ((int64_t)b * j->H + h0 * G + r) * j->D);
}

/* One KV head for the whole batch: the shared prefix once for every query row, then each suffix. */
static void attend_cascade(void *ctx, int64_t kvh) {
    const attn_job *j = ctx;
    int G = j->H / j->Hkv, rows = j->bs * G;
    float *buf = malloc(sizeof(float) * (size_t)rows * (j->D + 2 + ATTN_CHUNK));
    float *kt = rows >= CASCADE_TRANSPOSE_ROWS ? malloc(sizeof(float) * (size_t)j->D * ATTN_CHUNK) : NULL;
    const float **q = malloc(sizeof(float *) * (size_t)rows);
    int64_t *off = malloc(sizeof(int64_t) * (size_t)rows);
    if (!buf || !q || !off || (rows >= CASCADE_TRANSPOSE_ROWS && !kt)) abort();
    softmax_state st = new_state(buf, rows, j->D);
    for (int r = 0; r < rows; r++) {
        q[r] = j->q + (r / G) * j->ldq + (kvh * G + r % G) * j->D;
        off[r] = kvh * j->D;
    }
    int64_t stride = (int64_t)j->Hkv * j->D;
    attend_keys(q, off, rows, j->k_pool, j->v_pool, stride, j->D, j->indices + j->indptr[0], j->shared, j->D,
                j->scale, st, kt);
    for (int b = 0; b < j->bs; b++) {
        softmax_state sb = {st.acc + (int64_t)b * G * j->D, st.m + b * G, st.l + b * G, st.score};
        int64_t start = j->indptr[b] + j->shared;
        attend_keys(q + b * G, off + b * G, G, j->k_pool, j->v_pool, stride, j->D, j->indices + start,
                    j->indptr[b + 1] - start, j->D, j->scale, sb, NULL);
        for (int g = 0; g < G; g++) finish_row(&st, b * G + g, j->D, j->out + ((int64_t)b * j->H + kvh * G + g) * j->D);
    }
    free(off);
    free(q);
    free(kt);
    free(buf);
}

void rl_decode_attention(const float *q, int64_t ldq, const float *k_pool, const float *v_pool,
                         const int64_t *kv_indptr, const int64_t *kv_indices, int bs, int H, int Hkv, int D,
                         int64_t shared, float scale, float *out, int nthreads) {
    attn_job j = {q, k_pool, v_pool, kv_indptr, kv_indices, ldq, shared, bs, H, Hkv, D, 1, scale, out};
    if (shared > 0 && bs > 1) {
        rl_parallel(attend_cascade, &j, Hkv, nthreads);
        return;
    }
    /* whole requests per task when there are enough of them; halve the heads per task while it fits */
    int G = H / Hkv;
    for (int hpt = Hkv; hpt >= 1; hpt /= 2)
        if (Hkv % hpt == 0 && hpt * G <= MAX_TASK_ROWS && (bs >= 2 * nthreads || hpt == 1)) {
            j.heads_per_task = hpt;
            break;
        }
    rl_parallel(attend_request, &j, (int64_t)bs * (Hkv / j.heads_per_task), nthreads);
}
