/* AVX2 helpers shared by the GGUF unpacking (gguf_unpack_avx2.c) and the decode rows (gguf_decode.c). */
#pragma once
#include "exp2.h"

#include "rl_simd.h"
#include <stdint.h>
#include <string.h>


/* fp16 -> fp32 (F16C: the library is built with -mf16c; exact, subnormals, Inf and NaN included) */
static inline __attribute__((always_inline)) float gb_fp16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline __attribute__((always_inline)) uint32_t gb_le32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* byte i = 0xff where bit i of bits is set (as ggml's bytes_from_bits_32) */
static inline __attribute__((always_inline)) __m256i gb_bytes_from_bits(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202,
                                            0x0303030303030303);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

/* 16 bytes -> 32 values: the low nibbles (values 0-15), then the high ones (16-31) */
static inline __attribute__((always_inline)) __m256i gb_nibbles(const uint8_t *qs) {
    __m128i q = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

/* A Q4_0 / Q4_1 / Q5_0 / Q5_1 block's 32 unsigned values (0-15 or 0-31), its d and its m (0 without) */
static inline __attribute__((always_inline)) __m256i gb_q4_q5(const uint8_t *b, const int has_min, const int has_high, float *d, float *m) {
    const uint8_t *p = b + (has_min ? 4 : 2);
    *d = gb_fp16(b);
    *m = has_min ? gb_fp16(b + 2) : 0.0f;
    __m256i v = gb_nibbles(p + (has_high ? 4 : 0));
    if (has_high) v = _mm256_or_si256(v, _mm256_and_si256(gb_bytes_from_bits(gb_le32(p)), _mm256_set1_epi8(16)));
    return v;
}

/* silu(g) = g / (1 + e^-g) for 8 lanes, e^-g = 2^(-g log2 e) by rl_exp2_8 (exponent kept <= 126). */
static inline __attribute__((always_inline)) __m256 gb_silu8(__m256 g) {
    __m256 x = _mm256_min_ps(_mm256_mul_ps(g, _mm256_set1_ps(-1.44269504088896341f)), _mm256_set1_ps(126.0f));
    return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), rl_exp2_8(x)));
}
