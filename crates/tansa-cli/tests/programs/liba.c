/* liba.so of seed 000 Fig. 3: func_a0 -> func_a1 -> libb's func_b0 -> malloc. */
#include <stdlib.h>

void *func_b0(size_t n);

/* An opaque use of a pointer, so that calls are never compiled as tail calls. */
static void touch(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

__attribute__((noinline)) void *func_a1(size_t n) {
    void *p = func_b0(n);
    touch(p);
    return p;
}

__attribute__((noinline)) void *func_a0(size_t n) {
    void *p = func_a1(n);
    touch(p);
    return p;
}

/* A direct allocation of liba: calloc(20, 10) = 200 bytes. */
__attribute__((noinline)) void *liba_alloc(void) {
    void *p = calloc(20, 10);
    touch(p);
    return p;
}

/* Teardown: liba releases blocks that the chain allocated. */
__attribute__((noinline)) void liba_teardown(void **blocks, int n) {
    for (int i = 0; i < n; i++) {
        free(blocks[i]);
        touch(blocks);
    }
}
