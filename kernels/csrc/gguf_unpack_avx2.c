/* gguf_unpack.c's row unpacking in AVX2 (the AVX2 and AVX-512 paths): the same u / ws / c, 32 weights
 * per vector. The 5th bits of Q5_0 / Q5_1 spread from 32 bits to 32 bytes with a byte shuffle and a
 * compare, as ggml's bytes_from_bits_32. */
#include "gguf_blocks.h"

#include "gguf_simd.h"

#define fp16 gb_fp16

static void q4_q5(const uint8_t *row, int64_t nb, int has_min, int has_high, uint8_t *u, float *ws, float *c) {
    int64_t size = 18 + (has_min ? 2 : 0) + (has_high ? 4 : 0);
    for (int64_t i = 0; i < nb; i++) {
        float d, m;
        __m256i v = gb_q4_q5(row + i * size, has_min, has_high, &d, &m);
        float off = has_min ? m : (has_high ? -16.0f : -8.0f) * d;
        _mm256_storeu_si256((__m256i *)(u + 32 * i), v);
        ws[2 * i] = ws[2 * i + 1] = d;
        c[2 * i] = c[2 * i + 1] = off;
    }
}

static void q8_0(const uint8_t *row, int64_t nb, int offset128, uint8_t *u, float *ws, float *c) {
    const __m256i flip = _mm256_set1_epi8(offset128 ? (char)0x80 : 0);
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = row + 34 * i;
        float d = fp16(b);
        _mm256_storeu_si256((__m256i *)(u + 32 * i),
                            _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b + 2)), flip));
        ws[2 * i] = ws[2 * i + 1] = d;
        c[2 * i] = c[2 * i + 1] = offset128 ? -128.0f * d : 0.0f;
    }
}

static inline void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void k45(const uint8_t *row, int64_t nb, int five, uint8_t *u, float *ws, float *c) {
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    for (int64_t s = 0; s < nb; s++) {
        const uint8_t *b = row + s * (five ? 176 : 144), *qs = b + (five ? 48 : 16);
        float d = fp16(b), dmin = fp16(b + 2);
        __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
        uint8_t *o = u + 256 * s;
        for (int i = 0; i < 4; i++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * i));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) {
                __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * i)), one);
                __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * i + 1)), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
            }
            _mm256_storeu_si256((__m256i *)(o + 64 * i), lo);
            _mm256_storeu_si256((__m256i *)(o + 64 * i + 32), hi);
        }
        for (int j = 0; j < 8; j++) {
            int sc, m;
            scale_min_k4(j, b + 4, &sc, &m);
            ws[16 * s + 2 * j] = ws[16 * s + 2 * j + 1] = d * (float)sc;
            c[16 * s + 2 * j] = c[16 * s + 2 * j + 1] = -dmin * (float)m;
        }
    }
}

static void q6k(const uint8_t *row, int64_t nb, uint8_t *u, float *ws, float *c) {
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    for (int64_t s = 0; s < nb; s++) {
        const uint8_t *b = row + 210 * s;
        float d = fp16(b + 208);
        for (int n = 0; n < 2; n++) {
            const uint8_t *ql = b + 64 * n;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * n));
            uint8_t *o = u + 256 * s + 128 * n;
            __m256i parts[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
            for (int t = 0; t < 4; t++) {
                __m256i h = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * t)), m2);
                _mm256_storeu_si256((__m256i *)(o + 32 * t), _mm256_or_si256(parts[t], _mm256_slli_epi16(h, 4)));
            }
        }
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int h = 0; h < 16; h++) {  /* group h = 8 n + 2 t + is takes scales[8 n + is + 2 t]: the same index */
            ws[16 * s + h] = d * (float)sc[h];
            c[16 * s + h] = -32.0f * ws[16 * s + h];
        }
    }
}

void gb_unpack_row_avx2(int qtype, const uint8_t *row, int64_t K, uint8_t *u, float *ws, float *c, int offset128) {
    switch (qtype) {
    case GB_Q4_0: q4_q5(row, K / 32, 0, 0, u, ws, c); break;
    case GB_Q4_1: q4_q5(row, K / 32, 1, 0, u, ws, c); break;
    case GB_Q5_0: q4_q5(row, K / 32, 0, 1, u, ws, c); break;
    case GB_Q5_1: q4_q5(row, K / 32, 1, 1, u, ws, c); break;
    case GB_Q8_0: q8_0(row, K / 32, offset128, u, ws, c); break;
    case GB_Q4_K: k45(row, K / 256, 0, u, ws, c); break;
    case GB_Q5_K: k45(row, K / 256, 1, u, ws, c); break;
    case GB_Q6_K: q6k(row, K / 256, u, ws, c); break;
    default: gb_unpack_row(qtype, row, K, u, ws, c, offset128); break;
    }
}
