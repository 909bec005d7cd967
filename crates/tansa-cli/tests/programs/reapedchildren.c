/* A parent that collects its children's ends itself, at once (as MPI launchers' proxies and
 * shells do): child A allocates and aborts (SIGABRT); child B allocates, says it is ready
 * and waits until the parent kills it (SIGKILL); child C exits with code 7. The parent
 * prints "PID STATUS" for each (the raw wait status, in hex) and exits 0. The agent sees
 * none of the signal deaths itself: only the kernel, through a pidfd, tells how they ended
 * after their parent collected them. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void collect(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    printf("%d %x\n", (int)pid, (unsigned)status);
    fflush(stdout); /* before the next fork, which would copy the buffer */
}

int main(void) {
    pid_t a = fork();
    if (a == 0) {
        volatile char *p = malloc(1000);
        p[0] = 1;
        abort();
    }
    collect(a);
    int ready[2];
    if (pipe(ready) != 0) return 1;
    pid_t b = fork();
    if (b == 0) {
        volatile char *p = malloc(2000);
        p[0] = 1;
        char c = 'r';
        if (write(ready[1], &c, 1) != 1) _exit(1);
        for (;;) pause();
    }
    char c;
    if (read(ready[0], &c, 1) != 1) return 1;
    kill(b, SIGKILL);
    collect(b);
    pid_t cpid = fork();
    if (cpid == 0) {
        volatile char *p = malloc(3000);
        p[0] = 1;
        exit(7);
    }
    collect(cpid);
    return 0;
}
