/* The leak check at exit (tests/leak_check.rs): `thread_lost THREADS [again]`. Each of
 * THREADS threads, started and joined one after the other, loses one 1000-byte block
 * from `lose`; then main returns. With `again`, main makes one more allocation first (a
 * block it keeps in a global): the exiting thread's last event is then after the lost
 * blocks, which it was not without it. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void *volatile kept;

__attribute__((noinline)) void lose(void) {
    char *volatile p = malloc(1000);
    memset(p, 1, 1000);
    p = 0;
}

static void *worker(void *arg) {
    lose();
    return arg;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3;
    for (int i = 0; i < n; i++) {
        pthread_t t;
        pthread_create(&t, 0, worker, 0);
        pthread_join(t, 0);
    }
    if (argc > 2)
        kept = malloc(1);
    return 0;
}
