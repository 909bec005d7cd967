/* The worked example of seed 001 (spec section 19): funcA allocates, funcB frees on two
 * paths (directly, or in sub1 when error_condition_2 holds) and returns without freeing
 * when error_condition_1 holds. Beside it, a site whose blocks are always freed (scratch)
 * and one whose blocks are never freed (registry).
 *
 * Usage: leakcause [REQUESTS] [THREADS] [WORK] [PAUSE_MS] (default 2000 requests, 1 thread,
 * no work, no pause); WORK is a busy loop of that many iterations per request (for
 * benchmarks); PAUSE_MS a sleep after the requests, before the program's last allocation
 * (printf's buffer). With THREADS > 1
 * THREADS worker threads run the requests (the main thread only waits), so allocations at
 * the site happen while one is traced. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 64
#define NOINLINE __attribute__((noinline))

static __thread unsigned seed = 12345;
static volatile int sink;
static long requests = 2000;
static long work_per_request = 0;

static NOINLINE int chance(unsigned percent) {
    seed = seed * 1103515245u + 12345u;
    return (seed >> 16) % 100 < percent;
}

NOINLINE void sub1(char *p) {
    sink += p[0];
    free(p);
}

NOINLINE void sub2(char *p) {
    p[1] = 2;
    sink += p[1];
}

NOINLINE void funcB(char *p) {
    if (chance(30)) {        /* error_condition_2: location1 */
        sub1(p);
        return;
    }
    sub2(p);
    if (chance(20)) {        /* error_condition_1: location2, the leak */
        return;
    }
    free(p);
}

NOINLINE void funcA(void) {
    char *p = malloc(N);
    p[0] = 1;
    funcB(p);
}

/* Always freed. */
NOINLINE void scratch(void) {
    char *volatile s = malloc(32);
    s[0] = 1;
    free(s);
}

/* Never freed: kept for the life of the program. */
void *volatile registry[4096];
NOINLINE void remember(long i) {
    if (i % 64 == 0 && i / 64 < 4096)
        registry[i / 64] = malloc(16);
}

static void *work(void *arg) {
    seed += (unsigned)(long)arg;
    for (long i = 0; i < requests; i++) {
        for (long w = 0; w < work_per_request; w++)
            sink += (int)w;
        funcA();
        scratch();
        remember(i);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) requests = atol(argv[1]);
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    if (argc > 3) work_per_request = atol(argv[3]);
    if (threads <= 1) {
        work(NULL);
    } else {
        /* Every request on a worker thread: one allocation site, several threads. */
        pthread_t t[16];
        for (int i = 0; i < threads && i < 16; i++)
            pthread_create(&t[i], NULL, work, (void *)(long)i);
        for (int i = 0; i < threads && i < 16; i++) pthread_join(t[i], NULL);
    }
    if (argc > 4) {
        long ms = atol(argv[4]);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    printf("done %ld\n", requests);
    return 0;
}
