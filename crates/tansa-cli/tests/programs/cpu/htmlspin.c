/* The CPU program of the HTML report test (tests/html.rs): html_hot spins for argv[1]
 * milliseconds of CPU time, html_cold for a tenth of that.
 * Built with: cc -g -O1 -o htmlspin htmlspin.c */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

__attribute__((noinline)) double html_hot(double ms) {
    double end = cpu_ms() + ms, x = 1.0;
    while (cpu_ms() < end)
        for (int i = 0; i < 10000; i++)
            x = x * 0.999999 + 1.0;
    return x;
}

__attribute__((noinline)) double html_cold(double ms) {
    double end = cpu_ms() + ms, x = 2.0;
    while (cpu_ms() < end)
        for (int i = 0; i < 10000; i++)
            x = x * 0.999998 + 1.0;
    return x;
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 300;
    printf("%f\n", html_hot(ms) + html_cold(ms / 10));
    return 0;
}
