/* y[M, N] = x[M, K] @ W^T (+ bias) for a GGUF weight W in its own format (gguf_blocks.h).
 *
 * The activation rows are prepared once per call (quantized to int8 blocks of 32, or copied as float
 * for the float types), padded with zeros to Kp (a multiple of 64). A work item is a block of weight
 * rows; it unpacks 4 rows at a time into the thread's scratch (L1-sized for K ~ 5000) and runs the
 * ISA's tiles over every group of activation rows, so each weight byte is read from memory once per
 * call and unpacked once, whatever M is. */
#include "gguf_blocks.h"
#include "gguf_decode.h"
#include "gguf_panel.h"
#include "gguf_simd.h"
#include "gguf_tiles.h"
#include "pool.h"

#include "rl_simd.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RL_GGUF_ABI 1
#define UNPACK_SMALL_M 2     /* up to this many x rows (memory-bound), unpack ... */
#define UNPACK_SMALL_ROWS 2  /* ... this many weight rows at a time (fewer concurrent DRAM streams) */
#define PANEL_MIN_M 4        /* from this many x rows, AVX-512 runs 16-row panels (gguf_panel.h) */
/* Up to this many x rows run the decode kernels: each weight block decoded once meets up to 8 x rows
 * (gguf_decode.c), and each row's sums are those of a one-row call, bit for bit, so a verify step's
 * rows (speculative decoding) and small decode batches give the logits one token a step gives.
 * runtime/scheduler/speculation.py's VERIFY_MAX_ROWS keeps verify steps within it. */
#define DECODE_MAX_M 16

int rl_gguf_abi(void) { return RL_GGUF_ABI; }

/* x86-64: GB_ISA_AVX512 (F/BW/VL/VNNI), else GB_ISA_AVX2 (the x86 build's floor, see kernels/cpu_native.py);
 * aarch64: GB_ISA_NEON_DOT where the CPU has SDOT, else GB_ISA_AVX2 (NEON through rl_simd.h);
 * any other CPU: GB_ISA_SCALAR (portable C). */
int rl_gguf_best_isa(void) {
#if RL_X86
    return rl_cpu_has_avx512_vnni() ? GB_ISA_AVX512 : GB_ISA_AVX2;
#elif defined(__aarch64__)
    return rl_cpu_has_dotprod() ? GB_ISA_NEON_DOT : GB_ISA_AVX2;
#else
    return GB_ISA_SCALAR;
#endif
}

/* One activation row: q[Kp] = round(x / dx) per 32-block (dx = max|x| / 127), dxe[h] = dx,
 * xd[h] = dx * sum of the 16 q of group h; zero past K. K is a multiple of 32. */
static void quantize_row(const float *x, int64_t K, int64_t Kp, int8_t *q, float *dxe, float *xd, int32_t *xs) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t j = 0; j < K / 32; j++) {
        const float *xb = x + 32 * j;
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * i)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float d = _mm_cvtss_f32(m4) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256i v[4];
        for (int i = 0; i < 4; i++) v[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * i), _mm256_set1_ps(id)));
        int32_t s[2] = {0, 0};
        for (int i = 0; i < 4; i++) {
            int32_t lane[8];
            _mm256_storeu_si256((__m256i *)lane, v[i]);
            for (int l = 0; l < 8; l++) {
                q[32 * j + 8 * i + l] = (int8_t)lane[l];
                s[i / 2] += lane[l];
            }
        }
        xs[j] = s[0] + s[1];
        for (int h = 0; h < 2; h++) {
            dxe[2 * j + h] = d;
            xd[2 * j + h] = d * (float)s[h];
        }
    }
    memset(q + K, 0, (size_t)(Kp - K));
    for (int64_t h = K / 16; h < Kp / 16; h++) dxe[h] = xd[h] = 0.0f;
    for (int64_t h = K / 32; h < Kp / 32; h++) xs[h] = 0;
}

typedef struct {
    const gb_isa_tiles *tiles;
    int qtype, flt, M, isa, decode;  /* decode: gguf_decode.c's rows (up to DECODE_MAX_M x rows) */
    int panel;                       /* 16-row VNNI panels (gguf_panel.h) instead of the tiles */
    int64_t N, K, Kp, rb, wbytes;
    const uint8_t *w;
    const float *x, *bias, *add;
    float *y;
    int64_t ldy;  /* y's (and add's) row stride: a part writes its columns of a wider y */
    int epi;      /* GB_EPI_* (gguf_blocks.h): what a result does to y */
    int8_t *xq;
    float *dxe, *xd, *xf;
    int32_t *xs;
} gb_job;

static void prepare_row(void *ctx, int64_t b) {
    gb_job *j = ctx;
    if (j->flt) {
        memcpy(j->xf + b * j->Kp, j->x + b * j->K, (size_t)j->K * 4);
        memset(j->xf + b * j->Kp + j->K, 0, (size_t)(j->Kp - j->K) * 4);
    } else {
        quantize_row(j->x + b * j->K, j->K, j->Kp, j->xq + b * j->Kp, j->dxe + b * (j->Kp / 16),
                     j->xd + b * (j->Kp / 16), j->xs + b * (j->Kp / 32));
    }
}

/* the thread's scratch for 4 unpacked rows (grown on demand, kept for the thread's life) */
static __thread void *scratch;
static __thread size_t scratch_size;

static void *scratch_for(size_t bytes) {
    if (bytes > scratch_size) {
        free(scratch);
        scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
        scratch_size = scratch ? bytes : 0;
    }
    return scratch;
}

/* unpack rows [n, n + R) into the scratch (room for cap rows) at a row stride of Kp (groups: Kp / 16),
 * zero past K */
static void unpack_rows(const gb_job *j, int64_t n, int R, int cap, gb_wrows *wr, void *buf) {
    int64_t Kp = j->Kp, H = Kp / 16, K = j->K;
    if (j->flt) {
        float *f = buf;
        for (int r = 0; r < R; r++) {
            gb_float_row(j->qtype, j->w + (n + r) * j->wbytes, K, f + r * Kp);
            memset(f + r * Kp + K, 0, (size_t)(Kp - K) * 4);
        }
        *wr = (gb_wrows){.f = f, .ldu = Kp};
        return;
    }
    float *ws = buf, *c = ws + cap * H;
    uint8_t *u = (uint8_t *)(c + cap * H);
    for (int r = 0; r < R; r++) {
        (j->isa == GB_ISA_SCALAR ? gb_unpack_row : gb_unpack_row_avx2)(
            j->qtype, j->w + (n + r) * j->wbytes, K, u + r * Kp, ws + r * H, c + r * H, j->tiles->offset128);
        memset(u + r * Kp + K, 0, (size_t)(Kp - K));
        for (int64_t h = K / 16; h < H; h++) ws[r * H + h] = c[r * H + h] = 0.0f;
    }
    *wr = (gb_wrows){.u = u, .ws = ws, .c = c, .ldu = Kp, .ldh = H};
}

/* y rows [b0, b0 + bt), columns [n, n + R) from res[b * lr + r] by the job's epilogue: v = res + bias;
 * GB_EPI_STORE: y = v, or add + v with add (the torch path's rounding: the residual added last);
 * GB_EPI_SILU_MUL: y = silu(y) * v (y holds the gate's result, v is the up projection's; 8 lanes at a
 * time by gb_silu8 where the ISA has AVX2). */
static void store(const gb_job *j, int64_t n, int b0, int R, int bt, const float *res, int lr) {
    for (int b = 0; b < bt; b++) {
        float *y = j->y + (int64_t)(b0 + b) * j->ldy + n;
        const float *rr = res + b * lr, *add = j->add ? j->add + (int64_t)(b0 + b) * j->ldy + n : NULL;
        int r = 0;
        if (j->epi == GB_EPI_SILU_MUL && j->isa != GB_ISA_SCALAR)
            for (; r + 8 <= R; r += 8) {
                __m256 v = _mm256_loadu_ps(rr + r);
                if (j->bias) v = _mm256_add_ps(v, _mm256_loadu_ps(j->bias + n + r));
                _mm256_storeu_ps(y + r, _mm256_mul_ps(gb_silu8(_mm256_loadu_ps(y + r)), v));
            }
        for (; r < R; r++) {
            float v = rr[r] + (j->bias ? j->bias[n + r] : 0.0f);
            y[r] = j->epi == GB_EPI_SILU_MUL ? y[r] / (1.0f + expf(-y[r])) * v : add ? add[r] + v : v;
        }
    }
}

/* rows [n0, n1) of y by 16-row panels: unpack, pack, then every group of 8 x rows */
static void panel_rows(const gb_job *j, int64_t n0, int64_t n1) {
    int64_t H = j->Kp / 16;
    size_t rows_bytes = (size_t)GB_PANEL_ROWS * ((size_t)j->Kp + 2 * (size_t)H * 4);
    uint8_t *buf = scratch_for((rows_bytes + 63) / 64 * 64 + gb_panel_bytes(j->Kp));
    gb_panel p = gb_panel_at(buf + (rows_bytes + 63) / 64 * 64, j->Kp);
    int g32 = j->qtype != GB_Q6_K;
    float res[GB_PANEL_BT * GB_PANEL_ROWS];
    for (int64_t n = n0; n < n1; n += GB_PANEL_ROWS) {
        int R = n1 - n < GB_PANEL_ROWS ? (int)(n1 - n) : GB_PANEL_ROWS;
        gb_wrows wr;
        unpack_rows(j, n, R, GB_PANEL_ROWS, &wr, buf);
        gb_panel_pack(&wr, R, &p);
        for (int b0 = 0; b0 < j->M; b0 += GB_PANEL_BT) {
            int bt = j->M - b0 < GB_PANEL_BT ? j->M - b0 : GB_PANEL_BT;
            gb_xrows xr = {.q = j->xq + b0 * j->Kp, .dxe = j->dxe + b0 * H, .xd = j->xd + b0 * H,
                           .ldq = j->Kp, .ldh = H};
            gb_panel_tile(&p, &xr, bt, g32, res);
            store(j, n, b0, R, bt, res, GB_PANEL_ROWS);
        }
    }
}

static void linear_item(void *ctx, int64_t item) {
    const gb_job *j = ctx;
    int64_t n0 = item * j->rb, n1 = n0 + j->rb < j->N ? n0 + j->rb : j->N, H = j->Kp / 16;
    void *buf = scratch_for((size_t)GB_MAX_TILE * (size_t)j->Kp * 4 + 2 * GB_MAX_TILE * (size_t)H * 4);
    int sgn = j->qtype == GB_Q8_0 && !j->tiles->offset128;
    float res[GB_MAX_TILE * DECODE_MAX_M];
    if (j->decode) {
        gb_xrows xr = {.q = j->xq, .dxe = j->dxe, .xd = j->xd, .xs = j->xs, .ldq = j->Kp, .ldh = H, .lds = j->Kp / 32};
        for (int64_t n = n0; n < n1; n += GB_MAX_TILE) {
            int R = n1 - n < GB_MAX_TILE ? (int)(n1 - n) : GB_MAX_TILE;
            (j->decode == 2 ? gb_decode_rows_k : gb_decode_rows)(j->isa, j->qtype, j->w + n * j->wbytes, j->wbytes, R,
                                                                 j->K, &xr, j->M, res);
            store(j, n, 0, R, j->M, res, R);
        }
        return;
    }
    if (j->panel) {
        panel_rows(j, n0, n1);
        return;
    }
    int group = j->M <= UNPACK_SMALL_M ? UNPACK_SMALL_ROWS : GB_MAX_TILE;
    for (int64_t n = n0; n < n1; n += group) {
        int R = n1 - n < group ? (int)(n1 - n) : group;
        gb_wrows wr;
        unpack_rows(j, n, R, GB_MAX_TILE, &wr, buf);
        for (int b0 = 0; b0 < j->M; b0 += j->tiles->max_bt) {
            int bt = j->M - b0 < j->tiles->max_bt ? j->M - b0 : j->tiles->max_bt;
            gb_xrows xr = {.q = j->xq + b0 * j->Kp, .dxe = j->dxe + b0 * H, .xd = j->xd + b0 * H,
                           .f = j->xf + b0 * j->Kp, .ldq = j->Kp, .ldh = H};
            gb_tile_fn fn = j->flt ? j->tiles->flt[R][bt] : sgn ? j->tiles->signed8[R][bt] : j->tiles->quant[R][bt];
            fn(&wr, &xr, j->Kp, res);
            store(j, n, b0, R, bt, res, R);
        }
    }
}

/* y[M, N] = x[M, K] @ W^T (+ bias[N]); W: N rows of gb_row_bytes(qtype, K) bytes. isa: GB_ISA_*.
 * Returns 0, or -1 for an unknown type / K that is not whole blocks / no memory (y untouched). */
int rl_gguf_linear(const float *x, int M, const uint8_t *w, int qtype, const float *bias, float *y, int64_t N,
                   int64_t K, int isa, int nthreads) {
    return rl_gguf_linear_into(x, M, w, qtype, bias, NULL, y, N, GB_EPI_STORE, N, K, isa, nthreads);
}

/* gguf_blocks.h */
int rl_gguf_linear_into(const float *x, int M, const uint8_t *w, int qtype, const float *bias, const float *add,
                        float *y, int64_t ldy, int epi, int64_t N, int64_t K, int isa, int nthreads) {
    int flt = gb_is_float(qtype);
    int64_t block = qtype == GB_Q4_K || qtype == GB_Q5_K || qtype == GB_Q6_K ? 256 : flt ? 1 : 32;
    if (flt < 0 || K <= 0 || K % block || M < 0 || N < 0) return -1;
    int64_t Kp = (K + 63) / 64 * 64, H = Kp / 16;
    gb_job j = {.tiles = gb_tiles(isa), .qtype = qtype, .flt = flt, .M = M, .isa = isa, .N = N, .K = K, .Kp = Kp,
                .decode = isa != GB_ISA_SCALAR && isa != GB_ISA_NEON_DOT && M <= DECODE_MAX_M ? gb_decode_type(qtype) : 0,
                .panel = isa == GB_ISA_AVX512 && !flt && M >= PANEL_MIN_M && !(M <= DECODE_MAX_M && gb_decode_type(qtype)),
                .wbytes = gb_row_bytes(qtype, K), .w = w, .x = x, .bias = bias, .add = add, .y = y, .ldy = ldy,
                .epi = epi};
    size_t per_row = flt ? (size_t)Kp * 4 : (size_t)Kp + 2 * (size_t)H * 4 + (size_t)Kp / 32 * 4;
    void *xbuf = aligned_alloc(64, ((size_t)M * per_row + 63) / 64 * 64);
    if (!xbuf) return -1;
    if (flt) {
        j.xf = xbuf;
    } else {
        j.dxe = xbuf;
        j.xd = j.dxe + (int64_t)M * H;
        j.xs = (int32_t *)(j.xd + (int64_t)M * H);
        j.xq = (int8_t *)(j.xs + (int64_t)M * (Kp / 32));
    }
    rl_parallel(prepare_row, &j, M, M >= 8 ? nthreads : 1);
    /* work items: ~16 per thread at decode, at least 4 rows each (whole tiles) */
    int64_t items = (int64_t)nthreads * 16, rb = (N + items - 1) / items;
    int unit = j.panel ? GB_PANEL_ROWS : GB_MAX_TILE;
    j.rb = rb < unit ? unit : (rb + unit - 1) / unit * unit;
    rl_parallel(linear_item, &j, (N + j.rb - 1) / j.rb, nthreads);
    free(xbuf);
    return 0;
}

/* One row unpacked (offset128 = 1) by the isa's unpacking, for tests: w[k] = ws[k / 16] * u[k] + c[k / 16]. */
int rl_gguf_unpack_row(const uint8_t *row, int qtype, int64_t K, uint8_t *u, float *ws, float *c, int isa) {
    if (gb_is_float(qtype) != 0) return -1;
    (isa == GB_ISA_SCALAR ? gb_unpack_row : gb_unpack_row_avx2)(qtype, row, K, u, ws, c, 1);
    return 0;
}
