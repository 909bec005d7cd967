/* Blocks handed from one thread to another: handoff SOLO COUNT.
 * First SOLO malloc(48)/free pairs on the main thread alone. Then a second thread starts,
 * and the main thread mallocs COUNT blocks of 48 bytes and passes each through a small
 * queue to the second thread, which frees it. Run with glibc's tcache off, the main
 * thread's mallocs take the blocks the second thread has just freed from the arena's
 * shared free list, so an address is released by one thread and handed out again to the
 * other within nanoseconds, over and over.
 * Totals: SOLO + COUNT mallocs and as many frees, 48 bytes each, all released. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define QUEUE 64

static void *volatile queue[QUEUE];
static atomic_long head, tail; /* pushed and popped so far */
static long count;

static void *take(void *arg) {
    (void)arg;
    for (long i = 0; i < count; i++) {
        while (atomic_load_explicit(&head, memory_order_acquire) == i) {
        }
        void *p = queue[i % QUEUE];
        atomic_store_explicit(&tail, i + 1, memory_order_release);
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long solo = argc > 1 ? atol(argv[1]) : 1000;
    count = argc > 2 ? atol(argv[2]) : 100000;
    for (long i = 0; i < solo; i++) {
        void *volatile p = malloc(48);
        free(p);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, take, NULL) != 0) {
        perror("pthread_create");
        return 2;
    }
    for (long i = 0; i < count; i++) {
        void *p = malloc(48);
        while (i - atomic_load_explicit(&tail, memory_order_acquire) >= QUEUE) {
        }
        queue[i % QUEUE] = p;
        atomic_store_explicit(&head, i + 1, memory_order_release);
    }
    pthread_join(t, NULL);
    printf("handed %ld\n", count);
    return 0;
}
