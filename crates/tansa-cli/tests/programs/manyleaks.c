/* Twenty allocation sites (twenty call paths), each as lastleak.c's one: it frees its first
   block and keeps the next two, the last after half a second, then the program sleeps a
   second. The recorder judges all twenty leaking at once, after their last allocations,
   and has 16 trace slots a process: four sites find none free. */
#include <stdlib.h>
#include <unistd.h>

#define SITE(n) \
    __attribute__((noinline)) static char *make##n(void) { return malloc(64 + n); }
SITE(0) SITE(1) SITE(2) SITE(3) SITE(4) SITE(5) SITE(6) SITE(7) SITE(8) SITE(9)
SITE(10) SITE(11) SITE(12) SITE(13) SITE(14) SITE(15) SITE(16) SITE(17) SITE(18) SITE(19)

static char *(*const makers[20])(void) = {
    make0,  make1,  make2,  make3,  make4,  make5,  make6,  make7,  make8,  make9,
    make10, make11, make12, make13, make14, make15, make16, make17, make18, make19,
};

int main(void) {
    static char *kept[3][20];
    for (int i = 0; i < 3; i++) {
        if (i == 2)
            usleep(500 * 1000);
        for (int s = 0; s < 20; s++) {
            kept[i][s] = makers[s]();
            if (i == 0)
                free(kept[i][s]);
        }
    }
    usleep(1000 * 1000);
    return kept[1][0] == kept[2][0];
}
