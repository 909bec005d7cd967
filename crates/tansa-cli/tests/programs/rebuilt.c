/* rebuilt [MS]: ten allocations in alloc_early, a pause of MS milliseconds (default 1000),
 * then ten in alloc_late; the blocks are kept. The test replaces (or deletes) the program's
 * file during the pause. */
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) void *alloc_early(void) { return malloc(100); }
__attribute__((noinline)) void *alloc_late(void) { return malloc(200); }

int main(int argc, char **argv) {
    long ms = argc > 1 ? atol(argv[1]) : 1000;
    static void *kept[20];
    for (int i = 0; i < 10; i++) kept[i] = alloc_early();
    usleep((useconds_t)(ms * 1000));
    for (int i = 10; i < 20; i++) kept[i] = alloc_late();
    return kept[0] == NULL;
}
