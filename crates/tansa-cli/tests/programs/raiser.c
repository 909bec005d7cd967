/* Preloaded behind the agent (LD_PRELOAD=libtansa_agent.so:raiser.so), this allocator shim
 * raises SIGUSR1 at the start of every malloc(77), before calling the real malloc: the
 * signal handler then runs inside the agent's malloc hook, deterministically. It also
 * passes malloc_usable_size on, as an allocator does (the leak check at exit asks the object
 * that defines malloc for the sizes of its blocks). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stddef.h>

void *malloc(size_t size) {
    static void *(*next)(size_t);
    if (!next) next = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    if (size == 77) raise(SIGUSR1);
    return next(size);
}

size_t malloc_usable_size(void *p) {
    static size_t (*next)(void *);
    if (!next) next = (size_t (*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    return next(p);
}
