/* Many processes alive at once: manyprocs N [HEAVY] prints "limit SOFT" (its open-file soft
 * limit), forks N children that each allocate 1000 + i bytes (kept) and wait until the
 * parent closes a pipe, then exit 0; the parent closes the pipe once all N are started,
 * collects them and prints "done FAILED" (how many did not exit 0). The last HEAVY children
 * (0 by default) also allocate and free 32 bytes 400,000 times once the pipe is closed,
 * more than a recording ring holds.
 * Built with: cc -g -O1 manyprocs.c -o manyprocs
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    int heavy = argc > 2 ? atoi(argv[2]) : 0;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    printf("limit %llu\n", (unsigned long long)rl.rlim_cur);
    fflush(stdout);
    int gate[2], ready[2];
    if (pipe(gate) != 0 || pipe(ready) != 0) return 1;
    for (int i = 0; i < n; i++) {
        pid_t c = fork();
        if (c < 0) return 1;
        if (c == 0) {
            close(gate[1]);
            close(ready[0]);
            volatile char *m = malloc(1000 + (size_t)i);
            m[0] = 1;
            char b = 1;
            if (write(ready[1], &b, 1) != 1) _exit(2);
            if (read(gate[0], &b, 1) != 0) _exit(3);
            if (i >= n - heavy) {
                for (int k = 0; k < 400000; k++) {
                    volatile char *q = malloc(32);
                    q[0] = 1;
                    free((void *)q);
                }
            }
            _exit(0);
        }
    }
    close(gate[0]);
    close(ready[1]);
    /* Every child has allocated (and so announced itself to the recorder) before any
     * may end. */
    for (int i = 0; i < n; i++) {
        char b;
        if (read(ready[0], &b, 1) != 1) return 1;
    }
    close(gate[1]);
    int status, failed = 0;
    while (wait(&status) > 0) failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("done %d\n", failed);
    return 0;
}
