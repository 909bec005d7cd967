/* Starts a short-lived process (exec of argv[2], 60 ms of CPU, exits at once) and a
 * longer child (fork, then exec of argv[1], 400 ms), spins itself, and waits for both.
 * The short one has ended long before sampling stops. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

__attribute__((noinline)) double parent_spin(double ms) {
    double end = cpu_ms() + ms, x = 1.0;
    while (cpu_ms() < end)
        for (int i = 0; i < 10000; i++)
            x = x * 0.999999 + 1.0;
    return x;
}

static pid_t run(const char *path, const char *ms) {
    pid_t pid = fork();
    if (pid == 0) {
        execl(path, path, ms, (char *)NULL);
        _exit(127);
    }
    return pid;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: forker CHILD SHORT\n");
        return 2;
    }
    pid_t s = run(argv[2], "60");
    int status;
    waitpid(s, &status, 0);
    pid_t c = run(argv[1], "400");
    printf("%f\n", parent_spin(300));
    waitpid(c, &status, 0);
    return 0;
}
