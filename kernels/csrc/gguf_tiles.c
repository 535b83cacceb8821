/* The tiles of gguf_tiles.h. Integer tiles: per 32 weights (AVX2) a maddubs + madd gives 8 int32
 * lanes, each the exact sum of 4 products inside one 16-group, converted and scaled by ws * dx of its
 * group; per 64 weights (AVX-512) one vpdpbusd gives 16 such lanes. The offsets c meet the activation
 * sums (xd = dx * sum xq per 16) in a short float dot after the K loop. Float tiles: plain FMAs. */
#include "gguf_tiles.h"

#include "gguf_blocks.h"

#include "rl_simd.h"

#define T GB_MAX_TILE
#define INL static inline __attribute__((always_inline))
#define Z512 RL_TARGET("avx512f,avx512bw,avx512vl,avx512vnni")

/* sum_h c[h] * xd[h] over nh (a multiple of 4) groups */
INL float offset_dot(const float *c, const float *xd, int64_t nh) {
    __m256 acc = _mm256_setzero_ps();
    int64_t h = 0;
    for (; h + 8 <= nh; h += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(c + h), _mm256_loadu_ps(xd + h), acc);
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    if (h < nh) a = _mm_fmadd_ps(_mm_loadu_ps(c + h), _mm_loadu_ps(xd + h), a);
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

INL float hsum8(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

/* ---- scalar ---- */
static void scalar_quant(const gb_wrows *w, const gb_xrows *x, int64_t Kp, float *res, int R, int BT, int sgn) {
    for (int b = 0; b < BT; b++)
        for (int r = 0; r < R; r++) {
            const uint8_t *u = w->u + r * w->ldu;
            const int8_t *q = x->q + b * x->ldq;
            float s = 0.0f, o = 0.0f;
            for (int64_t h = 0; h < Kp / 16; h++) {
                int32_t acc = 0;
                for (int k = 16 * h; k < 16 * h + 16; k++) acc += (sgn ? (int32_t)(int8_t)u[k] : (int32_t)u[k]) * q[k];
                s += w->ws[r * w->ldh + h] * x->dxe[b * x->ldh + h] * (float)acc;
                o += w->c[r * w->ldh + h] * x->xd[b * x->ldh + h];
            }
            res[b * R + r] = s + o;
        }
}

static void scalar_flt(const gb_wrows *w, const gb_xrows *x, int64_t Kp, float *res, int R, int BT) {
    for (int b = 0; b < BT; b++)
        for (int r = 0; r < R; r++) {
            float s = 0.0f;
            for (int64_t k = 0; k < Kp; k++) s += w->f[r * w->ldu + k] * x->f[b * x->ldq + k];
            res[b * R + r] = s;
        }
}

/* ---- AVX2 ---- */
INL __m256 expand2(const float *p) {  /* lanes 0-3: p[0], lanes 4-7: p[1] */
    __m128 t = _mm_castpd_ps(_mm_load_sd((const double *)p));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(t), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

INL void avx2_quant(const gb_wrows *w, const gb_xrows *x, int64_t Kp, float *res, const int R, const int BT,
                    const int sgn) {
    __m256 acc[T][T];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) acc[r][b] = _mm256_setzero_ps();
    for (int64_t j = 0; j < Kp / 32; j++) {
        __m256i U[T], A[T];
        __m256 W[T];
        for (int r = 0; r < R; r++) {
            U[r] = _mm256_loadu_si256((const __m256i *)(w->u + r * w->ldu + 32 * j));
            if (sgn) A[r] = _mm256_abs_epi8(U[r]);
            W[r] = expand2(w->ws + r * w->ldh + 2 * j);
        }
        for (int b = 0; b < BT; b++) {
            __m256i X = _mm256_loadu_si256((const __m256i *)(x->q + b * x->ldq + 32 * j));
            __m256 D = _mm256_broadcast_ss(x->dxe + b * x->ldh + 2 * j);
            for (int r = 0; r < R; r++) {
                __m256i p = sgn ? _mm256_maddubs_epi16(A[r], _mm256_sign_epi8(X, U[r])) : _mm256_maddubs_epi16(U[r], X);
                p = _mm256_madd_epi16(p, ones);
                acc[r][b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(W[r], D), acc[r][b]);
            }
        }
    }
    for (int b = 0; b < BT; b++)
        for (int r = 0; r < R; r++)
            res[b * R + r] = hsum8(acc[r][b]) + offset_dot(w->c + r * w->ldh, x->xd + b * x->ldh, Kp / 16);
}

INL void avx2_flt(const gb_wrows *w, const gb_xrows *x, int64_t Kp, float *res, const int R, const int BT) {
    __m256 acc[T][T];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) acc[r][b] = _mm256_setzero_ps();
    for (int64_t k = 0; k < Kp; k += 8) {
        __m256 W[T];
        for (int r = 0; r < R; r++) W[r] = _mm256_loadu_ps(w->f + r * w->ldu + k);
        for (int b = 0; b < BT; b++) {
            __m256 X = _mm256_loadu_ps(x->f + b * x->ldq + k);
            for (int r = 0; r < R; r++) acc[r][b] = _mm256_fmadd_ps(W[r], X, acc[r][b]);
        }
    }
    for (int b = 0; b < BT; b++)
        for (int r = 0; r < R; r++) res[b * R + r] = hsum8(acc[r][b]);
}

/* ---- AVX-512 (F, BW, VL, VNNI) ---- */
INL Z512 __m512 expand4(const float *p) {  /* 4 lanes each of p[0..3] */
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_loadu_ps(p)));
}

INL Z512 void z_quant(const gb_wrows *w, const gb_xrows *x, int64_t Kp, float *res, const int R, const int BT) {
    __m512 acc[T][T];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) acc[r][b] = _mm512_setzero_ps();
    for (int64_t i = 0; i < Kp / 64; i++) {
        __m512i U[T];
        __m512 W[T];
        for (int r = 0; r < R; r++) {
            U[r] = _mm512_loadu_si512(w->u + r * w->ldu + 64 * i);
            W[r] = expand4(w->ws + r * w->ldh + 4 * i);
        }
        for (int b = 0; b < BT; b++) {
            __m512i X = _mm512_loadu_si512(x->q + b * x->ldq + 64 * i);
            __m512 D = expand4(x->dxe + b * x->ldh + 4 * i);
            for (int r = 0; r < R; r++) {
                __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), U[r], X);
                acc[r][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(W[r], D), acc[r][b]);
            }
        }
    }
    for (int b = 0; b < BT; b++)
        for (int r = 0; r < R; r++)
            res[b * R + r] = _mm512_reduce_add_ps(acc[r][b]) + offset_dot(w->c + r * w->ldh, x->xd + b * x->ldh, Kp / 16);
}

INL Z512 void z_flt(const gb_wrows *w, const gb_xrows *x, int64_t Kp, float *res, const int R, const int BT) {
    __m512 acc[T][T];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) acc[r][b] = _mm512_setzero_ps();
    for (int64_t k = 0; k < Kp; k += 16) {
        __m512 W[T];
        for (int r = 0; r < R; r++) W[r] = _mm512_loadu_ps(w->f + r * w->ldu + k);
        for (int b = 0; b < BT; b++) {
            __m512 X = _mm512_loadu_ps(x->f + b * x->ldq + k);
            for (int r = 0; r < R; r++) acc[r][b] = _mm512_fmadd_ps(W[r], X, acc[r][b]);
        }
    }
    for (int b = 0; b < BT; b++)
        for (int r = 0; r < R; r++) res[b * R + r] = _mm512_reduce_add_ps(acc[r][b]);
}

/* ---- aarch64 SDOT (Armv8.2 dot product; chosen at run time, gguf_matmul.c's rl_gguf_best_isa) ----
 * u is read as int8 (offset128 = 0: Q8_0's u is its q, every other type's u is below 64). Per 32 weights
 * and (row, x row): two SDOTs give 4 int32 lanes per 16-group, a pairwise add leaves 2 per group, each
 * converted and scaled by ws * dx of its group as the AVX2 tiles do. */
#if defined(__aarch64__)
#include <arm_neon.h>
#if defined(__ARM_FEATURE_DOTPROD)
#define DOTPROD
#elif defined(__clang__)
#define DOTPROD __attribute__((target("dotprod")))
#else
#define DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif

INL DOTPROD float32x4_t pairs(const float *p) {  /* p[0], p[0], p[1], p[1] */
    float32x2_t v = vld1_f32(p);
    return vcombine_f32(vdup_lane_f32(v, 0), vdup_lane_f32(v, 1));
}

INL DOTPROD void sdot_quant(const gb_wrows *w, const gb_xrows *x, int64_t Kp, float *res, const int R,
                            const int BT) {
    float32x4_t acc[T][T];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < BT; b++) acc[r][b] = vdupq_n_f32(0.0f);
    for (int64_t j = 0; j < Kp / 32; j++) {
        int8x16_t U0[T], U1[T];
        float32x4_t W[T];
        for (int r = 0; r < R; r++) {
            const int8_t *u = (const int8_t *)w->u + r * w->ldu + 32 * j;
            U0[r] = vld1q_s8(u);
            U1[r] = vld1q_s8(u + 16);
            W[r] = pairs(w->ws + r * w->ldh + 2 * j);
        }
        for (int b = 0; b < BT; b++) {
            const int8_t *q = x->q + b * x->ldq + 32 * j;
            int8x16_t X0 = vld1q_s8(q), X1 = vld1q_s8(q + 16);
            float32x4_t D = pairs(x->dxe + b * x->ldh + 2 * j);
            for (int r = 0; r < R; r++) {
                int32x4_t p = vpaddq_s32(vdotq_s32(vdupq_n_s32(0), U0[r], X0), vdotq_s32(vdupq_n_s32(0), U1[r], X1));
                acc[r][b] = vfmaq_f32(acc[r][b], vcvtq_f32_s32(p), vmulq_f32(W[r], D));
            }
        }
    }
    for (int b = 0; b < BT; b++)
        for (int r = 0; r < R; r++)
            res[b * R + r] = vaddvq_f32(acc[r][b]) + offset_dot(w->c + r * w->ldh, x->xd + b * x->ldh, Kp / 16);
}
#define SDOT_INST(R, BT) \
    static DOTPROD void n_q_##R##_##BT(const gb_wrows *w, const gb_xrows *x, int64_t Kp, float *res) { \
        sdot_quant(w, x, Kp, res, R, BT); }
#define SDOT_ROWS(R) SDOT_INST(R, 1) SDOT_INST(R, 2) SDOT_INST(R, 3) SDOT_INST(R, 4)
SDOT_ROWS(1) SDOT_ROWS(2) SDOT_ROWS(3) SDOT_ROWS(4)
#endif

/* one function per (R, BT) and kind; the tables below */
#define SIG(name) static void name(const gb_wrows *w, const gb_xrows *x, int64_t Kp, float *res)
#define INST(R, BT)                                                                 \
    SIG(s_q_##R##_##BT) { scalar_quant(w, x, Kp, res, R, BT, 0); }                  \
    SIG(s_f_##R##_##BT) { scalar_flt(w, x, Kp, res, R, BT); }                       \
    SIG(a_q_##R##_##BT) { avx2_quant(w, x, Kp, res, R, BT, 0); }                    \
    SIG(a_s_##R##_##BT) { avx2_quant(w, x, Kp, res, R, BT, 1); }                    \
    SIG(a_f_##R##_##BT) { avx2_flt(w, x, Kp, res, R, BT); }                         \
    static Z512 void z_q_##R##_##BT(const gb_wrows *w, const gb_xrows *x, int64_t Kp, float *res) { \
        z_quant(w, x, Kp, res, R, BT); }                                            \
    static Z512 void z_f_##R##_##BT(const gb_wrows *w, const gb_xrows *x, int64_t Kp, float *res) { \
        z_flt(w, x, Kp, res, R, BT); }
#define ROWS(R) INST(R, 1) INST(R, 2) INST(R, 3) INST(R, 4)
ROWS(1) ROWS(2) ROWS(3) ROWS(4)
#define TABLE(p) {{0}, {0, p##1_1, p##1_2, p##1_3, p##1_4}, {0, p##2_1, p##2_2, p##2_3, p##2_4}, \
                  {0, p##3_1, p##3_2, p##3_3, p##3_4}, {0, p##4_1, p##4_2, p##4_3, p##4_4}}

static const gb_isa_tiles SCALAR = {TABLE(s_q_), TABLE(s_q_), TABLE(s_f_), 1, 4};
static const gb_isa_tiles AVX2 = {TABLE(a_q_), TABLE(a_s_), TABLE(a_f_), 0, 2};
static const gb_isa_tiles AVX512 = {TABLE(z_q_), TABLE(z_q_), TABLE(z_f_), 1, 4};

#if defined(__aarch64__)
static const gb_isa_tiles NEON_DOT = {TABLE(n_q_), TABLE(n_q_), TABLE(a_f_), 0, 4};
#endif

const gb_isa_tiles *gb_tiles(int isa) {
#if defined(__aarch64__)
    if (isa == GB_ISA_NEON_DOT) return &NEON_DOT;
#endif
    return isa == GB_ISA_AVX512 ? &AVX512 : isa == GB_ISA_AVX2 ? &AVX2 : &SCALAR;
}
