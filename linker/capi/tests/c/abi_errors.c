/* The C ABI refuses bad input with a code instead of crashing: NULL pointers, a handle
 * of the wrong kind (or ended), a too-small or misaligned memory area, a description
 * the setup API did not write (or a copy of one used up), a damaged peer info, a failing exchange, a peer with
 * another ring size, a second connect, a request answered twice (before and after its
 * answer was read) or on another context, a shm request naming no client, a call into
 * a handle from inside its own poll callback (or a fabric's exchange), a ring below the
 * minimum, a set-up step from an atexit handler. Between the refusals it runs the real
 * thing in one process (two sim fabrics with the smallest rings, calls and replies; an
 * ipc and a delegation round trip) so every function is exercised.
 * Run by tests/c_programs.rs; prints each mismatch and exits 1 if there was one. */
#define _POSIX_C_SOURCE 200809L
#include <copyrpc.h>

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define EXPECT(expr, want)                                                                  \
    do {                                                                                    \
        int32_t got_ = (expr);                                                              \
        if (got_ != (want)) {                                                               \
            fprintf(stderr, "line %d: %s returned %d (%s), expected %d (%s)%s%s\n", __LINE__, \
                    #expr, got_, copyrpc_strerror(got_), (want), copyrpc_strerror(want),       \
                    got_ == COPYRPC_E_SYSTEM ? ": " : "",                                   \
                    got_ == COPYRPC_E_SYSTEM ? copyrpc_last_error() : "");                  \
            failures++;                                                                     \
        }                                                                                   \
    } while (0)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Both endpoints live in this process: each side's exchange hands over the other's
 * info, computed before the first connect. */
struct pair {
    copyrpc_peer_info a, b;
    int damage; /* 1: flip a byte of what the callback returns; 2: fail the exchange;
                   3: close the fabric from inside the callback, then fail */
    copyrpc_fabric *f;      /* for damage 3 */
    int32_t closed_inside;  /* what that close returned */
};

static int32_t exchange_a(void *arg, const copyrpc_peer_info *mine, copyrpc_peer_info *theirs) {
    struct pair *p = arg;
    if (p->damage == 3) p->closed_inside = copyrpc_fabric_close(p->f);
    if (p->damage >= 2) return -7;
    p->a = *mine;
    *theirs = p->b;
    if (p->damage == 1) theirs->endpoint[9] ^= 0x40;
    return 0;
}

static int32_t exchange_b(void *arg, const copyrpc_peer_info *mine, copyrpc_peer_info *theirs) {
    struct pair *p = arg;
    (void)mine;
    *theirs = p->a;
    return 0;
}

struct got {
    int n;
    int32_t status;
    uint64_t token;
    char data[16];
    size_t len;
    /* Set: the callback calls back into this handle, which must be refused (BUSY). */
    void *reenter;
    int32_t reentered[4];
};

static void on_response(void *arg, uint64_t token, int32_t status, const uint8_t *data, size_t len) {
    struct got *g = arg;
    g->n++;
    g->status = status;
    g->token = token;
    g->len = len;
    if (data && len <= sizeof g->data) memcpy(g->data, data, len);
    if (g->reenter) {
        copyrpc_ctx *ctx = g->reenter;
        g->reentered[0] = copyrpc_call(ctx, 0, "x", 1, 16, 7);
        g->reentered[1] = copyrpc_poll(ctx, on_response, arg);
        g->reentered[2] = copyrpc_ctx_fini(ctx);
        g->reentered[3] = copyrpc_idle(ctx);
    }
}

static void on_ipc(void *arg, uint64_t token, const copyrpc_shm_msg *resp) {
    struct got *g = arg;
    g->n++;
    g->token = token + resp->words[0];
    if (g->reenter) {
        g->reentered[0] = copyrpc_ipc_client_call(g->reenter, resp, 1);
        g->reentered[1] = copyrpc_ipc_client_poll(g->reenter, on_ipc, arg);
        g->reentered[2] = copyrpc_ipc_client_close(g->reenter);
    }
}

static void on_deleg(void *arg, uint64_t token, const copyrpc_shm_msg *resp) {
    struct got *g = arg;
    g->n++;
    g->token = token + resp->words[0];
    if (g->reenter) {
        g->reentered[0] = copyrpc_deleg_client_call(g->reenter, resp, 1);
        g->reentered[1] = copyrpc_deleg_client_poll(g->reenter, on_deleg, arg);
        g->reentered[2] = copyrpc_deleg_client_close(g->reenter);
    }
}

/* Each of the calls made from inside the callback (three, four for a context) was
 * refused as re-entrant. */
static void expect_busy(const char *what, const struct got *g, int calls) {
    for (int i = 0; i < calls; i++)
        if (g->reentered[i] != COPYRPC_E_BUSY) {
            fprintf(stderr, "%s: re-entrant call %d returned %d (%s), expected COPYRPC_E_BUSY\n", what, i,
                    g->reentered[i], copyrpc_strerror(g->reentered[i]));
            failures++;
        }
}

struct side {
    copyrpc_fabric *f;
    copyrpc_ctx *ctx;
    void *mem;
    uint16_t ep;
};

static void open_side(struct side *s, uint32_t ring) {
    copyrpc_queues q, q_copy, q_second;
    copyrpc_ep_desc d, d_copy;
    EXPECT(copyrpc_fabric_open(COPYRPC_FABRIC_SIM, ring, &s->f), COPYRPC_OK);
    /* Out of range changes nothing; both sides then connect with the same values. */
    EXPECT(copyrpc_fabric_set_qos(s->f, 256, 0), COPYRPC_E_BAD_ARG);
    EXPECT(copyrpc_fabric_set_qos(s->f, 0, 16), COPYRPC_E_BAD_ARG);
    EXPECT(copyrpc_fabric_set_qos(s->f, 106, 3), COPYRPC_OK);
    EXPECT(copyrpc_fabric_queues(s->f, &q), COPYRPC_OK);
    EXPECT(copyrpc_fabric_queues(s->f, &q_second), COPYRPC_OK);
    q_copy = q;
    s->mem = aligned_alloc(COPYRPC_CTX_ALIGN, COPYRPC_CTX_BYTES);
    EXPECT(copyrpc_ctx_init(s->mem, COPYRPC_CTX_BYTES, &q, &s->ctx), COPYRPC_OK);
    EXPECT(copyrpc_fabric_endpoint(s->f, &d), COPYRPC_OK);
    d_copy = d;
    EXPECT(copyrpc_ep_create(s->ctx, &d, &s->ep), COPYRPC_OK);
    /* Descriptions are used up: their queues and QP belong to this context now. So are
     * a struct copy made before the use, and a second description of the same queues:
     * two contexts on one SRQ and its CQs, or two endpoints on one QP, would corrupt
     * each other. */
    void *other = aligned_alloc(COPYRPC_CTX_ALIGN, COPYRPC_CTX_BYTES);
    copyrpc_ctx *again;
    uint16_t ep2;
    EXPECT(copyrpc_ctx_init(other, COPYRPC_CTX_BYTES, &q, &again), COPYRPC_E_BAD_DESC);
    EXPECT(copyrpc_ctx_init(other, COPYRPC_CTX_BYTES, &q_copy, &again), COPYRPC_E_BAD_DESC);
    EXPECT(copyrpc_ctx_init(other, COPYRPC_CTX_BYTES, &q_second, &again), COPYRPC_E_BAD_DESC);
    EXPECT(copyrpc_ep_create(s->ctx, &d, &ep2), COPYRPC_E_BAD_DESC);
    EXPECT(copyrpc_ep_create(s->ctx, &d_copy, &ep2), COPYRPC_E_BAD_DESC);
    free(other);
}

/* Both sides call each other at once, so each context holds a live request under the
 * same endpoint, sequence and call id: a reply on the other context must be refused,
 * not sent as the answer to that context's own request. */
static void cross_context_reply(struct side *a, struct side *b) {
    struct got ga = {0}, gb = {0};
    copyrpc_request ra, rb;
    int have_a = 0, have_b = 0;
    EXPECT(copyrpc_call(a->ctx, a->ep, "to-b", 4, 16, 1), COPYRPC_OK);
    EXPECT(copyrpc_call(b->ctx, b->ep, "to-a", 4, 16, 2), COPYRPC_OK);
    double end = now_s() + 30;
    while ((!have_a || !have_b) && now_s() < end) {
        if (copyrpc_poll(a->ctx, on_response, &ga) < 0 || copyrpc_poll(b->ctx, on_response, &gb) < 0) break;
        if (!have_a) have_a = copyrpc_recv(a->ctx, &ra) == 1;
        if (!have_b) have_b = copyrpc_recv(b->ctx, &rb) == 1;
        sched_yield();
    }
    if (!have_a || !have_b) {
        fprintf(stderr, "cross-context: requests arrived at a %d, b %d\n", have_a, have_b);
        failures++;
        return;
    }
    if (ra.ep != rb.ep || ra.seq != rb.seq || ra.call_id != rb.call_id) {
        fprintf(stderr, "cross-context: the two requests differ in (ep, seq, call_id), so the check below "
                        "would pass without the context's tag\n");
        failures++;
    }
    EXPECT(copyrpc_reply(a->ctx, &rb, "wrong", 5), COPYRPC_E_STALE_REQUEST);
    EXPECT(copyrpc_reply(b->ctx, &ra, "wrong", 5), COPYRPC_E_STALE_REQUEST);
    EXPECT(copyrpc_reply(a->ctx, &ra, "from-a", 6), COPYRPC_OK);
    EXPECT(copyrpc_reply(b->ctx, &rb, "from-b", 6), COPYRPC_OK);
    while ((ga.n == 0 || gb.n == 0) && now_s() < end) {
        if (copyrpc_poll(a->ctx, on_response, &ga) < 0 || copyrpc_poll(b->ctx, on_response, &gb) < 0) break;
        sched_yield();
    }
    if (ga.n != 1 || ga.status != COPYRPC_OK || ga.len != 6 || memcmp(ga.data, "from-b", 6) != 0 || gb.n != 1 ||
        gb.status != COPYRPC_OK || gb.len != 6 || memcmp(gb.data, "from-a", 6) != 0) {
        fprintf(stderr, "cross-context: a got %d response(s) \"%.*s\", b got %d \"%.*s\"\n", ga.n, (int)ga.len,
                ga.data, gb.n, (int)gb.len, gb.data);
        failures++;
    }
}

/* Runs after main returns, when the thread's storage (where the last error lives) is
 * destroyed already: a failing set-up step must still return its code, not abort. */
static void set_up_at_exit(void) {
    static _Alignas(COPYRPC_SHM_HANDLE_ALIGN) unsigned char mem[COPYRPC_IPC_CLIENT_BYTES];
    copyrpc_ipc_client *c;
    int32_t rc = copyrpc_ipc_client_attach(mem, sizeof mem, "/copyrpc-c-abi-test-absent", &c);
    const char *why = copyrpc_last_error();
    if (rc != COPYRPC_E_SYSTEM || why == NULL || *why == 0) {
        fprintf(stderr, "at exit: attach returned %d (%s), cause \"%s\"\n", rc, copyrpc_strerror(rc),
                why ? why : "(NULL)");
        _exit(1);
    }
}

int main(void) {
    atexit(set_up_at_exit);
    EXPECT(copyrpc_init(COPYRPC_VERSION), COPYRPC_OK);
    /* --- NULL everywhere ------------------------------------------------------------ */
    copyrpc_queues q0;
    memset(&q0, 0, sizeof q0);
    copyrpc_ctx *ctx = NULL;
    uint16_t ep;
    copyrpc_peer_info info;
    copyrpc_request req;
    copyrpc_cause cause;
    EXPECT(copyrpc_ctx_init(NULL, COPYRPC_CTX_BYTES, &q0, &ctx), COPYRPC_E_NULL);
    EXPECT(copyrpc_ctx_fini(NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_ep_create(NULL, NULL, &ep), COPYRPC_E_NULL);
    EXPECT(copyrpc_ep_local_info(NULL, 0, &info), COPYRPC_E_NULL);
    EXPECT(copyrpc_ep_connect(NULL, 0, &info), COPYRPC_E_NULL);
    EXPECT(copyrpc_call(NULL, 0, "x", 1, 0, 0), COPYRPC_E_NULL);
    EXPECT(copyrpc_poll(NULL, on_response, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_idle(NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_recv(NULL, &req), COPYRPC_E_NULL);
    EXPECT(copyrpc_reply(NULL, &req, NULL, 0), COPYRPC_E_NULL);
    EXPECT(copyrpc_flush(NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_failure_cause(NULL, 0, &cause), COPYRPC_E_NULL);
    EXPECT(copyrpc_fabric_open(COPYRPC_FABRIC_SIM, 4096, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_fabric_queues(NULL, &q0), COPYRPC_E_NULL);
    EXPECT(copyrpc_fabric_endpoint(NULL, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_fabric_connect(NULL, NULL, 0, exchange_a, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_fabric_close(NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_fabric_set_qos(NULL, 0, 0), COPYRPC_E_NULL);
    EXPECT(copyrpc_deleg_server_open(NULL, 4096, "/x", 4, 16, 4, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_deleg_server_poll(NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_deleg_server_recv(NULL, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_deleg_server_reply(NULL, NULL, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_deleg_server_close(NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_deleg_client_attach(NULL, 4096, "/x", NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_deleg_client_call(NULL, NULL, 0), COPYRPC_E_NULL);
    EXPECT(copyrpc_deleg_client_poll(NULL, on_deleg, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_deleg_client_close(NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_ipc_server_open(NULL, 4096, "/x", 4, 4, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_ipc_server_poll(NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_ipc_server_recv(NULL, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_ipc_server_reply(NULL, NULL, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_ipc_server_close(NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_ipc_client_attach(NULL, 4096, "/x", NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_ipc_client_call(NULL, NULL, 0), COPYRPC_E_NULL);
    EXPECT(copyrpc_ipc_client_poll(NULL, on_ipc, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_ipc_client_close(NULL), COPYRPC_E_NULL);
    uint32_t imm = 7;
    EXPECT(copyrpc_encode_imm(96, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_encode_imm(33, &imm), COPYRPC_E_BAD_ARG);
    EXPECT(copyrpc_encode_imm(96, &imm), COPYRPC_OK);
    if (imm != 3 || copyrpc_decode_imm(imm) != 96) {
        fprintf(stderr, "copyrpc_encode_imm(96) gave %u\n", imm);
        failures++;
    }
    if (strcmp(copyrpc_strerror(12345), "unknown copyrpc code") != 0) {
        fprintf(stderr, "copyrpc_strerror of an unknown code: %s\n", copyrpc_strerror(12345));
        failures++;
    }

    /* --- Too small, misaligned, bad arguments, descriptions not from the setup API --- */
    EXPECT(copyrpc_fabric_open(99, 4096, &(copyrpc_fabric *){0}), COPYRPC_E_BAD_ARG);
    EXPECT(copyrpc_fabric_open(COPYRPC_FABRIC_SIM, 3000, &(copyrpc_fabric *){0}), COPYRPC_E_BAD_ARG);
    /* Below the minimum (where a call cannot reserve room for a small response). */
    EXPECT(copyrpc_fabric_open(COPYRPC_FABRIC_SIM, COPYRPC_FABRIC_MIN_RING / 2, &(copyrpc_fabric *){0}),
           COPYRPC_E_BAD_ARG);
    EXPECT(copyrpc_fabric_open(COPYRPC_FABRIC_SIM, 128, &(copyrpc_fabric *){0}), COPYRPC_E_BAD_ARG);
    unsigned char *big = aligned_alloc(COPYRPC_CTX_ALIGN, COPYRPC_CTX_BYTES + COPYRPC_CTX_ALIGN);
    EXPECT(copyrpc_ctx_init(big, COPYRPC_CTX_BYTES / 2, &q0, &ctx), COPYRPC_E_TOO_SMALL);
    /* The header's size, not this build's handle size, is the bound. */
    EXPECT(copyrpc_ctx_init(big, COPYRPC_CTX_BYTES - 1, &q0, &ctx), COPYRPC_E_TOO_SMALL);
    EXPECT(copyrpc_ctx_init(big + 8, COPYRPC_CTX_BYTES, &q0, &ctx), COPYRPC_E_MISALIGNED);
    EXPECT(copyrpc_ctx_init(big, COPYRPC_CTX_BYTES, &q0, &ctx), COPYRPC_E_BAD_DESC);
    static _Alignas(COPYRPC_SHM_HANDLE_ALIGN) unsigned char smem[4][512];
    char region[64];
    snprintf(region, sizeof region, "/copyrpc-c-abi-test-%ld", (long)getpid());
    copyrpc_deleg_server *ds;
    copyrpc_ipc_server *is;
    copyrpc_ipc_client *ic;
    EXPECT(copyrpc_deleg_server_open(smem[0], 16, region, 4, 16, 4, &ds), COPYRPC_E_TOO_SMALL);
    EXPECT(copyrpc_deleg_server_open(smem[0] + 1, 511, region, 4, 16, 4, &ds), COPYRPC_E_MISALIGNED);
    EXPECT(copyrpc_deleg_server_open(smem[0], 512, "no-slash", 4, 16, 4, &ds), COPYRPC_E_BAD_ARG);
    EXPECT(copyrpc_deleg_server_open(smem[0], 512, region, 4, 15, 4, &ds), COPYRPC_E_BAD_ARG);
    EXPECT(copyrpc_ipc_client_attach(smem[3], 8, region, &ic), COPYRPC_E_TOO_SMALL);
    EXPECT(copyrpc_deleg_client_attach(smem[3], 8, region, &(copyrpc_deleg_client *){0}), COPYRPC_E_TOO_SMALL);
    EXPECT(copyrpc_ipc_server_open(smem[1], 8, region, 4, 4, &is), COPYRPC_E_TOO_SMALL);
    /* No such region: a system error with its cause. */
    EXPECT(copyrpc_ipc_client_attach(smem[3], 512, "/copyrpc-c-abi-test-absent", &ic), COPYRPC_E_SYSTEM);
    if (strlen(copyrpc_last_error()) == 0) {
        fprintf(stderr, "no cause recorded for a failed attach\n");
        failures++;
    }

    /* --- A real pair of endpoints in this process --------------------------------- */
    /* The smallest rings: the calls and replies below show the minimum is usable. */
    struct side a, b, c;
    open_side(&a, COPYRPC_FABRIC_MIN_RING);
    open_side(&b, COPYRPC_FABRIC_MIN_RING);
    open_side(&c, 4096);
    copyrpc_ep_desc d0;
    memset(&d0, 0, sizeof d0);
    EXPECT(copyrpc_ep_create(a.ctx, &d0, &ep), COPYRPC_E_BAD_DESC);
    EXPECT(copyrpc_ep_local_info(a.ctx, 7, &info), COPYRPC_E_NO_SUCH_ENDPOINT);
    EXPECT(copyrpc_call(a.ctx, a.ep, "x", 1, 16, 1), COPYRPC_E_NOT_CONNECTED);

    /* Damaged peer infos are refused, whichever byte was hit. */
    struct pair p = {0};
    EXPECT(copyrpc_ep_local_info(b.ctx, b.ep, &p.b), COPYRPC_OK);
    copyrpc_peer_info bad = p.b;
    bad.endpoint[0] ^= 1;
    EXPECT(copyrpc_ep_connect(a.ctx, a.ep, &bad), COPYRPC_E_BAD_PEER_INFO);
    bad = p.b;
    bad.qp[3] ^= 0x80;
    EXPECT(copyrpc_ep_connect(a.ctx, a.ep, &bad), COPYRPC_E_BAD_PEER_INFO);
    bad = p.b;
    bad.check ^= 1;
    EXPECT(copyrpc_ep_connect(a.ctx, a.ep, &bad), COPYRPC_E_BAD_PEER_INFO);
    memset(&bad, 0, sizeof bad);
    EXPECT(copyrpc_ep_connect(a.ctx, a.ep, &bad), COPYRPC_E_BAD_PEER_INFO);
    memset(&bad, 0xff, sizeof bad);
    EXPECT(copyrpc_ep_connect(a.ctx, a.ep, &bad), COPYRPC_E_BAD_PEER_INFO);
    EXPECT(copyrpc_ep_connect(a.ctx, a.ep, NULL), COPYRPC_E_NULL);
    p.damage = 1;
    EXPECT(copyrpc_fabric_connect(a.f, a.ctx, a.ep, exchange_a, &p), COPYRPC_E_BAD_PEER_INFO);
    p.damage = 2;
    EXPECT(copyrpc_fabric_connect(a.f, a.ctx, a.ep, exchange_a, &p), COPYRPC_E_SYSTEM);
    if (!strstr(copyrpc_last_error(), "returned -7")) {
        fprintf(stderr, "failed exchange: cause %s\n", copyrpc_last_error());
        failures++;
    }
    /* Closing the fabric from inside its own exchange would free what the connect goes
     * on to use: refused, and the fabric stays usable. */
    p.damage = 3;
    p.f = a.f;
    p.closed_inside = 0;
    EXPECT(copyrpc_fabric_connect(a.f, a.ctx, a.ep, exchange_a, &p), COPYRPC_E_SYSTEM);
    EXPECT(p.closed_inside, COPYRPC_E_BUSY);
    EXPECT(copyrpc_fabric_connect(a.f, a.ctx, a.ep, NULL, &p), COPYRPC_E_NULL);

    /* Wrong kinds: a fabric, an ipc handle, a context passed where another kind goes. */
    EXPECT(copyrpc_call((copyrpc_ctx *)a.f, 0, "x", 1, 16, 1), COPYRPC_E_WRONG_KIND);
    EXPECT(copyrpc_fabric_queues((copyrpc_fabric *)a.ctx, &q0), COPYRPC_E_WRONG_KIND);
    EXPECT(copyrpc_deleg_server_poll((copyrpc_deleg_server *)a.ctx), COPYRPC_E_WRONG_KIND);
    EXPECT(copyrpc_idle((copyrpc_ctx *)a.f), COPYRPC_E_WRONG_KIND);
    /* Nothing sent or received yet: nothing for a poll to do. */
    EXPECT(copyrpc_idle(a.ctx), 1);

    /* A peer whose recv ring is larger than a's send ring: refused before a's QP was
     * touched, so a can still connect to b below. */
    struct pair pc = {0};
    EXPECT(copyrpc_ep_local_info(c.ctx, c.ep, &pc.b), COPYRPC_OK);
    if (copyrpc_refusal_detail() == NULL || copyrpc_refusal_detail()[0] != '\0') {
        fprintf(stderr, "refusal detail before any refusal: %s\n", copyrpc_refusal_detail());
        failures++;
    }
    EXPECT(copyrpc_fabric_connect(a.f, a.ctx, a.ep, exchange_a, &pc), COPYRPC_E_BAD_SETUP);
    if (strcmp(copyrpc_refusal_detail(), "send ring smaller than the peer's recv ring") != 0) {
        fprintf(stderr, "BAD_SETUP detail: \"%s\"\n", copyrpc_refusal_detail());
        failures++;
    }

    /* The real connection, calls and their replies. */
    p.damage = 0;
    EXPECT(copyrpc_fabric_connect(a.f, a.ctx, a.ep, exchange_a, &p), COPYRPC_OK);
    EXPECT(copyrpc_fabric_connect(b.f, b.ctx, b.ep, exchange_b, &p), COPYRPC_OK);
    EXPECT(copyrpc_ep_connect(a.ctx, a.ep, &p.b), COPYRPC_E_ALREADY_CONNECTED);
    /* Refused before the exchange (which would fail, damage 2) and the QP. */
    p.damage = 2;
    EXPECT(copyrpc_fabric_connect(a.f, a.ctx, a.ep, exchange_a, &p), COPYRPC_E_ALREADY_CONNECTED);
    p.damage = 0;
    /* The smallest ring holds responses of up to 64 bytes (COPYRPC_FABRIC_MIN_RING). */
    EXPECT(copyrpc_call(a.ctx, a.ep, "x", 1, 65, 1), COPYRPC_E_TOO_LARGE);
    if (!strstr(copyrpc_refusal_detail(), "response allowance")) {
        fprintf(stderr, "TOO_LARGE detail: \"%s\"\n", copyrpc_refusal_detail());
        failures++;
    }
    cross_context_reply(&a, &b);
    EXPECT(copyrpc_call(a.ctx, a.ep, NULL, 3, 16, 1), COPYRPC_E_NULL);
    EXPECT(copyrpc_call(a.ctx, a.ep, "ping", 4, 16, 42), COPYRPC_OK);
    /* A call written and not yet posted is work for the next poll. */
    EXPECT(copyrpc_idle(a.ctx), 0);
    EXPECT(copyrpc_flush(a.ctx), COPYRPC_OK);
    struct got g = {.reenter = a.ctx};
    EXPECT(copyrpc_poll(a.ctx, NULL, &g), COPYRPC_E_NULL);
    int served = 0;
    double end = now_s() + 30;
    while (g.n == 0 && now_s() < end) {
        /* A waits as a caller should: it polls only when copyrpc_idle says there is
         * work, so the response arrives only if copyrpc_idle sees it. */
        int32_t idle = copyrpc_idle(a.ctx);
        if (idle < 0 || (idle == 0 && copyrpc_poll(a.ctx, on_response, &g) < 0)) break;
        if (copyrpc_poll(b.ctx, on_response, &g) < 0) break;
        if (copyrpc_recv(b.ctx, &req) == 1) {
            if (req.len != 4 || memcmp(req.data, "ping", 4) != 0) {
                fprintf(stderr, "request bytes differ\n");
                failures++;
            }
            EXPECT(copyrpc_reply(b.ctx, &req, "pong!", 5), COPYRPC_OK);
            EXPECT(copyrpc_reply(b.ctx, &req, "pong!", 5), COPYRPC_E_STALE_REQUEST);
            served++;
        }
        sched_yield();
    }
    if (served != 1 || g.n != 1 || g.status != COPYRPC_OK || g.token != 42 || g.len != 5 ||
        memcmp(g.data, "pong!", 5) != 0) {
        fprintf(stderr, "round trip: served %d, responses %d, status %d, token %llu, %zu bytes\n", served, g.n,
                g.status, (unsigned long long)g.token, g.len);
        failures++;
    }
    expect_busy("copyrpc_poll", &g, 4);
    EXPECT(copyrpc_recv(b.ctx, NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_failure_cause(a.ctx, a.ep, &cause), COPYRPC_OK);
    if (cause.kind != COPYRPC_CAUSE_NONE) {
        fprintf(stderr, "a working endpoint reports failure cause %d\n", cause.kind);
        failures++;
    }
    EXPECT(copyrpc_failure_cause(a.ctx, 9, &cause), COPYRPC_E_NO_SUCH_ENDPOINT);

    /* An ended context is refused, then the fabrics close. */
    EXPECT(copyrpc_ctx_fini(a.ctx), COPYRPC_OK);
    EXPECT(copyrpc_ctx_fini(a.ctx), COPYRPC_E_WRONG_KIND);
    EXPECT(copyrpc_poll(a.ctx, on_response, &g), COPYRPC_E_WRONG_KIND);
    EXPECT(copyrpc_idle(a.ctx), COPYRPC_E_WRONG_KIND);
    EXPECT(copyrpc_ctx_fini(b.ctx), COPYRPC_OK);
    EXPECT(copyrpc_fabric_close(a.f), COPYRPC_OK);
    EXPECT(copyrpc_fabric_close(b.f), COPYRPC_OK);
    EXPECT(copyrpc_ctx_fini(c.ctx), COPYRPC_OK);
    EXPECT(copyrpc_fabric_close(c.f), COPYRPC_OK);

    /* --- ipc round trip in this process; handles of the wrong kind ---------------- */
    EXPECT(copyrpc_ipc_server_open(smem[1], 512, region, 4, 4, &is), COPYRPC_OK);
    EXPECT(copyrpc_ipc_client_attach(smem[2], 512, region, &ic), COPYRPC_OK);
    EXPECT(copyrpc_deleg_server_poll((copyrpc_deleg_server *)is), COPYRPC_E_WRONG_KIND);
    EXPECT(copyrpc_ipc_client_call((copyrpc_ipc_client *)is, NULL, 0), COPYRPC_E_WRONG_KIND);
    copyrpc_shm_msg m = {.words = {5}};
    EXPECT(copyrpc_ipc_client_call(ic, &m, 100), COPYRPC_OK);
    copyrpc_ipc_request ir;
    int got = 0;
    end = now_s() + 30;
    while (!got && now_s() < end) {
        if (copyrpc_ipc_server_poll(is) > 0) got = copyrpc_ipc_server_recv(is, &ir) == 1;
        if (!got) sched_yield();
    }
    if (!got) {
        fprintf(stderr, "ipc: the request never arrived\n");
        return 1;
    }
    copyrpc_shm_msg r = {.words = {ir.msg.words[0] + 1}};
    EXPECT(copyrpc_ipc_server_reply(is, &ir, &r), COPYRPC_OK);
    struct got ig = {.reenter = ic};
    end = now_s() + 30;
    while (ig.n == 0 && now_s() < end) {
        if (copyrpc_ipc_client_poll(ic, on_ipc, &ig) == 0) sched_yield();
    }
    if (ig.n != 1 || ig.token != 106) {
        fprintf(stderr, "ipc: %d responses, token+word %llu (expected 106)\n", ig.n, (unsigned long long)ig.token);
        failures++;
    }
    expect_busy("copyrpc_ipc_client_poll", &ig, 3);
    /* Answered and read: a second reply is refused (it would overwrite the next answer
     * in the client's response ring), and so is a client id past the table. */
    EXPECT(copyrpc_ipc_server_reply(is, &ir, &r), COPYRPC_E_SHM_REPLY);
    copyrpc_ipc_request forged = ir;
    forged.client_id = 4;
    EXPECT(copyrpc_ipc_server_reply(is, &forged, &r), COPYRPC_E_SHM_REPLY);
    forged.client_id = UINT32_MAX;
    EXPECT(copyrpc_ipc_server_reply(is, &forged, &r), COPYRPC_E_SHM_REPLY);
    /* A client process that dies without closing keeps its id until a reap finds it. */
    EXPECT(copyrpc_ipc_server_reap(is), 0);
    pid_t child = fork();
    if (child == 0) {
        copyrpc_ipc_client *lost;
        _exit(copyrpc_ipc_client_attach(smem[3], 512, region, &lost) == COPYRPC_OK ? 0 : 1);
    }
    int status = -1;
    if (child < 0 || waitpid(child, &status, 0) != child || status != 0) {
        fprintf(stderr, "ipc: the child client did not attach (status %d)\n", status);
        failures++;
    }
    EXPECT(copyrpc_ipc_server_reap(is), 1);
    EXPECT(copyrpc_ipc_server_reap((copyrpc_ipc_server *)ic), COPYRPC_E_WRONG_KIND);
    EXPECT(copyrpc_ipc_server_reap(NULL), COPYRPC_E_NULL);
    EXPECT(copyrpc_ipc_server_close(is), COPYRPC_OK);
    EXPECT(copyrpc_ipc_client_call(ic, &m, 9), COPYRPC_E_SHM_UNAVAILABLE);
    if (!strstr(copyrpc_refusal_detail(), "ipc server is gone")) {
        fprintf(stderr, "ipc SHM_UNAVAILABLE detail: \"%s\"\n", copyrpc_refusal_detail());
        failures++;
    }
    EXPECT(copyrpc_ipc_client_close(ic), COPYRPC_OK);
    EXPECT(copyrpc_ipc_client_close(ic), COPYRPC_E_WRONG_KIND);
    EXPECT(copyrpc_ipc_server_recv(is, &ir), COPYRPC_E_WRONG_KIND);

    /* --- delegation round trip in this process; handles of the wrong kind ---------- */
    EXPECT(copyrpc_deleg_server_open(smem[0], 512, region, 4, 16, 4, &ds), COPYRPC_OK);
    copyrpc_deleg_client *dc;
    EXPECT(copyrpc_deleg_client_attach(smem[3], 512, region, &dc), COPYRPC_OK);
    EXPECT(copyrpc_ipc_server_poll((copyrpc_ipc_server *)ds), COPYRPC_E_WRONG_KIND);
    EXPECT(copyrpc_deleg_client_call((copyrpc_deleg_client *)ds, &m, 0), COPYRPC_E_WRONG_KIND);
    EXPECT(copyrpc_deleg_server_recv((copyrpc_deleg_server *)dc, NULL), COPYRPC_E_WRONG_KIND);
    /* Any 64-bit token comes back, as with copyrpc and ipc calls. */
    const uint64_t call = 0xfedcba9876543210ull;
    int32_t rc = copyrpc_deleg_client_call(dc, &m, call);
    if (rc != COPYRPC_OK) {
        fprintf(stderr, "deleg call: %s\n", copyrpc_strerror(rc));
        return 1;
    }
    copyrpc_deleg_request dr;
    got = 0;
    end = now_s() + 30;
    while (!got && now_s() < end) {
        if (copyrpc_deleg_server_poll(ds) > 0) got = copyrpc_deleg_server_recv(ds, &dr) == 1;
        if (!got) sched_yield();
    }
    if (!got || dr.msg.words[0] != 5) {
        fprintf(stderr, "deleg: the request never arrived intact\n");
        return 1;
    }
    EXPECT(copyrpc_deleg_server_reply(ds, &dr, &r), COPYRPC_OK);
    EXPECT(copyrpc_deleg_server_reply(ds, &dr, &r), COPYRPC_E_SHM_REPLY);
    struct got dg = {.reenter = dc};
    end = now_s() + 30;
    while (dg.n == 0 && now_s() < end) {
        if (copyrpc_deleg_client_poll(dc, on_deleg, &dg) == 0) sched_yield();
    }
    if (dg.n != 1 || dg.token != call + 6) {
        fprintf(stderr, "deleg: %d responses, token+word %llu (expected %llu)\n", dg.n, (unsigned long long)dg.token,
                (unsigned long long)(call + 6));
        failures++;
    }
    expect_busy("copyrpc_deleg_client_poll", &dg, 3);
    /* The client has read the answer, so the slot reads empty again: the second reply
     * is still refused (it would answer the client's next call on the slot). */
    EXPECT(copyrpc_deleg_server_reply(ds, &dr, &r), COPYRPC_E_SHM_REPLY);
    /* A failure cause as text: never NULL, the syndrome named. */
    copyrpc_cause retry = {.kind = COPYRPC_CAUSE_ERROR_COMPLETION, .syndrome = 0x15};
    if (copyrpc_cause_text(NULL)[0] != '\0' || !strstr(copyrpc_cause_text(&retry), "retry counter exceeded")) {
        fprintf(stderr, "cause text: \"%s\"\n", copyrpc_cause_text(&retry));
        failures++;
    }
    /* A server gone: the code stands for several causes, the detail says which. */
    EXPECT(copyrpc_deleg_server_close(ds), COPYRPC_OK);
    EXPECT(copyrpc_deleg_client_call(dc, &m, 2), COPYRPC_E_SHM_UNAVAILABLE);
    if (!strstr(copyrpc_refusal_detail(), "delegation server is gone")) {
        fprintf(stderr, "SHM_UNAVAILABLE detail: \"%s\"\n", copyrpc_refusal_detail());
        failures++;
    }
    EXPECT(copyrpc_deleg_client_close(dc), COPYRPC_OK);
    EXPECT(copyrpc_deleg_server_close(ds), COPYRPC_E_WRONG_KIND);

    free(big);
    free(a.mem);
    free(b.mem);
    free(c.mem);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("abi_errors: ok\n");
    return 0;
}
