/* sigqueue ROUNDS RAISER_SO: re-executes itself with RAISER_SO appended to LD_PRELOAD (so
 * that the shim sits behind the agent, and only in this program), then: each round mallocs
 * 77 bytes (the shim raises SIGUSR1 inside that call, that is inside the agent's malloc
 * hook) and frees them; the SIGUSR1 handler mallocs 40 blocks of 33 bytes, kept until the
 * end (40 is more than the agent's per-thread queue of signal-handler events holds). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PER_SIGNAL 40
static void *kept[100000];
static volatile int nkept;

static void handler(int sig) {
    (void)sig;
    for (int i = 0; i < PER_SIGNAL && nkept < 100000; i++) kept[nkept++] = malloc(33);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 10;
    if (argc > 2 && !getenv("SIGQUEUE_STAGE")) {
        const char *old = getenv("LD_PRELOAD");
        static char preload[8192];
        snprintf(preload, sizeof preload, "%s%s%s", old ? old : "", old ? ":" : "", argv[2]);
        setenv("LD_PRELOAD", preload, 1);
        setenv("SIGQUEUE_STAGE", "2", 1);
        execv("/proc/self/exe", argv);
        perror("execv");
        return 2;
    }
    signal(SIGUSR1, handler);
    for (int i = 0; i < rounds; i++) {
        void *volatile p = malloc(77);
        free(p);
    }
    printf("handled %d\n", nkept / PER_SIGNAL);
    return 0;
}
