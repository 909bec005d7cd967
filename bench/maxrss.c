/* maxrss CMD ARGS...: runs CMD and prints "maxrss_kb=N exit=S" on stderr (N: the peak
 * resident set size of CMD as wait4 reports it). Used by bench/memory.py. */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    pid_t pid = fork();
    if (pid == 0) {
        execvp(argv[1], argv + 1);
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) return 2;
    fprintf(stderr, "maxrss_kb=%ld exit=%d\n", ru.ru_maxrss, status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
