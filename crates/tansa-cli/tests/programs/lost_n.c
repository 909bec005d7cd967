/* lost_n N: loses N blocks of 24 bytes (lose_some) and, when N > 2, one of 100 bytes
 * (lose_more); keeps one of 50 bytes in a global (keep). Two runs with different N are
 * compared with `tansa diff --metric lost` (tests/diff.rs). */
#include <stdlib.h>
#include <string.h>

void *volatile kept;

__attribute__((noinline)) void *lose_some(void) { return malloc(24); }
__attribute__((noinline)) void *lose_more(void) { return malloc(100); }
__attribute__((noinline)) void *keep(void) { return malloc(50); }

__attribute__((noinline)) static void make(int n) {
    for (int i = 0; i < n; i++) {
        void *volatile p = lose_some();
        memset(p, 1, 24);
    }
    if (n > 2) {
        void *volatile p = lose_more();
        memset(p, 2, 100);
    }
    kept = keep();
}

/* Overwrites the stack below main's frame, where make's dead frames held its pointers. */
__attribute__((noinline)) static void scrub(void) {
    volatile char zeros[16384];
    memset((char *)zeros, 0, sizeof zeros);
}

int main(int argc, char **argv) {
    make(argc > 1 ? atoi(argv[1]) : 1);
    scrub();
    return 0;
}
