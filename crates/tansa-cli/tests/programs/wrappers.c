/* Allocations through C allocation wrappers (tests/memory_attribution.rs): the program's
 * own xmalloc and xstrdup, as GNU programs carry them, and the C library's strdup.
 * parse() allocates 10 x 100 bytes through xmalloc, name() 20 x 6 bytes through xstrdup
 * (which calls xmalloc), label() 30 x 4 bytes through strdup, and build() 40 x 50 bytes
 * through my_alloc, a wrapper no list knows (`--alloc-fn my_alloc`); nothing is freed.
 * Built: cc -O1 -g wrappers.c (and -O2 -fomit-frame-pointer) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

NOINLINE void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) abort();
    return p;
}

NOINLINE char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

/* Not a tail call, so that it has a frame at -O2 too. */
NOINLINE void *my_alloc(size_t n) {
    void *p = xmalloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

static void *volatile keep;

NOINLINE void parse(void) { keep = xmalloc(100); }
NOINLINE void name(void) { keep = xstrdup("hello"); }
NOINLINE void label(void) { keep = strdup("abc"); }
NOINLINE void build(void) { keep = my_alloc(50); }

int main(void) {
    for (int i = 0; i < 10; i++) parse();
    for (int i = 0; i < 20; i++) name();
    for (int i = 0; i < 30; i++) label();
    for (int i = 0; i < 40; i++) build();
    puts("done");
    return 0;
}
