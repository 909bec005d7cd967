/* Two named threads: named MS. Thread "heavy" spins for 2*MS milliseconds of its own CPU
 * time, thread "light" for MS, both at once; main waits. Prints each thread's id as
 * "heavy TID" and "light TID". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long ms;

static long long thread_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) static void burn(long long ns) {
    volatile unsigned long x = 0;
    while (thread_ns() < ns) x++;
}

static void *run(void *arg) {
    const char *name = arg;
    pthread_setname_np(pthread_self(), name);
    printf("%s %ld\n", name, (long)syscall(SYS_gettid));
    fflush(stdout);
    burn((name[0] == 'h' ? 2 : 1) * ms * 1000000LL);
    return NULL;
}

int main(int argc, char **argv) {
    ms = argc > 1 ? atol(argv[1]) : 300;
    pthread_t a, b;
    pthread_create(&a, NULL, run, "heavy");
    pthread_create(&b, NULL, run, "light");
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return 0;
}
