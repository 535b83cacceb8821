/* Decode rows of the K-quants (Q4_K, Q5_K, Q6_K) for up to 8 activation rows at a time, decoded in registers as
 * gguf_decode.c does for the 32-block types: per 32 weights one exact integer dot with the activation block.
 * AVX-512 VNNI (row_k45, row_q6k): one float FMA per 32 scaled by d * scale * dx; Q4_K / Q5_K's mins
 * (dmin * m * dx * sum xq) and Q6_K's offset (-32 d * scale * dx * sum xq per 16) gather in a scalar per row.
 * AVX2 (row_k45_i, row_q6k_i): the scale is applied in the integer dot, d once per super-block and the mins /
 * offsets as one vector FMA per super-block. */
#include "gguf_decode.h"

#include "gguf_blocks.h"
#include "gguf_simd.h"

#define INL static inline __attribute__((always_inline))
#define VNNI RL_TARGET("avx2,fma,avx512vl,avx512vnni")
#define MAXB 8  /* x rows met by each decoded weight block (1, 2, 4 or 8 per call) */
#define PREFETCH_BYTES 512
#define UNROLL _Pragma("GCC unroll 8")  /* whole: constant shifts, masks, t[] in registers */
#define PREFETCH_I 1536  /* the AVX2 rows: further ahead, one thread streams alone at decode */

INL __m256i dot(__m256i u, __m256i X) {  /* the VNNI rows' exact int32 dot, u unsigned */
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, X);
}

INL void prefetch(const uint8_t *p, const int lines) {  /* ``lines`` cache lines from p */
    for (int i = 0; i < lines; i++) _mm_prefetch((const char *)(p + 64 * i), _MM_HINT_T0);
}

/* the n-th 128 weights of the Q6_K super-block at blk as four 32-byte vectors of unsigned 6-bit values */
INL void q6k_half(const uint8_t *blk, const int n, __m256i u[4]) {
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    const uint8_t *ql = blk + 64 * n;
    __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * n));
    __m256i parts[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                        _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
    UNROLL
    for (int t = 0; t < 4; t++)
        u[t] = _mm256_or_si256(parts[t], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), m2), 4));
}

INL float hsum(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

INL void scale_min(int j, const uint8_t *q, int *sc, int *m) {  /* ggml's get_scale_min_k4 */
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* one 32-block (index blk of the row) of u with one scale per 16: acc += cvt(u . x) * (s16 * dx) */
INL void meet(__m256i u, __m256 s16, int64_t blk, const gb_xrows *x, const int BT, __m256 *acc) {
    for (int b = 0; b < BT; b++) {
        __m256i X = _mm256_loadu_si256((const __m256i *)(x->q + b * x->ldq + 32 * blk));
        __m256 dx = _mm256_broadcast_ss(x->dxe + b * x->ldh + 2 * blk);
        acc[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot(u, X)), _mm256_mul_ps(s16, dx), acc[b]);
    }
}

INL void row_k45(const uint8_t *w, int64_t K, const gb_xrows *x, float *res, const int five, const int BT) {
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    const int size = five ? 176 : 144;
    __m256 acc[MAXB];
    float mins[MAXB];
    for (int b = 0; b < BT; b++) acc[b] = _mm256_setzero_ps(), mins[b] = 0.0f;
    for (int64_t s = 0; s < K / 256; s++) {
        const uint8_t *blk = w + s * size, *qs = blk + (five ? 48 : 16);
        prefetch(blk + PREFETCH_BYTES, 3);
        float d = gb_fp16(blk), dmin = gb_fp16(blk + 2);
        __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
        for (int i = 0; i < 4; i++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * i));
            __m256i u[2] = {_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)};
            for (int h = 0; h < 2; h++) {
                int j = 2 * i + h, sc, m;
                if (five)
                    u[h] = _mm256_or_si256(u[h], _mm256_slli_epi16(
                        _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j)), one), 4));
                scale_min(j, blk + 4, &sc, &m);
                int64_t b32 = 8 * s + j;
                meet(u[h], _mm256_set1_ps(d * (float)sc), b32, x, BT, acc);
                for (int b = 0; b < BT; b++)
                    mins[b] += dmin * (float)m * x->dxe[b * x->ldh + 2 * b32] * (float)x->xs[b * x->lds + b32];
            }
        }
    }
    for (int b = 0; b < BT; b++) res[b] = hsum(acc[b]) - mins[b];
}

INL void row_q6k(const uint8_t *w, int64_t K, const gb_xrows *x, float *res, const int BT) {
    __m256 acc[MAXB];
    float offs[MAXB];
    for (int b = 0; b < BT; b++) acc[b] = _mm256_setzero_ps(), offs[b] = 0.0f;
    for (int64_t s = 0; s < K / 256; s++) {
        const uint8_t *blk = w + 210 * s;
        prefetch(blk + PREFETCH_BYTES, 4);
        float d = gb_fp16(blk + 208);
        const int8_t *sc = (const int8_t *)(blk + 192);
        for (int n = 0; n < 2; n++) {
            __m256i u[4];
            q6k_half(blk, n, u);
            for (int t = 0; t < 4; t++) {
                float sa = d * (float)sc[8 * n + 2 * t], sb = d * (float)sc[8 * n + 2 * t + 1];
                int64_t b32 = 8 * s + 4 * n + t;  /* groups 2 b32 (scale sa) and 2 b32 + 1 (sb) */
                meet(u[t], _mm256_set_m128(_mm_set1_ps(sb), _mm_set1_ps(sa)), b32, x, BT, acc);
                for (int b = 0; b < BT; b++) {
                    const float *xd = x->xd + b * x->ldh + 2 * b32;
                    offs[b] += sa * xd[0] + sb * xd[1];
                }
            }
        }
    }
    for (int b = 0; b < BT; b++) res[b] = hsum(acc[b]) - 32.0f * offs[b];
}

/* The AVX2 rows (no VNNI): each 32-block's scale is applied in the integer dot (maddubs, then madd with the
 * block's int16 scale instead of ones), so per 32 weights one cvt and one FMA by dx; d scales a super-block's
 * sum once; the mins / offsets are one vector FMA per super-block from x->xd (dx * sum xq per 16). */

/* int16 lanes 0-7 = the scale of lane 0-7's 16 bytes, 8-15 = the next 16: (lo, hi) = int16 index in sc */
INL __m256i pick16(__m256i sc, int lo, int hi) {
    return _mm256_shuffle_epi8(sc, _mm256_set_m128i(_mm_set1_epi16((short)(((2 * hi + 1) << 8) | (2 * hi))),
                                                    _mm_set1_epi16((short)(((2 * lo + 1) << 8) | (2 * lo)))));
}

/* two 32-blocks (blk, blk + 1 of the row) with int16 scales s0, s1: t[b] (+)= the pair's dots, reduced to 4
 * lanes each by one hadd, times dx per lane (x->dxe holds each block's dx twice: [dx0 dx0 dx1 dx1] per lane) */
INL void meet2(__m256i u0, __m256i s0, __m256i u1, __m256i s1, int64_t blk, const gb_xrows *x, const int BT,
               const int first, __m256 *t) {
    UNROLL
    for (int b = 0; b < BT; b++) {
        const int8_t *q = x->q + b * x->ldq + 32 * blk;
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(u0, _mm256_loadu_si256((const __m256i *)q)), s0);
        __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(u1, _mm256_loadu_si256((const __m256i *)(q + 32))), s1);
        __m256 dx = _mm256_broadcast_ps((const __m128 *)(x->dxe + b * x->ldh + 2 * blk));
        __m256 p = _mm256_cvtepi32_ps(_mm256_hadd_epi32(p0, p1));
        t[b] = first ? _mm256_mul_ps(p, dx) : _mm256_fmadd_ps(p, dx, t[b]);
    }
}

/* the 8 scales and 8 mins of a Q4_K / Q5_K super-block (12 bytes at q) as bytes 0-7 and 8-15 */
INL __m128i scales_mins(const uint8_t *q) {
    uint32_t a = gb_le32(q), b = gb_le32(q + 4), c = gb_le32(q + 8), lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu,
             top2 = 0x03030303u;
    uint32_t s03 = a & lo6, m03 = b & lo6;
    uint32_t s47 = (c & lo4) | (((a >> 6) & top2) << 4), m47 = ((c >> 4) & lo4) | (((b >> 6) & top2) << 4);
    return _mm_setr_epi32((int)s03, (int)s47, (int)m03, (int)m47);
}

INL void row_k45_i(const uint8_t *w, int64_t K, const gb_xrows *x, float *res, const int five, const int BT) {
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    const __m256i blockorder = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);  /* _mm256_hadd_ps's lane order */
    const int size = five ? 176 : 144;
    __m256 acc[MAXB], mins[MAXB];
    UNROLL
    for (int b = 0; b < BT; b++) acc[b] = mins[b] = _mm256_setzero_ps();
    for (int64_t s = 0; s < K / 256; s++) {
        const uint8_t *blk = w + s * size, *qs = blk + (five ? 48 : 16);
        prefetch(blk + PREFETCH_I, 3);
        __m128i sm = scales_mins(blk + 4);
        __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        __m256 mf = _mm256_mul_ps(_mm256_set1_ps(gb_fp16(blk + 2)), _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(
                                                        _mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)), blockorder)));
        __m256 d = _mm256_set1_ps(gb_fp16(blk));
        __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
        __m256 t[2][MAXB];
        UNROLL
        for (int i = 0; i < 4; i++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * i));
            __m256i u[2] = {_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)};
            UNROLL
            for (int h = 0; h < 2 && five; h++)
                u[h] = _mm256_or_si256(u[h], _mm256_slli_epi16(
                    _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * i + h)), one), 4));
            meet2(u[0], pick16(sc, 2 * i, 2 * i), u[1], pick16(sc, 2 * i + 1, 2 * i + 1), 8 * s + 2 * i, x, BT,
                  (i & 1) == 0, t[i >> 1]);
        }
        UNROLL
        for (int b = 0; b < BT; b++) {
            const float *xd = x->xd + b * x->ldh + 16 * s;
            __m256 xsum = _mm256_hadd_ps(_mm256_loadu_ps(xd), _mm256_loadu_ps(xd + 8));
            acc[b] = _mm256_fmadd_ps(_mm256_add_ps(t[0][b], t[1][b]), d, acc[b]);
            mins[b] = _mm256_fmadd_ps(mf, xsum, mins[b]);
        }
    }
    UNROLL
    for (int b = 0; b < BT; b++) res[b] = hsum(_mm256_sub_ps(acc[b], mins[b]));
}

INL void row_q6k_i(const uint8_t *w, int64_t K, const gb_xrows *x, float *res, const int BT) {
    __m256 acc[MAXB], offs[MAXB];
    UNROLL
    for (int b = 0; b < BT; b++) acc[b] = offs[b] = _mm256_setzero_ps();
    for (int64_t s = 0; s < K / 256; s++) {
        const uint8_t *blk = w + 210 * s;
        prefetch(blk + PREFETCH_I, 4);
        __m256 d = _mm256_set1_ps(gb_fp16(blk + 208));
        __m128i sc8 = _mm_loadu_si128((const __m128i *)(blk + 192));
        __m256i sc16[2] = {_mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8)),
                           _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)))};
        __m256 scf[2] = {_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8))),
                         _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8))))};
        __m256 t[2][MAXB];
        UNROLL
        for (int n = 0; n < 2; n++) {
            __m256i u[4];
            q6k_half(blk, n, u);
            /* 32-block 4 n + tt: scales 2 tt and 2 tt + 1 of the n-th 8 */
            UNROLL
            for (int tt = 0; tt < 4; tt += 2)
                meet2(u[tt], pick16(sc16[n], 2 * tt, 2 * tt + 1), u[tt + 1], pick16(sc16[n], 2 * tt + 2, 2 * tt + 3),
                      8 * s + 4 * n + tt, x, BT, tt == 0, t[n]);
        }
        UNROLL
        for (int b = 0; b < BT; b++) {
            const float *xd = x->xd + b * x->ldh + 16 * s;
            acc[b] = _mm256_fmadd_ps(_mm256_add_ps(t[0][b], t[1][b]), d, acc[b]);
            offs[b] = _mm256_fmadd_ps(scf[0], _mm256_loadu_ps(xd), offs[b]);
            offs[b] = _mm256_fmadd_ps(scf[1], _mm256_loadu_ps(xd + 8), offs[b]);
        }
    }
    UNROLL
    for (int b = 0; b < BT; b++) res[b] = hsum(_mm256_fnmadd_ps(_mm256_set1_ps(32.0f), offs[b], acc[b]));
}

#define KROW_I(t, BT)                                                                    \
    do {                                                                                 \
        if ((t) == GB_Q6_K) row_q6k_i(w, K, x, res, BT);                                 \
        else row_k45_i(w, K, x, res, (t) == GB_Q5_K, BT);                                \
    } while (0)

#define KROW(t, BT)                                                                      \
    do {                                                                                 \
        if ((t) == GB_Q6_K) row_q6k(w, K, x, res, BT);                                   \
        else row_k45(w, K, x, res, (t) == GB_Q5_K, BT);                                  \
    } while (0)

/* BT is 1, 2, 4 or 8 (gb_decode_rows_k splits larger counts): each x row's sums are the same
 * whatever BT is, so a row's result does not depend on the rows beside it */
static void krow_avx2(int t, const uint8_t *w, int64_t K, const gb_xrows *x, float *res, int BT) {
    if (BT == 1) KROW_I(t, 1);
    else if (BT == 2) KROW_I(t, 2);
    else if (BT == 4) KROW_I(t, 4);
    else KROW_I(t, 8);
}

static VNNI void krow_vnni(int t, const uint8_t *w, int64_t K, const gb_xrows *x, float *res, int BT) {
    if (BT == 1) KROW(t, 1);
    else if (BT == 2) KROW(t, 2);
    else if (BT == 4) KROW(t, 4);
    else KROW(t, 8);
}

void gb_decode_rows_k(int isa, int qtype, const uint8_t *w, int64_t wbytes, int R, int64_t K, const gb_xrows *x,
                      int BT, float *res) {
    for (int r = 0; r < R; r++)
        for (int b0 = 0; b0 < BT;) {
            int n = gb_x_chunk(BT - b0);
            float part[MAXB];
            gb_xrows xr = gb_xrows_from(x, b0);
            (isa == GB_ISA_AVX512 ? krow_vnni : krow_avx2)(qtype, w + r * wbytes, K, &xr, part, n);
            for (int b = 0; b < n; b++) res[(b0 + b) * R + r] = part[b];
            b0 += n;
        }
}
