/*
 * The other half of dup1.c (see there): a second `static long dup(long)`, and `main`,
 * which calls both argv[1] times (default 1000).
 */
#include <stdio.h>
#include <stdlib.h>

long call1(long);
static volatile long sink;

__attribute__((noinline)) static long dup(long x) {
    return x * 2;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    for (long i = 0; i < n; i++)
        sink += dup(i) + call1(i);
    printf("%ld\n", sink);
    return 0;
}
