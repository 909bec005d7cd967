/* phases [SECONDS]: first_phase spins for SECONDS (default 0.3), then the program sleeps
 * as long, then second_phase spins as long: a timeline shows the two phases apart, with
 * the idle gap between them. */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) void first_phase(double s) {
    double end = now() + s;
    while (now() < end)
        for (int i = 0; i < 10000; i++) sink += i;
}

__attribute__((noinline)) void second_phase(double s) {
    double end = now() + s;
    while (now() < end)
        for (int i = 0; i < 10000; i++) sink ^= i;
}

int main(int argc, char **argv) {
    double s = argc > 1 ? atof(argv[1]) : 0.3;
    first_phase(s);
    usleep((useconds_t)(s * 1e6));
    second_phase(s);
    return 0;
}
