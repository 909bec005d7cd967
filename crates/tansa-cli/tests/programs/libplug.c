/* A plugin loaded with dlopen: malloc(1000) grown to 2000 by realloc, released later. */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void *plug_work(void) {
    char *p = malloc(1000);
    memset(p, 1, 1000);
    p = realloc(p, 2000);
    memset(p, 2, 2000);
    return p;
}

__attribute__((noinline)) void plug_release(void *p) {
    free(p);
    __asm__ volatile("" : : "r"(p) : "memory");
}

/* For the dlopen storm: one allocation and release per call. */
__attribute__((noinline)) int plug_cycle(int n) {
    char *p = malloc(96);
    memset(p, n, 96);
    int r = p[n % 96];
    free(p);
    return r;
}
