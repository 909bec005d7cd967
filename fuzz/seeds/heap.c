/* Seed program of the memory fuzz corpus: a few allocations of every kind, from main, a
 * helper, a second thread and a forked child, some freed, some leaked (one lost at exit, for
 * the leak check's records).
 * Built by fuzz/seed.sh with: cc -g -O1 -pthread heap.c -o heap */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) static void *helper(size_t n) { return malloc(n); }

static void *worker(void *arg) {
    (void)arg;
    void *keep[4];
    for (int i = 0; i < 4; i++) keep[i] = calloc(i + 1, 32);
    for (int i = 0; i < 3; i++) free(keep[i]);
    return keep[3];
}

int main(void) {
    char *p = helper(100);
    p = realloc(p, 300);
    void *q = NULL;
    if (posix_memalign(&q, 64, 256) == 0) memset(q, 1, 256);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    void *r;
    pthread_join(t, &r);
    free(r);
    pid_t child = fork();
    if (child == 0) {
        free(q);
        void *c = malloc(77);
        (void)c;
        _exit(0);
    }
    waitpid(child, NULL, 0);
    free(p);
    (void)helper(40);
    return 0;
}
