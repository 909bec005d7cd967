/* Seed program of the CPU and instruction-trace fuzz corpora: a hot function called many
 * times. Built by fuzz/seed.sh with: cc -g -O1 spin.c -o spin */
#include <stdlib.h>

__attribute__((noinline)) long work(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) {
        s += (i % 7) * (i % 3);
        if (i % 5 == 0) s ^= i;
    }
    return s;
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 1000;
    long size = argc > 2 ? atol(argv[2]) : 3000;
    long t = 0;
    for (long k = 0; k < calls; k++) t += work(size + (k & 3));
    return (int)(t & 1);
}
