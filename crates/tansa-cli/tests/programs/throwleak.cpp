// A leak decided by an error check that throws before it calls anything
// (tests/leak_cause.rs): `process` allocates with `new[]`, then `check` throws when its
// condition holds, past `process`'s `delete[]` (caught in `main`). The paths part at
// `check`'s branch: the leaking one throws, the freeing one returns to the `delete[]`.
//
// Usage: throwleak [N] (default 2000 iterations). Prints "done N".
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

__attribute__((noinline)) void check(int i) {
    if (i % 5 == 2) // check's error condition: the leak
        throw std::runtime_error("bad");
}

__attribute__((noinline)) void process(int i) {
    char *raw = new char[512]; // process's allocation
    memset(raw, i, 512);
    check(i);
    delete[] raw;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    for (int i = 0; i < n; i++) {
        try {
            process(i);
        } catch (const std::exception &) {
        }
    }
    printf("done %d\n", n);
    return 0;
}
