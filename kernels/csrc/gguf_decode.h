/* gguf_decode.c: the 32-block types at a few activation rows, decoded in registers (no scratch). */
#pragma once
#include "gguf_tiles.h"

#include <stdint.h>

/* x rows b0 .. of x (the decode kernels meet 1, 2, 4 or 8 of them per decoded weight block) */
static inline gb_xrows gb_xrows_from(const gb_xrows *x, int b0) {
    gb_xrows y = *x;
    y.q = x->q + (int64_t)b0 * x->ldq;
    y.dxe = x->dxe + (int64_t)b0 * x->ldh;
    y.xd = x->xd + (int64_t)b0 * x->ldh;
    y.xs = x->xs + (int64_t)b0 * x->lds;
    return y;
}

/* how many of n remaining x rows the next call meets: 8, 4, 2 or 1 */
static inline int gb_x_chunk(int n) { return n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1; }

/* 1 where gb_decode_rows takes the type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), 2 for gb_decode_rows_k's
 * (Q4_K, Q5_K, Q6_K), else 0 */
int gb_decode_type(int qtype);
/* res[b * R + r] = dot(x row b, weight row r) for R <= 4 weight rows at w (wbytes apart), BT rows of x
 * (needs x->q, x->dxe, x->xs; each weight block decoded once meets up to 8 of them; a row's result is
 * the same whatever BT is); isa GB_ISA_AVX2 or GB_ISA_AVX512. */
void gb_decode_rows(int isa, int qtype, const uint8_t *w, int64_t wbytes, int R, int64_t K, const gb_xrows *x,
                    int BT, float *res);
/* The same for the K-quants (gguf_decode_k.c); also needs x->xd. */
void gb_decode_rows_k(int isa, int qtype, const uint8_t *w, int64_t wbytes, int R, int64_t K, const gb_xrows *x,
                      int BT, float *res);
