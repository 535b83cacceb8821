/* The x86 SIMD intrinsics every kernel here is written in, on any CPU.
 *
 * x86-64: the compiler's own <immintrin.h>. Elsewhere (aarch64 Linux, Apple Silicon): SIMDe's
 * implementations of the same intrinsics (https://github.com/simd-everywhere/simde, MIT, the
 * `simde-py` package's headers; kernels/cpu_native.py adds its include path), which lower each one
 * to NEON instructions where NEON has an equivalent and to plain C loops the compiler vectorizes
 * elsewhere. RL_TARGET marks x86 code compiled for an ISA the build flags do not assume (AVX-512):
 * on other CPUs it is empty and those paths are never chosen at run time (gguf_matmul.c's
 * rl_gguf_best_isa, gemv.c's f32_kind). */
#pragma once

#if defined(__x86_64__) || defined(_M_X64)
#define RL_X86 1
#include <immintrin.h>
#define RL_TARGET(isa) __attribute__((target(isa)))
#else
#define RL_X86 0
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx2.h>
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <simde/x86/fma.h>
#ifndef _MM_FROUND_NO_EXC
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#endif
#define RL_TARGET(isa)
#include <stdint.h>
/* the two intrinsics the kernels use that SIMDe lacks */
static inline float _cvtsh_ss(uint16_t h) {
    return simde_mm_cvtss_f32(simde_mm_cvtph_ps(simde_mm_cvtsi32_si128((int32_t)h)));
}
static inline float _mm512_reduce_add_ps(simde__m512 v) {  /* AVX-512 paths only: never run here */
    float f[16], s = 0.0f;
    simde_mm512_storeu_ps(f, v);
    for (int i = 0; i < 16; i++) s += f[i];
    return s;
}
#endif

/* run-time CPU features the kernels choose their paths by */
#if RL_X86
static inline int rl_cpu_has_avx512f(void) { return __builtin_cpu_supports("avx512f"); }
static inline int rl_cpu_has_avx512_vnni(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}
#else
static inline int rl_cpu_has_avx512f(void) { return 0; }
static inline int rl_cpu_has_avx512_vnni(void) { return 0; }
#endif

/* aarch64's int8 dot product (SDOT, Armv8.2 FEAT_DotProd) */
#if defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
static inline int rl_cpu_has_dotprod(void) {
    int v = 0;
    size_t n = sizeof v;
    return sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &n, NULL, 0) == 0 && v;
}
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#define RL_HWCAP_ASIMDDP (1UL << 20)
static inline int rl_cpu_has_dotprod(void) { return (getauxval(AT_HWCAP) & RL_HWCAP_ASIMDDP) != 0; }
#else
static inline int rl_cpu_has_dotprod(void) { return 0; }
#endif
