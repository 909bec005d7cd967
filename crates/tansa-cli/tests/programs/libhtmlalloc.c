/* The library of html_heap.c: html_lib_fill allocates 1000 x 100 bytes and keeps them.
 * Built with: cc -shared -fPIC -g -O0 -o libhtmlalloc.so libhtmlalloc.c */
#include <stdlib.h>

static void *kept[1000];

__attribute__((noinline)) void html_lib_fill(void) {
    for (int i = 0; i < 1000; i++)
        kept[i] = malloc(100);
}
