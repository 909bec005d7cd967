/* Leaks whose blocks come from `realloc` and `reallocarray` (tests/leak_cause.rs): `grow`
   takes a small block and grows it with `realloc`, `grow_array` with `reallocarray`; each
   keeps its grown block on one branch and frees it on the other. A grown block's site is
   the reallocation's stack (the small block it replaced was released by it). Prints
   `done N` after N rounds (default 1500), one millisecond apart. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) static void grow(int i) {
    char *b = malloc(16);
    b = realloc(b, 4096); /* grow's realloc */
    memset(b, 'x', 100);
    if (i % 8 == 3) /* grow's leak: every 8th round */
        return;
    free(b);
}

__attribute__((noinline)) static void grow_array(int i) {
    long *a = malloc(2 * sizeof(long));
    a = reallocarray(a, 512, sizeof(long)); /* grow_array's reallocarray */
    a[0] = i;
    if (i % 5 == 1) /* grow_array's leak: every 5th round */
        return;
    free(a);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1500;
    for (int i = 0; i < n; i++) {
        grow(i);
        grow_array(i);
        usleep(1000);
    }
    printf("done %d\n", n);
    return 0;
}
