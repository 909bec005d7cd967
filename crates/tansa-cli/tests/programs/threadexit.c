/* Threads that exit while others allocate, and that release memory from TLS destructors
 * after the agent's own thread-exit handler may already have run: threadexit THREADS.
 * Each thread: malloc(100) kept in a pthread key whose destructor frees it, and
 * malloc(200) freed before it returns. */
#include <pthread.h>
#include <stdlib.h>

static pthread_key_t key;

static void release(void *p) { free(p); }

static void *short_lived(void *arg) {
    (void)arg;
    pthread_setspecific(key, malloc(100));
    void *p = malloc(200);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 50;
    pthread_key_create(&key, release);
    pthread_t t[8];
    for (int i = 0; i < n; i += 8) {
        int k = n - i < 8 ? n - i : 8;
        for (int j = 0; j < k; j++) pthread_create(&t[j], NULL, short_lived, NULL);
        for (int j = 0; j < k; j++) pthread_join(t[j], NULL);
    }
    return 0;
}
