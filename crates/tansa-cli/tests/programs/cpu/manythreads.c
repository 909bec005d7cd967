/* A process of many threads: manythreads N starts N threads that wait for ever, prints
 * "ready" and spins in main until it is killed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *wait_forever(void *arg) {
    (void)arg;
    for (;;) pause();
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, &attr, wait_forever, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    printf("ready\n");
    fflush(stdout);
    volatile unsigned long x = 0;
    for (;;) x++;
}
