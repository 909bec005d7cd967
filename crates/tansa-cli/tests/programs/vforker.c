/* vforker STATIC: children of vfork that run no program, and one that does.
 * Five children _exit at once and are waited for; one tries to execute a program that
 * does not exist and _exits 127 (the classic failed exec); one executes STATIC (a program
 * that cannot run the agent); the last _exits and is never waited for, so the recorder
 * reaps it once this process is gone. Prints "vforked N exec M" with the children started
 * and the exit status of STATIC. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    void *volatile p = malloc(10);
    int n = 0, status = 0;
    for (int i = 0; i < 5; i++) {
        pid_t c = vfork();
        if (c == 0)
            _exit(7);
        waitpid(c, &status, 0);
        n++;
    }
    pid_t c = vfork();
    if (c == 0) {
        execl("/nonexistent/tansa-test-program", "x", (char *)NULL);
        _exit(127);
    }
    waitpid(c, &status, 0);
    n++;
    c = vfork();
    if (c == 0) {
        execl(argv[1], argv[1], (char *)NULL);
        _exit(127);
    }
    waitpid(c, &status, 0);
    n++;
    int exec_status = WEXITSTATUS(status);
    c = vfork();
    if (c == 0)
        _exit(3);
    n++;
    free(p);
    printf("vforked %d exec %d\n", n, exec_status);
    return 0;
}
