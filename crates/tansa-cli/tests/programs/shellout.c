/* shellout COMMAND: runs COMMAND once with system() and once with popen() (both start
 * /bin/sh -c COMMAND through glibc's internal spawn, which no interposition reaches) and
 * prints "system S popen P" with their statuses. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: shellout COMMAND\n");
        return 2;
    }
    int s = system(argv[1]);
    FILE *f = popen(argv[1], "r");
    if (!f) {
        perror("popen");
        return 1;
    }
    char buf[256];
    while (fgets(buf, sizeof buf, f)) {
    }
    int p = pclose(f);
    printf("system %d popen %d\n", s, p);
    return 0;
}
