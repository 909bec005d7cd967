/* Known allocation volumes per library for the sampled heap mode (tests/sampled.rs):
 *   libsampled.so: churn_blocks, 64 MiB (at least; the last block may pass it) in blocks
 *                  of 16 to 4096 bytes, all freed; keep_blocks, 8 MiB in 1 KiB blocks, kept;
 *   the executable: 32 MiB in 100-byte blocks, all freed, and 4 MiB in one block, kept
 *                  (larger than any sampling interval of the test: sampled for sure).
 */
#include <stdlib.h>
#include <string.h>

void churn_blocks(void);
void keep_blocks(void);

int main(void) {
    churn_blocks();
    keep_blocks();
    for (size_t total = 0; total < 32u << 20; total += 100) {
        char *p = malloc(100);
        p[0] = 1;
        free(p);
    }
    char *big = malloc(4u << 20);
    memset(big, 3, 4096);
    return big[0] == 3 ? 0 : 1;
}
