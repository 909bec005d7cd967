/* A library whose constructor starts a thread (and waits for it) before the agent's own
 * constructor has run: the thread allocates 4444 bytes and frees them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

int early_status = -1;

static void *early_thread(void *arg) {
    (void)arg;
    void *volatile p = malloc(4444);
    free(p);
    return NULL;
}

__attribute__((constructor)) static void start_early(void) {
    pthread_t t;
    early_status = pthread_create(&t, NULL, early_thread, NULL);
    if (early_status == 0) pthread_join(t, NULL);
}
