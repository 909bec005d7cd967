/* One allocation site (one call path) that frees its first block and keeps the next two,
   the last after half a second, then sleeps a second: the recorder can judge it leaking
   only after its last allocation. */
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) static char *make(void) { return malloc(64); }

int main(void) {
    static char *kept[3];
    for (int i = 0; i < 3; i++) {
        if (i == 2)
            usleep(500 * 1000);
        kept[i] = make();
        if (i == 0)
            free(kept[i]);
    }
    usleep(1000 * 1000);
    return kept[1] == kept[2];
}
