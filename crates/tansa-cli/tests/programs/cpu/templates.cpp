// Two instances of one function template, whose loops are on one line (line 5): 2/3 of
// the work in work<long, int>, 1/3 in work<long, char>.
volatile long sink;
template <typename A, typename B>
__attribute__((noinline)) long work(A a, B b) { long s = 0; for (long i = 0; i < a; i++) s += i * b; return s; }

int main() {
    sink = work<long, int>(200000000L, 3);
    sink += work<long, char>(100000000L, 'a');
    return 0;
}
