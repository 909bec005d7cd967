/* clocks [SECONDS]: reads the monotonic clock in a loop for SECONDS (default 1). With a
 * clock source the vDSO can read (the TSC, kvm-clock), nearly all of the time is spent in
 * the vDSO's clock_gettime, which no file on disk holds. */
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 1.0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < secs);
    return 0;
}
