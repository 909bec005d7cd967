/* Allocations through C allocation wrappers (tests/memory_attribution.rs): the program's
 * own xmalloc and xstrdup, as GNU programs carry them, and the C library's strdup.
 * parse() allocates 10 x 100 bytes through xmalloc, name() 20 x 6 bytes through xstrdup
 * (which calls xmalloc), label() 30 x 4 bytes through strdup; nothing is freed.
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

static void *volatile keep;

NOINLINE void parse(void) { keep = xmalloc(100); }
NOINLINE void name(void) { keep = xstrdup("hello"); }
NOINLINE void label(void) { keep = strdup("abc"); }

int main(void) {
    for (int i = 0; i < 10; i++) parse();
    for (int i = 0; i < 20; i++) name();
    for (int i = 0; i < 30; i++) label();
    puts("done");
    return 0;
}
