/* The online softmax of attention over chunks of ATTN_CHUNK keys read in place from the paged pools:
 * scores (register tiles over a transposed chunk, or keys read in place), the running max and sum,
 * and P.V into each row's accumulator. Used by attention.c's decode and cascade tasks.
 *
 * Compiled twice: here for float32 pools (rl_attend_keys_f32), and by softmax_chunks_f16.c with
 * RL_KV_HALF for float16 pools (rl_attend_keys_f16), whose K/V rows are widened to float32 as they are
 * loaded (F16C's vcvtph2ps, 8 lanes); every product, sum and the softmax state stay float32. */
#include "softmax_chunks.h"

#include "exp2.h"

#include "kernels.h"

#include <math.h>
#include <string.h>

#ifdef RL_KV_HALF
typedef uint16_t kv_t;  /* IEEE binary16 bits */
#define KV_LOAD8(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define KV_ONE(x) _cvtsh_ss(x)
#define KV_NAME(name) name##_f16
#else
typedef float kv_t;
#define KV_LOAD8(p) _mm256_loadu_ps(p)
#define KV_ONE(x) (x)
#define KV_NAME(name) name##_f32
#endif

#define PREFETCH 8  /* keys ahead: a context's slots are scattered over the pool (random DRAM rows) */

static inline void prefetch_row(const kv_t *row, int64_t n) {  /* n elements, a cache line at a time */
    for (int64_t d = 0; d < n; d += 64 / (int64_t)sizeof(kv_t)) _mm_prefetch((const char *)(row + d), _MM_HINT_T0);
}

/* Scores are kept in log2 units (the softmax scale times log2(e)), so a softmax weight is 2^(s - max)
 * (rl_exp2_8, exp2.h: a sixth of a prefix chunk's work). */

/* s[0..n) = 2^(s - mx) in place; returns their sum. */
static float exp_sub_sum(float *s, int n, float mx) {
    __m256 m8 = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
    int t = 0;
    for (; t + 8 <= n; t += 8) {
        __m256 e = rl_exp2_8(_mm256_sub_ps(_mm256_loadu_ps(s + t), m8));
        _mm256_storeu_ps(s + t, e);
        acc = _mm256_add_ps(acc, e);
    }
    float sum = rl_hsum(acc);
    for (; t < n; t++) {
        s[t] = exp2f(s[t] - mx);
        sum += s[t];
    }
    return sum;
}

/* o[0..D) = o * corr + sum_t p[t] v_t over the chunk's V rows, 64 lanes of o in registers at a time;
 * `ahead` (or NULL): prefetch `span` floats of the slot PREFETCH keys on from there. */
static void accumulate_v(float *o, float corr, const float *p, int cn, const kv_t *v_base, int64_t stride,
                         const int64_t *slots, int D, const kv_t *ahead, int64_t span) {
    __m256 cv = _mm256_set1_ps(corr);
    int d0 = 0;
    for (; d0 + 64 <= D; d0 += 64) {
        __m256 a[8];
        for (int i = 0; i < 8; i++) a[i] = _mm256_mul_ps(_mm256_loadu_ps(o + d0 + 8 * i), cv);
        for (int t = 0; t < cn; t++) {
            const kv_t *v = v_base + slots[t] * stride + d0;
            if (ahead && d0 == 0 && t + PREFETCH < cn) prefetch_row(ahead + slots[t + PREFETCH] * stride, span);
            __m256 pt = _mm256_set1_ps(p[t]);
            for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(pt, KV_LOAD8(v + 8 * i), a[i]);
        }
        for (int i = 0; i < 8; i++) _mm256_storeu_ps(o + d0 + 8 * i, a[i]);
    }
    for (; d0 < D; d0 += 8) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(o + d0), cv);
        for (int t = 0; t < cn; t++)
            a = _mm256_fmadd_ps(_mm256_set1_ps(p[t]), KV_LOAD8(v_base + slots[t] * stride + d0), a);
        _mm256_storeu_ps(o + d0, a);
    }
}

/* The 8 x 8 block r[0..8) (row i = 8 lanes) transposed in place. */
static inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* kt[d * ATTN_CHUNK + t] = key t's lane d (one head's rows at `off`), zero past `cn`: a query then
 * scores 8 keys per FMA, with no horizontal sum per (query, key). 8 keys x 8 lanes per register
 * transpose (D is a multiple of 8), the scalar loop for the last cn % 8 keys. */
static void transpose_chunk(float *kt, const kv_t *k_pool, int64_t stride, int64_t off, const int64_t *slots,
                            int cn, int64_t next, int D) {
    int t = 0;
    for (; t + 8 <= cn; t += 8) {
        const kv_t *k[8];
        for (int i = 0; i < 8; i++) {
            k[i] = k_pool + slots[t + i] * stride + off;
            if (t + i + PREFETCH < next) prefetch_row(k_pool + slots[t + i + PREFETCH] * stride + off, D);
        }
        for (int d = 0; d < D; d += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = KV_LOAD8(k[i] + d);
            transpose8(r);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(kt + (int64_t)(d + i) * ATTN_CHUNK + t, r[i]);
        }
    }
    for (; t < cn; t++) {
        const kv_t *k = k_pool + slots[t] * stride + off;
        for (int d = 0; d < D; d++) kt[d * ATTN_CHUNK + t] = KV_ONE(k[d]);
    }
    for (int d = 0; d < D; d++)
        for (t = cn; t < ATTN_CHUNK; t++) kt[d * ATTN_CHUNK + t] = 0.0f;
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

/* o[r] = o[r] * corr[r] + sum_t p[r][t] v_t for rows [r0, r0 + RB) over one chunk's V rows (every row
 * reads the same head at `v_base`); per (row, lane) the sum runs over t in order, as in accumulate_v. */
static inline __attribute__((always_inline)) void accumulate_tile(float *acc, const float *corr, const float *p,
                                                                  int r0, const int RB, int cn,
                                                                  const kv_t *v_base, int64_t stride,
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
            const kv_t *v = v_base + slots[t] * stride + j;
            __m256 v0 = KV_LOAD8(v), v1 = KV_LOAD8(v + 8);
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

/* Rows [r0, r0 + RB) over one transposed chunk, start to end: scores, the online-softmax update, then
 * P.V. The rows' scores and accumulators stay in L1 between the three, where scoring every row of the
 * chunk first would push them out to L2 and read them back twice. */
static inline __attribute__((always_inline)) void chunk_rows(const float *const *q, int r0, const int RB,
                                                             const float *kt, int cn, __m256 sc, softmax_state st,
                                                             const kv_t *v_base, int64_t stride,
                                                             const int64_t *slots, int D) {
    score_tile(q, r0, RB, kt, D, sc, st.score);
    for (int r = r0; r < r0 + RB; r++) {
        float *s = st.score + (int64_t)r * ATTN_CHUNK, mx = row_max(s, cn, st.m[r]);
        float corr = exp2f(st.m[r] - mx);  /* 2^-inf = 0 on the first chunk */
        st.l[r] = st.l[r] * corr + exp_sub_sum(s, cn, mx);
        st.m[r] = mx;
        st.corr[r] = corr;
    }
    if (D % 16 == 0) {
        accumulate_tile(st.acc, st.corr, st.score, r0, RB, cn, v_base, stride, slots, D);
        return;
    }
    for (int r = r0; r < r0 + RB; r++)  /* the tile spans 16 lanes; head dims of 8 * odd go row by row */
        accumulate_v(st.acc + (int64_t)r * D, st.corr[r], st.score + (int64_t)r * ATTN_CHUNK, cn, v_base, stride,
                     slots, D, NULL, 0);
}

/* Every row of `st` over one transposed chunk, TILE_ROWS rows at a time. */
static void chunk_all_rows(const float *const *q, int nq, const float *kt, int cn, float scale, softmax_state st,
                           const kv_t *v_base, int64_t stride, const int64_t *slots, int D) {
    __m256 sc = _mm256_set1_ps(scale);
    int r = 0;
    for (; r + TILE_ROWS <= nq; r += TILE_ROWS) chunk_rows(q, r, TILE_ROWS, kt, cn, sc, st, v_base, stride, slots, D);
    switch (nq - r) {  /* the last rows as one tile of a constant height */
    case 5: chunk_rows(q, r, 5, kt, cn, sc, st, v_base, stride, slots, D); break;
    case 4: chunk_rows(q, r, 4, kt, cn, sc, st, v_base, stride, slots, D); break;
    case 3: chunk_rows(q, r, 3, kt, cn, sc, st, v_base, stride, slots, D); break;
    case 2: chunk_rows(q, r, 2, kt, cn, sc, st, v_base, stride, slots, D); break;
    case 1: chunk_rows(q, r, 1, kt, cn, sc, st, v_base, stride, slots, D); break;
    default: break;
    }
}

/* score[r * CHUNK + t] = scale * q[r] . key (c0 + t) for t < cn, keys read in place (rows of any heads):
 * four keys at a time, so four independent FMA chains run per row (one chain is latency-bound). Each
 * (row, key) sum runs over d in 8-lane steps, then across the lanes, whether or not it is in a group. */
static void score_keys(const float *const *q, const int64_t *off, int nq, const kv_t *k_pool, int64_t stride,
                       int64_t span, const int64_t *slots, int64_t c0, int cn, int64_t n, int D, float scale,
                       float *score) {
    int t = 0;
    for (; t + 4 <= cn; t += 4) {
        const kv_t *k[4];
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
                a0 = _mm256_fmadd_ps(qv, KV_LOAD8(k[0] + o + d), a0);
                a1 = _mm256_fmadd_ps(qv, KV_LOAD8(k[1] + o + d), a1);
                a2 = _mm256_fmadd_ps(qv, KV_LOAD8(k[2] + o + d), a2);
                a3 = _mm256_fmadd_ps(qv, KV_LOAD8(k[3] + o + d), a3);
            }
            float *row = score + r * ATTN_CHUNK + t;
            row[0] = rl_hsum(a0) * scale;
            row[1] = rl_hsum(a1) * scale;
            row[2] = rl_hsum(a2) * scale;
            row[3] = rl_hsum(a3) * scale;
        }
    }
    for (; t < cn; t++) {
        const kv_t *k = k_pool + slots[c0 + t] * stride;
        if (c0 + t + PREFETCH < n) prefetch_row(k_pool + slots[c0 + t + PREFETCH] * stride + off[0], span);
        for (int r = 0; r < nq; r++) {
            __m256 a = _mm256_setzero_ps();
            for (int d = 0; d < D; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + d), KV_LOAD8(k + off[r] + d), a);
            score[r * ATTN_CHUNK + t] = rl_hsum(a) * scale;
        }
    }
}

/* softmax_chunks.h: rl_attend_keys_f32, or rl_attend_keys_f16 (RL_KV_HALF) */
void KV_NAME(rl_attend_keys)(const float *const *q, const int64_t *off, int nq, const void *k_pool_,
                             const void *v_pool_, int64_t stride, int64_t span, const int64_t *slots, int64_t n,
                             int D, float scale, softmax_state st, float *kt) {
    const kv_t *k_pool = k_pool_, *v_pool = v_pool_;
    for (int64_t c0 = 0; c0 < n; c0 += ATTN_CHUNK) {
        int cn = n - c0 < ATTN_CHUNK ? (int)(n - c0) : ATTN_CHUNK;
        if (kt) {
            transpose_chunk(kt, k_pool, stride, off[0], slots + c0, cn, n - c0, D);
            chunk_all_rows(q, nq, kt, cn, scale, st, v_pool + off[0], stride, slots + c0, D);
            continue;
        }
        score_keys(q, off, nq, k_pool, stride, span, slots, c0, cn, n, D, scale, st.score);
        for (int t = 0; t < cn && t < PREFETCH; t++) prefetch_row(v_pool + slots[c0 + t] * stride + off[0], span);
        for (int r = 0; r < nq; r++) {
            float *s = st.score + r * ATTN_CHUNK, mx = row_max(s, cn, st.m[r]);
            float corr = exp2f(st.m[r] - mx);  /* 2^-inf = 0 on the first chunk */
            st.l[r] = st.l[r] * corr + exp_sub_sum(s, cn, mx);
            st.m[r] = mx;
            accumulate_v(st.acc + (int64_t)r * D, corr, s, cn, v_pool + off[r], stride, slots + c0, D,
                         r == 0 ? v_pool + off[0] : NULL, span);
        }
    }
}

#ifndef RL_KV_HALF  /* what follows reads no pool: compiled once */
void rl_finish_row(const softmax_state *st, int r, int D, float *out) {
    float inv = st->l[r] > 0.0f ? 1.0f / st->l[r] : 0.0f;  /* no keys: zeros */
    for (int d = 0; d < D; d++) out[d] = st->acc[(int64_t)r * D + d] * inv;
}

/* The state of `rows` rows laid out in STATE_FLOATS(rows, D) floats at buf: rows x (acc D + m + l +
 * score CHUNK + corr); rows [r0, r0 + n) of it, reset (acc 0, m = -inf, l = 0). */
softmax_state rl_state_rows(float *buf, int rows, int D, int r0, int n) {
    softmax_state st = {buf + (int64_t)r0 * D, buf + (int64_t)rows * D + r0, buf + (int64_t)rows * (D + 1) + r0,
                        buf + (int64_t)rows * (D + 2) + (int64_t)r0 * ATTN_CHUNK,
                        buf + (int64_t)rows * (D + 2 + ATTN_CHUNK) + r0};
    memset(st.acc, 0, sizeof(float) * (size_t)n * D);
    for (int r = 0; r < n; r++) {
        st.m[r] = -INFINITY;
        st.l[r] = 0.0f;
    }
    return st;
}

softmax_state rl_new_state(float *buf, int rows, int D) { return rl_state_rows(buf, rows, D, 0, rows); }
#endif
