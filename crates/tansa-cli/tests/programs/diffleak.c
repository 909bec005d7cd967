/* Built by tests/diff.rs: cc -g -O1 diffleak.c -L. -ldiffleak -Wl,-rpath,DIR -o diffleak
 * `diffleak N`: N blocks of 100 bytes leaked through libdiffleak.so (leak_blocks), 4096
 * bytes allocated and freed there (scratch), and 1000 bytes allocated and freed by the
 * executable itself (steady). Nothing else allocates (no stdio). */
#include <stdlib.h>

void leak_blocks(long n);
void scratch(void);

static void *volatile keep;

__attribute__((noinline)) static void steady(void) {
    void *p = malloc(1000);
    keep = p;
    free(p);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 0;
    steady();
    scratch();
    leak_blocks(n);
    return 0;
}
