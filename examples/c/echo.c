/* copyrpc echo from C: two processes (fork), each a DPDK-lcore-style run-to-completion
 * loop that calls the other and answers its calls, over the software device model.
 *
 *   cc -O3 $(pkg-config --cflags --libs copyrpc) examples/c/echo.c -o echo && ./echo [CALLS]
 *
 * The same work as the Rust echo (host/src/rpc/echo.rs, `copyrpc-echo`): CALLS calls
 * per process (default 1000000), 16 in flight, payload sizes cycling through the
 * framing edge cases up to 1024 bytes, every response checked byte for byte, every
 * request checked for arrival order and echoed back. Prints each side's calls/s;
 * exits 0 only when both sides had every call answered. Like a DPDK lcore (and like
 * mpirun's default binding of the Rust echo's ranks), process r runs on the r-th CPU it
 * may use; the device model's engine thread, started after, shares that CPU. */
/* sched_setaffinity and the CPU_* macros. */
#define _GNU_SOURCE
#include <copyrpc.h>

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WINDOW 16
#define MAX_PAYLOAD 1024
#define RING_BYTES 16384
#define DEADLINE_S 600.0
/* How long set-up waits for the peer (the exchange and the start/stop handshakes). */
#define PEER_WAIT_MS 60000

static const size_t SIZES[] = {0, 1, 8, 20, 21, 52, 53, 200, 204, 220, 221, 512, 1000, 4096};

static size_t size_of_call(uint64_t k) {
    size_t s = SIZES[k % (sizeof SIZES / sizeof SIZES[0])];
    return s <= MAX_PAYLOAD ? s : (size_t)((k * 37) % (MAX_PAYLOAD + 1));
}

/* Byte i of call k from rank src: (k * 131 + i * 7 + src) mod 256, as in the Rust echo;
 * the first 8 bytes name the call (order check). Written as an 8-bit running value so
 * gcc -O3 vectorizes it (16 bytes per paddb) as rustc does the Rust loop; computed in
 * 64-bit arithmetic it stays scalar or widens, and this harness alone would cost
 * thousands of instructions per call more than the Rust echo's (docs/PERFORMANCE.md). */
__attribute__((noinline)) /* inlined into the call loop, gcc 12 leaves it scalar */
static void fill(uint64_t src, uint64_t k, uint8_t *out, size_t len) {
    uint8_t v = (uint8_t)(k * 131 + src);
    for (size_t i = 0; i < len; i++) {
        out[i] = v;
        v = (uint8_t)(v + 7);
    }
    if (len >= 8) {
        uint64_t head = src << 32 | (uint32_t)k;
        memcpy(out, &head, 8); /* little-endian hosts, as the Rust echo */
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

struct link { int rd, wr; };

/* Reads exactly len bytes from fd, waiting at most PEER_WAIT_MS in all. */
static int read_full(int fd, void *buf, size_t len, const char *what) {
    uint8_t *p = buf;
    double end = now_s() + PEER_WAIT_MS / 1000.0;
    while (len > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int left = (int)((end - now_s()) * 1000.0);
        if (left <= 0 || poll(&pfd, 1, left) == 0) {
            fprintf(stderr, "echo: timed out after %d ms waiting for the peer's %s\n", PEER_WAIT_MS, what);
            return -1;
        }
        ssize_t n = read(fd, p, len);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            fprintf(stderr, "echo: the peer closed the pipe before sending its %s\n", what);
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* copyrpc_fabric_connect's exchange: our info down one pipe, the peer's up the other. */
static int32_t exchange(void *arg, const copyrpc_peer_info *mine, copyrpc_peer_info *theirs) {
    struct link *l = arg;
    if (write(l->wr, mine, sizeof *mine) != (ssize_t)sizeof *mine) return -1;
    return read_full(l->rd, theirs, sizeof *theirs, "peer info");
}

struct state {
    uint64_t rank, responses, in_flight, bad;
    uint8_t want[MAX_PAYLOAD];
};

static void on_response(void *arg, uint64_t k, int32_t status, const uint8_t *data, size_t len) {
    struct state *s = arg;
    s->in_flight--;
    s->responses++;
    size_t n = size_of_call(k);
    fill(s->rank, k, s->want, n);
    if (status != COPYRPC_OK || len != n || memcmp(data, s->want, n) != 0) {
        if (s->bad++ == 0)
            fprintf(stderr, "echo rank %llu: response to call %llu: status %d (%s), %zu bytes, expected %zu\n",
                    (unsigned long long)s->rank, (unsigned long long)k, status, copyrpc_strerror(status), len, n);
    }
}

#define CHECK(what, expr)                                                                     \
    do {                                                                                      \
        int32_t rc_ = (expr);                                                                 \
        if (rc_ < 0) {                                                                        \
            fprintf(stderr, "echo rank %llu: %s: %s%s%s\n", (unsigned long long)rank, what,   \
                    copyrpc_strerror(rc_), rc_ == COPYRPC_E_SYSTEM ? ": " : "",                 \
                    rc_ == COPYRPC_E_SYSTEM ? copyrpc_last_error() : "");                     \
            if (rc_ == COPYRPC_E_BAD_SETUP || rc_ == COPYRPC_E_TOO_LARGE)                     \
                fprintf(stderr, "  the rule: %s\n", copyrpc_refusal_detail());                \
            return 1;                                                                         \
        }                                                                                     \
    } while (0)

/* Pins the calling thread to the rank-th CPU of its affinity mask, if it has two. */
static void pin(uint64_t rank) {
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) || CPU_COUNT(&allowed) < 2) return;
    uint64_t seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || seen++ != rank % (uint64_t)CPU_COUNT(&allowed)) continue;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof one, &one)) perror("echo: sched_setaffinity (running unpinned)");
        return;
    }
}

static int run(uint64_t rank, struct link *l, uint64_t calls) {
    pin(rank);
    copyrpc_fabric *f;
    copyrpc_queues q;
    copyrpc_ep_desc d;
    copyrpc_ctx *ctx;
    uint16_t ep;
    CHECK("open the sim fabric", copyrpc_fabric_open(COPYRPC_FABRIC_SIM, RING_BYTES, &f));
    CHECK("describe the queues", copyrpc_fabric_queues(f, &q));
    /* The context lives in our memory: a hugepage or a DPDK memzone works the same. */
    void *mem = aligned_alloc(COPYRPC_CTX_ALIGN, COPYRPC_CTX_BYTES);
    if (!mem) return 1;
    CHECK("init the context", copyrpc_ctx_init(mem, COPYRPC_CTX_BYTES, &q, &ctx));
    CHECK("create the endpoint's QP and rings", copyrpc_fabric_endpoint(f, &d));
    CHECK("create the endpoint", copyrpc_ep_create(ctx, &d, &ep));
    CHECK("connect", copyrpc_fabric_connect(f, ctx, ep, exchange, l));
    /* Nobody sends before the peer is connected. */
    char go = 'g';
    if (write(l->wr, &go, 1) != 1 || read_full(l->rd, &go, 1, "start signal")) return 1;

    struct state *s = calloc(1, sizeof *s);
    uint8_t *buf = malloc(MAX_PAYLOAD + 8);
    if (!s || !buf) return 1;
    s->rank = rank;
    uint64_t peer = 1 - rank, next = 0, served = 0, expect = 0;
    double start = now_s();
    while (s->responses < calls || served < calls) {
        if (now_s() - start > DEADLINE_S) {
            fprintf(stderr, "echo rank %llu: deadline: %llu/%llu responses, %llu/%llu served\n",
                    (unsigned long long)rank, (unsigned long long)s->responses,
                    (unsigned long long)calls, (unsigned long long)served, (unsigned long long)calls);
            return 1;
        }
        int progressed = 0;
        while (next < calls && s->in_flight < WINDOW) {
            size_t len = size_of_call(next);
            fill(rank, next, buf, len);
            int32_t rc = copyrpc_call(ctx, ep, buf, len, (uint32_t)len, next);
            if (rc == COPYRPC_OK) {
                next++;
                s->in_flight++;
                progressed = 1;
            } else if (rc >= COPYRPC_E_SQ_FULL) {
                break; /* no room yet: poll, then retry */
            } else {
                CHECK("call", rc);
            }
        }
        int32_t n = copyrpc_poll(ctx, on_response, s);
        CHECK("poll", n);
        progressed |= n > 0;
        if (s->bad) {
            copyrpc_cause c;
            if (copyrpc_failure_cause(ctx, ep, &c) == COPYRPC_OK && c.kind != COPYRPC_CAUSE_NONE)
                fprintf(stderr, "echo rank %llu: endpoint failed: %s\n", (unsigned long long)rank,
                        copyrpc_cause_text(&c));
            return 1;
        }
        copyrpc_request r;
        while (copyrpc_recv(ctx, &r) == 1) {
            if (r.len >= 8) {
                uint64_t head;
                memcpy(&head, r.data, 8);
                if (head >> 32 != peer || (uint32_t)head != (uint32_t)expect) {
                    fprintf(stderr, "echo rank %llu: request names rank %llu call %u, expected call %llu\n",
                            (unsigned long long)rank, (unsigned long long)(head >> 32), (uint32_t)head,
                            (unsigned long long)expect);
                    return 1;
                }
            }
            expect++;
            CHECK("reply", copyrpc_reply(ctx, &r, r.data, r.len));
            served++;
            progressed = 1;
        }
        if (!progressed) sched_yield();
    }
    double elapsed = now_s() - start;
    /* Our last replies must reach the peer: keep polling until it says it is done. */
    CHECK("flush", copyrpc_flush(ctx));
    char done = 'd';
    if (write(l->wr, &done, 1) != 1) return 1;
    struct pollfd pfd = {.fd = l->rd, .events = POLLIN};
    double end = now_s() + PEER_WAIT_MS / 1000.0;
    while (poll(&pfd, 1, 0) == 0) {
        if (now_s() > end) {
            fprintf(stderr, "echo rank %llu: timed out waiting for the peer to finish\n", (unsigned long long)rank);
            return 1;
        }
        CHECK("poll", copyrpc_poll(ctx, on_response, s));
        sched_yield();
    }
    if (read_full(l->rd, &done, 1, "done signal")) return 1;
    printf("rank %llu/2: responses=%llu served=%llu in %.3fs: %.0f calls/s: ok\n", (unsigned long long)rank,
           (unsigned long long)s->responses, (unsigned long long)served, elapsed, (double)s->responses / elapsed);
    fflush(stdout);
    CHECK("end the context", copyrpc_ctx_fini(ctx));
    CHECK("close the fabric", copyrpc_fabric_close(f));
    free(mem);
    free(s);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    /* First: the library must be of the ABI this program was built for. */
    if (copyrpc_init(COPYRPC_VERSION) != COPYRPC_OK) {
        fprintf(stderr, "%s: libcopyrpc %#x does not run programs built with copyrpc.h %#x\n", argv[0],
                copyrpc_version(), COPYRPC_VERSION);
        return 1;
    }
    uint64_t calls = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    if (calls == 0 || calls > UINT32_MAX) {
        fprintf(stderr, "usage: echo [CALLS]  (1..=%u calls per process)\n", UINT32_MAX);
        return 2;
    }
    int a2b[2], b2a[2];
    if (pipe(a2b) || pipe(b2a)) return perror("pipe"), 1;
    pid_t child = fork();
    if (child < 0) return perror("fork"), 1;
    if (child == 0) {
        struct link l = {.rd = a2b[0], .wr = b2a[1]};
        close(a2b[1]);
        close(b2a[0]);
        _exit(run(1, &l, calls));
    }
    struct link l = {.rd = b2a[0], .wr = a2b[1]};
    close(a2b[0]);
    close(b2a[1]);
    int rc = run(0, &l, calls);
    /* Closing our ends unblocks a child still waiting on us; its own waits are bounded. */
    close(l.rd);
    close(l.wr);
    int st = 0;
    double end = now_s() + PEER_WAIT_MS / 1000.0;
    pid_t w;
    while ((w = waitpid(child, &st, WNOHANG)) == 0 && now_s() < end) sched_yield();
    if (w == 0) {
        fprintf(stderr, "echo: rank 1 still runs %d ms after rank 0 ended; killing it\n", PEER_WAIT_MS);
        kill(child, SIGKILL);
        waitpid(child, &st, 0);
        return 1;
    }
    if (w < 0) return perror("waitpid"), 1;
    int child_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!child_ok) fprintf(stderr, "echo: rank 1 failed (wait status %#x)\n", st);
    return rc == 0 && child_ok ? 0 : 1;
}
