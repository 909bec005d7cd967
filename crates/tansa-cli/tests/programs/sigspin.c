/* Allocations made only in a signal handler: a SIGALRM timer interrupts the busy function
 * `spin` until the handler `on_tick` ran 200 times, each time allocating 64 bytes (kept).
 * The program allocates nothing else, so every block is the handler's; the interrupted
 * function is `spin` for nearly every signal (one may land just before or after it).
 * glibc's first malloc (tcache_init) takes the arena lock, which a handler interrupting it
 * would wait for forever: the program allocates nothing outside the handler, so the first
 * malloc is the handler's own. Built with -g and -O0 or -O2 (tests/memory_attribution.rs). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static volatile int ticks;
static void *kept[200];

__attribute__((noinline)) void on_tick(int sig) {
    (void)sig;
    if (ticks < 200) {
        kept[ticks] = malloc(64);
        ticks++;
    }
}

__attribute__((noinline)) void spin(void) {
    while (ticks < 200) {
        __asm__ volatile("" ::: "memory");
    }
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_tick;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, 0);
    spin();
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, 0);
    __asm__ volatile("" : : "r"(kept) : "memory");
    return 0;
}
