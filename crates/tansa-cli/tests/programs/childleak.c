/* A forked child that leaks for the first part of a recording (tests/leak_cause.rs): the
 * child keeps one block in four from `child_leak` (the others are freed) and exits; the
 * parent then allocates and frees, balanced, for several times as long. The child's site
 * must be judged over the child's own life: judged over the whole recording, its count of
 * blocks held looks flat once the child is gone.
 * Usage: childleak CHILD_ITERATIONS PARENT_ITERATIONS
 */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Not static, and written through a volatile pointer: the compiler keeps every call. */
void *kept[1 << 20];

__attribute__((noinline)) static void child_leak(long n) {
    long k = 0;
    for (long i = 0; i < n; i++) {
        volatile char *p = malloc(64);
        p[0] = (char)i;
        if (i % 4 == 0 && k < (long)(sizeof kept / sizeof kept[0])) {
            kept[k++] = (void *)p;
        } else {
            free((void *)p);
        }
    }
}

__attribute__((noinline)) static void parent_work(long n) {
    for (long i = 0; i < n; i++) {
        volatile char *p = malloc(32);
        p[0] = (char)i;
        free((void *)p);
    }
}

int main(int argc, char **argv) {
    long child = argc > 1 ? atol(argv[1]) : 200000;
    long parent = argc > 2 ? atol(argv[2]) : 2000000;
    pid_t pid = fork();
    if (pid == 0) {
        child_leak(child);
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    parent_work(parent);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
