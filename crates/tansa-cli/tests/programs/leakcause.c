/* The worked example of seed 001 (spec section 19): funcA allocates, funcB frees on two
 * paths (directly, or in sub1 when error_condition_2 holds) and returns without freeing
 * when error_condition_1 holds. Usage: leakcause [REQUESTS] (default 2000). */
#include <stdio.h>
#include <stdlib.h>

#define N 64
#define NOINLINE __attribute__((noinline))

static unsigned seed = 12345;
static volatile int sink;

static NOINLINE int chance(unsigned percent) {
    seed = seed * 1103515245u + 12345u;
    return (seed >> 16) % 100 < percent;
}

NOINLINE void sub1(char *p) {
    sink += p[0];
    free(p);
}

NOINLINE void sub2(char *p) {
    p[1] = 2;
    sink += p[1];
}

NOINLINE void funcB(char *p) {
    if (chance(30)) {        /* error_condition_2: location1 */
        sub1(p);
        return;
    }
    sub2(p);
    if (chance(20)) {        /* error_condition_1: location2, the leak */
        return;
    }
    free(p);
}

NOINLINE void funcA(void) {
    char *p = malloc(N);
    p[0] = 1;
    funcB(p);
}

int main(int argc, char **argv) {
    long requests = argc > 1 ? atol(argv[1]) : 2000;
    for (long i = 0; i < requests; i++)
        funcA();
    printf("done %ld\n", requests);
    return 0;
}
