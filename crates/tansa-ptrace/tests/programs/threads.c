/*
 * Test target for `tansa retrace record` on a multithreaded program: the region (`work`)
 * runs in the main thread and in three worker threads at once. `work(i)` runs its loop
 * i % 4 times, so it takes four paths. The main thread calls it 8 times (i = 0..7), then
 * each worker 200 times (i = 0..199) after a barrier, so the workers are in the region
 * together. Every thread prints its own sum, so the output does not depend on scheduling.
 *
 * Built by the tests with:  cc -O1 -g -fno-inline -pthread -o threads threads.c
 */
#include <pthread.h>
#include <stdio.h>

#define WORKERS 3

static pthread_barrier_t start;

__attribute__((noinline)) static long leaf(long x) {
    return x * 3 + 1;
}

__attribute__((noinline)) long work(long i) {
    long s = 0;
    for (long k = 0; k < (i & 3); k++)
        s += leaf(k + i);
    return s;
}

static void *worker(void *arg) {
    long *sum = arg;
    pthread_barrier_wait(&start);
    for (long i = 0; i < 200; i++)
        *sum += work(i);
    return NULL;
}

int main(void) {
    long main_sum = 0;
    for (long i = 0; i < 8; i++)
        main_sum += work(i);
    pthread_t t[WORKERS];
    long sums[WORKERS] = {0};
    pthread_barrier_init(&start, NULL, WORKERS);
    for (int j = 0; j < WORKERS; j++)
        pthread_create(&t[j], NULL, worker, &sums[j]);
    for (int j = 0; j < WORKERS; j++)
        pthread_join(t[j], NULL);
    printf("main %ld\n", main_sum);
    for (int j = 0; j < WORKERS; j++)
        printf("worker %d %ld\n", j, sums[j]);
    return 0;
}
