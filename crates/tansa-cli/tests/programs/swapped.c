/* A program that leaves a FIFO where its library was: swapped LIB MOVED MS.
 * Loads LIB with dlopen, renames LIB to MOVED and makes a FIFO at LIB, then allocates 1000
 * bytes in the library, spins in it for MS milliseconds of CPU time and exits. The swap
 * comes before the library's code runs: a recorder opens a file as soon as a stack names
 * it, and one that opened LIB then, or at the end, would block in open(2) for good.
 * Built at test time with: cc -g -O1 -o swapped swapped.c -ldl */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) return 3;
    void *(*alloc)(size_t) = (void *(*)(size_t))dlsym(h, "swapped_alloc");
    long (*spin)(long) = (long (*)(long))dlsym(h, "swapped_spin");
    if (!alloc || !spin) return 4;
    if (rename(argv[1], argv[2]) != 0 || mkfifo(argv[1], 0600) != 0) return 5;
    void *p = alloc(1000);
    long x = spin(atol(argv[3]));
    printf("%ld\n", x & 1);
    return p == NULL;
}
