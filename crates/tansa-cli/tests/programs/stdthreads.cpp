// Two std::thread workers, each allocating 500 blocks of 100 bytes with malloc and
// freeing them; the threads start in libstdc++'s trampoline, which calls `work`.
// Built with: c++ -g -O1 -pthread stdthreads.cpp -o stdthreads
#include <cstdlib>
#include <thread>
#include <vector>

__attribute__((noinline)) void work(int n) {
    std::vector<void *> blocks;
    blocks.reserve(n);
    for (int i = 0; i < n; i++) blocks.push_back(std::malloc(100));
    for (void *p : blocks) std::free(p);
}

int main() {
    std::thread a(work, 500), b(work, 500);
    a.join();
    b.join();
}
