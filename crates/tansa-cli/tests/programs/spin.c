/* CPU-bound: spin [ROUNDS] [THREADS]. Each round calls hot_a for 7 units of work and
 * hot_b for 3 (iteration counts), so about 70% of the CPU time is in hot_a and 30% in
 * hot_b. With THREADS > 1, the work is split across threads (plus the main thread). */
#include <pthread.h>
#include <stdlib.h>

static volatile unsigned long sink;

__attribute__((noinline)) void hot_a(long n) {
    unsigned long x = sink;
    for (long i = 0; i < n; i++) x = x * 6364136223846793005ul + 1442695040888963407ul;
    sink = x;
}

__attribute__((noinline)) void hot_b(long n) {
    unsigned long x = sink;
    for (long i = 0; i < n; i++) x = x * 2862933555777941757ul + 3037000493ul;
    sink = x;
}

static long rounds = 2000;

static void *work(void *arg) {
    (void)arg;
    for (long r = 0; r < rounds; r++) {
        hot_a(7 * 20000);
        hot_b(3 * 20000);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) rounds = atol(argv[1]);
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    pthread_t t[8];
    for (int i = 1; i < threads && i < 8; i++) pthread_create(&t[i], NULL, work, NULL);
    work(NULL);
    for (int i = 1; i < threads && i < 8; i++) pthread_join(t[i], NULL);
    return 0;
}
