/* livegrow N MS DONE: calls liblive.so's live_grow() N times, MS milliseconds apart (the
 * blocks stay allocated: liblive.so ends with N * 4096 net bytes), then writes "done" to
 * the file DONE and exits 0. The live-view tests watch it grow and check that it ran to
 * its end after the view was closed.
 * Flags: -g -O1, linked against liblive.so with an rpath (tests/live_view.rs). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void *live_grow(void);

static void *kept[100000];

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: livegrow N MS DONE\n");
        return 2;
    }
    int n = atoi(argv[1]);
    long ms = atol(argv[2]);
    if (n < 0 || n > 100000) return 2;
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    for (int i = 0; i < n; i++) {
        kept[i] = live_grow();
        nanosleep(&pause, NULL);
    }
    FILE *f = fopen(argv[3], "w");
    if (!f) return 3;
    fputs("done\n", f);
    fclose(f);
    return 0;
}
