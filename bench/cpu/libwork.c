/* The shared-library part of bench/cpu/workload.c. */
double lib_work(long n, double seed) {
    double x = seed;
    for (long i = 0; i < n; i++)
        x = x * 0.999999 + (double)(i & 7);
    return x;
}
