/* Spins for argv[1] milliseconds of its own CPU time in spin(), then exits. Built twice,
 * as cpu_child and cpu_short, so the two processes have different names. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

__attribute__((noinline)) double spin(double ms) {
    double end = cpu_ms() + ms, x = 1.0;
    while (cpu_ms() < end)
        for (int i = 0; i < 10000; i++)
            x = x * 0.999999 + 1.0;
    return x;
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 100;
    printf("%f\n", spin(ms));
    return 0;
}
