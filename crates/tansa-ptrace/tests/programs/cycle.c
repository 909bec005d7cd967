/*
 * Test target for the sampler's phase: a region (`rec`, recursion) whose executions take
 * four paths in turn, of 4, 13, 22 and 31 instructions: 70 in all, a multiple of 7. With
 * the seed's sampling (one count running on across executions, every 7th instruction kept)
 * every execution of a path is then sampled at the same positions, and the others are never
 * seen. `rec` is written in assembly so that its lengths do not depend on the compiler:
 * rec(0) runs xor, test, jle, ret; rec(n) runs 9 instructions around rec(n - 1).
 *
 * Built by the tests with:  cc -O1 -g -fno-inline -o cycle cycle.c   (x86-64)
 *
 * argv[1]: executions of the region (default 1000).
 */
#include <stdlib.h>

long rec(long n);

__asm__(".text\n"
        ".globl rec\n"
        ".type rec, @function\n"
        "rec:\n"
        "    xor %eax, %eax\n"
        "    test %rdi, %rdi\n"
        "    jle 1f\n"
        "    sub $8, %rsp\n"
        "    dec %rdi\n"
        "    call rec\n"
        "    inc %rax\n"
        "    add $8, %rsp\n"
        "    ret\n"
        "1:  ret\n"
        ".size rec, .-rec\n");

static volatile long sink;

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    for (long k = 0; k < n; k++)
        sink += rec(k % 4);
    return 0;
}
