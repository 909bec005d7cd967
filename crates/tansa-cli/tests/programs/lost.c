/* The leak check at exit (`tansa record --leak-check`, tests/leak_check.rs): blocks the
 * program can still reach when it exits, and blocks it lost, each from its own function.
 *
 *   lose_many      5 x 40 B, pointers dropped             definitely lost
 *   lose_box       16 B holding the only pointer to ...   definitely lost
 *   lose_inner     ... 24 B                               indirectly lost
 *   lose_cycle     2 x 32 B pointing at each other        1 definitely, 1 indirectly
 *   lose_big       200 KiB (its own mapping)              definitely lost
 *   keep_global    100 B in a global                      reachable
 *   keep_interior  64 B, a global points inside it        reachable
 *   keep_in_thread 48 B on the stack of a thread still running at exit   reachable
 *   keep_in_mapping 56 B in an anonymous mapping           reachable
 *   keep_big       300,000 B in a global                  reachable
 *   freed          8 B, freed                             not live
 *
 * With the argument `kill` the program kills itself with SIGKILL instead of exiting: no
 * check is made. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct pair { struct pair *other; char pad[24]; };

void *volatile keep;
char *volatile interior;
void *volatile big;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int ready;

__attribute__((noinline)) void *lose_many(void) { return malloc(40); }
__attribute__((noinline)) void *lose_inner(void) { return malloc(24); }
__attribute__((noinline)) void **lose_box(void) { return malloc(16); }
__attribute__((noinline)) struct pair *lose_cycle(void) { return malloc(sizeof(struct pair)); }
__attribute__((noinline)) void *lose_big(void) { return malloc(200 * 1024); }
__attribute__((noinline)) void *keep_global(void) { return malloc(100); }
__attribute__((noinline)) void *keep_interior(void) { return malloc(64); }
__attribute__((noinline)) void *keep_in_thread(void) { return malloc(48); }
__attribute__((noinline)) void *keep_in_mapping(void) { return malloc(56); }
__attribute__((noinline)) void *keep_big(void) { return malloc(300000); }
__attribute__((noinline)) void freed(void) { free(malloc(8)); }

static void *holder(void *arg) {
    (void)arg;
    void *volatile mine = keep_in_thread();
    pthread_mutex_lock(&m);
    ready = 1;
    pthread_cond_signal(&c);
    for (;;)
        pthread_cond_wait(&c, &m); /* never signalled again: runs until the process exits */
    return mine;
}

__attribute__((noinline)) static void make(void) {
    for (int i = 0; i < 5; i++) {
        void *volatile p = lose_many();
        memset(p, 1, 40);
    }
    void **box = lose_box();
    box[0] = lose_inner();
    box[1] = 0;
    box = 0;
    struct pair *a = lose_cycle(), *b = lose_cycle();
    a->other = b;
    b->other = a;
    a = b = 0;
    memset(lose_big(), 2, 4096);
    keep = keep_global();
    interior = (char *)keep_interior() + 20;
    big = keep_big();
    void **region = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    region[7] = keep_in_mapping();
    freed();
}

/* Overwrites the stack below main's frame, where make's dead frames held its pointers. */
__attribute__((noinline)) static void scrub(void) {
    volatile char zeros[16384];
    memset((char *)zeros, 0, sizeof zeros);
}

int main(int argc, char **argv) {
    pthread_t t;
    pthread_create(&t, 0, holder, 0);
    pthread_mutex_lock(&m);
    while (!ready)
        pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
    make();
    scrub();
    if (argc > 1 && strcmp(argv[1], "kill") == 0)
        raise(SIGKILL);
    exit(0);
}
