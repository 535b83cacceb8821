/* gguf_decode.c: the 32-block types at 1-2 activation rows, decoded in registers (no scratch). */
#pragma once
#include "gguf_tiles.h"

#include <stdint.h>

/* 1 where gb_decode_rows takes the type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), 2 for gb_decode_rows_k's
 * (Q4_K, Q5_K, Q6_K), else 0 */
int gb_decode_type(int qtype);
/* res[b * R + r] = dot(x row b, weight row r) for R <= 4 weight rows at w (wbytes apart), BT <= 2 rows
 * of x (needs x->q, x->dxe, x->xs); isa GB_ISA_AVX2 or GB_ISA_AVX512. */
void gb_decode_rows(int isa, int qtype, const uint8_t *w, int64_t wbytes, int R, int64_t K, const gb_xrows *x,
                    int BT, float *res);
/* The same for the K-quants (gguf_decode_k.c); also needs x->xd. */
void gb_decode_rows_k(int isa, int qtype, const uint8_t *w, int64_t wbytes, int R, int64_t K, const gb_xrows *x,
                      int BT, float *res);
