/* A library whose internal functions have no symbol once it is stripped to its exported
 * symbols, as distribution libraries are (tests/unnamed_functions.rs).
 * Built: cc -shared -fPIC -O1 -g unnamed_lib.c -o libunnamed.so, then `strip`. */
#include <stdlib.h>

__attribute__((noinline)) static void *grow_a(size_t n) { return malloc(n); }

__attribute__((noinline)) static void *grow_b(size_t n) { return malloc(2 * n); }

/* Volatile so that the loops stay loops. The two are the same code at the same alignment,
 * so that their times are in the ratio of their iterations on any CPU (with different
 * bodies, one CPU ran spin_a's loop seven times slower per iteration than spin_b's). */
__attribute__((noinline, aligned(64))) static long spin_a(long n) {
    volatile long s = 0;
    for (long i = 0; i < n; i++) s += i;
    return s;
}

__attribute__((noinline, aligned(64))) static long spin_b(long n) {
    volatile long s = 0;
    for (long i = 0; i < n; i++) s += i;
    return s;
}

void *lib_alloc(int which, size_t n) { return which ? grow_b(n) : grow_a(n); }

long lib_spin(int which, long n) { return which ? spin_b(n) : spin_a(n); }

/* Keep the static functions apart from the exported ones (no inlining into them). */
void *(*volatile keep_grow[2])(size_t) = {grow_a, grow_b};
long (*volatile keep_spin[2])(long) = {spin_a, spin_b};
