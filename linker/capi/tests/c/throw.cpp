// A C++ exception thrown from each kind of callback leaves the library call that ran
// the callback, reaches the program's catch, and leaves the handle as the header says:
// a delegation or ipc client and a fabric usable, a context marked (COPYRPC_E_UNWOUND
// for every call but its fini). Run under valgrind by tests/c_programs.rs. One
// "NAME: ok" line per case.
#include <copyrpc.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

static int failures;

static void expect(int line, const char *what, int32_t got, int32_t want) {
    if (got != want) {
        std::fprintf(stderr, "line %d: %s returned %d (%s), expected %d (%s)\n", line, what, got,
                     copyrpc_strerror(got), want, copyrpc_strerror(want));
        failures++;
    }
}
#define EXPECT(expr, want) expect(__LINE__, #expr, (expr), (want))

struct thrown : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Runs `f`, which must throw `thrown` out of the library.
template <typename F> static void expect_throw(int line, F f) {
    try {
        f();
        std::fprintf(stderr, "line %d: no exception came out\n", line);
        failures++;
    } catch (const thrown &) {
    }
}

struct deleg_case {
    int calls = 0;
    uint64_t last = 0;
};

extern "C" void deleg_throws(void *arg, uint64_t token, const copyrpc_shm_msg *) {
    auto *c = static_cast<deleg_case *>(arg);
    c->calls++;
    c->last = token;
    if (token == 1) throw thrown("from the deleg callback");
}

static void deleg() {
    int start = failures;
    alignas(COPYRPC_SHM_HANDLE_ALIGN) static unsigned char s_mem[COPYRPC_DELEG_SERVER_BYTES],
        c_mem[COPYRPC_DELEG_CLIENT_BYTES];
    std::string region = "/copyrpc-c-throw-deleg-" + std::to_string(getpid());
    copyrpc_deleg_server *s;
    copyrpc_deleg_client *c;
    EXPECT(copyrpc_deleg_server_open(s_mem, sizeof s_mem, region.c_str(), 1, 16, 4, &s), COPYRPC_OK);
    EXPECT(copyrpc_deleg_client_attach(c_mem, sizeof c_mem, region.c_str(), &c), COPYRPC_OK);
    copyrpc_shm_msg m = {};
    auto serve = [&](int n) {
        copyrpc_deleg_request r;
        int served = 0;
        // The request is in the ring already: a few polls find it.
        for (int i = 0; i < 1000000 && served < n; i++) {
            if (copyrpc_deleg_server_poll(s) > 0)
                while (copyrpc_deleg_server_recv(s, &r) == 1) {
                    EXPECT(copyrpc_deleg_server_reply(s, &r, &r.msg), COPYRPC_OK);
                    served++;
                }
        }
        if (served < n) {
            std::fprintf(stderr, "deleg: the server found %d of %d requests\n", served, n);
            failures++;
        }
    };
    EXPECT(copyrpc_deleg_client_call(c, &m, 1), COPYRPC_OK);
    serve(1);
    deleg_case dc;
    expect_throw(__LINE__, [&] { copyrpc_deleg_client_poll(c, deleg_throws, &dc); });
    // Usable: the next call and its response go through.
    EXPECT(copyrpc_deleg_client_call(c, &m, 2), COPYRPC_OK);
    serve(1);
    EXPECT(copyrpc_deleg_client_poll(c, deleg_throws, &dc), 1);
    if (dc.calls != 2 || dc.last != 2) {
        std::fprintf(stderr, "deleg: %d callbacks, last token %llu\n", dc.calls, (unsigned long long)dc.last);
        failures++;
    }
    EXPECT(copyrpc_deleg_client_close(c), COPYRPC_OK);
    EXPECT(copyrpc_deleg_server_close(s), COPYRPC_OK);
    if (failures == start) std::printf("deleg: ok\n");
}

extern "C" void ipc_throws(void *arg, uint64_t token, const copyrpc_shm_msg *) {
    auto *c = static_cast<deleg_case *>(arg);
    c->calls++;
    c->last = token;
    if (token == 1) throw thrown("from the ipc callback");
}

static void ipc() {
    int start = failures;
    alignas(COPYRPC_SHM_HANDLE_ALIGN) static unsigned char s_mem[COPYRPC_IPC_SERVER_BYTES],
        c_mem[COPYRPC_IPC_CLIENT_BYTES];
    std::string region = "/copyrpc-c-throw-ipc-" + std::to_string(getpid());
    copyrpc_ipc_server *s;
    copyrpc_ipc_client *c;
    EXPECT(copyrpc_ipc_server_open(s_mem, sizeof s_mem, region.c_str(), 1, 4, &s), COPYRPC_OK);
    EXPECT(copyrpc_ipc_client_attach(c_mem, sizeof c_mem, region.c_str(), &c), COPYRPC_OK);
    copyrpc_shm_msg m = {};
    auto serve = [&](int n) {
        copyrpc_ipc_request r;
        int served = 0;
        // The request is in the ring already: a few polls find it.
        for (int i = 0; i < 1000000 && served < n; i++) {
            if (copyrpc_ipc_server_poll(s) > 0)
                while (copyrpc_ipc_server_recv(s, &r) == 1) {
                    EXPECT(copyrpc_ipc_server_reply(s, &r, &r.msg), COPYRPC_OK);
                    served++;
                }
        }
        if (served < n) {
            std::fprintf(stderr, "ipc: the server found %d of %d requests\n", served, n);
            failures++;
        }
    };
    EXPECT(copyrpc_ipc_client_call(c, &m, 1), COPYRPC_OK);
    serve(1);
    deleg_case ic;
    expect_throw(__LINE__, [&] { copyrpc_ipc_client_poll(c, ipc_throws, &ic); });
    EXPECT(copyrpc_ipc_client_call(c, &m, 2), COPYRPC_OK);
    serve(1);
    EXPECT(copyrpc_ipc_client_poll(c, ipc_throws, &ic), 1);
    if (ic.calls != 2 || ic.last != 2) {
        std::fprintf(stderr, "ipc: %d callbacks, last token %llu\n", ic.calls, (unsigned long long)ic.last);
        failures++;
    }
    EXPECT(copyrpc_ipc_client_close(c), COPYRPC_OK);
    EXPECT(copyrpc_ipc_server_close(s), COPYRPC_OK);
    if (failures == start) std::printf("ipc: ok\n");
}

struct side {
    copyrpc_fabric *f = nullptr;
    copyrpc_ctx *ctx = nullptr;
    void *mem = nullptr;
    uint16_t ep = 0;
};

static void open_side(side &s) {
    copyrpc_fabric_options o = {};
    o.size = sizeof o;
    o.kind = COPYRPC_FABRIC_SIM;
    o.ring_bytes = 4096;
    o.flags = COPYRPC_FABRIC_MANUAL_STEP;
    EXPECT(copyrpc_fabric_open_ex(&o, &s.f), COPYRPC_OK);
    copyrpc_queues q;
    copyrpc_ep_desc d;
    s.mem = std::aligned_alloc(COPYRPC_CTX_ALIGN, COPYRPC_CTX_BYTES);
    EXPECT(copyrpc_fabric_queues(s.f, &q), COPYRPC_OK);
    EXPECT(copyrpc_ctx_init(s.mem, COPYRPC_CTX_BYTES, &q, &s.ctx), COPYRPC_OK);
    EXPECT(copyrpc_fabric_endpoint(s.f, &d), COPYRPC_OK);
    EXPECT(copyrpc_ep_create(s.ctx, &d, &s.ep), COPYRPC_OK);
}

struct exchange_case {
    copyrpc_peer_info other;
    bool throw_now;
};

extern "C" int32_t exchange(void *arg, const copyrpc_peer_info *, copyrpc_peer_info *theirs) {
    auto *x = static_cast<exchange_case *>(arg);
    if (x->throw_now) throw thrown("from the exchange callback");
    *theirs = x->other;
    return 0;
}

extern "C" void response_throws(void *, uint64_t, int32_t, const uint8_t *, size_t) {
    throw thrown("from the response callback");
}

static void context() {
    int start = failures;
    side a, b;
    open_side(a);
    open_side(b);
    exchange_case xa{}, xb{};
    EXPECT(copyrpc_ep_local_info(b.ctx, b.ep, &xa.other), COPYRPC_OK);
    EXPECT(copyrpc_ep_local_info(a.ctx, a.ep, &xb.other), COPYRPC_OK);
    // The exchange throws: the fabric is usable and the endpoint still connectable.
    xa.throw_now = true;
    expect_throw(__LINE__, [&] { copyrpc_fabric_connect(a.f, a.ctx, a.ep, exchange, &xa); });
    xa.throw_now = false;
    EXPECT(copyrpc_fabric_connect(a.f, a.ctx, a.ep, exchange, &xa), COPYRPC_OK);
    EXPECT(copyrpc_fabric_connect(b.f, b.ctx, b.ep, exchange, &xb), COPYRPC_OK);
    // A response whose callback throws: the context is marked, and ends with its fini.
    uint64_t x = 7;
    EXPECT(copyrpc_call(a.ctx, a.ep, &x, sizeof x, 8, 1), COPYRPC_OK);
    bool thrown_out = false;
    for (int i = 0; i < 100000 && !thrown_out; i++) {
        copyrpc_fabric_step(a.f);
        copyrpc_fabric_step(b.f);
        copyrpc_poll(b.ctx, response_throws, nullptr);
        copyrpc_request r;
        while (copyrpc_recv(b.ctx, &r) == 1) EXPECT(copyrpc_reply(b.ctx, &r, r.data, r.len), COPYRPC_OK);
        try {
            copyrpc_poll(a.ctx, response_throws, nullptr);
        } catch (const thrown &) {
            thrown_out = true;
        }
    }
    if (!thrown_out) {
        std::fprintf(stderr, "context: the response never came\n");
        failures++;
    }
    EXPECT(copyrpc_poll(a.ctx, response_throws, nullptr), COPYRPC_E_UNWOUND);
    EXPECT(copyrpc_call(a.ctx, a.ep, &x, sizeof x, 8, 2), COPYRPC_E_UNWOUND);
    EXPECT(copyrpc_idle(a.ctx), COPYRPC_E_UNWOUND);
    EXPECT(copyrpc_fabric_close(a.f), COPYRPC_E_IN_USE);
    EXPECT(copyrpc_ctx_fini(a.ctx), COPYRPC_OK);
    EXPECT(copyrpc_ctx_fini(a.ctx), COPYRPC_E_WRONG_KIND);
    EXPECT(copyrpc_fabric_close(a.f), COPYRPC_OK);
    EXPECT(copyrpc_ctx_fini(b.ctx), COPYRPC_OK);
    EXPECT(copyrpc_fabric_close(b.f), COPYRPC_OK);
    std::free(a.mem);
    std::free(b.mem);
    if (failures == start) std::printf("context: ok\n");
}

int main() {
    if (copyrpc_init(COPYRPC_VERSION) != COPYRPC_OK) return 1;
    deleg();
    ipc();
    context();
    if (failures) {
        std::fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    return 0;
}
