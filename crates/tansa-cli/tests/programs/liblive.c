/* liblive.so: the library the live-view tests watch. Each live_grow() call keeps one
 * 4096-byte block, so the library's net bytes grow by 4096 per call.
 * Flags: -shared -fPIC -g -O1 (tests/live_view.rs, tests/live_snapshot.rs). */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void *live_grow(void) {
    void *p = malloc(4096);
    memset(p, 0x5a, 4096);
    return p;
}
