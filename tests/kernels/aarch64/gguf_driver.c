/* The GGUF block matmul and the float16 KV cache of an aarch64 build, run under qemu-user by
 * tests/kernels/test_aarch64_qemu.py (the Python stack does not run under emulation; this driver is all
 * that does).
 *
 *   gguf_driver --best-isa               prints rl_gguf_best_isa() (the run-time choice on this CPU)
 *   gguf_driver CASES OUT ISA            runs every case of CASES on ISA (gguf_blocks.h's GB_ISA_*) and
 *                                        writes each case's y, float32 [M, N], one after the other, to OUT
 *   gguf_driver --kv16 CASE OUT          stores CASE's K/V rows into float16 pools (rl_rope_store_kv with
 *                                        cos 1, sin 0: no rotation) and runs rl_decode_attention over them;
 *                                        writes the pools (uint16 [T, Hkv, D] each), then out float32 [bs, H, D]
 *
 * CASES (little-endian): int32 count, then per case int32 qtype, M, N, K, int64 bytes of W, float32
 * x [M, K], W's raw GGUF rows. Exit 1 on a bad file, 2 when rl_gguf_linear refuses a case.
 * CASE (--kv16): int32 T, Hkv, D, bs, H, int64 shared, float32 kv [T, 2 * Hkv * D] (k then v of each
 * slot), float32 q [bs, H, D], float scale, int64 indptr [bs + 1], int64 indices [indptr[bs]]. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rl_gguf_linear(const float *x, int M, const uint8_t *w, int qtype, const float *bias, float *y, int64_t N,
                   int64_t K, int isa, int nthreads);
int rl_gguf_best_isa(void);
void rl_rope_store_kv(float *qkv, int64_t ld, int64_t T, int H, int Hkv, int D, const float *cos_,
                      const float *sin_, const int64_t *loc, void *k_pool, void *v_pool, int kv_half);
void rl_decode_attention(const float *q, int64_t ldq, const void *k_pool, const void *v_pool,
                         const int64_t *kv_indptr, const int64_t *kv_indices, int bs, int H, int Hkv, int D,
                         int64_t shared, float scale, float *out, int nthreads, int kv_half);

static void *read_n(FILE *f, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "gguf_driver: the cases file ends early\n");
        exit(1);
    }
    return p;
}

static int kv16(const char *case_path, const char *out_path) {
    FILE *in = fopen(case_path, "rb"), *out = fopen(out_path, "wb");
    if (!in || !out) {
        perror("gguf_driver");
        return 1;
    }
    int32_t *head = read_n(in, 20);
    int64_t *shared = read_n(in, 8);
    int T = head[0], Hkv = head[1], D = head[2], bs = head[3], H = head[4];
    int64_t row = (int64_t)Hkv * D;
    float *kv = read_n(in, sizeof(float) * (size_t)(T * 2 * row)), *q = read_n(in, sizeof(float) * (size_t)bs * H * D);
    float *scale = read_n(in, 4);
    int64_t *indptr = read_n(in, 8 * (size_t)(bs + 1));
    int64_t *indices = read_n(in, 8 * (size_t)indptr[bs]);
    float *cos_ = malloc(sizeof(float) * (size_t)T * D), *sin_ = calloc((size_t)T * D, sizeof(float));
    int64_t *loc = malloc(8 * (size_t)T);
    uint16_t *k_pool = calloc((size_t)(T * row), 2), *v_pool = calloc((size_t)(T * row), 2);
    float *o = calloc((size_t)bs * H * D, sizeof(float));
    for (int64_t i = 0; i < (int64_t)T * D; i++) cos_[i] = 1.0f;
    for (int t = 0; t < T; t++) loc[t] = t;
    rl_rope_store_kv(kv, 2 * row, T, 0, Hkv, D, cos_, sin_, loc, k_pool, v_pool, 1);
    rl_decode_attention(q, (int64_t)H * D, k_pool, v_pool, indptr, indices, bs, H, Hkv, D, *shared, *scale, o, 2, 1);
    fwrite(k_pool, 2, (size_t)(T * row), out);
    fwrite(v_pool, 2, (size_t)(T * row), out);
    fwrite(o, 4, (size_t)bs * H * D, out);
    return fclose(out) != 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--kv16")) return kv16(argv[2], argv[3]);
    if (argc == 2 && !strcmp(argv[1], "--best-isa")) {
        printf("%d\n", rl_gguf_best_isa());
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: gguf_driver --best-isa | gguf_driver CASES OUT ISA\n");
        return 1;
    }
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    if (!in || !out) {
        perror("gguf_driver");
        return 1;
    }
    int isa = atoi(argv[3]);
    int32_t *count = read_n(in, 4);
    for (int32_t c = 0; c < *count; c++) {
        int32_t *head = read_n(in, 16);
        int64_t *wbytes = read_n(in, 8);
        int qtype = head[0], M = head[1], N = head[2], K = head[3];
        float *x = read_n(in, (size_t)M * K * 4), *y = calloc((size_t)M * N + 1, 4);
        uint8_t *w = read_n(in, (size_t)*wbytes);
        if (rl_gguf_linear(x, M, w, qtype, NULL, y, N, K, isa, 2) != 0) {
            fprintf(stderr, "gguf_driver: case %d (type %d, %d x %d x %d) refused\n", c, qtype, M, N, K);
            return 2;
        }
        fwrite(y, 4, (size_t)M * N, out);
        free(head), free(wbytes), free(x), free(y), free(w);
    }
    free(count);
    return fclose(out) != 0;
}
