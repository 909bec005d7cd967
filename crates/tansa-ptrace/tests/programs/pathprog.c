/* pathprog: prints its thread id, reads a number from stdin, then calls traced(number).
 * traced -> choose (a branch on x > 5) -> leaf; then a branch on choose's result, and
 * puts (a library call through the PLT) or leaf. Built with CFLAGS (see common/mod.rs). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) void leaf(void) { __asm__ volatile(""); }

__attribute__((noinline)) int choose(int x) {
    if (x > 5) {
        leaf();
        return 1;
    }
    return 0;
}

__attribute__((noinline)) void traced(int x) {
    if (choose(x))
        puts("big");
    else
        leaf();
}

int main(void) {
    printf("%d\n", (int)gettid());
    fflush(stdout);
    char buf[16] = {0};
    if (read(0, buf, sizeof buf - 1) <= 0) return 2;
    traced(atoi(buf));
    return 0;
}
