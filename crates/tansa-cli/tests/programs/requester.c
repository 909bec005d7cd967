/* Allocates blocks of 12345 bytes from one site, a millisecond apart, N times (default
 * 400), freeing each: a site the leak-cause test's own sink asks the agent to trace. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>

__attribute__((noinline)) static void *site(void) {
    return malloc(12345);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 400;
    for (int i = 0; i < n; i++) {
        char *p = site();
        memset(p, i, 16);
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
        usleep(1000);
    }
    puts("done");
    return 0;
}
