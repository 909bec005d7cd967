/* Heap reports tell apart functions of one name in one module (tests/memory_attribution.rs):
 * samename_a.c and samename_b.c each have a `static` function `helper`; the first's blocks
 * are 1000 bytes, the second's 3000, one of each per call of `from_a` and `from_b`, N times
 * (default 10). Built with samename_a.c and samename_b.c. */
#include <stdlib.h>

void from_a(void);
void from_b(void);

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    for (int i = 0; i < n; i++) {
        from_a();
        from_b();
    }
    return 0;
}
