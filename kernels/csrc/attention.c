/* Decode attention straight from the paged KV pools: no gather copy, no padding.
 *
 * Online softmax over chunks of ATTN_CHUNK keys: each chunk's K rows stay in L1 while every query
 * row of the task scores them. A task is one (request, KV head) with its G query heads, or, when
 * the batch shares a prefix of `shared` slots (a radix-cache prefix), one KV head with every
 * request's query rows: the prefix K/V are then read once for the whole batch (cascade), and each
 * request continues the same softmax state over its own suffix. With at least CASCADE_TRANSPOSE_ROWS
 * query rows, each prefix chunk is transposed once ([D, CHUNK]) and every row scores 8 keys per FMA
 * with no horizontal sum per (row, key): batch 64 over a 1,700-token prefix (16 heads, 4 KV heads,
 * D 64) takes 12.5 ms per layer instead of 18.6. Both products of the prefix chunk (scores, and P.V)
 * then run in register tiles of TILE_ROWS rows, so a loaded K or V vector feeds TILE_ROWS FMAs. */
#include "kernels.h"
#include "pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ATTN_CHUNK 64
#define CASCADE_TRANSPOSE_ROWS 16  /* query rows from which a transposed prefix chunk pays (one copy, all rows) */

typedef struct {
    float *acc, *m, *l, *score, *corr;  /* per query row: acc [D], running max, running sum, score [CHUNK],
                                        * the chunk's rescale of acc */
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

/* A register tile of RB query rows x 16 keys (or RB rows x 16 lanes of V): 2 * RB accumulators, and each
 * pair of loaded vectors feeds RB FMAs (one load per FMA without the tile). RB is a constant at every
 * call, so the tile lives in registers. */
#define TILE_ROWS 6

/* score[r * CHUNK + t] = scale * q[r] . key t, rows [r0, r0 + RB), for the transposed chunk `kt`.
 * Per (row, key) the sums run over d in order, as in the untiled loop. */
static inline __attribute__((always_inline)) void score_tile(const float *const *q, int r0, const int RB,
                                                             const float *kt, int D, __m256 sc, float *score) {
    for (int j = 0; j < ATTN_CHUNK; j += 16) {
        __m256 a[TILE_ROWS][2];
        for (int r = 0; r < RB; r++) a[r][0] = a[r][1] = _mm256_setzero_ps();
        for (int d = 0; d < D; d++) {
            const float *row = kt + (int64_t)d * ATTN_CHUNK + j;
            __m256 k0 = _mm256_loadu_ps(row), k1 = _mm256_loadu_ps(row + 8);
            for (int r = 0; r < RB; r++) {
                __m256 qd = _mm256_broadcast_ss(q[r0 + r] + d);
                a[r][0] = _mm256_fmadd_ps(qd, k0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(qd, k1, a[r][1]);
            }
        }
        for (int r = 0; r < RB; r++) {
            _mm256_storeu_ps(score + (int64_t)(r0 + r) * ATTN_CHUNK + j, _mm256_mul_ps(a[r][0], sc));
            _mm256_storeu_ps(score + (int64_t)(r0 + r) * ATTN_CHUNK + j + 8, _mm256_mul_ps(a[r][1], sc));
        }
    }
}

static void score_transposed(const float *const *q, int nq, const float *kt, int D, float scale, float *score) {
    __m256 sc = _mm256_set1_ps(scale);
    int r = 0;
    for (; r + TILE_ROWS <= nq; r += TILE_ROWS) score_tile(q, r, TILE_ROWS, kt, D, sc, score);
    for (; r < nq; r++) score_tile(q, r, 1, kt, D, sc, score);
}

/* o[r] = o[r] * corr[r] + sum_t p[r][t] v_t for rows [r0, r0 + RB) over one chunk's V rows (every row
 * reads the same head at `v_base`); per (row, lane) the sum runs over t in order, as in accumulate_v. */
static inline __attribute__((always_inline)) void accumulate_tile(float *acc, const float *corr, const float *p,
                                                                  int r0, const int RB, int cn,
                                                                  const float *v_base, int64_t stride,
                                                                  const int64_t *slots, int D) {
    for (int j = 0; j < D; j += 16) {
        __m256 a[TILE_ROWS][2];
        for (int r = 0; r < RB; r++) {
            __m256 cv = _mm256_set1_ps(corr[r0 + r]);
            const float *o = acc + (int64_t)(r0 + r) * D + j;
            a[r][0] = _mm256_mul_ps(_mm256_loadu_ps(o), cv);
            a[r][1] = _mm256_mul_ps(_mm256_loadu_ps(o + 8), cv);
        }
        for (int t = 0; t < cn; t++) {
            const float *v = v_base + slots[t] * stride + j;
            __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8);
            for (int r = 0; r < RB; r++) {
                __m256 pt = _mm256_broadcast_ss(p + (int64_t)(r0 + r) * ATTN_CHUNK + t);
                a[r][0] = _mm256_fmadd_ps(pt, v0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(pt, v1, a[r][1]);
            }
        }
        for (int r = 0; r < RB; r++) {
            float *o = acc + (int64_t)(r0 + r) * D + j;
            _mm256_storeu_ps(o, a[r][0]);
            _mm256_storeu_ps(o + 8, a[r][1]);
        }
    }
}

static void accumulate_rows(softmax_state st, int nq, int cn, const float *v_base, int64_t stride,
                            const int64_t *slots, int D) {
    int r = 0;
    if (D % 16) {  /* the tile spans 16 lanes; head dims of 8 * odd go row by row */
        for (; r < nq; r++)
            accumulate_v(st.acc + (int64_t)r * D, st.corr[r], st.score + (int64_t)r * ATTN_CHUNK, cn, v_base, stride,
                         slots, D, NULL, 0);
        return;
    }
    for (; r + TILE_ROWS <= nq; r += TILE_ROWS)
        accumulate_tile(st.acc, st.corr, st.score, r, TILE_ROWS, cn, v_base, stride, slots, D);
    for (; r < nq; r++) accumulate_tile(st.acc, st.corr, st.score, r, 1, cn, v_base, stride, slots, D);
}

/* The largest of s[0..n) and `mx`. */
static float row_max(const float *s, int n, float mx) {
    __m256 m8 = _mm256_set1_ps(mx);
    int t = 0;
    for (; t + 8 <= n; t += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(s + t));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    float out = _mm_cvtss_f32(h);
    for (; t < n; t++) out = s[t] > out ? s[t] : out;
    return out;
}

/* score[r * CHUNK + t] = scale * q[r] . key (c0 + t) for t < cn, keys read in place (rows of any heads):
 * four keys at a time, so four independent FMA chains run per row (one chain is latency-bound). Each
 * (row, key) sum runs over d in 8-lane steps, then across the lanes, whether or not it is in a group. */
static void score_keys(const float *const *q, const int64_t *off, int nq, const float *k_pool, int64_t stride,
                       int64_t span, const int64_t *slots, int64_t c0, int cn, int64_t n, int D, float scale,
                       float *score) {
    int t = 0;
    for (; t + 4 <= cn; t += 4) {
        const float *k[4];
        for (int u = 0; u < 4; u++) {
            k[u] = k_pool + slots[c0 + t + u] * stride;
            if (c0 + t + u + PREFETCH < n) prefetch_row(k_pool + slots[c0 + t + u + PREFETCH] * stride + off[0], span);
        }
        for (int r = 0; r < nq; r++) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            const float *qr = q[r];
            int64_t o = off[r];
            for (int d = 0; d < D; d += 8) {
                __m256 qv = _mm256_loadu_ps(qr + d);
                a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[0] + o + d), a0);
                a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[1] + o + d), a1);
                a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[2] + o + d), a2);
                a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[3] + o + d), a3);
            }
            float *row = score + r * ATTN_CHUNK + t;
            row[0] = rl_hsum(a0) * scale;
            row[1] = rl_hsum(a1) * scale;
            row[2] = rl_hsum(a2) * scale;
            row[3] = rl_hsum(a3) * scale;
        }
    }
    for (; t < cn; t++) {
        const float *k = k_pool + slots[c0 + t] * stride;
        if (c0 + t + PREFETCH < n) prefetch_row(k_pool + slots[c0 + t + PREFETCH] * stride + off[0], span);
        for (int r = 0; r < nq; r++) {
            __m256 a = _mm256_setzero_ps();
            for (int d = 0; d < D; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + d), _mm256_loadu_ps(k + off[r] + d), a);
            score[r * ATTN_CHUNK + t] = rl_hsum(a) * scale;
        }
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
            score_keys(q, off, nq, k_pool, stride, span, slots, c0, cn, n, D, scale, st.score);
        }
        for (int t = 0; t < cn && t < PREFETCH; t++) prefetch_row(v_pool + slots[c0 + t] * stride + off[0], span);
        for (int r = 0; r < nq; r++) {
            float *s = st.score + r * ATTN_CHUNK, mx = row_max(s, cn, st.m[r]);
            float corr = expf(st.m[r] - mx);  /* exp(-inf) = 0 on the first chunk */
            st.l[r] = st.l[r] * corr + exp_sub_sum(s, cn, mx);
            st.m[r] = mx;
            if (kt) {
                st.corr[r] = corr;
            } else {
                accumulate_v(st.acc + (int64_t)r * D, corr, s, cn, v_pool + off[r], stride, slots + c0, D,
                             r == 0 ? v_pool + off[0] : NULL, span);
            }
        }
        if (kt) accumulate_rows(st, nq, cn, v_pool + off[0], stride, slots + c0, D);
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

#define STATE_FLOATS(rows, D) ((int64_t)(rows) * ((D) + 3 + ATTN_CHUNK))

/* STATE_FLOATS: rows x (acc D + m + l + score CHUNK + corr) floats, zeroed, m = -inf */
static softmax_state new_state(float *buf, int rows, int D) {
    softmax_state st = {buf, buf + (int64_t)rows * D, buf + (int64_t)rows * (D + 1), buf + (int64_t)rows * (D + 2),
                        buf + (int64_t)rows * (D + 2 + ATTN_CHUNK)};
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
    float buf[STATE_FLOATS(MAX_TASK_ROWS, 256)];  /* D <= 256: checked by the caller */
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
    float *buf = malloc(sizeof(float) * (size_t)STATE_FLOATS(rows, j->D));
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
        softmax_state sb = {st.acc + (int64_t)b * G * j->D, st.m + b * G, st.l + b * G, st.score, st.corr};
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
