/* Two functions for the builder test. Built with `cc -g -O1` (see src/agent.rs, its tests). */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long alpha(long n) {
    long x = 0;
    for (long i = 0; i < n; i++)
        x += i ^ (x >> 3);
    return x;
}

__attribute__((noinline)) long beta(long n) {
    long x = 1;
    for (long i = 0; i < n; i++)
        x = x * 3 + i;
    return x;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    printf("%ld\n", alpha(n) + beta(n));
    return 0;
}
