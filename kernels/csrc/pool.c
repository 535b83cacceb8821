/* The thread pool of pool.h. One job at a time (a mutex serialises callers). A job is published
 * by writing its fields, then `claim` (gen << 32 | next item), then bumping `gen` (a futex word).
 * Items are claimed by a CAS on `claim` that checks the generation; when a job is over the caller
 * closes it (next item = 0xffffffff) before writing the next job's fields, so a worker holding a
 * stale generation, or fields read across two jobs, can never claim an item. The caller waits for
 * `done == n` (the items the workers finished). */
#define _GNU_SOURCE
#include "pool.h"

#include "rl_simd.h"
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 255
#define SPIN_SECONDS 50e-6  /* a worker spins this long, then sleeps (longer spins measured no faster, and slower under load) */

static struct {
    pthread_mutex_t lock;
    int nworkers;
    pthread_t threads[MAX_WORKERS];
    _Atomic uint32_t gen;      /* futex word: bumped per job (and to stop) */
    _Atomic int stop;
    _Atomic int sleepers;
    _Atomic(rl_item_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t n;
    _Atomic uint64_t claim;    /* gen << 32 | next item */
    _Atomic int64_t done;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

/* Claim the next item of job `gen` (of n items); -1 when none is left or the job is over. */
static int64_t claim(uint32_t gen, int64_t n) {
    uint64_t c = atomic_load_explicit(&P.claim, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(c >> 32) != gen || (int64_t)(c & 0xffffffffu) >= n) return -1;
        if (atomic_compare_exchange_weak_explicit(&P.claim, &c, c + 1, memory_order_acq_rel, memory_order_acquire))
            return (int64_t)(c & 0xffffffffu);
    }
}

static void *worker(void *arg) {
    (void)arg;
    uint32_t seen = atomic_load(&P.gen);
    for (;;) {
        uint32_t g;
        double idle_since = now();
        for (int i = 1; (g = atomic_load_explicit(&P.gen, memory_order_acquire)) == seen; i++) {
            _mm_pause();
            if (i % 256 || now() - idle_since < SPIN_SECONDS) continue;
            atomic_fetch_add(&P.sleepers, 1);
            futex_wait(&P.gen, seen);
            atomic_fetch_sub(&P.sleepers, 1);
            idle_since = now();
        }
        seen = g;
        if (atomic_load(&P.stop)) return NULL;
        rl_item_fn fn = atomic_load_explicit(&P.fn, memory_order_acquire);
        void *ctx = atomic_load_explicit(&P.ctx, memory_order_acquire);
        int64_t n = atomic_load_explicit(&P.n, memory_order_acquire);
        for (int64_t i; (i = claim(g, n)) >= 0;) {
            fn(ctx, i);
            atomic_fetch_add_explicit(&P.done, 1, memory_order_release);
        }
    }
}

static void stop_workers(void) {
    atomic_store(&P.stop, 1);
    atomic_fetch_add(&P.gen, 1);
    futex_wake_all(&P.gen);
    for (int i = 0; i < P.nworkers; i++) pthread_join(P.threads[i], NULL);
    P.nworkers = 0;
    atomic_store(&P.stop, 0);
}

static void after_fork_in_child(void) {  /* the workers did not survive the fork */
    P.nworkers = 0;
    pthread_mutex_init(&P.lock, NULL);
}

static void resize(int nworkers) {
    static int registered;
    if (!registered) {
        pthread_atfork(NULL, NULL, after_fork_in_child);
        registered = 1;
    }
    if (P.nworkers) stop_workers();
    for (int i = 0; i < nworkers; i++) {
        if (pthread_create(&P.threads[i], NULL, worker, NULL)) break;
        P.nworkers = i + 1;
    }
}

void rl_parallel(rl_item_fn fn, void *ctx, int64_t n, int nthreads) {
    if (n <= 0) return;
    int want = nthreads - 1 < MAX_WORKERS ? nthreads - 1 : MAX_WORKERS;
    if (want <= 0 || n == 1) {
        for (int64_t i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&P.lock);
    if (P.nworkers != want) resize(want);
    atomic_store_explicit(&P.fn, fn, memory_order_release);
    atomic_store_explicit(&P.ctx, ctx, memory_order_release);
    atomic_store_explicit(&P.n, n, memory_order_release);
    atomic_store_explicit(&P.done, 0, memory_order_release);
    uint32_t gen = atomic_load(&P.gen) + 1;
    atomic_store_explicit(&P.claim, (uint64_t)gen << 32, memory_order_release);
    atomic_store_explicit(&P.gen, gen, memory_order_release);
    if (atomic_load(&P.sleepers)) futex_wake_all(&P.gen);
    int64_t mine = 0;
    for (int64_t i; (i = claim(gen, n)) >= 0; mine++) fn(ctx, i);
    for (int spins = 0; atomic_load_explicit(&P.done, memory_order_acquire) + mine < n; spins++) {
        if (spins < 2000) _mm_pause();
        else sched_yield();  /* a preempted worker holds an item: let it run */
    }
    atomic_store_explicit(&P.claim, ((uint64_t)gen << 32) | 0xffffffffu, memory_order_release);  /* closed */
    pthread_mutex_unlock(&P.lock);
}
