/* The library of `swapped` (swapped.c): one allocation, and a loop to be sampled in.
 * Built at test time with: cc -shared -fPIC -g -O1 -o libswapped.so swapped_lib.c */
#include <stdlib.h>
#include <time.h>

void *swapped_alloc(size_t n) { return malloc(n); }

/* Spins for `ms` milliseconds of CPU time; returns a value the compiler cannot drop. */
long swapped_spin(long ms) {
    struct timespec t0, t;
    long x = 0;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    do {
        for (int i = 0; i < 100000; i++) x = x * 31 + i;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
    return x;
}
