/* Blocks allocated by threads the agent cannot record, released by one it records:
 * lostblocks THREADS BLOCKS. THREADS threads, all alive at once, each make BLOCKS
 * malloc(1000) and reallocate the last of them to 2000 bytes; the main thread then releases
 * every block. Prints "held N" with N the bytes glibc still counts in use afterwards, beyond
 * what it counted before the threads started (a release refused by the agent shows there),
 * then "done". Totals: THREADS * BLOCKS mallocs, THREADS reallocs, THREADS * BLOCKS frees. */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_barrier_t barrier;
static long blocks;

static void *work(void *arg) {
    void **mine = arg;
    pthread_barrier_wait(&barrier);
    for (long i = 0; i < blocks; i++) {
        mine[i] = malloc(1000);
        memset(mine[i], 1, 8);
    }
    mine[blocks - 1] = realloc(mine[blocks - 1], 2000);
    pthread_barrier_wait(&barrier);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 16;
    blocks = argc > 2 ? atol(argv[2]) : 10;
    void ***all = calloc((size_t)threads, sizeof *all);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    for (int t = 0; t < threads; t++) all[t] = calloc((size_t)blocks, sizeof **all);
    pthread_barrier_init(&barrier, NULL, (unsigned)threads);
    size_t before = mallinfo2().uordblks;
    for (int t = 0; t < threads; t++) pthread_create(&ids[t], NULL, work, all[t]);
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    for (int t = 0; t < threads; t++)
        for (long i = 0; i < blocks; i++) free(all[t][i]);
    size_t after = mallinfo2().uordblks;
    printf("held %ld\n", (long)after - (long)before);
    printf("done\n");
    return 0;
}
