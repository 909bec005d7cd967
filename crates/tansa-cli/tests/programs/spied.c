/* Runs under the agent with the spy behind it: spied PLUGIN LOGFILE.
 * Inside the spy's window it exercises every path of the agent that could allocate: new
 * threads (their first event), new and deep stacks, every allocation function, a dlopen'ed
 * module (a rescan of the module map) and its release. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void touch(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

__attribute__((noinline)) static void *deep(int depth, size_t n) {
    if (depth == 0) return malloc(n);
    void *p = deep(depth - 1, n + 1);
    touch(p);
    return p;
}

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++) {
        void *p = deep(i % 40, 16);
        void *q = calloc(3, 7);
        p = realloc(p, 300);
        q = reallocarray(q, 4, 9);
        free(p);
        free(q);
    }
    return NULL;
}

int main(int argc, char **argv) {
    void (*start)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "spy_start");
    void (*stop)(const char *) = (void (*)(const char *))dlsym(RTLD_DEFAULT, "spy_stop");
    if (!start || !stop || argc < 3) return 2;
    start();
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, NULL);
    void *a = memalign(64, 100), *b = NULL, *c = aligned_alloc(32, 64), *d = valloc(10), *e = pvalloc(10);
    if (posix_memalign(&b, 16, 24) != 0) return 3;
    free(a); free(b); free(c); free(d); free(e);
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) return 4;
    int (*cycle)(int) = (int (*)(int))dlsym(h, "plug_cycle");
    for (int i = 0; i < 50; i++) touch((void *)(long)cycle(i));
    dlclose(h);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    stop(argv[2]);
    return 0;
}
