/* Processes one after another: serialprocs N [wait [killed]] forks N children in turn;
 * child i allocates 1000 + i bytes (kept) and exits 0 (with "killed": kills itself with
 * SIGKILL, which its agent cannot see), and is collected before the next one starts.
 * Prints "done FAILED" (how many did not end so); with "wait", then reads its standard
 * input to its end before it exits.
 * Built with: cc -g -O1 serialprocs.c -o serialprocs
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    int killed = argc > 3 && strcmp(argv[3], "killed") == 0;
    int failed = 0;
    for (int i = 0; i < n; i++) {
        pid_t c = fork();
        if (c < 0) return 1;
        if (c == 0) {
            volatile char *m = malloc(1000 + (size_t)i);
            m[0] = 1;
            if (killed) kill(getpid(), SIGKILL);
            _exit(0);
        }
        int status = 0;
        waitpid(c, &status, 0);
        if (killed)
            failed += !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        else
            failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    printf("done %d\n", failed);
    fflush(stdout);
    if (argc > 2) {
        char buf[64];
        while (read(0, buf, sizeof buf) > 0) {
        }
    }
    return 0;
}
