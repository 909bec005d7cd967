/* malloc and free from a signal handler that fires continuously during an allocation loop:
 * signals N; prints "handler H loop L" (the number of handler runs and of loop iterations:
 * at least N, more until the handler ran 200 times). The handler uses a size
 * (33) whose tcache bin differs from the loop's (55), so glibc itself stays consistent; both
 * bins are filled before the timer starts, so that neither call ever needs the arena lock
 * (a handler interrupting glibc's own first malloc, tcache_init, would deadlock on it). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t handled;

static void on_alarm(int sig) {
    (void)sig;
    void *p = malloc(33);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
    handled++;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    for (size_t size = 33; size <= 55; size += 22) {
        void *p = malloc(size);
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
    struct itimerval it = {{0, 100}, {0, 100}};
    setitimer(ITIMER_REAL, &it, NULL);
    /* At least N iterations, and on until the handler ran 200 times (a fast machine can
     * finish N before the timer fired that often), at most 100 N. */
    long i = 0;
    for (; i < n || (handled < 200 && i < 100 * n); i++) {
        void *p = malloc(55);
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    char buf[64];
    int len = snprintf(buf, sizeof buf, "handler %d loop %ld\n", (int)handled, i);
    return write(1, buf, (size_t)len) == len ? 0 : 1;
}
