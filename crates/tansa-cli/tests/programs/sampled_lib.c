/* The library of sampled_main.c (tests/sampled.rs). */
#include <stdlib.h>

static void *kept[8192];

/* 64 MiB in blocks of 16 to 4096 bytes (sizes cycle), each freed at once. */
void churn_blocks(void) {
    size_t total = 0;
    unsigned i = 0;
    while (total < 64u << 20) {
        size_t size = 16 + (i * 2654435761u) % 4081;
        char *p = malloc(size);
        p[0] = 1;
        free(p);
        total += size;
        i++;
    }
}

/* 8 MiB kept in 8192 blocks of 1 KiB. */
void keep_blocks(void) {
    for (int i = 0; i < 8192; i++) {
        kept[i] = malloc(1024);
        ((char *)kept[i])[0] = 1;
    }
}
