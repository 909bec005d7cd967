// names [N]: CPU time in a C++ method (shapes::Square::area), in a function whose work is
// an always-inlined helper (outer, with mix inlined), and none in driver itself, which
// only calls them 20 times: `tansa annotate` by short names, and its explanations.
#include <cstdlib>

namespace shapes {
struct Square {
    long side;
    __attribute__((noinline)) long area(long n) const;
};

long Square::area(long n) const {
    long s = 0;
    // A chain of multiplications: one iteration after the other, not vectorized.
    for (long i = 0; i < n; i++) s = s * 31 + (side ^ i);
    return s;
}
}  // namespace shapes

static inline __attribute__((always_inline)) long mix(long x) {
    for (int i = 0; i < 50; i++) x = x * 6364136223846793005L + 1;
    return x;
}

__attribute__((noinline)) long outer(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) s += mix(i);
    return s;
}

__attribute__((noinline)) long driver(long n) {
    shapes::Square sq{3};
    long r = 0;
    for (int k = 0; k < 20; k++) {
        // Arguments that differ each time: the calls cannot be merged into one.
        r += sq.area(n + k);
        r += outer(n / 200 + k);
    }
    return r;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    volatile long r = driver(n);
    return (int)(r & 1);
}
