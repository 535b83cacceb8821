/* GGUF block weights multiplied in their own format (gguf_unpack.c, gguf_dot.c).
 *
 * The quantized types are multiplied as integers: each weight row is unpacked, a few rows at a time
 * into a thread's scratch, to one unsigned byte u[k] per weight with, per group of 16 weights
 * ("half" of a 32-block), a float scale ws[h] and a float offset c[h]:
 *
 *   w[k] = ws[h] * u[k] + c[h]                 (h = k / 16)
 *
 * (Q4_0: ws = d, c = -8 d; Q4_1: ws = d, c = m; Q5_0: c = -16 d; Q8_0: u = q + 128, c = -128 d;
 * Q4_K/Q5_K: ws = d * sc, c = -dmin * m; Q6_K: ws = d * sc, c = -32 d * sc.) Each activation row is
 * quantized once per call to int8 blocks of 32 (xq = round(x / dx), dx = max|x| / 127 per block, as
 * ggml's Q8_0), so a row's dot product is
 *
 *   sum_h dx[h] * (ws[h] * sum_{k in h} u[k] xq[k]  +  c[h] * sum_{k in h} xq[k])
 *
 * with the inner sums exact in int32 (maddubs + madd on AVX2, vpdpbusd on AVX-512 VNNI; from 4 activation
 * rows AVX-512 repacks 16 unpacked rows into a VNNI panel, gguf_panel.h). F32, F16
 * and BF16 rows are converted to float32 and multiplied with the float32 activations. */
#pragma once
#include <stdint.h>

enum { GB_F32 = 0, GB_F16 = 1, GB_Q4_0 = 2, GB_Q4_1 = 3, GB_Q5_0 = 6, GB_Q5_1 = 7, GB_Q8_0 = 8,
       GB_Q4_K = 12, GB_Q5_K = 13, GB_Q6_K = 14, GB_BF16 = 30 };
/* The instruction sets of the block kernels. GB_ISA_AVX2 is the AVX2 code, on aarch64 through rl_simd.h's
 * NEON lowering ("neon"); GB_ISA_NEON_DOT (aarch64 with SDOT) runs that code but multiplies the unpacked
 * rows with native SDOT tiles (gguf_tiles_neon.c) at every batch size. */
enum { GB_ISA_SCALAR = 0, GB_ISA_AVX2 = 1, GB_ISA_AVX512 = 2, GB_ISA_NEON_DOT = 3 };

/* 1 for F32/F16/BF16 (float path), 0 for the block types, -1 for a type this file does not know. */
int gb_is_float(int qtype);
/* bytes of one row of K values */
int64_t gb_row_bytes(int qtype, int64_t K);
/* One quantized row of K values (K a multiple of the type's block) -> u[K], ws[K/16], c[K/16].
 * offset128: Q8_0's u = q + 128 (else u = (uint8_t)q, c = 0: the signed AVX2 path). */
void gb_unpack_row(int qtype, const uint8_t *row, int64_t K, uint8_t *u, float *ws, float *c, int offset128);
/* The same in AVX2 (gguf_unpack_avx2.c), for the AVX2 and AVX-512 paths. */
void gb_unpack_row_avx2(int qtype, const uint8_t *row, int64_t K, uint8_t *u, float *ws, float *c, int offset128);
/* What gguf_matmul.c's rl_gguf_linear_into does with each result v = (x W^T)[t, c] + bias[c]. */
enum { GB_EPI_STORE = 0,     /* y = v, or add + v */
       GB_EPI_SILU_MUL = 1 }; /* y = silu(y) * v: y holds the gate projection, W is the up one */
/* y[t * ldy + c] for c < N by the epilogue epi (add: [M, ldy] like y, or NULL); the rest as rl_gguf_linear. */
int rl_gguf_linear_into(const float *x, int M, const uint8_t *w, int qtype, const float *bias, const float *add,
                        float *y, int64_t ldy, int epi, int64_t N, int64_t K, int isa, int nthreads);
/* One F32/F16/BF16 row of K values -> float32 w[K]. */
void gb_float_row(int qtype, const uint8_t *row, int64_t K, float *w);
