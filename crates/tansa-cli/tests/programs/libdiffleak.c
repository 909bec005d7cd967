/* Built by tests/diff.rs: cc -shared -fPIC -g -O1 libdiffleak.c -o libdiffleak.so
 * leak_blocks(n) allocates n blocks of 100 bytes and never frees them;
 * scratch() allocates 4096 bytes and frees them (the same in every run). */
#include <stdlib.h>

static void *volatile keep;

__attribute__((noinline)) void leak_blocks(long n) {
    for (long i = 0; i < n; i++)
        keep = malloc(100);
}

__attribute__((noinline)) void scratch(void) {
    void *p = malloc(4096);
    keep = p;
    free(p);
}
