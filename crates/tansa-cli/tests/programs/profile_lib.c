/* The library of profile_main.c: keeps blocks (never freed) and makes scratch blocks that
 * its caller frees. Built with -O0 so that every function keeps its own frame. */
#include <stdlib.h>
#include <string.h>

static void *kept[1000];

/* Allocates n blocks of 1000 bytes and keeps them: n * 1000 bytes never freed. */
void keep_blocks(int n) {
    for (int i = 0; i < n && i < 1000; i++) {
        kept[i] = malloc(1000);
        memset(kept[i], 1, 1000);
    }
}

/* One zeroed scratch block of 4096 bytes, freed by the caller. */
void *scratch_block(void) {
    return calloc(1, 4096);
}
