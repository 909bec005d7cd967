/* Processes one after another, as a build or a shell script starts them (bench/procs.py).
 *   spawn fork N   N children in turn, each allocating once and exiting
 *   spawn exec N   N children in turn, each running /bin/true (fork, then execve)
 * Each child is collected before the next one starts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: spawn fork|exec N\n");
        return 2;
    }
    int exec = strcmp(argv[1], "exec") == 0;
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
        pid_t c = fork();
        if (c < 0) return 1;
        if (c == 0) {
            if (exec) {
                execl("/bin/true", "true", (char *)0);
                _exit(127);
            }
            volatile char *m = malloc(1000 + (size_t)i);
            m[0] = 1;
            _exit(0);
        }
        int status = 0;
        waitpid(c, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    }
    return 0;
}
