/* Decode rows of the 32-block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) for up to 8 activation rows: each weight
 * block is decoded in registers and met at once by the activation block (no scratch), as ggml's
 * vec_dot_q*_q8_0. The offset of Q4_0 / Q5_0 / Q8_0 (o = 8, 16, 128: w = d (u - o)) starts the
 * integer sum at -o * sum(xq), so one float FMA per block and row pair remains; Q4_1 / Q5_1's min m
 * adds m * dx * sum(xq) per block. AVX2: maddubs + madd (Q8_0 signed: abs / sign); AVX-512: the
 * 256-bit vpdpbusd (VL + VNNI). */
#include "gguf_decode.h"

#include "gguf_blocks.h"
#include "gguf_simd.h"

#define INL static inline __attribute__((always_inline))
#define VNNI RL_TARGET("avx2,fma,avx512vl,avx512vnni")
#define MAXR 4
#define MAXB 8  /* x rows met by each decoded weight block (1, 2, 4 or 8 per call) */
#define DECODE_ROWS 2  /* weight rows per step at 1 x row: fewer concurrent streams read DRAM faster than 4 */
#define PREFETCH_BLOCKS 16  /* software prefetch this many blocks ahead in each row (past a row's end: the next rows) */
#define PREFETCH_BLOCKS_Q8 96  /* Q8_0 (the tied LM head: one long stream) reads DRAM faster from further ahead */

INL __m256i block_values(const uint8_t *b, const int t, const int vnni, float *d, float *m) {
    if (t == GB_Q8_0) {
        *d = gb_fp16(b);
        *m = 0.0f;
        __m256i v = _mm256_loadu_si256((const __m256i *)(b + 2));
        return vnni ? _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)) : v;
    }
    return gb_q4_q5(b, t == GB_Q4_1 || t == GB_Q5_1, t == GB_Q5_0 || t == GB_Q5_1, d, m);
}

INL int block_bytes(const int t) {
    return t == GB_Q4_0 ? 18 : t == GB_Q4_1 ? 20 : t == GB_Q5_0 ? 22 : t == GB_Q5_1 ? 24 : 34;
}

INL int block_offset(const int t, const int vnni) {
    return t == GB_Q4_0 ? 8 : t == GB_Q5_0 ? 16 : t == GB_Q8_0 && vnni ? 128 : 0;
}

INL float hsum(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

/* res[b * R + r] = dot(x row b, weight row r) for the R rows at w (wbytes apart) */
INL void rows(const uint8_t *w, int64_t wbytes, int64_t K, const gb_xrows *x, float *res, const int t, const int R,
              const int BT, const int vnni) {
    const int size = block_bytes(t), o = block_offset(t, vnni), has_min = t == GB_Q4_1 || t == GB_Q5_1;
    const int sgn = t == GB_Q8_0 && !vnni;
    const int ahead = t == GB_Q8_0 ? PREFETCH_BLOCKS_Q8 : PREFETCH_BLOCKS;
    __m256 acc[MAXR][MAXB];
    float mins[MAXR][MAXB];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) acc[r][b] = _mm256_setzero_ps(), mins[r][b] = 0.0f;
    for (int64_t j = 0; j < K / 32; j++) {
        __m256i U[MAXR];
        float d[MAXR], m[MAXR];
        for (int r = 0; r < R; r++) {
            _mm_prefetch((const char *)(w + r * wbytes + (j + ahead) * size), _MM_HINT_T0);
            U[r] = block_values(w + r * wbytes + j * size, t, vnni, &d[r], &m[r]);
        }
        for (int b = 0; b < BT; b++) {
            __m256i X = _mm256_loadu_si256((const __m256i *)(x->q + b * x->ldq + 32 * j));
            float dx = x->dxe[b * x->ldh + 2 * j];
            int32_t xs = x->xs[b * x->lds + j];
            __m256i init = _mm256_setr_epi32(-o * xs, 0, 0, 0, 0, 0, 0, 0);  /* upper lanes zero (a cast leaves them undefined) */
            for (int r = 0; r < R; r++) {
                __m256i p;
                if (vnni) {
                    p = _mm256_dpbusd_epi32(init, U[r], X);
                } else {
                    __m256i s = sgn ? _mm256_maddubs_epi16(_mm256_abs_epi8(U[r]), _mm256_sign_epi8(X, U[r]))
                                    : _mm256_maddubs_epi16(U[r], X);
                    p = _mm256_add_epi32(_mm256_madd_epi16(s, _mm256_set1_epi16(1)), init);
                }
                acc[r][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d[r] * dx), acc[r][b]);
                if (has_min) mins[r][b] += m[r] * (dx * (float)xs);
            }
        }
    }
    for (int b = 0; b < BT; b++)
        for (int r = 0; r < R; r++) res[b * R + r] = hsum(acc[r][b]) + mins[r][b];
}

#define TYPES(F, R, BT) F(GB_Q4_0, R, BT) F(GB_Q4_1, R, BT) F(GB_Q5_0, R, BT) F(GB_Q5_1, R, BT) F(GB_Q8_0, R, BT)
#define CASE(T, R, BT) case T: rows(w, wbytes, K, x, res, T, R, BT, vnni); return;
#define VARIANT(name, attr, vnni_)                                                                          \
    static attr void name(int t, const uint8_t *w, int64_t wbytes, int64_t K, const gb_xrows *x, float *res, \
                          int R, int BT) {                                                                   \
        const int vnni = vnni_;                                                                              \
        if (R == 4 && BT == 1) switch (t) { TYPES(CASE, 4, 1) }                                              \
        if (R == 2 && BT == 1) switch (t) { TYPES(CASE, 2, 1) }                                              \
        if (R == 2 && BT == 2) switch (t) { TYPES(CASE, 2, 2) }                                              \
        if (BT == 1) switch (t) { TYPES(CASE, 1, 1) }                                                        \
        if (BT == 2) switch (t) { TYPES(CASE, 1, 2) }                                                        \
        if (BT == 4) switch (t) { TYPES(CASE, 1, 4) }                                                        \
        switch (t) { TYPES(CASE, 1, 8) }                                                                     \
    }
VARIANT(rows_avx2, , 0)
VARIANT(rows_vnni, VNNI, 1)

int gb_decode_type(int qtype) {
    if (qtype == GB_Q4_K || qtype == GB_Q5_K || qtype == GB_Q6_K) return 2;
    return qtype == GB_Q4_0 || qtype == GB_Q4_1 || qtype == GB_Q5_0 || qtype == GB_Q5_1 || qtype == GB_Q8_0;
}

/* BT x rows in chunks of 8, 4, 2 or 1: each row's sums are the same whatever the chunk, so a row's
 * result does not depend on the rows beside it (speculative decoding's verify rows need that) */
void gb_decode_rows(int isa, int qtype, const uint8_t *w, int64_t wbytes, int R, int64_t K, const gb_xrows *x,
                    int BT, float *res) {
    for (int b0 = 0; b0 < BT;) {
        int n = gb_x_chunk(BT - b0);
        gb_xrows xr = gb_xrows_from(x, b0);
        for (int r0 = 0; r0 < R;) {  /* the (R, BT) shapes instantiated: 4 x 1, 2 x 1, 2 x 2, else 1 x BT */
            float part[MAXR * MAXB];
            int rr = R - r0 >= DECODE_ROWS && n == 1 ? DECODE_ROWS : R - r0 >= 2 && n <= 2 ? 2 : 1;
            (isa == GB_ISA_AVX512 ? rows_vnni : rows_avx2)(qtype, w + r0 * wbytes, wbytes, K, &xr, part, rr, n);
            for (int b = 0; b < n; b++)
                for (int r = 0; r < rr; r++) res[(b0 + b) * R + r0 + r] = part[b * rr + r];
            r0 += rr;
        }
        b0 += n;
    }
}
