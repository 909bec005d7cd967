/* Benchmark (a) of bench/memory.py: an allocation storm. Two threads, N iterations each
 * (default 2M); each iteration, at call depth ~20, mallocs and frees a temporary and
 * replaces one block of a long-lived ring. Build: cc -O2 -g -pthread -o storm storm.c */
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <stdio.h>
#define RING 1024
static long iters = 2000000;
__attribute__((noinline)) static void *work(int depth, void **ring, long i) {
    if (depth > 0) { void *r = work(depth - 1, ring, i); __asm__ volatile("" ::: "memory"); return r; }
    char *tmp = malloc(64 + (i & 63));
    tmp[0] = (char)i;
    __asm__ volatile("" : : "r"(tmp) : "memory"); /* the temporary escapes: no elision */
    free(tmp);
    size_t slot = (size_t)i % RING;
    free(ring[slot]);
    ring[slot] = malloc(32 + (i & 127));
    return ring[slot];
}
static void *thread_main(void *arg) {
    void **ring = calloc(RING, sizeof(void *));
    for (long i = 0; i < iters; i++) work(18, ring, i);
    for (int i = 0; i < RING; i++) free(ring[i]);
    free(ring);
    return arg;
}
int main(int argc, char **argv) {
    if (argc > 1) iters = atol(argv[1]);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, thread_main, 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    return 0;
}
