/* Leaks through allocation wrappers, the common case: the function that allocates is not
 * the one that decides whether the block is freed. `make` allocates with malloc and hands
 * the block to `handle`; `request` allocates with `new`, whose `operator new` (libstdc++)
 * calls malloc. Each caller frees its block unless its error condition holds (20 %).
 * `transact` allocates with `new` and frees after `validate`, which throws an exception
 * (caught in `main`) when its error condition holds: the block leaks.
 *
 * Usage: wrapped [REQUESTS] [WORK] (default 2000 requests, no work); WORK is a busy loop of
 * that many iterations in `handle` between the allocation and its fate (a long traced
 * path). Prints "done REQUESTS". */
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#define NOINLINE __attribute__((noinline))

static unsigned seed = 12345;
static volatile int sink;
static long work;

static NOINLINE int chance(unsigned percent) {
    seed = seed * 1103515245u + 12345u;
    return (seed >> 16) % 100 < percent;
}

struct Session {
    char name[40];
    long id;
};

NOINLINE char *make(int n) {
    char *p = static_cast<char *>(malloc(n));
    p[0] = 1;
    return p;
}

NOINLINE void handle() {
    char *p = make(64);
    sink += p[0];
    for (long w = 0; w < work; w++)
        sink += static_cast<int>(w);
    if (chance(20)) { /* handle's error condition: the leak */
        return;
    }
    free(p);
}

NOINLINE void request(long i) {
    Session *s = new Session();
    s->id = i;
    sink += static_cast<int>(s->id);
    if (chance(20)) { /* request's error condition: the leak */
        return;
    }
    delete s;
}

Session *volatile last_transaction;

NOINLINE void validate(long i) {
    if (chance(20)) { /* validate's error condition: the leak */
        throw std::runtime_error("bad request");
    }
    sink += static_cast<int>(i);
}

NOINLINE void transact(long i) {
    Session *s = new Session();
    s->id = i;
    last_transaction = s;
    validate(i);
    delete s;
}

int main(int argc, char **argv) {
    long requests = argc > 1 ? atol(argv[1]) : 2000;
    work = argc > 2 ? atol(argv[2]) : 0;
    for (long i = 0; i < requests; i++) {
        handle();
        request(i);
        try {
            transact(i);
        } catch (const std::exception &) {
            sink += 1;
        }
    }
    printf("done %ld\n", requests);
    return 0;
}
