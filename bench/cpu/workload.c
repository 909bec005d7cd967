/* Benchmark workload for bench/cpu.sh: 70 % of the iterations in exe_work (this file),
 * 30 % in lib_work (cpu/libwork.c), ROUNDS rounds; prints its own elapsed wall time in
 * milliseconds on stderr, so the slowdown is measured without the recorder's start-up and
 * finishing work. Built with -O2 -g (frame pointers omitted, as distributions build). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double lib_work(long n, double seed);

__attribute__((noinline)) double exe_work(long n, double seed) {
    double x = seed;
    for (long i = 0; i < n; i++)
        x = x * 0.999999 + (double)(i & 7);
    return x;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 1000;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    double s = 0;
    for (long r = 0; r < rounds; r++) {
        s = exe_work(700000, s);
        s = lib_work(300000, s);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    fprintf(stderr, "elapsed_ms %.3f\n", (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
    printf("%f\n", s);
    return 0;
}
