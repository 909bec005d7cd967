/* orphan ROUNDS [now]: prints "ready PID", waits for SIGUSR1 (unless "now" is given), then
 * does ROUNDS malloc/free pairs of 48 bytes and prints "done". The test kills the recorder
 * in between. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile sig_atomic_t go;
static void on_usr1(int sig) { (void)sig; go = 1; }

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 1000000;
    signal(SIGUSR1, on_usr1);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    if (argc > 2) go = 1;
    while (!go) pause();
    for (long i = 0; i < rounds; i++) {
        void *volatile p = malloc(48);
        free(p);
    }
    printf("done\n");
    return 0;
}
