/* See samename_main.c. */
#include <stdlib.h>

void *volatile kept_a;

__attribute__((noinline)) static void *helper(void) { return malloc(1000); }

void from_a(void) { kept_a = helper(); }
