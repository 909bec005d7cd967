/* 70 % of the iterations in exe_work (this executable), 30 % in lib_work (libshare.so).
 * Each call depends on the previous result, so the compiler cannot hoist or merge them. */
#include <stdio.h>
#include <stdlib.h>

double lib_work(long n, double seed);

__attribute__((noinline)) double exe_work(long n, double seed) {
    double x = seed;
    for (long i = 0; i < n; i++)
        x = x * 0.999999 + (double)(i & 7);
    return x;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 400;
    double s = 0;
    for (long r = 0; r < rounds; r++) {
        s = exe_work(700000, s);
        s = lib_work(300000, s);
    }
    printf("%f\n", s);
    return 0;
}
