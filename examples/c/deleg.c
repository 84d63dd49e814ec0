/* delegationrpc from C: one server process and 4 client processes over /dev/shm.
 *
 *   cc -O2 $(pkg-config --cflags --libs copyrpc) examples/c/deleg.c -o deleg && ./deleg [CALLS]
 *
 * The server creates the region, forks the clients, and answers every request in its
 * poll loop; each client makes CALLS calls (default 100000), up to 8 in flight, and
 * checks that each response answers its own request. Exits 0 only when every call of
 * every client was answered and checked. */
#define _POSIX_C_SOURCE 200809L
#include <copyrpc.h>

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CLIENTS 4
#define RESP_DEPTH 8
#define DEADLINE_S 300.0

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* What the server computes from a request: the client checks it. */
static uint64_t answer(uint64_t client, uint64_t seq) { return (seq * 3 + 1) ^ (client << 40); }

static void report(const char *who, const char *what, int32_t rc) {
    fprintf(stderr, "deleg %s: %s: %s%s%s\n", who, what, copyrpc_strerror(rc),
            rc == COPYRPC_E_SYSTEM ? ": " : "", rc == COPYRPC_E_SYSTEM ? copyrpc_last_error() : "");
}

struct client_state {
    uint64_t index, answered, bad;
};

/* Each call's token is its sequence number: the response must answer that request. */
static void on_response(void *arg, uint64_t seq, const copyrpc_shm_msg *resp) {
    struct client_state *s = arg;
    if (resp->words[0] != s->index || resp->words[1] != seq || resp->words[2] != answer(s->index, seq)) {
        if (s->bad++ == 0)
            fprintf(stderr, "deleg client %llu: the response to request %llu answers another\n",
                    (unsigned long long)s->index, (unsigned long long)seq);
    }
    s->answered++;
}

static int client(uint64_t index, const char *region, uint64_t calls) {
    /* The handle lives in our memory (static storage here). */
    static _Alignas(COPYRPC_SHM_HANDLE_ALIGN) unsigned char mem[COPYRPC_DELEG_CLIENT_BYTES];
    copyrpc_deleg_client *c;
    int32_t rc = copyrpc_deleg_client_attach(mem, sizeof mem, region, &c);
    if (rc < 0) return report("client", "attach", rc), 1;
    struct client_state s = {.index = index};
    uint64_t next = 0, in_flight = 0;
    double start = now_s();
    while (s.answered < calls) {
        if (now_s() - start > DEADLINE_S) {
            fprintf(stderr, "deleg client %llu: deadline: %llu/%llu answered\n", (unsigned long long)index,
                    (unsigned long long)s.answered, (unsigned long long)calls);
            return 1;
        }
        while (next < calls && in_flight < RESP_DEPTH) {
            copyrpc_shm_msg req = {.words = {index, next}};
            rc = copyrpc_deleg_client_call(c, &req, next);
            if (rc == COPYRPC_E_TOO_MANY_CALLS || rc == COPYRPC_E_RING_FULL) break; /* poll first */
            if (rc < 0) return report("client", "call", rc), 1;
            next++;
            in_flight++;
        }
        rc = copyrpc_deleg_client_poll(c, on_response, &s);
        if (rc < 0) return report("client", "poll", rc), 1;
        in_flight -= (uint64_t)rc;
        if (s.bad) return 1;
        if (rc == 0) sched_yield();
    }
    rc = copyrpc_deleg_client_close(c);
    if (rc < 0) return report("client", "close", rc), 1;
    printf("client %llu: %llu calls answered: ok\n", (unsigned long long)index, (unsigned long long)s.answered);
    fflush(stdout); /* the child ends with _exit, which does not flush */
    return 0;
}

int main(int argc, char **argv) {
    /* First: the library must be of the ABI this program was built for. */
    if (copyrpc_init(COPYRPC_VERSION) != COPYRPC_OK) {
        fprintf(stderr, "%s: libcopyrpc %#x does not run programs built with copyrpc.h %#x\n", argv[0],
                copyrpc_version(), COPYRPC_VERSION);
        return 1;
    }
    uint64_t calls = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000;
    if (calls == 0) {
        fprintf(stderr, "usage: deleg [CALLS]  (calls per client, at least 1)\n");
        return 2;
    }
    char region[64];
    snprintf(region, sizeof region, "/copyrpc-c-deleg-%ld", (long)getpid());
    static _Alignas(COPYRPC_SHM_HANDLE_ALIGN) unsigned char mem[COPYRPC_DELEG_SERVER_BYTES];
    copyrpc_deleg_server *s;
    int32_t rc = copyrpc_deleg_server_open(mem, sizeof mem, region, 8, 256, RESP_DEPTH, &s);
    if (rc < 0) return report("server", "open", rc), 1;
    fflush(stdout);
    pid_t kids[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        kids[i] = fork();
        if (kids[i] < 0) return perror("fork"), 1;
        if (kids[i] == 0) _exit(client((uint64_t)i, region, calls));
    }
    uint64_t served = 0, total = calls * CLIENTS;
    int alive = CLIENTS, failed = 0;
    double start = now_s();
    /* Serve until every client has exited (each exits once all its calls are answered). */
    while (alive > 0) {
        if (now_s() - start > DEADLINE_S) {
            fprintf(stderr, "deleg server: deadline: served %llu of %llu\n", (unsigned long long)served,
                    (unsigned long long)total);
            failed = 1;
            break;
        }
        rc = copyrpc_deleg_server_poll(s);
        if (rc < 0) return report("server", "poll", rc), 1;
        copyrpc_deleg_request r;
        int got = 0;
        while ((rc = copyrpc_deleg_server_recv(s, &r)) == 1) {
            copyrpc_shm_msg resp = {.words = {r.msg.words[0], r.msg.words[1], answer(r.msg.words[0], r.msg.words[1])}};
            rc = copyrpc_deleg_server_reply(s, &r, &resp);
            if (rc < 0) return report("server", "reply", rc), 1;
            served++;
            got = 1;
        }
        if (rc < 0) return report("server", "recv", rc), 1;
        int st;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w > 0) {
            alive--;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "deleg server: client pid %ld failed (wait status %#x)\n", (long)w, st);
                failed = 1;
            }
        }
        if (!got) sched_yield();
    }
    if (alive > 0)
        for (int i = 0; i < CLIENTS; i++) kill(kids[i], SIGKILL);
    while (alive > 0 && wait(NULL) > 0) alive--;
    rc = copyrpc_deleg_server_close(s);
    if (rc < 0) return report("server", "close", rc), 1;
    if (failed || served != total) {
        fprintf(stderr, "deleg server: served %llu of %llu\n", (unsigned long long)served, (unsigned long long)total);
        return 1;
    }
    printf("server: %llu calls from %d clients answered: ok\n", (unsigned long long)served, CLIENTS);
    return 0;
}
