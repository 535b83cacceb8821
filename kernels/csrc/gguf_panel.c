/* The AVX-512 VNNI panel (gguf_panel.h). Per scale group of G weights (16 or 32) and activation row b:
 * G / 4 vpdpbusd give 16 lanes of exact int32 sums (lane r: weight row r), then
 *
 *   acc[b] += float(isum) * (ws[h] * dx[b, h]) + c[h] * xd[b, h]     (xd summed over the group)
 *
 * Integer sums stay small: |u| <= 255, |xq| <= 127, 32 products per lane at most. */
#include "gguf_panel.h"

#include "rl_simd.h"
#include <string.h>

#define INL static inline __attribute__((always_inline))
#define Z512 RL_TARGET("avx512f,avx512bw,avx512vl,avx512vnni")
#define R16 GB_PANEL_ROWS

static size_t up64(size_t n) { return (n + 63) / 64 * 64; }

size_t gb_panel_bytes(int64_t Kp) {
    return up64((size_t)Kp * R16) + 2 * up64((size_t)(Kp / 16) * R16 * sizeof(float));
}

gb_panel gb_panel_at(void *buf, int64_t Kp) {
    uint8_t *p = buf;
    size_t ub = up64((size_t)Kp * R16), hb = up64((size_t)(Kp / 16) * R16 * sizeof(float));
    return (gb_panel){.u = p, .ws = (float *)(p + ub), .c = (float *)(p + ub + hb), .Kp = Kp};
}

/* 16 rows of 16 dwords (row i at r[i]) -> out[k] = dword k of every row: a 16 x 16 dword transpose */
INL Z512 void transpose16(const __m512i r[R16], __m512i out[R16]) {
    __m512i a[R16], b[R16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {  /* b[4i + c], 128-bit lane L: dword 4L + c of rows 4i..4i+3 */
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    for (int c = 0; c < 4; c++) {  /* a 4 x 4 transpose of 128-bit lanes */
        __m512i s0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44), s1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xEE);
        __m512i s2 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
        __m512i s3 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xEE);
        out[c] = _mm512_shuffle_i32x4(s0, s2, 0x88);
        out[4 + c] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
        out[8 + c] = _mm512_shuffle_i32x4(s1, s3, 0x88);
        out[12 + c] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
    }
}

Z512 void gb_panel_pack(const gb_wrows *w, int R, gb_panel *p) {
    int64_t H = p->Kp / 16;
    for (int64_t k = 0; k < p->Kp; k += 64) {  /* 16 dwords of each row -> 16 panel rows of 64 bytes */
        __m512i r[R16], out[R16];
        for (int i = 0; i < R16; i++)
            r[i] = i < R ? _mm512_loadu_si512(w->u + i * w->ldu + k) : _mm512_setzero_si512();
        transpose16(r, out);
        for (int i = 0; i < R16; i++) _mm512_store_si512(p->u + (k / 4 + i) * 64, out[i]);
    }
    for (int64_t h = 0; h < H; h++)
        for (int r = 0; r < R16; r++) {
            p->ws[h * R16 + r] = r < R ? w->ws[r * w->ldh + h] : 0.0f;
            p->c[h * R16 + r] = r < R ? w->c[r * w->ldh + h] : 0.0f;
        }
}

INL int32_t x4(const int8_t *q) {
    int32_t v;
    memcpy(&v, q, 4);
    return v;
}

INL Z512 void panel(const gb_panel *p, const gb_xrows *x, float *res, const int BT, const int G) {
    __m512 acc[GB_PANEL_BT];
    for (int b = 0; b < BT; b++) acc[b] = _mm512_setzero_ps();
    const int64_t groups = p->Kp / G;
    for (int64_t g = 0; g < groups; g++) {
        __m512i is[GB_PANEL_BT];
        for (int b = 0; b < BT; b++) is[b] = _mm512_setzero_si512();
        const uint8_t *u = p->u + g * G * R16;
        const int8_t *q = x->q + g * G;
        for (int t = 0; t < G / 4; t++) {
            __m512i W = _mm512_load_si512(u + t * 64);
            for (int b = 0; b < BT; b++)
                is[b] = _mm512_dpbusd_epi32(is[b], W, _mm512_set1_epi32(x4(q + b * x->ldq + 4 * t)));
        }
        const int64_t h = g * (G / 16);
        __m512 WS = _mm512_load_ps(p->ws + h * R16), C = _mm512_load_ps(p->c + h * R16);
        for (int b = 0; b < BT; b++) {
            const float *xd = x->xd + b * x->ldh + h;
            float dx = x->dxe[b * x->ldh + h], s = G == 32 ? xd[0] + xd[1] : xd[0];
            acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[b]), _mm512_mul_ps(WS, _mm512_set1_ps(dx)), acc[b]);
            acc[b] = _mm512_fmadd_ps(C, _mm512_set1_ps(s), acc[b]);
        }
    }
    for (int b = 0; b < BT; b++) _mm512_storeu_ps(res + b * R16, acc[b]);
}

#define PANEL(BT)                                                                                   \
    static Z512 void panel_##BT(const gb_panel *p, const gb_xrows *x, float *res, int g32) {         \
        if (g32) panel(p, x, res, BT, 32); else panel(p, x, res, BT, 16);                            \
    }
PANEL(1) PANEL(2) PANEL(3) PANEL(4) PANEL(5) PANEL(6) PANEL(7) PANEL(8)

void gb_panel_tile(const gb_panel *p, const gb_xrows *x, int bt, int g32, float *res) {
    static void (*const fns[GB_PANEL_BT + 1])(const gb_panel *, const gb_xrows *, float *, int) = {
        0, panel_1, panel_2, panel_3, panel_4, panel_5, panel_6, panel_7, panel_8};
    fns[bt](p, x, res, g32);
}
