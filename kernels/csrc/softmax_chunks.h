/* The online softmax of attention over chunks of keys read from the paged pools (softmax_chunks.c),
 * shared by the decode and cascade entry points of attention.c. */
#pragma once
#include <stdint.h>

#define LOG2E 1.44269504088896341f  /* scores are kept in log2 units: softmax weights are powers of 2 */
#define ATTN_CHUNK 64
#define CASCADE_TRANSPOSE_ROWS 16  /* query rows from which a transposed prefix chunk pays (one copy, all rows) */

typedef struct {
    float *acc, *m, *l, *score, *corr;  /* per query row: acc [D], running max, running sum, score [CHUNK],
                                        * the chunk's rescale of acc */
} softmax_state;

#define STATE_FLOATS(rows, D) ((int64_t)(rows) * ((D) + 3 + ATTN_CHUNK))

softmax_state rl_state_rows(float *buf, int rows, int D, int r0, int n);
softmax_state rl_new_state(float *buf, int rows, int D);

/* Continue rows [0, nq) of `st` over the keys at `slots[0..n)`: row r is query q[r] of the KV head whose
 * rows start `off[r]` elements into a pool row (pools [slots, stride elements]); a slot's `span` elements
 * from off[0] hold every head the rows read (prefetched together). `kt` (D x CHUNK floats, or NULL):
 * every row reads one head (off[r] == off[0]) and there are enough rows to pay for transposing each
 * chunk once (the cascade prefix). Scores are in log2 units: `scale` is the softmax scale x log2(e).
 * The pools hold float32 (rl_attend_keys_f32) or float16 (rl_attend_keys_f16, widened on load); the
 * arithmetic is float32 in both. */
typedef void (*rl_attend_fn)(const float *const *q, const int64_t *off, int nq, const void *k_pool,
                             const void *v_pool, int64_t stride, int64_t span, const int64_t *slots, int64_t n,
                             int D, float scale, softmax_state st, float *kt);
void rl_attend_keys_f32(const float *const *q, const int64_t *off, int nq, const void *k_pool, const void *v_pool,
                        int64_t stride, int64_t span, const int64_t *slots, int64_t n, int D, float scale,
                        softmax_state st, float *kt);
void rl_attend_keys_f16(const float *const *q, const int64_t *off, int nq, const void *k_pool, const void *v_pool,
                        int64_t stride, int64_t span, const int64_t *slots, int64_t n, int D, float scale,
                        softmax_state st, float *kt);

/* out[0..D) = row r's softmax-weighted sum (zeros for a row that saw no key). */
void rl_finish_row(const softmax_state *st, int r, int D, float *out);
