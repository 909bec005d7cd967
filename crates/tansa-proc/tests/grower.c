/* A process that grows on request, for tansa-proc's tests.
 *
 * Built at test time with: cc -O1 -g -o grower grower.c   (see tests/usage.rs)
 *
 * Reads commands from standard input, one a line, and answers "ok" on standard output once
 * the work is done:
 *   grow K   allocate K MiB with mmap and touch every page (so it is resident)
 *   open     open /dev/null and keep the descriptor
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

int main(void) {
    char line[128];
    setvbuf(stdout, NULL, _IOLBF, 0);
    puts("ready");
    while (fgets(line, sizeof line, stdin)) {
        int k;
        if (sscanf(line, "grow %d", &k) == 1) {
            size_t len = (size_t)k << 20;
            char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) return 1;
            memset(p, 0x5a, len);
        } else if (strncmp(line, "open", 4) == 0) {
            if (open("/dev/null", O_RDONLY) < 0) return 1;
        } else {
            return 2;
        }
        puts("ok");
    }
    return 0;
}
