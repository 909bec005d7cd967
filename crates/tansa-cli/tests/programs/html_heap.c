/* The heap program of the HTML report test (tests/html.rs). The main thread is named
 * "</script><b>" (a name the page must show as text); then libhtmlalloc.so allocates
 * 1000 x 100 bytes (kept to the end) and html_scratch makes 250 temporary blocks of 50
 * bytes (each freed at once); 400 ms later html_leak leaks 777 bytes from the executable;
 * 400 ms later the program exits.
 * Built with: cc -g -O0 -pthread html_heap.c -L. -lhtmlalloc -Wl,-rpath,. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

void html_lib_fill(void);

__attribute__((noinline)) void *html_leak(void) {
    void *p = malloc(777);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void html_scratch(void) {
    for (int i = 0; i < 250; i++) {
        void *p = malloc(50);
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
}

int main(void) {
    pthread_setname_np(pthread_self(), "</script><b>");
    html_lib_fill();
    html_scratch();
    usleep(400 * 1000);
    html_leak();
    usleep(400 * 1000);
    return 0;
}
