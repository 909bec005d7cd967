/* Allocations made inside the C library on the program's behalf: printf allocates the
 * stdout buffer (glibc names the function __printf inside and exports it as printf), and
 * main allocates one block of its own. */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    for (int i = 0; i < 3; i++) printf("line %d\n", i);
    char *volatile p = malloc(1000);
    free(p);
    return 0;
}
