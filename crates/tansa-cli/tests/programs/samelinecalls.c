/* Two calls of one leaking function on one source line: two call paths whose frames
 * (function, file, line) look the same, in one process. Each loop round leaks 2 blocks
 * of 24 bytes.
 * Built with: cc -g -O0 samelinecalls.c -o samelinecalls
 */
#include <stdlib.h>

__attribute__((noinline)) void *make(void) {
    char *p = malloc(24);
    if (p) p[0] = 1;
    return p;
}

int main(void) {
    for (int i = 0; i < 2000; i++) { make(); make(); }
    return 0;
}
