/* libb.so of seed 000 Fig. 3: func_b0 is the function that finally calls malloc. */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void *func_b0(size_t n) {
    void *p = malloc(n);
    memset(p, 0xb0, n);
    return p;
}

/* A direct allocation of libb: 300 bytes. */
__attribute__((noinline)) void *libb_alloc(void) {
    void *p = malloc(300);
    memset(p, 0xbb, 300);
    return p;
}
