/* The GGUF block matmul of an aarch64 build, run under qemu-user by tests/kernels/test_aarch64_qemu.py
 * (the Python stack does not run under emulation; this driver is all that does).
 *
 *   gguf_driver --best-isa               prints rl_gguf_best_isa() (the run-time choice on this CPU)
 *   gguf_driver CASES OUT ISA            runs every case of CASES on ISA (gguf_blocks.h's GB_ISA_*) and
 *                                        writes each case's y, float32 [M, N], one after the other, to OUT
 *
 * CASES (little-endian): int32 count, then per case int32 qtype, M, N, K, int64 bytes of W, float32
 * x [M, K], W's raw GGUF rows. Exit 1 on a bad file, 2 when rl_gguf_linear refuses a case. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rl_gguf_linear(const float *x, int M, const uint8_t *w, int qtype, const float *bias, float *y, int64_t N,
                   int64_t K, int isa, int nthreads);
int rl_gguf_best_isa(void);

static void *read_n(FILE *f, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "gguf_driver: the cases file ends early\n");
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
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
