/* main -> level1 -> level2 -> level3, the time in level3. Built with
 * -O2 -fomit-frame-pointer: only DWARF CFI can unwind it. Work after each call keeps the
 * calls from becoming tail calls, so every frame is really on the stack. */
#include <stdio.h>
#include <stdlib.h>

#define KEEP() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) double level3(long n, double seed) {
    double x = seed;
    for (long i = 0; i < n; i++)
        x = x * 0.999999 + (double)(i & 7);
    return x;
}

__attribute__((noinline)) double level2(long n, double seed) {
    double x = level3(n, seed);
    KEEP();
    return x * 0.5 + 1.0;
}

__attribute__((noinline)) double level1(long n, double seed) {
    double x = level2(n, seed);
    KEEP();
    return x * 0.5 + 2.0;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 300;
    double s = 0;
    for (long r = 0; r < rounds; r++) {
        s = level1(1000000, s);
        KEEP();
    }
    printf("%f\n", s);
    return 0;
}
