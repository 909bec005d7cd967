/* sigqueue ROUNDS RAISER_SO [exit]: re-executes itself with RAISER_SO appended to LD_PRELOAD
 * (so that the shim sits behind the agent, and only in this program), then: each round
 * mallocs 77 bytes (the shim raises SIGUSR1 inside that call, that is inside the agent's
 * malloc hook) and frees them; the SIGUSR1 handler mallocs 40 blocks of 33 bytes, kept until
 * the end (40 is more than the agent's per-thread queue of signal-handler events holds).
 * With `exit`, the program first loses 5 blocks of 40 bytes (dropped by lose()), and the
 * handler calls exit(0) once it has made its blocks, from inside that malloc hook. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PER_SIGNAL 40
/* Not static: the stores to a static array no code reads would be optimized away, and the
 * blocks would then be lost indeed. */
void *kept[100000];
static volatile int nkept;
static volatile int exit_in_handler;

static void handler(int sig) {
    (void)sig;
    for (int i = 0; i < PER_SIGNAL && nkept < 100000; i++) kept[nkept++] = malloc(33);
    if (exit_in_handler) exit(0);
}

__attribute__((noinline)) static void lose(void) {
    for (int i = 0; i < 5; i++) {
        void *volatile p = malloc(40);
        memset(p, 1, 40);
    }
}

/* Overwrites the stack below main's frame, where lose()'s dead frames held its pointers;
 * then allocates and frees a block the way lose() allocated its own, so that registers the
 * agent's hook left holding lose()'s last block hold that freed one instead (the registers
 * of the call the handler interrupts are saved on the stack, where the check finds them). */
__attribute__((noinline)) static void scrub(void) {
    volatile char zeros[16384];
    memset((char *)zeros, 0, sizeof zeros);
    for (int i = 0; i < 2; i++) {
        void *volatile p = malloc(40);
        free(p);
    }
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
    if (argc > 3 && strcmp(argv[3], "exit") == 0) {
        exit_in_handler = 1;
        lose();
        scrub();
    }
    for (int i = 0; i < rounds; i++) {
        void *volatile p = malloc(77);
        free(p);
    }
    printf("handled %d\n", nkept / PER_SIGNAL);
    return 0;
}
