/* A dlopen/dlclose storm while other threads allocate: dlstorm PLUGIN ROUNDS.
 * Two threads each dlopen the plugin, call plug_cycle (malloc 96 + free), and dlclose it,
 * ROUNDS times; a third thread allocates meanwhile. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static const char *plugin;
static int rounds;
static atomic_int failed, stop;

static void *storm(void *arg) {
    (void)arg;
    for (int i = 0; i < rounds; i++) {
        void *h = dlopen(plugin, RTLD_NOW);
        if (!h) { atomic_store(&failed, 1); return NULL; }
        int (*cycle)(int) = (int (*)(int))dlsym(h, "plug_cycle");
        if (!cycle) { atomic_store(&failed, 1); return NULL; }
        cycle(i);
        dlclose(h);
    }
    return NULL;
}

static void *steady(void *arg) {
    (void)arg;
    while (!atomic_load(&stop)) {
        void *p = malloc(24);
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    plugin = argv[1];
    rounds = argc > 2 ? atoi(argv[2]) : 200;
    pthread_t a, b, c;
    pthread_create(&c, NULL, steady, NULL);
    pthread_create(&a, NULL, storm, NULL);
    pthread_create(&b, NULL, storm, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    atomic_store(&stop, 1);
    pthread_join(c, NULL);
    return atomic_load(&failed);
}
