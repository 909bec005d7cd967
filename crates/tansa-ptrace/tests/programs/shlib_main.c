/*
 * Calls `shfn` from libshlib.so (shlib.c) argv[1] times (default 1000) through `work`.
 * Built by the tests with:
 *   cc -O1 -g -fno-inline -o shlib_main shlib_main.c -L. -lshlib -Wl,-rpath,'$ORIGIN'
 */
#include <stdio.h>
#include <stdlib.h>

int shfn(int);
static volatile long sink;

__attribute__((noinline)) long work(long i) {
    return shfn((int)i) + 1;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    for (long i = 0; i < n; i++)
        sink += work(i);
    printf("%ld\n", sink);
    return 0;
}
