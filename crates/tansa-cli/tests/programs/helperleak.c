/* Leaks decided by a branch whose leaking side calls a helper (tests/leak_cause.rs).
 *
 * `work` mallocs and memsets a block; on its error condition it calls `report_error`,
 * which only memsets a static buffer, and returns without freeing; otherwise it frees. The
 * paths part in `work`, at that branch: `report_error` runs only on the leaking path, and
 * its `memset` is not the one both paths ran before the branch.
 *
 * `handle` (as a request handler) mallocs `y` and leaks it on one condition; both paths
 * then call `parse`, which has nothing to do with `y`, so `parse` is no cause of `y`'s
 * leak. `parse` itself leaks its buffer on an error return.
 *
 * Usage: helperleak [N] (default 2000 iterations). Prints "done N". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char scratch[256];
volatile int sink;

__attribute__((noinline)) void report_error(int i) {
    memset(scratch, i, sizeof scratch);
}

__attribute__((noinline)) void work(int i) {
    char *p = malloc(128); /* work's allocation */
    memset(p, i, 128);
    if (i % 4 == 0) { /* work's error condition: the leak */
        report_error(i);
        return;
    }
    free(p);
}

struct req {
    char *buf;
};

__attribute__((noinline)) int parse(struct req *r, int i) {
    r->buf = malloc(64);
    memset(r->buf, 0, 64);
    if (i % 5 == 3) /* parse's error return, forgets to free */
        return -1;
    return 0;
}

__attribute__((noinline)) void handle(int i) {
    struct req r;
    switch (i % 3) {
    case 0: {
        char *x = malloc(200); /* handle's x: always freed */
        memset(x, 1, 200);
        free(x);
        break;
    }
    case 1: {
        char *y = malloc(300); /* handle's y */
        memset(y, 1, 300);
        if (i % 7 == 1) /* handle's y condition: the leak */
            break;
        free(y);
        break;
    }
    default:
        break;
    }
    if (parse(&r, i) < 0)
        return;
    free(r.buf);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    for (int i = 0; i < n; i++) {
        work(i);
        handle(i);
    }
    printf("done %d\n", n);
    return 0;
}
