/* The GGUF block layouts (ggml-common.h's block_q*), unpacked to gguf_blocks.h's u / ws / c form.
 * Plain loops over a block's bytes: the compiler vectorizes them (-O3 -mavx2). */
#include "gguf_blocks.h"

#include "rl_simd.h"
#include <string.h>

static inline RL_TARGET("f16c") float fp16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline uint32_t le32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

int gb_is_float(int qtype) {
    switch (qtype) {
    case GB_F32: case GB_F16: case GB_BF16: return 1;
    case GB_Q4_0: case GB_Q4_1: case GB_Q5_0: case GB_Q5_1: case GB_Q8_0: case GB_Q4_K: case GB_Q5_K:
    case GB_Q6_K: return 0;
    default: return -1;
    }
}

int64_t gb_row_bytes(int qtype, int64_t K) {
    switch (qtype) {
    case GB_F32: return 4 * K;
    case GB_F16: case GB_BF16: return 2 * K;
    case GB_Q4_0: return K / 32 * 18;
    case GB_Q4_1: return K / 32 * 20;
    case GB_Q5_0: return K / 32 * 22;
    case GB_Q5_1: return K / 32 * 24;
    case GB_Q8_0: return K / 32 * 34;
    case GB_Q4_K: return K / 256 * 144;
    case GB_Q5_K: return K / 256 * 176;
    case GB_Q6_K: return K / 256 * 210;
    default: return 0;
    }
}

/* 32-blocks: d (fp16), [m (fp16)], [qh (32 bits)], qs[16] (low nibbles: values 0-15, high: 16-31). */
static void unpack_q4_q5(const uint8_t *b, int has_min, int has_high, uint8_t *u, float *ws, float *c) {
    float d = fp16(b), m = has_min ? fp16(b + 2) : 0.0f;
    const uint8_t *p = b + (has_min ? 4 : 2);
    uint32_t qh = has_high ? le32(p) : 0;
    const uint8_t *qs = p + (has_high ? 4 : 0);
    for (int j = 0; j < 16; j++) {
        u[j] = (uint8_t)((qs[j] & 15) | (((qh >> j) & 1) << 4));
        u[j + 16] = (uint8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
    }
    float off = has_min ? m : (has_high ? -16.0f : -8.0f) * d;
    ws[0] = ws[1] = d;
    c[0] = c[1] = off;
}

/* Q4_K / Q5_K's 6-bit scale and min of sub-block j (ggml's get_scale_min_k4) */
static inline void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K (144 bytes: d, dmin, scales[12], qs[128]) or Q5_K (176: d, dmin, scales[12], qh[32], qs[128]):
 * 64 values per 32 bytes of qs (low nibbles then high), sub-block j's 5th bit is bit j of qh[l]. */
static void unpack_k45(const uint8_t *b, int five, uint8_t *u, float *ws, float *c) {
    float d = fp16(b), dmin = fp16(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
    for (int i = 0; i < 4; i++) {
        for (int l = 0; l < 32; l++) {
            int h0 = five ? ((qh[l] >> (2 * i)) & 1) << 4 : 0, h1 = five ? ((qh[l] >> (2 * i + 1)) & 1) << 4 : 0;
            u[64 * i + l] = (uint8_t)((qs[32 * i + l] & 15) | h0);
            u[64 * i + 32 + l] = (uint8_t)((qs[32 * i + l] >> 4) | h1);
        }
        for (int s = 0; s < 2; s++) {
            int sc, m;
            scale_min_k4(2 * i + s, scales, &sc, &m);
            ws[4 * i + 2 * s] = ws[4 * i + 2 * s + 1] = d * (float)sc;
            c[4 * i + 2 * s] = c[4 * i + 2 * s + 1] = -dmin * (float)m;
        }
    }
}

/* Q6_K (210 bytes: ql[128], qh[64], scales[16] int8, d): two halves of 128 values; value
 * 32 t + l of a half (t = 0..3) takes a nibble of ql and 2 bits of qh, scale scales[l / 16 + 2 t]. */
static void unpack_q6k(const uint8_t *b, uint8_t *u, float *ws, float *c) {
    float d = fp16(b + 208);
    const int8_t *scales = (const int8_t *)(b + 192);
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
        uint8_t *o = u + 128 * n;
        for (int l = 0; l < 32; l++) {
            o[l] = (uint8_t)((ql[l] & 15) | ((qh[l] & 3) << 4));
            o[l + 32] = (uint8_t)((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4));
            o[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
        for (int t = 0; t < 4; t++)
            for (int is = 0; is < 2; is++) {
                float s = d * (float)scales[8 * n + is + 2 * t];
                ws[8 * n + 2 * t + is] = s;
                c[8 * n + 2 * t + is] = -32.0f * s;
            }
    }
}

static void unpack_q8_0(const uint8_t *b, int offset128, uint8_t *u, float *ws, float *c) {
    float d = fp16(b);
    for (int j = 0; j < 32; j++) u[j] = (uint8_t)(b[2 + j] + (offset128 ? 128 : 0));
    ws[0] = ws[1] = d;
    c[0] = c[1] = offset128 ? -128.0f * d : 0.0f;
}

void gb_unpack_row(int qtype, const uint8_t *row, int64_t K, uint8_t *u, float *ws, float *c, int offset128) {
    int super = qtype == GB_Q4_K || qtype == GB_Q5_K || qtype == GB_Q6_K;
    int64_t bs = super ? 256 : 32, nb = K / bs, bytes = gb_row_bytes(qtype, bs);
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = row + i * bytes;
        uint8_t *ub = u + i * bs;
        float *wb = ws + i * bs / 16, *cb = c + i * bs / 16;
        switch (qtype) {
        case GB_Q4_0: unpack_q4_q5(b, 0, 0, ub, wb, cb); break;
        case GB_Q4_1: unpack_q4_q5(b, 1, 0, ub, wb, cb); break;
        case GB_Q5_0: unpack_q4_q5(b, 0, 1, ub, wb, cb); break;
        case GB_Q5_1: unpack_q4_q5(b, 1, 1, ub, wb, cb); break;
        case GB_Q8_0: unpack_q8_0(b, offset128, ub, wb, cb); break;
        case GB_Q4_K: unpack_k45(b, 0, ub, wb, cb); break;
        case GB_Q5_K: unpack_k45(b, 1, ub, wb, cb); break;
        case GB_Q6_K: unpack_q6k(b, ub, wb, cb); break;
        default: break;
        }
    }
}

static RL_TARGET("f16c") void f16_row(const uint8_t *row, int64_t K, float *w) {
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
        _mm256_storeu_ps(w + k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * k))));
    for (; k < K; k++) w[k] = fp16(row + 2 * k);
}

void gb_float_row(int qtype, const uint8_t *row, int64_t K, float *w) {
    if (qtype == GB_F32) {
        memcpy(w, row, (size_t)K * 4);
    } else if (qtype == GB_F16) {
        f16_row(row, K, w);
    } else {  /* BF16: the high half of a float32 */
        for (int64_t k = 0; k < K; k++) {
            uint32_t bits = (uint32_t)(row[2 * k] | (row[2 * k + 1] << 8)) << 16;
            memcpy(w + k, &bits, 4);
        }
    }
}
