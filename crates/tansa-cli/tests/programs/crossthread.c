/* A leak decided on another thread than the allocating one (tests/leak_cause.rs): the
 * producer's `make_msg` mallocs messages and queues them; the consumer's `consume` frees
 * each one unless its condition holds. The traced (allocating) thread never frees: its
 * paths cannot show where freeing and leaking part. Producers come one after another, each
 * for BATCH messages, so that a trace followed to its producer's end (a message that
 * leaked) ends soon and more traces follow.
 *
 * Usage: crossthread [N] (default 2000 messages, one every 200 µs or so; a multiple of
 * BATCH). Prints "done N". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define Q 64
#define BATCH 10
static void *q[Q];
static long head, tail;
static int done;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

__attribute__((noinline)) void *make_msg(int i) {
    int *p = malloc(96); /* make_msg's allocation */
    memset(p, 0, 96);
    p[0] = i;
    return p;
}

static void *producer(void *arg) {
    int first = *(int *)arg;
    for (int i = first; i < first + BATCH; i++) {
        void *p = make_msg(i);
        pthread_mutex_lock(&m);
        while (head - tail == Q)
            pthread_cond_wait(&cv, &m);
        q[head++ % Q] = p;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&m);
        usleep(200); /* a message every 200 µs or so: the run spans many scans */
    }
    return 0;
}

__attribute__((noinline)) void consume(int *p) {
    if (p[0] % 4 == 3) /* consume's condition: the leak */
        return;
    free(p);
}

static void *consumer(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&m);
        while (tail == head && !done)
            pthread_cond_wait(&cv, &m);
        if (tail == head && done) {
            pthread_mutex_unlock(&m);
            break;
        }
        int *p = q[tail++ % Q];
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&m);
        consume(p);
    }
    return 0;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    pthread_t a, b;
    pthread_create(&b, 0, consumer, 0);
    for (int first = 0; first < n; first += BATCH) {
        pthread_create(&a, 0, producer, &first);
        pthread_join(a, 0);
    }
    pthread_mutex_lock(&m);
    done = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&m);
    pthread_join(b, 0);
    printf("done %d\n", n);
    return 0;
}
