/* CPU time in two functions, 3:1, for tests/export.rs. Built with -O0 so that neither is
 * inlined. Runs for about the number of milliseconds given (default 600). */
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

static void burn_big(void) {
    for (unsigned long i = 0; i < 3000000; i++) sink += i * 7;
}

static void burn_small(void) {
    for (unsigned long i = 0; i < 1000000; i++) sink += i * 3;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 600;
    double end = now_ms() + ms;
    while (now_ms() < end) {
        burn_big();
        burn_small();
    }
    return 0;
}
