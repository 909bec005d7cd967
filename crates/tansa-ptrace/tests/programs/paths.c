/*
 * Test target for `tansa retrace` at sparse periods: a region (`work`) with a loop whose
 * body (about 10 instructions) is much shorter than the period, and three paths chosen
 * by the caller: execution k takes path A when k % 4 is 0 or 1 (half of them), path B
 * (8 more calls of `step`) when it is 2, path C (one call of `step`) when it is 3. Each path
 * is reproducible: the same input gives the same instructions.
 *
 * Built by the tests with:  cc -O1 -g -fno-inline -o paths paths.c
 *
 * argv[1]: executions of the region (default 1000); argv[2]: the loop's trip count
 * (default 16).
 */
#include <stdlib.h>

static volatile int sink;
static volatile int rounds = 16;

__attribute__((noinline)) static int step(int x, int i) {
    return (x * 5) ^ i;
}

__attribute__((noinline)) int work(int mode, int n) {
    int acc = 1;
    for (int i = 0; i < n; i++)
        acc += (acc >> 3) ^ i;
    if (mode == 1) {
        for (int i = 0; i < 8; i++)
            acc = step(acc, i);
    } else if (mode == 2) {
        acc = step(acc ^ 0x55, n);
    }
    return acc;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    if (argc > 2)
        rounds = atoi(argv[2]);
    for (long k = 0; k < n; k++) {
        int mode = (k % 4 == 2) ? 1 : (k % 4 == 3) ? 2 : 0;
        sink += work(mode, rounds);
    }
    return 0;
}
