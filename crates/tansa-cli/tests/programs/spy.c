/* A spy allocator preloaded *behind* the agent (LD_PRELOAD="agent:spy"): the agent's
 * "real" malloc family is this one. Between spy_start() and spy_stop(path) it logs every
 * call that reaches it (not its own nested calls), so a test can check that each one is a
 * call the program made and the agent recorded: the agent itself allocates nothing here. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { MALLOC, CALLOC, REALLOC, FREE, MEMALIGN, POSIX_MEMALIGN, ALIGNED_ALLOC, VALLOC, PVALLOC, REALLOCARRAY };
struct entry { int op; void *ptr; size_t size; void *old; };
#define CAP (1 << 20)
static struct entry log_[CAP];
static atomic_size_t used;
static atomic_int enabled;
static __thread int depth __attribute__((tls_model("initial-exec")));

static char arena[1 << 16];
static size_t arena_used;
static void *bootstrap(size_t n) {
    size_t at = (arena_used + 15) & ~(size_t)15;
    arena_used = at + n;
    return arena_used <= sizeof arena ? arena + at : NULL;
}
static int in_arena(void *p) { return (char *)p >= arena && (char *)p < arena + sizeof arena; }

static void note(int op, void *ptr, size_t size, void *old) {
    if (!atomic_load(&enabled) || depth > 1) return;
    size_t i = atomic_fetch_add(&used, 1);
    if (i < CAP) log_[i] = (struct entry){op, ptr, size, old};
}

#define REAL(name, ret, args) static ret (*real_##name) args; \
    if (!real_##name) real_##name = (ret (*) args)dlsym(RTLD_NEXT, #name)

void *malloc(size_t n) {
    static void *(*real_malloc)(size_t);
    static int resolving;
    if (!real_malloc) {
        if (resolving) return bootstrap(n);
        resolving = 1;
        real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
        resolving = 0;
    }
    depth++;
    void *p = real_malloc(n);
    note(MALLOC, p, n, NULL);
    depth--;
    return p;
}
void *calloc(size_t a, size_t b) {
    static void *(*real_calloc)(size_t, size_t);
    static int resolving;
    if (!real_calloc) {
        if (resolving) return bootstrap(a * b);
        resolving = 1;
        real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
        resolving = 0;
    }
    depth++;
    void *p = real_calloc(a, b);
    note(CALLOC, p, a * b, NULL);
    depth--;
    return p;
}
void free(void *p) {
    if (in_arena(p)) return;
    REAL(free, void, (void *));
    depth++;
    note(FREE, p, 0, NULL);
    real_free(p);
    depth--;
}
void *realloc(void *p, size_t n) {
    REAL(realloc, void *, (void *, size_t));
    depth++;
    void *q = real_realloc(p, n);
    note(REALLOC, q, n, p);
    depth--;
    return q;
}
void *reallocarray(void *p, size_t a, size_t b) {
    REAL(reallocarray, void *, (void *, size_t, size_t));
    depth++;
    void *q = real_reallocarray(p, a, b);
    note(REALLOCARRAY, q, a * b, p);
    depth--;
    return q;
}
void *memalign(size_t al, size_t n) {
    REAL(memalign, void *, (size_t, size_t));
    depth++;
    void *p = real_memalign(al, n);
    note(MEMALIGN, p, n, NULL);
    depth--;
    return p;
}
void *aligned_alloc(size_t al, size_t n) {
    REAL(aligned_alloc, void *, (size_t, size_t));
    depth++;
    void *p = real_aligned_alloc(al, n);
    note(ALIGNED_ALLOC, p, n, NULL);
    depth--;
    return p;
}
int posix_memalign(void **out, size_t al, size_t n) {
    REAL(posix_memalign, int, (void **, size_t, size_t));
    depth++;
    int r = real_posix_memalign(out, al, n);
    note(POSIX_MEMALIGN, r == 0 ? *out : NULL, n, NULL);
    depth--;
    return r;
}
void *valloc(size_t n) {
    REAL(valloc, void *, (size_t));
    depth++;
    void *p = real_valloc(n);
    note(VALLOC, p, n, NULL);
    depth--;
    return p;
}
void *pvalloc(size_t n) {
    REAL(pvalloc, void *, (size_t));
    depth++;
    void *p = real_pvalloc(n);
    note(PVALLOC, p, n, NULL);
    depth--;
    return p;
}

void spy_start(void) { atomic_store(&enabled, 1); }

void spy_stop(const char *path) {
    atomic_store(&enabled, 0);
    static const char *names[] = {"malloc", "calloc", "realloc", "free", "memalign",
                                  "posix_memalign", "aligned_alloc", "valloc", "pvalloc", "reallocarray"};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    size_t n = atomic_load(&used);
    if (n > CAP) n = CAP;
    char line[128];
    for (size_t i = 0; i < n; i++) {
        int len = snprintf(line, sizeof line, "%s %lu %lu %lu\n", names[log_[i].op],
                           (unsigned long)log_[i].ptr, (unsigned long)log_[i].size, (unsigned long)log_[i].old);
        if (write(fd, line, (size_t)len) < 0) break;
    }
    close(fd);
}
