/* spawner PROGRAM...: starts each program in turn with posix_spawnp (as glibc does it: a
 * child sharing the parent's memory until it executes, with no pthread_atfork handler
 * run) and waits for it; prints "spawned N" with the number started. */
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>

extern char **environ;

int main(int argc, char **argv) {
    int n = 0;
    for (int i = 1; i < argc; i++) {
        pid_t pid;
        char *args[] = {argv[i], NULL};
        if (posix_spawnp(&pid, argv[i], NULL, NULL, args, environ) != 0) {
            perror(argv[i]);
            return 1;
        }
        int status;
        waitpid(pid, &status, 0);
        n++;
    }
    printf("spawned %d\n", n);
    return 0;
}
