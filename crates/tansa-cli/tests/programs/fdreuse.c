/* fdreuse CHILD [cut]: closes the recorder's inherited descriptor (the number in TANSA_FD)
 * and puts a socket of its own at that number; with "cut", also removes TANSA_ENDPOINT
 * from its environment. Then it forks a child that allocates 2222 bytes, starts CHILD
 * (fork + exec, with the argument 300), allocates 3333 bytes itself, and prints how many bytes its own socket
 * received (none may be tansa's): "received N". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void use(size_t n) {
    void *volatile p = malloc(n);
    free(p);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *text = getenv("TANSA_FD");
    int fd = text ? atoi(text) : 100;
    close(fd);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) return 2;
    if (sv[0] != fd) {
        if (dup2(sv[0], fd) < 0) return 2;
        close(sv[0]);
    }
    if (argc > 2 && strcmp(argv[2], "cut") == 0) unsetenv("TANSA_ENDPOINT");
    pid_t c = fork();
    if (c == 0) {
        use(2222);
        _exit(0);
    }
    waitpid(c, NULL, 0);
    pid_t e = fork();
    if (e == 0) {
        execl(argv[1], argv[1], "300", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(e, &status, 0);
    use(3333);
    char buf[256];
    ssize_t n = recv(sv[1], buf, sizeof buf, MSG_DONTWAIT);
    printf("received %zd\n", n < 0 ? (ssize_t)0 : n);
    return n > 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ? 1 : 0;
}
