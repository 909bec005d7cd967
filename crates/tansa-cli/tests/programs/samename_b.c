/* See samename_main.c. */
#include <stdlib.h>

void *volatile kept_b;

__attribute__((noinline)) static void *helper(void) { return malloc(3000); }

void from_b(void) { kept_b = helper(); }
