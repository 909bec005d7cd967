/* The shared-library part of the 70/30 workload (cpu_share.c): the same loop as
 * exe_work, so iteration counts are time shares. */
double lib_work(long n, double seed) {
    double x = seed;
    for (long i = 0; i < n; i++)
        x = x * 0.999999 + (double)(i & 7);
    return x;
}
