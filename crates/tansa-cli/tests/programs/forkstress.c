/* fork while other threads are inside the allocator: forkstress FORKS.
 * Two threads allocate continuously; the main thread forks FORKS times; each child makes
 * one allocation of 4321 bytes, frees it, and exits. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int stop;

static void *spin(void *arg) {
    size_t size = (size_t)arg;
    while (!atomic_load(&stop)) {
        void *p = malloc(size);
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int forks = argc > 1 ? atoi(argv[1]) : 20;
    pthread_t a, b;
    pthread_create(&a, NULL, spin, (void *)64);
    pthread_create(&b, NULL, spin, (void *)128);
    for (int i = 0; i < forks; i++) {
        usleep(2000);
        pid_t pid = fork();
        if (pid == 0) {
            void *p = malloc(4321);
            __asm__ volatile("" : : "r"(p) : "memory");
            free(p);
            _exit(0);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 1;
    }
    atomic_store(&stop, 1);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return 0;
}
