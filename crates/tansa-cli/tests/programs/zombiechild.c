/* A child that aborts, left unreaped: its parent forks it, learns that it ended without
 * collecting it (waitid with WNOWAIT, so it stays a zombie), prints "ready PARENT CHILD"
 * and waits to be killed. The child allocates 1000 bytes before it aborts.
 * Built with: cc -g -O1 zombiechild.c -o zombiechild
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
        volatile char *p = malloc(1000);
        p[0] = 1;
        abort();
    }
    siginfo_t info;
    if (waitid(P_PID, (id_t)child, &info, WEXITED | WNOWAIT) != 0) return 1;
    printf("ready %d %d\n", (int)getpid(), (int)child);
    fflush(stdout);
    for (;;) pause();
}
