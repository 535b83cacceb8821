/* softmax_chunks.c compiled a second time for float16 KV pools: rl_attend_keys_f16, whose K/V loads
 * widen 8 halves to 8 floats (F16C; SIMDe's NEON lowering off x86). */
#define RL_KV_HALF 1
#include "softmax_chunks.c"
