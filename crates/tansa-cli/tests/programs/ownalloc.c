/* An executable that allocates past tansa's hooks, as one with a statically linked
   allocator does. Built with -DEXPORTED (malloc, calloc, realloc and free defined here and
   exported: every call in the process goes to them), -DHIDDEN (the same, hidden: only this
   file's calls go to them) or -DNAMED (an allocator entry point of its own, mi_malloc, as a
   statically linked mimalloc has). main makes 100 blocks of 100 bytes with its allocator and
   one string with strdup (the C library's malloc, or the exported one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char arena[1 << 20];
static size_t used;

#if defined(HIDDEN)
#define OWN __attribute__((visibility("hidden")))
#else
#define OWN
#endif

static void *bump(size_t n) {
    void *p = arena + used;
    used += (n + 15) & ~(size_t)15;
    return p;
}

#if defined(EXPORTED) || defined(HIDDEN)
OWN void *malloc(size_t n) { return bump(n); }
OWN void free(void *p) { (void)p; }
OWN void *calloc(size_t a, size_t b) { return memset(bump(a * b), 0, a * b); }
OWN void *realloc(void *p, size_t n) {
    void *q = bump(n);
    if (p) memcpy(q, p, n);
    return q;
}
#define ALLOC malloc
#else
void *mi_malloc(size_t n) { return bump(n); }
#define ALLOC mi_malloc
#endif

int main(void) {
    for (int i = 0; i < 100; i++) {
        char *volatile p = ALLOC(100);
        p[0] = 1;
    }
    char *s = strdup("a string of the C library");
    printf("%zu %zu\n", used, strlen(s));
    return 0;
}
