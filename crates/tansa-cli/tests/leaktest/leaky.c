/* leaky: a small loopback server whose memory behaves as asked, for `tansa leaktest`'s tests
 * and benchmark.
 *
 * Built at test time with (see tests/leaktest.rs and bench/leaktest.sh):
 *     cc -O1 -g -pthread -o leaky leaky.c
 *
 *   leaky serve --mode MODE --port-file FILE [--log FILE] [--cap N] [--die-after N]
 *               [--hang-after N] [--tick-ms N]
 *       Listens on 127.0.0.1, on a port the kernel picks, written to FILE once it listens.
 *       One request per connection: a line "OP [N]", answered "OK" once its work is done.
 *       Modes (what one request does to memory):
 *         flat    allocates 256 KiB, uses it, frees it: no growth
 *         leak    allocates 512 KiB and never frees it: steady leak (1-a)
 *         cache   keeps each request's 256 KiB entry, evicting the oldest beyond --cap
 *                 entries (default 3): bounded growth (1-b)
 *         error   every other request (the 1st, 3rd, ...) meets a simulated upstream error,
 *                 logs "ERROR 2498-7766-0011 ..." to --log, and its recovery leaks 512 KiB;
 *                 the others are flat: one-off growth caused by another event (2)
 *         conn    "open N": keeps a pool of one 256 KiB buffer per connection for N
 *                 connections, never shrinking; with --cap C at most C buffers: growth with
 *                 a parameter without a cap (3-a) or with one (3-b)
 *         fdleak  opens /dev/null and never closes it: a descriptor leak (1-a)
 *         tick    like flat, but a background thread leaks 256 KiB every --tick-ms (100):
 *                 periodic work that leaks (idle test)
 *       --die-after N   abort() on the N-th request; --hang-after N  stop answering at it.
 *
 *   leaky request --port-file FILE OP [N]
 *       Sends one request; exits 0 when answered "OK".
 *
 *   leaky mc HOST PORT COUNT SIZE PREFIX
 *       Stores COUNT values of SIZE bytes under keys PREFIX0.. in memcached (text protocol).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define KIB 1024
#define ENTRY (256 * KIB)
#define LEAK (512 * KIB)
#define MAX_CACHE 4096

static void die(const char *what) {
    perror(what);
    exit(2);
}

/* Allocates and touches n bytes, so they are resident. */
static char *grab(size_t n) {
    char *p = malloc(n);
    if (!p) die("malloc");
    memset(p, 0x5a, n);
    return p;
}

static int tick_ms = 100;

/* The per-connection buffers of mode conn (kept for good). */
char *pool[MAX_CACHE];

static void *ticker(void *arg) {
    (void)arg;
    for (;;) {
        usleep((useconds_t)tick_ms * 1000);
        (void)grab(ENTRY);
    }
    return NULL;
}

static int serve(int argc, char **argv) {
    const char *mode = "flat", *port_file = NULL, *log_file = NULL;
    long cap = -1, die_after = 0, hang_after = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "leaky: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--mode")) mode = v;
        else if (!strcmp(a, "--port-file")) port_file = v;
        else if (!strcmp(a, "--log")) log_file = v;
        else if (!strcmp(a, "--cap")) cap = atol(v);
        else if (!strcmp(a, "--die-after")) die_after = atol(v);
        else if (!strcmp(a, "--hang-after")) hang_after = atol(v);
        else if (!strcmp(a, "--tick-ms")) tick_ms = atoi(v);
        else { fprintf(stderr, "leaky: unknown option %s\n", a); return 2; }
        i++;
    }
    if (!port_file) { fprintf(stderr, "leaky: --port-file is required\n"); return 2; }
    /* Large blocks come from mmap and go back on free: freeing shows in RSS at once. */
    mallopt(M_MMAP_THRESHOLD, 64 * KIB);
    signal(SIGPIPE, SIG_IGN);

    int log_fd = -1;
    if (log_file && (log_fd = open(log_file, O_WRONLY | O_CREAT | O_APPEND, 0644)) < 0) die("open log");

    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) die("socket");
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, (struct sockaddr *)&addr, sizeof addr) < 0) die("bind");
    if (listen(s, 64) < 0) die("listen");
    socklen_t len = sizeof addr;
    if (getsockname(s, (struct sockaddr *)&addr, &len) < 0) die("getsockname");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *pf = fopen(tmp, "w");
    if (!pf) die("port file");
    fprintf(pf, "%d\n", ntohs(addr.sin_port));
    fclose(pf);
    if (rename(tmp, port_file) < 0) die("rename port file");

    if (!strcmp(mode, "tick")) {
        pthread_t t;
        if (pthread_create(&t, NULL, ticker, NULL)) die("pthread_create");
    }

    static char *cache[MAX_CACHE];
    long cached = 0, pooled = 0, requests = 0;
    if (!strcmp(mode, "cache") && cap < 0) cap = 3;

    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0) { if (errno == EINTR) continue; die("accept"); }
        char line[256];
        ssize_t n = read(c, line, sizeof line - 1);
        if (n <= 0) { close(c); continue; }
        line[n] = 0;
        char op[64] = "";
        long arg = 0;
        sscanf(line, "%63s %ld", op, &arg);
        requests++;
        if (die_after && requests == die_after) abort();
        if (hang_after && requests == hang_after) for (;;) pause();

        if (!strcmp(mode, "flat") || !strcmp(mode, "tick")) {
            free(grab(ENTRY));
        } else if (!strcmp(mode, "leak")) {
            (void)grab(LEAK);
        } else if (!strcmp(mode, "cache")) {
            if (cached == cap) {
                free(cache[0]);
                memmove(cache, cache + 1, (size_t)(cached - 1) * sizeof cache[0]);
                cached--;
            }
            if (cap > 0 && cached < MAX_CACHE) cache[cached++] = grab(ENTRY);
        } else if (!strcmp(mode, "error")) {
            if (requests % 2 == 1) {
                if (log_fd >= 0)
                    dprintf(log_fd, "ERROR 2498-7766-0011 upstream connection reset during %s; recovering\n", op);
                (void)grab(LEAK); /* the recovery path forgets this buffer */
            } else {
                free(grab(ENTRY));
            }
        } else if (!strcmp(mode, "conn")) {
            long want = arg;
            if (cap >= 0 && want > cap) want = cap;
            if (want > MAX_CACHE) want = MAX_CACHE;
            while (pooled < want) pool[pooled++] = grab(ENTRY);
        } else if (!strcmp(mode, "fdleak")) {
            if (open("/dev/null", O_RDONLY) < 0) die("open /dev/null");
        } else {
            fprintf(stderr, "leaky: unknown mode %s\n", mode);
            return 2;
        }
        if (write(c, "OK\n", 3) != 3) { /* the client went away: its problem */ }
        close(c);
    }
}

static int request(int argc, char **argv) {
    if (argc < 3 || strcmp(argv[0], "--port-file")) {
        fprintf(stderr, "usage: leaky request --port-file FILE OP [N]\n");
        return 2;
    }
    FILE *pf = fopen(argv[1], "r");
    int port = 0;
    if (!pf || fscanf(pf, "%d", &port) != 1) { fprintf(stderr, "leaky: cannot read %s\n", argv[1]); return 2; }
    fclose(pf);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect");
    char line[256];
    int n = snprintf(line, sizeof line, "%s %s\n", argv[2], argc > 3 ? argv[3] : "0");
    if (write(s, line, (size_t)n) != n) die("write");
    char reply[16] = "";
    ssize_t got = read(s, reply, sizeof reply - 1);
    if (got < 3 || strncmp(reply, "OK\n", 3)) { fprintf(stderr, "leaky: no answer\n"); return 1; }
    return 0;
}

static int mc(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: leaky mc HOST PORT COUNT SIZE PREFIX\n");
        return 2;
    }
    long count = atol(argv[2]), size = atol(argv[3]);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1]))};
    if (inet_pton(AF_INET, argv[0], &addr.sin_addr) != 1) { fprintf(stderr, "leaky: bad host\n"); return 2; }
    if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect");
    FILE *out = fdopen(s, "w");
    char *value = malloc((size_t)size);
    if (!out || !value) die("setup");
    memset(value, 'v', (size_t)size);
    for (long i = 0; i < count; i++) {
        fprintf(out, "set %s%ld 0 0 %ld noreply\r\n", argv[4], i, size);
        fwrite(value, 1, (size_t)size, out);
        fputs("\r\n", out);
    }
    /* Requests on one connection are handled in order: the answer to this one means all
     * the sets before it are done. */
    fputs("version\r\n", out);
    fflush(out);
    char reply[128];
    ssize_t got = read(s, reply, sizeof reply - 1);
    if (got <= 0 || strncmp(reply, "VERSION", 7)) { fprintf(stderr, "leaky: memcached did not answer\n"); return 1; }
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "serve")) return serve(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "request")) return request(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "mc")) return mc(argc - 2, argv + 2);
    fprintf(stderr, "usage: leaky serve|request|mc ... (see the comment at the top of leaky.c)\n");
    return 2;
}
