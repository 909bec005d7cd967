/* Thread churn: threadchurn THREADS AT_ONCE.
 * Starts THREADS threads, AT_ONCE at a time (all of a batch alive together, then joined).
 * Each thread: three malloc/free pairs (100, 101, 102 bytes) and one malloc(64) kept in a
 * pthread key whose destructor frees it -- a key the program creates after the agent's own,
 * so that free comes after the agent's thread-exit handler. Per thread: 4 mallocs, 4 frees,
 * 367 bytes allocated, all released. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_key_t key;
static pthread_barrier_t barrier;

static void release(void *p) { free(p); }

static void *work(void *arg) {
    (void)arg;
    for (int i = 0; i < 3; i++) {
        void *volatile p = malloc(100 + i);
        memset(p, 1, 8);
        free(p);
    }
    pthread_setspecific(key, malloc(64));
    pthread_barrier_wait(&barrier);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    int at_once = argc > 2 ? atoi(argv[2]) : 1;
    if (at_once < 1) at_once = 1;
    pthread_key_create(&key, release);
    pthread_t *t = calloc((size_t)at_once, sizeof *t);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (int done = 0; done < n; done += at_once) {
        int k = n - done < at_once ? n - done : at_once;
        pthread_barrier_init(&barrier, NULL, (unsigned)k + 1);
        for (int j = 0; j < k; j++) {
            if (pthread_create(&t[j], &attr, work, NULL) != 0) {
                perror("pthread_create");
                return 2;
            }
        }
        pthread_barrier_wait(&barrier);
        for (int j = 0; j < k; j++) pthread_join(t[j], NULL);
        pthread_barrier_destroy(&barrier);
    }
    free(t);
    printf("threads %d\n", n);
    return 0;
}
