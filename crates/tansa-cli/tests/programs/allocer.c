/* allocer [MS]: allocates and frees 1111 bytes, then sleeps MS milliseconds (default 0).
 * Built dynamically and statically (-static). */
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    void *volatile p = malloc(1111);
    free(p);
    long ms = argc > 1 ? atol(argv[1]) : 0;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return 0;
}
