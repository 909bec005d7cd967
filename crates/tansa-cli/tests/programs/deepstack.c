/* Stacks deeper than the recorder's frame limit (tests/agent_losses.rs): `deepstack
 * DEPTH...` allocates one 100-byte block (kept) below a recursion of each DEPTH frames. */
#include <stdlib.h>

void *volatile kept[16];

__attribute__((noinline)) void *recurse(int depth) {
    if (depth == 0)
        return malloc(100);
    void *p = recurse(depth - 1);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
    return p;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc && i <= 16; i++)
        kept[i - 1] = recurse(atoi(argv[i]));
    return 0;
}
