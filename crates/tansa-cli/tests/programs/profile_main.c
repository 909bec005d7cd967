/* Known heap traffic for the export and flame graph tests (tests/export.rs):
 *   keep_blocks(N)  (libprofile.so): N mallocs of 1000 bytes, never freed;
 *   churn()         : 10 callocs of 4096 bytes via scratch_block (libprofile.so), each
 *                     freed right away;
 *   grow()          : malloc 100, realloc to 200, 300 (freed at the end);
 *   peak()          : 64 KiB held, then freed: the heap peaks inside it.
 * N is the first argument (default 5). */
#include <stdlib.h>
#include <string.h>

void keep_blocks(int n);
void *scratch_block(void);

static void churn(void) {
    for (int i = 0; i < 10; i++) {
        char *p = scratch_block();
        p[0] = 1;
        free(p);
    }
}

static void *grow(void) {
    char *p = malloc(100);
    p = realloc(p, 200);
    p = realloc(p, 300);
    return p;
}

static void peak(void) {
    char *big = malloc(65536);
    memset(big, 2, 65536);
    free(big);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5;
    keep_blocks(n);
    churn();
    void *g = grow();
    peak();
    free(g);
    return 0;
}
