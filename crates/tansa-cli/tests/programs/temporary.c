/* Temporary allocations (blocks released by the thread that made them before it allocates
 * again), in known numbers per function; tests/memory_attribution.rs checks them.
 *
 * scratch: 500 blocks (500 times the argument, if any), each freed at once: 500
 *          temporary.
 * pairs:   100 times two blocks, freed in the order allocated: the first is not temporary
 *          (the second was allocated in between), the second is (only a free in between):
 *          200 allocations, 100 temporary.
 * churn:   two threads at once, 1000 blocks each, each freed at once: 2000 temporary,
 *          whatever the interleaving (another thread's allocations do not count).
 * handed:  a block a thread allocates and another frees: not temporary.
 * kept:    10 blocks freed at the end, after other allocations: not temporary.
 */
#include <pthread.h>
#include <stdlib.h>

static void *volatile sink;

static int rounds = 1;

__attribute__((noinline)) static void scratch(void) {
    for (int i = 0; i < 500 * rounds; i++) {
        char *p = malloc(64);
        p[0] = 1;
        sink = p;
        free(p);
    }
}

__attribute__((noinline)) static void pairs(void) {
    for (int i = 0; i < 100; i++) {
        char *a = malloc(24);
        char *b = malloc(24);
        a[0] = b[0] = 1;
        sink = a;
        sink = b;
        free(a);
        free(b);
    }
}

__attribute__((noinline)) static void churn(void) {
    for (int i = 0; i < 1000; i++) {
        char *p = malloc(16);
        p[0] = 1;
        sink = p;
        free(p);
    }
}

static void *churner(void *arg) {
    (void)arg;
    churn();
    return NULL;
}

__attribute__((noinline)) static void *handed(void *arg) {
    (void)arg;
    return malloc(48);
}

__attribute__((noinline)) static void *kept(void) {
    return malloc(32);
}

int main(int argc, char **argv) {
    if (argc > 1) {
        rounds = atoi(argv[1]);
    }
    void *k[10];
    for (int i = 0; i < 10; i++) {
        k[i] = kept();
    }
    scratch();
    pairs();
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        pthread_create(&t[i], NULL, churner, NULL);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
    }
    pthread_t h;
    void *block;
    pthread_create(&h, NULL, handed, NULL);
    pthread_join(h, &block);
    free(block);
    for (int i = 0; i < 10; i++) {
        free(k[i]);
    }
    return 0;
}
