/* A run-to-completion busy-poll loop written from copyrpc.h alone: two processes (fork)
 * call each other and answer each other's calls over the software device model, each
 * stepping its own device from its loop (COPYRPC_FABRIC_MANUAL_STEP: no engine thread)
 * and never yielding, as a DPDK lcore polls its NIC.
 *
 *   cc -O3 $(pkg-config --cflags --libs copyrpc) examples/c/busy_poll.c -o busy_poll && ./busy_poll [CALLS [1]]
 *
 * The work of examples/c/echo.c: CALLS calls per process (default 1000000), 16 in
 * flight, payload sizes cycling through the framing edge cases up to 1024 bytes, every
 * response checked byte for byte, every request echoed back. Prints each side's
 * calls/s; exits 0 only when both sides had every call answered. Process r runs on the
 * r-th CPU it may use (a pinned lcore).
 *
 * With a second argument 1, both sides run in this one process and thread, their loop
 * passes alternating: nothing then depends on timing (the device model's links are
 * instant), so callgrind counts the same instructions on every run. */
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

/* Byte i of call k from rank src is (k * 131 + src + 7 * i) mod 256, as in
 * examples/c/echo.c (and the Rust echo), its first 8 bytes then replaced by src and k.
 * Those bytes are a window of SEVENS (SEVENS[j] = 7 * j mod 256) starting where
 * 7 * j = v (mod 256), j = 183 * v (7 * 183 = 1 mod 256), so a fill is one memcpy, as
 * in the Rust twin: the harness then costs the same in both, whatever each compiler
 * makes of a byte loop. */
static uint8_t SEVENS[256 + MAX_PAYLOAD];

__attribute__((noinline)) static void fill(uint64_t src, uint64_t k, uint8_t *out, size_t len) {
    uint8_t v = (uint8_t)(k * 131 + src);
    memcpy(out, SEVENS + (uint8_t)(v * 183u), len);
    if (len >= 8) {
        uint64_t head = src << 32 | (uint32_t)k;
        memcpy(out, &head, 8);
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One side: its fabric, context, endpoint and counts. */
struct side {
    uint64_t rank, calls, next, responses, served, expect, in_flight, bad;
    copyrpc_fabric *f;
    copyrpc_ctx *ctx;
    void *mem;
    uint16_t ep;
    uint8_t buf[MAX_PAYLOAD], want[MAX_PAYLOAD];
};

static void on_response(void *arg, uint64_t k, int32_t status, const uint8_t *data, size_t len) {
    struct side *s = arg;
    s->in_flight--;
    s->responses++;
    size_t n = size_of_call(k);
    fill(s->rank, k, s->want, n);
    if (status != COPYRPC_OK || len != n || memcmp(data, s->want, n) != 0) {
        if (s->bad++ == 0)
            fprintf(stderr, "busy_poll rank %llu: response to call %llu: status %d (%s), %zu bytes, expected %zu\n",
                    (unsigned long long)s->rank, (unsigned long long)k, status, copyrpc_strerror(status), len, n);
    }
}

static int fail(const struct side *s, const char *what, int32_t rc) {
    fprintf(stderr, "busy_poll rank %llu: %s: %s%s%s\n", (unsigned long long)s->rank, what, copyrpc_strerror(rc),
            rc == COPYRPC_E_SYSTEM ? ": " : "", rc == COPYRPC_E_SYSTEM ? copyrpc_last_error() : "");
    if (rc == COPYRPC_E_BAD_SETUP || rc == COPYRPC_E_TOO_LARGE)
        fprintf(stderr, "  the rule: %s\n", copyrpc_refusal_detail());
    return -1;
}

/* One pass of the loop: step the device, make calls while the window has room, poll,
 * answer what arrived. Returns 0, or -1 on an error (printed). */
__attribute__((noinline)) static int pass(struct side *s) {
    int32_t rc = copyrpc_fabric_step(s->f);
    if (rc < 0) return fail(s, "step", rc);
    while (s->next < s->calls && s->in_flight < WINDOW) {
        size_t len = size_of_call(s->next);
        fill(s->rank, s->next, s->buf, len);
        rc = copyrpc_call(s->ctx, s->ep, s->buf, len, (uint32_t)len, s->next);
        if (rc != COPYRPC_OK) {
            if (rc >= COPYRPC_E_SQ_FULL) break; /* no room yet: poll, then retry */
            return fail(s, "call", rc);
        }
        s->next++;
        s->in_flight++;
    }
    rc = copyrpc_poll(s->ctx, on_response, s);
    if (rc < 0) return fail(s, "poll", rc);
    if (s->bad) return -1;
    copyrpc_request r;
    while (copyrpc_recv(s->ctx, &r) == 1) {
        uint64_t peer = 1 - s->rank;
        if (r.len >= 8) {
            uint64_t head;
            memcpy(&head, r.data, 8);
            if (head >> 32 != peer || (uint32_t)head != (uint32_t)s->expect) {
                fprintf(stderr, "busy_poll rank %llu: request names rank %llu call %u, expected call %llu\n",
                        (unsigned long long)s->rank, (unsigned long long)(head >> 32), (uint32_t)head,
                        (unsigned long long)s->expect);
                return -1;
            }
        }
        s->expect++;
        rc = copyrpc_reply(s->ctx, &r, r.data, r.len);
        if (rc < 0) return fail(s, "reply", rc);
        s->served++;
    }
    return 0;
}

static int done(const struct side *s) { return s->responses == s->calls && s->served == s->calls; }

static int open_side(struct side *s, uint64_t rank, uint64_t calls) {
    memset(s, 0, sizeof *s);
    s->rank = rank;
    s->calls = calls;
    copyrpc_fabric_options o = {.size = sizeof o,
                                .kind = COPYRPC_FABRIC_SIM,
                                .ring_bytes = RING_BYTES,
                                .endpoints = 16,
                                .flags = COPYRPC_FABRIC_MANUAL_STEP};
    copyrpc_queues q;
    copyrpc_ep_desc d;
    int32_t rc;
    if ((rc = copyrpc_fabric_open_ex(&o, &s->f))) return fail(s, "open the sim fabric", rc);
    /* The context lives in our memory: a hugepage or a DPDK memzone works the same. */
    s->mem = aligned_alloc(COPYRPC_CTX_ALIGN, COPYRPC_CTX_BYTES);
    if (!s->mem) return -1;
    if ((rc = copyrpc_fabric_queues(s->f, &q))) return fail(s, "describe the queues", rc);
    if ((rc = copyrpc_ctx_init(s->mem, COPYRPC_CTX_BYTES, &q, &s->ctx))) return fail(s, "init the context", rc);
    if ((rc = copyrpc_fabric_endpoint(s->f, &d))) return fail(s, "create the endpoint's QP", rc);
    if ((rc = copyrpc_ep_create(s->ctx, &d, &s->ep))) return fail(s, "create the endpoint", rc);
    return 0;
}

static int close_side(struct side *s) {
    int32_t rc;
    if ((rc = copyrpc_ctx_fini(s->ctx))) return fail(s, "end the context", rc);
    if ((rc = copyrpc_fabric_close(s->f))) return fail(s, "close the fabric", rc);
    free(s->mem);
    return 0;
}

static void report(const struct side *s, double elapsed) {
    printf("rank %llu/2: responses=%llu served=%llu in %.3fs: %.0f calls/s: ok\n", (unsigned long long)s->rank,
           (unsigned long long)s->responses, (unsigned long long)s->served, elapsed, (double)s->responses / elapsed);
    fflush(stdout);
}

/* --- Two processes -------------------------------------------------------------------- */

struct link { int rd, wr; };

/* Reads exactly len bytes from fd, waiting at most PEER_WAIT_MS in all. */
static int read_full(int fd, void *buf, size_t len, const char *what) {
    uint8_t *p = buf;
    double end = now_s() + PEER_WAIT_MS / 1000.0;
    while (len > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int left = (int)((end - now_s()) * 1000.0);
        if (left <= 0 || poll(&pfd, 1, left) == 0) {
            fprintf(stderr, "busy_poll: timed out after %d ms waiting for the peer's %s\n", PEER_WAIT_MS, what);
            return -1;
        }
        ssize_t n = read(fd, p, len);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            fprintf(stderr, "busy_poll: the peer closed the pipe before sending its %s\n", what);
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int32_t exchange(void *arg, const copyrpc_peer_info *mine, copyrpc_peer_info *theirs) {
    struct link *l = arg;
    if (write(l->wr, mine, sizeof *mine) != (ssize_t)sizeof *mine) return -1;
    return read_full(l->rd, theirs, sizeof *theirs, "peer info");
}

/* Pins the calling thread to the rank-th CPU of its affinity mask, if it has two. */
static void pin(uint64_t rank) {
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) || CPU_COUNT(&allowed) < 2) return;
    uint64_t seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || seen++ != rank % (uint64_t)CPU_COUNT(&allowed)) continue;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof one, &one)) perror("busy_poll: sched_setaffinity (running unpinned)");
        return;
    }
}

static int run(uint64_t rank, struct link *l, uint64_t calls) {
    pin(rank);
    struct side *s = malloc(sizeof *s);
    if (!s || open_side(s, rank, calls)) return 1;
    int32_t rc = copyrpc_fabric_connect(s->f, s->ctx, s->ep, exchange, l);
    if (rc) return fail(s, "connect", rc), 1;
    /* Nobody sends before the peer is connected. */
    char go = 'g';
    if (write(l->wr, &go, 1) != 1 || read_full(l->rd, &go, 1, "start signal")) return 1;
    double start = now_s();
    while (!done(s)) {
        if (pass(s)) return 1;
        /* A clock read per pass would cost more than the pass; every 4096 passes is
         * plenty for a 10-minute bound. */
        if ((s->next & 0xfff) == 0 && now_s() - start > DEADLINE_S) {
            fprintf(stderr, "busy_poll rank %llu: deadline: %llu/%llu responses, %llu/%llu served\n",
                    (unsigned long long)rank, (unsigned long long)s->responses, (unsigned long long)calls,
                    (unsigned long long)s->served, (unsigned long long)calls);
            return 1;
        }
    }
    double elapsed = now_s() - start;
    /* Our last replies must reach the peer: keep stepping until it says it is done. */
    char fin = 'd';
    if (write(l->wr, &fin, 1) != 1) return 1;
    struct pollfd pfd = {.fd = l->rd, .events = POLLIN};
    double end = now_s() + PEER_WAIT_MS / 1000.0;
    while (poll(&pfd, 1, 0) == 0) {
        if (now_s() > end) {
            fprintf(stderr, "busy_poll rank %llu: timed out waiting for the peer to finish\n", (unsigned long long)rank);
            return 1;
        }
        if (pass(s)) return 1;
    }
    if (read_full(l->rd, &fin, 1, "done signal")) return 1;
    report(s, elapsed);
    if (close_side(s)) return 1;
    free(s);
    return 0;
}

static int two_processes(uint64_t calls) {
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
    close(l.rd);
    close(l.wr);
    int st = 0;
    double end = now_s() + PEER_WAIT_MS / 1000.0;
    pid_t w;
    while ((w = waitpid(child, &st, WNOHANG)) == 0 && now_s() < end) sched_yield();
    if (w == 0) {
        fprintf(stderr, "busy_poll: rank 1 still runs %d ms after rank 0 ended; killing it\n", PEER_WAIT_MS);
        kill(child, SIGKILL);
        waitpid(child, &st, 0);
        return 1;
    }
    if (w < 0) return perror("waitpid"), 1;
    int child_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!child_ok) fprintf(stderr, "busy_poll: rank 1 failed (wait status %#x)\n", st);
    return rc == 0 && child_ok ? 0 : 1;
}

/* --- One process, passes alternating ---------------------------------------------------- */

static int32_t hand_over(void *arg, const copyrpc_peer_info *mine, copyrpc_peer_info *theirs) {
    (void)mine;
    *theirs = *(const copyrpc_peer_info *)arg;
    return 0;
}

static int one_process(uint64_t calls) {
    struct side *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    if (!a || !b || open_side(a, 0, calls) || open_side(b, 1, calls)) return 1;
    copyrpc_peer_info ia, ib;
    int32_t rc;
    if ((rc = copyrpc_ep_local_info(a->ctx, a->ep, &ia)) || (rc = copyrpc_ep_local_info(b->ctx, b->ep, &ib)) ||
        (rc = copyrpc_fabric_connect(a->f, a->ctx, a->ep, hand_over, &ib)) ||
        (rc = copyrpc_fabric_connect(b->f, b->ctx, b->ep, hand_over, &ia)))
        return fail(a, "connect", rc), 1;
    double start = now_s();
    /* Each pass makes progress whenever one is possible (the links are instant), so a
     * bound on the passes ends a run that stopped making any. */
    uint64_t passes = 0, limit = 1000 + 64 * calls;
    while (!done(a) || !done(b)) {
        if (pass(a) || pass(b)) return 1;
        if (++passes > limit) {
            fprintf(stderr, "busy_poll: no progress: rank 0 %llu/%llu, rank 1 %llu/%llu answered\n",
                    (unsigned long long)a->responses, (unsigned long long)calls, (unsigned long long)b->responses,
                    (unsigned long long)calls);
            return 1;
        }
    }
    double elapsed = now_s() - start;
    report(a, elapsed);
    report(b, elapsed);
    if (close_side(a) || close_side(b)) return 1;
    free(a);
    free(b);
    return 0;
}

int main(int argc, char **argv) {
    for (size_t j = 0; j < sizeof SEVENS; j++) SEVENS[j] = (uint8_t)(7 * j);
    if (copyrpc_init(COPYRPC_VERSION) != COPYRPC_OK) {
        fprintf(stderr, "%s: libcopyrpc %#x does not run programs built with copyrpc.h %#x\n", argv[0],
                copyrpc_version(), COPYRPC_VERSION);
        return 1;
    }
    uint64_t calls = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    int one = argc > 2 && strcmp(argv[2], "1") == 0;
    if (calls == 0 || calls > UINT32_MAX || (argc > 2 && !one) || argc > 3) {
        fprintf(stderr, "usage: busy_poll [CALLS [1]]  (1..=%u calls per side; 1: both sides in one process)\n",
                UINT32_MAX);
        return 2;
    }
    return one ? one_process(calls) : two_processes(calls);
}
