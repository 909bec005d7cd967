/* A program that generates code at run time, as a JIT does: two functions copied into
 * anonymous executable memory, jit_hot called three times as long as jit_cold, for about
 * MS milliseconds. How it names them (the first argument):
 *   map   writes /tmp/perf-PID.map, as V8's --perf-basic-prof does;
 *   stale writes the map, then dates it an hour back, as a map left by an earlier
 *         process with the same id would be, which tansa must refuse;
 *   none  writes no map;
 *   link  makes /tmp/perf-PID.map a symbolic link to a map elsewhere (TARGET, the third
 *         argument), which tansa must refuse.
 * Prints the map's path on stdout (the test removes it). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* spin(n): dec rdi; jnz -5; ret */
static const unsigned char SPIN[] = {0x48, 0xff, 0xcf, 0x75, 0xfb, 0xc3};

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "map";
    double ms = argc > 2 ? atof(argv[2]) : 600;
    unsigned char *code = mmap(NULL, 8192, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED)
        return 1;
    memcpy(code, SPIN, sizeof SPIN);          /* jit_hot at +0 */
    memcpy(code + 256, SPIN, sizeof SPIN);    /* jit_cold at +256 */
    if (mprotect(code, 8192, PROT_READ | PROT_EXEC) != 0)
        return 1;
    void (*hot)(long) = (void (*)(long))code;
    void (*cold)(long) = (void (*)(long))(code + 256);

    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    if (strcmp(mode, "map") == 0 || strcmp(mode, "stale") == 0) {
        FILE *f = fopen(path, "w");
        if (!f)
            return 1;
        fprintf(f, "%lx %zx jit_hot\n", (unsigned long)code, sizeof SPIN);
        fprintf(f, "%lx %zx jit_cold\n", (unsigned long)(code + 256), sizeof SPIN);
        fclose(f);
        if (strcmp(mode, "stale") == 0) {
            struct timeval hour_ago[2];
            gettimeofday(&hour_ago[0], NULL);
            hour_ago[0].tv_sec -= 3600;
            hour_ago[1] = hour_ago[0];
            if (utimes(path, hour_ago) != 0)
                return 1;
        }
    } else if (strcmp(mode, "link") == 0) {
        const char *target = argc > 3 ? argv[3] : "/dev/null";
        FILE *f = fopen(target, "w");
        if (!f)
            return 1;
        fprintf(f, "%lx %zx secret_name\n", (unsigned long)code, sizeof SPIN);
        fclose(f);
        if (symlink(target, path) != 0)
            return 1;
    }
    printf("%s\n", path);
    fflush(stdout);

    double end = now_ms() + ms;
    while (now_ms() < end) {
        hot(3000000);
        cold(1000000);
    }
    return 0;
}
