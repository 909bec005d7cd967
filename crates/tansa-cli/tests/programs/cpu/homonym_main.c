/* homonym_main + homonym_a.c + homonym_b.c: two C `static` functions named `helper`, one
 * in each file, doing work in the ratio 1:3 (25 % and 75 % of the loop iterations). */
#include <stdio.h>
#include <stdlib.h>

double file_a(long n, double seed);
double file_b(long n, double seed);

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 200;
    double s = 0;
    for (long r = 0; r < rounds; r++) {
        s = file_a(250000, s);
        s = file_b(750000, s);
    }
    printf("%f\n", s);
    return 0;
}
