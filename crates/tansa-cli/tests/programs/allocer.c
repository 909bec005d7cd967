/* allocer [MS [N]]: allocates and frees 1111 bytes N times (default 1), then sleeps MS
 * milliseconds (default 0). Built dynamically and statically (-static). */
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    long n = argc > 2 ? atol(argv[2]) : 1;
    for (long i = 0; i < n; i++) {
        void *volatile p = malloc(1111);
        free(p);
    }
    long ms = argc > 1 ? atol(argv[1]) : 0;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return 0;
}
