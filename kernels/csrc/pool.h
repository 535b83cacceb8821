/* A small thread pool for the native CPU kernels (pool.c): the caller plus nthreads - 1 workers.
 *
 * Why not OpenMP: a shared machine preempts threads, and OpenMP's spinning workers then hold up
 * every parallel region until the OS runs them again (a GEMV ran several times slower with one
 * other busy process). These workers spin briefly, then sleep on a futex (a woken thread
 * is scheduled promptly), and items are handed out one at a time, so a late worker only means
 * the caller does more of the items itself. */
#pragma once
#include <stdint.h>

typedef void (*rl_item_fn)(void *ctx, int64_t item);

/* Run fn(ctx, i) for i in [0, n) on nthreads threads (the caller included); returns when all are done. */
void rl_parallel(rl_item_fn fn, void *ctx, int64_t n, int nthreads);
