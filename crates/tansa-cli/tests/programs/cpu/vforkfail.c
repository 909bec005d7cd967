/* A vfork child whose exec fails: vforkfail MICROS. Spins MICROS microseconds of CPU time,
 * starts a child with vfork that tries to execute a program that does not exist and ends
 * with _exit(127) (as a shell does for a mistyped command), spins as long again, and
 * prints "cpu NS" (main's CPU time from its start) and "child S" (the child's status). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long thread_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void spin(long micros) {
    volatile unsigned long x = 0;
    long long end = thread_ns() + micros * 1000LL;
    while (thread_ns() < end) x++;
}

int main(int argc, char **argv) {
    long long start = thread_ns();
    long micros = argc > 1 ? atol(argv[1]) : 20500;
    spin(micros);
    pid_t pid = vfork();
    if (pid == 0) {
        execl("/nonexistent/program", "program", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    spin(micros);
    printf("cpu %lld\nchild %d\n", thread_ns() - start, WEXITSTATUS(status));
    return 0;
}
