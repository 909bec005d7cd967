/* Allocates through the stripped library's internal functions: 10 x 100 bytes in grow_a,
 * 20 x 200 bytes in grow_b (nothing freed); with an argument N, also spins N iterations in
 * spin_a and 3N in spin_b (tests/unnamed_functions.rs).
 * Built: cc -O1 -g unnamed_main.c -L DIR -lunnamed -Wl,-rpath,DIR */
#include <stdio.h>
#include <stdlib.h>

void *lib_alloc(int which, size_t n);
long lib_spin(int which, long n);

int main(int argc, char **argv) {
    for (int i = 0; i < 10; i++) lib_alloc(0, 100);
    for (int i = 0; i < 20; i++) lib_alloc(1, 100);
    if (argc > 1) {
        long n = atol(argv[1]);
        long s = lib_spin(0, n) + lib_spin(1, 3 * n);
        printf("%ld\n", s & 1);
    }
    return 0;
}
