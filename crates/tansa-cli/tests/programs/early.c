/* early: linked against libearly.so, whose constructor started a thread before main (and
 * before the agent's constructor); prints "early N" with pthread_create's result. */
#include <stdio.h>

extern int early_status;

int main(void) {
    printf("early %d\n", early_status);
    return early_status == 0 ? 0 : 1;
}
