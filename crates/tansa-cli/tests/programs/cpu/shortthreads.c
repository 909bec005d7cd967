/* Short-lived threads: shortthreads THREADS MICROS. Starts THREADS threads one after
 * another; each spins until it has used MICROS microseconds of its own CPU time, then ends.
 * Prints "cpu NS": the CPU time the workers used, plus what main used from its start to
 * its end, in nanoseconds. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long micros;

static long long thread_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *spin(void *out) {
    volatile unsigned long x = 0;
    while (thread_ns() < micros * 1000LL) x++;
    *(long long *)out = thread_ns();
    return NULL;
}

int main(int argc, char **argv) {
    long long main_start = thread_ns();
    int threads = argc > 1 ? atoi(argv[1]) : 50;
    micros = argc > 2 ? atol(argv[2]) : 3000;
    long long total = 0;
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        long long used = 0;
        pthread_create(&t, NULL, spin, &used);
        pthread_join(t, NULL);
        total += used;
    }
    total += thread_ns() - main_start;
    printf("cpu %lld\n", total);
    return 0;
}
