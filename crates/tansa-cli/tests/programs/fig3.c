/* The seed 000 Fig. 3 test program.
 *
 *   fig3 PLUGIN [normal|kill|segv]
 *
 * Phases (main thread unless noted), with the allocations each makes:
 *   A  10 x func_0(100): main -> func_0 (exe) -> func_a0 (liba) -> func_a1 -> func_b0 (libb) -> malloc(100)
 *   B  liba_alloc: calloc(20, 10) = 200 bytes from liba (leaked)
 *   C  libb_alloc: malloc(300) from libb, freed by main
 *   D  exe_grow: malloc(50), realloc to 70, 90, 110 (exe), freed by main
 *   E  exe_aligned: memalign(64,128), posix_memalign(64,256), aligned_alloc(128,384), valloc(512),
 *      pvalloc(100); all freed but the aligned_alloc block (leaked)
 *   -- mode kill: raise(SIGKILL) here; mode segv: write through a null pointer here --
 *   F  dlopen(PLUGIN): plug_work mallocs 1000, reallocs to 2000; plug_release frees it; dlclose
 *   G  liba_teardown frees the 10 blocks of phase A (a release from another library's code)
 *   H  leak: malloc(777) from the exe, never freed
 *   I  two threads, "worker-1" then "worker-2", each: 5 x func_0(40), then frees two of them
 * No stdio: its buffers would add allocations of their own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *func_a0(size_t n);
void *liba_alloc(void);
void liba_teardown(void **blocks, int n);
void *libb_alloc(void);

static void touch(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }
static void pause_ms(int ms) { usleep(ms * 1000); }

__attribute__((noinline)) void *func_0(size_t n) {
    void *p = func_a0(n);
    touch(p);
    return p;
}

__attribute__((noinline)) void *exe_grow(void) {
    char *p = malloc(50);
    touch(p);
    p = realloc(p, 70);
    touch(p);
    p = realloc(p, 90);
    touch(p);
    p = realloc(p, 110);
    touch(p);
    return p;
}

__attribute__((noinline)) void exe_aligned(void) {
    void *a = memalign(64, 128);
    void *b = NULL;
    if (posix_memalign(&b, 64, 256) != 0) _exit(3);
    void *c = aligned_alloc(128, 384);
    void *d = valloc(512);
    void *e = pvalloc(100);
    touch(a); touch(b); touch(c); touch(d); touch(e);
    free(a);
    free(b);
    free(d);
    free(e);
}

__attribute__((noinline)) void *leak(void) {
    void *p = malloc(777);
    touch(p);
    return p;
}

static void *worker(void *name) {
    pthread_setname_np(pthread_self(), (const char *)name);
    void *q[5];
    for (int i = 0; i < 5; i++) q[i] = func_0(40);
    free(q[0]);
    free(q[1]);
    touch(q);
    return NULL;
}

int main(int argc, char **argv) {
    const char *plugin = argc > 1 ? argv[1] : "./libplug.so";
    const char *mode = argc > 2 ? argv[2] : "normal";
    void *chain[10];

    for (int i = 0; i < 10; i++) chain[i] = func_0(100); /* A */
    pause_ms(3);
    touch(liba_alloc()); /* B */
    pause_ms(3);
    void *lb = libb_alloc(); /* C */
    free(lb);
    pause_ms(3);
    void *g = exe_grow(); /* D */
    free(g);
    pause_ms(3);
    exe_aligned(); /* E */
    pause_ms(3);

    if (strcmp(mode, "kill") == 0) raise(SIGKILL);
    if (strcmp(mode, "segv") == 0) {
        volatile int *null = NULL;
        *null = 1;
    }

    void *h = dlopen(plugin, RTLD_NOW); /* F */
    if (!h) _exit(2);
    void *(*work)(void) = (void *(*)(void))dlsym(h, "plug_work");
    void (*release)(void *) = (void (*)(void *))dlsym(h, "plug_release");
    if (!work || !release) _exit(2);
    void *pp = work();
    release(pp);
    dlclose(h);
    pause_ms(3);

    liba_teardown(chain, 10); /* G */
    pause_ms(3);
    touch(leak()); /* H */
    pause_ms(3);

    static char names[2][16] = {"worker-1", "worker-2"}; /* I */
    for (int t = 0; t < 2; t++) {
        pthread_t th;
        if (pthread_create(&th, NULL, worker, names[t]) != 0) _exit(4);
        pthread_join(th, NULL);
        pause_ms(3);
    }
    return 0;
}
