/* The leak check at exit at scale (tests/leak_check.rs): `lost_many THREADS BLOCKS`.
 * `kept` allocates BLOCKS blocks held in an array, then drops every tenth (24 bytes each:
 * BLOCKS / 10 definitely lost); THREADS threads each hold a 32-byte block from `held` on
 * their stacks (of the default size, mostly never touched) and are still running when the
 * process exits (all reachable). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t counted = PTHREAD_MUTEX_INITIALIZER;
static int started;

__attribute__((noinline)) void *held(void) { return malloc(32); }
__attribute__((noinline)) void *kept(long i) { return malloc(24 + (i % 5) * 8); }

static void *holder(void *arg) {
    (void)arg;
    void *volatile mine = held();
    pthread_mutex_lock(&counted);
    started++;
    pthread_mutex_unlock(&counted);
    pthread_mutex_lock(&m); /* held by main until the process exits */
    pthread_mutex_unlock(&m);
    return mine;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    int threads = atoi(argv[1]);
    long blocks = atol(argv[2]);
    void **array = malloc(sizeof(void *) * blocks);
    for (long i = 0; i < blocks; i++)
        array[i] = kept(i);
    for (long i = 0; i < blocks; i += 10)
        array[i] = 0;
    pthread_mutex_lock(&m);
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, 0, holder, 0) != 0) {
            fprintf(stderr, "lost_many: thread %d could not be created\n", i);
            return 1;
        }
    }
    for (;;) {
        pthread_mutex_lock(&counted);
        int n = started;
        pthread_mutex_unlock(&counted);
        if (n == threads)
            break;
        usleep(1000);
    }
    exit(0);
}
