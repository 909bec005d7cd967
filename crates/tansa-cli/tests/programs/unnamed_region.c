/* A repeated region (`work`) that runs a stripped library's code: the PLT stub of
 * lib_spin, lib_spin (exported), and its internal spin_a or spin_b, which have no symbol
 * (tests/unnamed_functions.rs). With an argument N, N executions of the region.
 * Built: cc -O1 -g unnamed_region.c -L DIR -lunnamed -Wl,-rpath,DIR */
#include <stdio.h>
#include <stdlib.h>

long lib_spin(int which, long n);

__attribute__((noinline)) long work(int i) { return lib_spin(i & 1, 3); }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    long s = 0;
    for (int i = 0; i < n; i++) s += work(i);
    printf("%ld\n", s & 1);
    return 0;
}
