/* Preloaded behind the agent (LD_PRELOAD=libtansa_agent.so:raiser.so), this allocator shim
 * raises SIGUSR1 at the start of every malloc(77), before calling the real malloc: the
 * signal handler then runs inside the agent's malloc hook, deterministically. */
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
