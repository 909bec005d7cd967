/* fork + exec: forker [child]
 * parent: malloc(1111) (kept), malloc(4444) (inherited by the child), fork, wait, exit 0.
 * forked child: free the inherited 4444 block, malloc(2222), then exec itself with "child".
 * exec'd image: malloc(3333), exit 7. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void touch(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        touch(malloc(3333));
        return 7;
    }
    touch(malloc(1111));
    void *inherited = malloc(4444);
    touch(inherited);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
        free(inherited);
        touch(malloc(2222));
        char *args[] = {argv[0], "child", NULL};
        execv(argv[0], args);
        _exit(3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 7 ? 0 : 1;
}
