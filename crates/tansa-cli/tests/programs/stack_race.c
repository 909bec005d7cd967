/* Threads meeting the same new call stacks at the same moment (tests/agent_invariants.rs):
 * `stack_race THREADS ROUNDS [refused]`. In round r every thread, released together by a
 * barrier, allocates 16 bytes r + 1 calls deep in `deep`: a stack no thread has met before.
 * Every block is kept. With `refused`, each frees a pointer never allocated there instead
 * (only under `tansa record --online`, which refuses such a call). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_barrier_t barrier;
static int rounds, refused;
static char never_allocated[64];

__attribute__((noinline)) void *deep(int d) {
    void *p;
    if (d > 0)
        p = deep(d - 1);
    else if (refused) {
        char *volatile never = never_allocated + 16;
        free(never);
        p = 0;
    } else
        p = malloc(16);
    __asm__ volatile("" ::: "memory"); /* no tail call: one frame per level */
    return p;
}

static void *worker(void *arg) {
    void **kept = arg;
    for (int r = 0; r < rounds; r++) {
        pthread_barrier_wait(&barrier);
        kept[r] = deep(r);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    int threads = atoi(argv[1]);
    rounds = atoi(argv[2]);
    refused = argc > 3 && strcmp(argv[3], "refused") == 0;
    pthread_t *t = malloc(sizeof(pthread_t) * threads);
    void ***kept = malloc(sizeof(void **) * threads);
    pthread_barrier_init(&barrier, 0, threads);
    for (int i = 0; i < threads; i++) {
        kept[i] = malloc(sizeof(void *) * rounds);
        if (pthread_create(&t[i], 0, worker, kept[i]) != 0)
            return 1;
    }
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], 0);
    return 0;
}
