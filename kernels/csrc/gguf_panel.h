/* The AVX-512 VNNI panel of the GGUF block matmul (gguf_panel.c): 16 unpacked weight rows packed so
 * one 64-byte load holds 4 consecutive weights of each row ([Kp / 4][16][4], the VNNI layout), times
 * up to 8 activation rows. A vpdpbusd per 4 weights of the 16 rows and one activation row sums a whole
 * scale group (16 or 32 weights) exactly in int32 lanes, one lane per weight row, so the group is
 * converted and scaled once, not once per 4 weights as in the row-major tiles (gguf_tiles.c). */
#pragma once
#include "gguf_tiles.h"

#include <stddef.h>
#include <stdint.h>

#define GB_PANEL_ROWS 16
#define GB_PANEL_BT 8

/* A packed panel: u at [k / 4][r][k % 4], ws and c at [h][r] (h = k / 16). */
typedef struct {
    uint8_t *u;
    float *ws, *c;
    int64_t Kp;
} gb_panel;

/* Bytes a panel of Kp weights per row needs (64-byte aligned parts). */
size_t gb_panel_bytes(int64_t Kp);
/* Lay out a panel in buf (aligned to 64, gb_panel_bytes(Kp) long). */
gb_panel gb_panel_at(void *buf, int64_t Kp);
/* Pack R <= 16 row-major unpacked rows (gguf_tiles.h's gb_wrows) into p; rows past R are zero. */
void gb_panel_pack(const gb_wrows *w, int R, gb_panel *p);
/* res[b * 16 + r] = dot(activation row b, weight row r) for bt <= 8 rows of x (q, dxe, xd).
 * g32: each 32-group of weights shares one ws and one c (every block type but Q6_K). */
void gb_panel_tile(const gb_panel *p, const gb_xrows *x, int bt, int g32, float *res);
