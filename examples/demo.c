/* A small program that allocates through several paths and leaks on purpose.
 * Build: cc -g -o demo demo.c          Record: tansa record -- ./demo */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

static char *cache[64];

static char *remember(const char *s) {
    char *copy = strdup(s);              /* allocated in libc, on behalf of remember() */
    cache[strlen(s) % 64] = copy;        /* overwritten entries leak */
    return copy;
}

static void work(int n) {
    int *scratch = calloc((size_t)n, sizeof *scratch);
    for (int i = 0; i < n; i++) scratch[i] = i * i;
    double *grow = NULL;
    for (int i = 1; i <= 8; i++) grow = realloc(grow, (size_t)i * 1024);
    free(grow);
    free(scratch);
}

int main(void) {
    char name[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "item-%d", i);
        remember(name);
        work(100 + i % 50);
    }
    void *leak = malloc(4096);           /* never freed */
    printf("demo done (%p)\n", leak);
    return 0;
}
