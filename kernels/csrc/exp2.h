/* 2^x for 8 float lanes, shared by the softmax (softmax_chunks.c) and the SiLU epilogue (gguf_simd.h). */
#pragma once
#include "rl_simd.h"

/* x = n + f with n = round(x), f in [-1/2, 1/2]; 2^f by a degree-5 polynomial fitted to minimise the
 * relative error (2.3e-7 over the interval, ~2 ulp), 2^n added into the exponent bits. x below -126
 * is taken as -126; the caller keeps x at most 127. 12 vector ops, where Cephes' expf takes 17. */
static inline __attribute__((always_inline)) __m256 rl_exp2_8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(1.32764713e-3f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.67554189e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.55071309e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.40221202e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.93146944e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.00000012f));
    __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
}
