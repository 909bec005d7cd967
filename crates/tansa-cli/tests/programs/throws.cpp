// Exceptions thrown through frames that allocate: throws N throws an exception from a
// recursion of depth i % 30 (each level holding a std::vector) N times, catches each, and
// prints "caught N". The unwinder that runs is the program's own (libgcc_s), over frames
// whose allocations the agent records.
// Built with: c++ -g -O1 throws.cpp -o throws
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

static int depth(int n) {
    std::vector<int> v(n + 1);
    if (n == 0) throw std::runtime_error("bottom " + std::to_string(v.size()));
    return depth(n - 1) + (int)v.size();
}

int main(int argc, char **argv) {
    int n = argc > 1 ? std::atoi(argv[1]) : 100;
    int caught = 0;
    for (int i = 0; i < n; i++) {
        try {
            depth(i % 30);
        } catch (const std::exception &) {
            caught++;
        }
    }
    std::printf("caught %d\n", caught);
    return 0;
}
