/* One of two C `static` functions named `helper` (homonym_main.c). */
__attribute__((noinline)) static double helper(long n, double seed) {
    double x = seed;
    for (long i = 0; i < n; i++)
        x = x * 0.999999 + (double)(i & 3);
    return x;
}

__attribute__((noinline)) double file_b(long n, double seed) { return helper(n, seed) + 1.0; }
