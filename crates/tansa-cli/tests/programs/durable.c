/* Durable recordings: allocates known amounts, says so, then waits to be killed.
 *
 * durable N BYTES [threads]: allocates N blocks of BYTES bytes in main (kept), prints
 * "ready PID" on stdout (flushed) and then loops forever allocating and freeing one block of
 * 17 bytes every millisecond (so that the rings keep moving), until a signal kills it.
 * With a third argument T, T threads allocate and free as well. With a fourth argument
 * `ignore-term`, SIGTERM is ignored (a program that does not end when asked to); with
 * `exit-on-signal`, SIGHUP and SIGTERM make it exit with status 100 + the signal's number
 * (which signal it was sent shows in its status).
 * Built with: cc -g -O1 -pthread durable.c -o durable
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *volatile sink;

__attribute__((noinline)) static void churn(void) {
    struct timespec ms = {0, 1000000};
    for (;;) {
        void *p = malloc(17);
        sink = p;
        free(p);
        nanosleep(&ms, NULL);
    }
}

static void exit_on(int sig) { _exit(100 + sig); }

static void *thread_main(void *arg) {
    (void)arg;
    churn();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: durable N BYTES [threads]\n");
        return 2;
    }
    long n = atol(argv[1]);
    long bytes = atol(argv[2]);
    for (long i = 0; i < n; i++) {
        char *p = malloc((size_t)bytes);
        memset(p, 1, (size_t)bytes);
        sink = p;
    }
    if (argc > 4 && strcmp(argv[4], "ignore-term") == 0) {
        signal(SIGTERM, SIG_IGN);
    }
    if (argc > 4 && strcmp(argv[4], "exit-on-signal") == 0) {
        signal(SIGHUP, exit_on);
        signal(SIGTERM, exit_on);
    }
    int threads = argc > 3 ? atoi(argv[3]) : 0;
    for (int t = 0; t < threads; t++) {
        pthread_t th;
        pthread_create(&th, NULL, thread_main, NULL);
    }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    churn();
    return 0;
}
