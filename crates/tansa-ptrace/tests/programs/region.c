/*
 * Test target for `tansa retrace`: a region (`work`) of a few hundred instructions with
 * branches that depend on the iteration of its loop, calls, and a nested loop, run
 * `argv[1]` times with the same input, so every execution takes the same path.
 *
 * Built by the tests with:  cc -O1 -g -fno-inline -o region region.c
 * (-fno-inline keeps the helpers as real calls; -g gives source lines.)
 *
 * With argv[1] = 0 the region never runs (the "exits before the region" case). argv[2]
 * sets the loop's trip count (default 12, about 400 instructions; 100 gives about 3400).
 */
#include <stdlib.h>

static volatile int sink;
static volatile int seed = 7; /* read every time: the compiler cannot hoist work() */
static volatile int rounds = 12;

__attribute__((noinline)) static int mix(int a, int b) {
    return (a * 31) ^ (b >> 2) ^ 0x5bd1;
}

__attribute__((noinline)) static int odd_step(int x, int i) {
    int s = 0;
    for (int k = 0; k <= (i & 3); k++) /* inner trip count depends on the iteration */
        s += (x >> k) & 0xff;
    return s;
}

__attribute__((noinline)) static int even_step(int x, int i) {
    if (i % 4 == 0)
        return x - i * 3;
    return x + (i << 1);
}

__attribute__((noinline)) int work(int seed) {
    int acc = seed;
    for (int i = 0; i < rounds; i++) {
        if (i % 3 == 0)
            acc = mix(acc, i);
        else if (i & 1)
            acc += odd_step(acc, i);
        else
            acc = even_step(acc, i);
        if (acc < 0)
            acc = -acc;
    }
    return acc;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    if (argc > 2)
        rounds = atoi(argv[2]);
    for (long k = 0; k < n; k++)
        sink += work(seed);
    return 0;
}
