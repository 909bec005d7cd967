/* Blocks a forked child inherits and then loses (`tansa record --leak-check`,
 * tests/leak_check.rs). Valgrind (--trace-children=yes --leak-check=full) counts each
 * process's own copy of the heap; so does tansa for lost blocks. Each block comes from its
 * own function:
 *
 *   drop_in_child  4000 B in a global; the child clears it      child: definitely lost
 *                  (the parent frees its own copy after the child ended)
 *   free_in_child  300 B in a global; the child frees it         parent: reachable
 *   lose_early     111 B, dropped before the fork                 parent and child: definitely lost
 *   list_head      64 B in a global, holding the only pointer     child: definitely lost,
 *   list_node      ... to 48 B; the child clears the global       child: indirectly lost
 *                                                                parent: both reachable
 *   lose_in_child  33 B, dropped by the child                     child: definitely lost
 *   lose_in_parent 70 B, dropped by the parent after the child    parent: definitely lost
 *
 * The child exits with `exit(0)` (its check is made); the parent waits for it first. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

void *volatile shared;
void *volatile freed_by_child;
void **volatile head;

__attribute__((noinline)) void *drop_in_child(void) { return malloc(4000); }
__attribute__((noinline)) void *free_in_child(void) { return malloc(300); }
__attribute__((noinline)) void lose_early(void) { void *volatile p = malloc(111); p = 0; (void)p; }
__attribute__((noinline)) void *list_node(void) { return malloc(48); }
__attribute__((noinline)) void **list_head(void) {
    void **h = malloc(64);
    h[0] = list_node();
    return h;
}
__attribute__((noinline)) void lose_in_child(void) { void *volatile p = malloc(33); p = 0; (void)p; }
__attribute__((noinline)) void lose_in_parent(void) { void *volatile p = malloc(70); p = 0; (void)p; }

int main(void) {
    shared = drop_in_child();
    freed_by_child = free_in_child();
    head = list_head();
    lose_early();
    pid_t c = fork();
    if (c == 0) {
        shared = 0;
        free(freed_by_child);
        freed_by_child = 0;
        head = 0;
        lose_in_child();
        exit(0);
    }
    waitpid(c, 0, 0);
    free(shared);
    shared = 0;
    lose_in_parent();
    return 0;
}
