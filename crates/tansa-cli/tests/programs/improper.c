/* Improper use: free and realloc of pointers that were never allocated (interior pointers of
 * live blocks). Under `tansa record --online` the agent refuses both and the program goes
 * on; it prints "survived" and exits 0. (Without tansa, glibc would abort.) */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) void bad_free(char *block) { free(block + 16); }

__attribute__((noinline)) void *bad_realloc(char *block) { return realloc(block + 32, 100); }

int main(void) {
    char *block = malloc(64);
    memset(block, 0, 64);
    bad_free(block);
    void *r = bad_realloc(block);
    free(block);
    const char *msg = r == NULL ? "survived\n" : "realloc returned a block\n";
    return write(1, msg, strlen(msg)) > 0 && r == NULL ? 0 : 1;
}
