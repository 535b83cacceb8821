/* Register tiles of the GGUF block matmul (gguf_tiles.c), R <= 4 unpacked weight rows times BT <= 4
 * activation rows, for one ISA: res[b * R + r] = dot(x row b, weight row r) over the padded K. */
#pragma once
#include <stdint.h>

#define GB_MAX_TILE 4

/* R unpacked weight rows: row r's u at u + r * ldu (Kp bytes), its ws / c at ws / c + r * ldh (Kp / 16). */
typedef struct {
    const uint8_t *u;
    const float *ws, *c, *f;  /* f: float rows (F32/F16/BF16) at f + r * ldu */
    int64_t ldu, ldh;
} gb_wrows;

/* BT quantized activation rows: row b's int8 q at q + b * ldq, dx / dx * sum per 16 at dxe / xd + b * ldh,
 * the int sum of each 32-block at xs + b * lds; float rows (the float types) at f + b * ldq. */
typedef struct {
    const int8_t *q;
    const float *dxe, *xd, *f;
    const int32_t *xs;
    int64_t ldq, ldh, lds;
} gb_xrows;

typedef void (*gb_tile_fn)(const gb_wrows *w, const gb_xrows *x, int64_t Kp, float *res);

typedef struct {
    gb_tile_fn quant[GB_MAX_TILE + 1][GB_MAX_TILE + 1];   /* [R][BT], unsigned u (u <= 127 on AVX2) */
    gb_tile_fn signed8[GB_MAX_TILE + 1][GB_MAX_TILE + 1]; /* AVX2: Q8_0's u read as int8 (offset128 = 0) */
    gb_tile_fn flt[GB_MAX_TILE + 1][GB_MAX_TILE + 1];
    int offset128;  /* how this ISA wants Q8_0 unpacked */
    int max_bt;     /* activation rows per tile */
} gb_isa_tiles;

/* The tiles of GB_ISA_SCALAR / AVX2 / AVX512 (AVX512: F, BW, VL and VNNI). */
const gb_isa_tiles *gb_tiles(int isa);
