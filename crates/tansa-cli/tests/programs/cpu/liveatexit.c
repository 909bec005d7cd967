/* Threads still running when the process exits: liveatexit THREADS MICROS. Starts THREADS
 * threads; each spins until it has used MICROS microseconds of its own CPU time, then
 * waits for ever. Main spins as long, waits until every thread is done spinning, prints
 * "cpu NS" (the CPU time the threads used until then, plus main's from its start) and
 * exits while the threads still exist. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long micros;
static pthread_barrier_t done;

static long long thread_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void spin(void) {
    volatile unsigned long x = 0;
    long long end = thread_ns() + micros * 1000LL;
    while (thread_ns() < end) x++;
}

static void *worker(void *out) {
    spin();
    *(long long *)out = thread_ns();
    pthread_barrier_wait(&done);
    for (;;) pause();
    return NULL;
}

int main(int argc, char **argv) {
    long long main_start = thread_ns();
    int threads = argc > 1 ? atoi(argv[1]) : 40;
    micros = argc > 2 ? atol(argv[2]) : 2500;
    long long *used = calloc(threads, sizeof *used);
    pthread_barrier_init(&done, NULL, threads + 1);
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        pthread_create(&t, NULL, worker, &used[i]);
    }
    spin();
    pthread_barrier_wait(&done);
    long long total = thread_ns() - main_start;
    for (int i = 0; i < threads; i++) total += used[i];
    printf("cpu %lld\n", total);
    fflush(stdout);
    exit(0);
}
