/*
 * The batch-1 echo's driver work, done by rdma-core's own mlx5 provider instead of
 * mlx5-raw: the anchor for issue 24's "<= 300 instructions per message per side"
 * (docs/PERFORMANCE.md, "The stock driver: rdma-core's mlx5 provider on the same round").
 *
 * One round is what one side's driver does for one call at a time: post one inline
 * RDMA WRITE_WITH_IMM of the 32 B echo's batch (96 B: 32 B metadata + 64 B message;
 * signaled every 64th WQE, as copyrpc signals), poll the receive CQ and take the one
 * completion waiting there, poll the send CQ once (empty but every 64th round), and
 * repost SRQ WQEs a third of the queue at a time. No BlueFlame copy (the Rust figures
 * have none: the device model has no BlueFlame register), CQE version 0.
 *
 * Only the m_* functions are counted (callgrind --toggle-collect='m_*'); the dev_*
 * functions play the device, writing the CQEs a ConnectX would. The provider's objects
 * are linked in (its entry points are hidden in libmlx5.so) and its structures are
 * filled by hand, as its create verbs would fill them, because there is no device to
 * create them on. scripts/rdma-core-instr.sh builds and runs this.
 *
 *   rdma_core_round ROUNDS [MODE]
 *   MODE: post (ibv_post_send + ibv_poll_cq, the default), ex (ibv_wr_* +
 *         ibv_start_poll), each with "-locked" for rdma-core's default locking
 *         (MLX5_SINGLE_THREADED unset); without it the provider's single-threaded mode.
 *
 * Every round checks the completion it polled (status, opcode, immediate), so a harness
 * that drove the provider down a wrong path fails instead of counting it.
 */
#include <config.h>
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlx5.h"
#include "wqe.h"

#define SQ_WQEBBS 512
#define CQES 1024
#define SRQ_WR 1023
#define SIGNAL_EVERY 64
#define REPOST_EVERY 341 /* a third of the SRQ, as mlx5-raw's driver echo reposts */
#define PAYLOAD 96
#define QPN 0x123
#define SRQN 0x45
#define RKEY 0x1234

static int locked; /* rdma-core's default: spinlocks taken */
static int ex;     /* the extended API: ibv_wr_* and ibv_start_poll */

static struct mlx5_context *ctx;
static struct mlx5_qp *qp;
static struct mlx5_cq *scq, *rcq;
static struct mlx5_srq *srq;
static struct mlx5_bf bf;
static uint64_t bf_reg[64] __attribute__((aligned(64)));
static __be32 qp_db[2], scq_db[2], rcq_db[2], srq_db[1];
static uint8_t payload[PAYLOAD];
static struct ibv_sge sge;
static struct ibv_send_wr wr;
static struct ibv_recv_wr rwr[REPOST_EVERY];
static struct ibv_wc wc[16];
static __be32 last_imm;

/* The device's own positions. */
static unsigned dev_scq_pi, dev_rcq_pi;
static int dev_srq_next;

static void *zalloc(size_t n)
{
	void *p;

	if (posix_memalign(&p, 4096, n)) {
		perror("posix_memalign");
		exit(2);
	}
	memset(p, 0, n);
	return p;
}

static void must(int failed, const char *what)
{
	if (failed) {
		fprintf(stderr, "rdma_core_round: %s failed\n", what);
		exit(2);
	}
}

static void init_cq(struct mlx5_cq *cq, __be32 *db)
{
	uint8_t *ring = zalloc(CQES * 64);
	struct ibv_cq_init_attr_ex attr = {
		.wc_flags = IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_BYTE_LEN,
	};

	for (int i = 0; i < CQES; i++)
		ring[i * 64 + 63] = MLX5_CQE_INVALID << 4;
	cq->verbs_cq.cq.context = &ctx->ibv_ctx.context;
	cq->verbs_cq.cq.cqe = CQES - 1;
	cq->buf_a.ibv_buf.addr = ring;
	cq->active_buf = &cq->buf_a;
	cq->cqe_sz = 64;
	cq->dbrec = db;
	mlx5_spinlock_init(&cq->lock, locked);
	if (!locked)
		cq->flags |= MLX5_CQ_FLAGS_SINGLE_THREADED;
	must(mlx5_cq_fill_pfns(cq, &attr, ctx), "mlx5_cq_fill_pfns");
}

static void setup(void)
{
	struct mlx5_device *mdev = zalloc(sizeof(*mdev));
	struct ibv_qp_init_attr_ex qp_attr = {
		.qp_type = IBV_QPT_RC,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
	};

	ctx = zalloc(sizeof(*ctx));
	mdev->page_size = 4096;
	ctx->ibv_ctx.context.device = &mdev->verbs_dev.device;
	ctx->shut_up_bf = 1;
	ctx->max_srq_recv_wr = 1 << 15;
	ctx->max_recv_wr = 1 << 15;

	scq = zalloc(sizeof(*scq));
	rcq = zalloc(sizeof(*rcq));
	init_cq(scq, scq_db);
	init_cq(rcq, rcq_db);

	srq = zalloc(sizeof(*srq));
	srq->vsrq.srq.context = &ctx->ibv_ctx.context;
	srq->max_gs = 1;
	srq->srqn = SRQN;
	srq->db = srq_db;
	mlx5_spinlock_init(&srq->lock, locked);
	must(mlx5_alloc_srq_buf(&ctx->ibv_ctx.context, srq, SRQ_WR, NULL), "mlx5_alloc_srq_buf");
	must(mlx5_store_srq(ctx, SRQN, srq), "mlx5_store_srq");

	qp = zalloc(sizeof(*qp));
	qp->ibv_qp = &qp->verbs_qp.qp;
	qp->ibv_qp->context = &ctx->ibv_ctx.context;
	qp->ibv_qp->qp_type = IBV_QPT_RC;
	qp->ibv_qp->qp_num = QPN;
	qp->ibv_qp->state = IBV_QPS_RTS;
	qp->ibv_qp->send_cq = &scq->verbs_cq.cq;
	qp->ibv_qp->recv_cq = &rcq->verbs_cq.cq;
	qp->ibv_qp->srq = &srq->vsrq.srq;
	qp->rsc.type = MLX5_RSC_TYPE_QP;
	qp->rsc.rsn = QPN;
	qp->max_inline_data = 220;
	qp->sq_start = zalloc(SQ_WQEBBS * 64);
	qp->sq.qend = (uint8_t *)qp->sq_start + SQ_WQEBBS * 64;
	qp->sq.wqe_cnt = SQ_WQEBBS;
	qp->sq.max_post = SQ_WQEBBS / 4; /* WQEs of up to four WQEBBs (220 B inline) */
	qp->sq.wqe_shift = 6;
	qp->sq.max_gs = 1;
	qp->sq.qp_state_max_gs = 1;
	qp->sq.wrid = zalloc(SQ_WQEBBS * sizeof(uint64_t));
	qp->sq.wqe_head = zalloc(SQ_WQEBBS * sizeof(unsigned));
	qp->sq.wr_data = zalloc(SQ_WQEBBS * sizeof(uint32_t));
	mlx5_spinlock_init(&qp->sq.lock, locked);
	qp->db = qp_db;
	bf.reg = bf_reg;
	bf.buf_size = 256;
	qp->bf = &bf;
	must(mlx5_store_qp(ctx, QPN, qp), "mlx5_store_qp");
	must(mlx5_qp_fill_wr_pfns(qp, &qp_attr, NULL), "mlx5_qp_fill_wr_pfns");

	sge.addr = (uintptr_t)payload;
	sge.length = PAYLOAD;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.rdma.rkey = RKEY;
	for (int i = 0; i < REPOST_EVERY; i++)
		rwr[i].next = i + 1 < REPOST_EVERY ? &rwr[i + 1] : NULL;
}

/* ---- counted: the driver's work ---- */

__attribute__((noinline)) int m_post(uint64_t raddr, uint32_t imm, int signaled)
{
	struct ibv_send_wr *bad;

	wr.wr.rdma.remote_addr = raddr;
	wr.imm_data = htobe32(imm);
	wr.send_flags = IBV_SEND_INLINE | (signaled ? IBV_SEND_SIGNALED : 0);
	return mlx5_post_send(qp->ibv_qp, &wr, &bad);
}

__attribute__((noinline)) int m_post_ex(uint64_t raddr, uint32_t imm, int signaled)
{
	struct ibv_qp_ex *x = &qp->verbs_qp.qp_ex;

	ibv_wr_start(x);
	x->wr_id = raddr;
	x->wr_flags = IBV_SEND_INLINE | (signaled ? IBV_SEND_SIGNALED : 0);
	ibv_wr_rdma_write_imm(x, RKEY, raddr, htobe32(imm));
	ibv_wr_set_inline_data(x, payload, PAYLOAD);
	return ibv_wr_complete(x);
}

static inline int poll_ex(struct mlx5_cq *cq)
{
	struct ibv_cq_ex *x = &cq->verbs_cq.cq_ex;
	struct ibv_poll_cq_attr attr = { 0 };
	int n = 0;

	if (ibv_start_poll(x, &attr))
		return 0;
	do {
		if (x->status != IBV_WC_SUCCESS)
			n = -1000;
		else if (ibv_wc_read_opcode(x) == IBV_WC_RECV_RDMA_WITH_IMM)
			last_imm = ibv_wc_read_imm_data(x);
		n++;
	} while (ibv_next_poll(x) == 0);
	ibv_end_poll(x);
	return n;
}

/* One function per CQ and API, so that callgrind counts each poll on its own. */
__attribute__((noinline)) int m_poll_recv(void)
{
	return mlx5_poll_cq(&rcq->verbs_cq.cq, 16, wc);
}

__attribute__((noinline)) int m_poll_send(void)
{
	return mlx5_poll_cq(&scq->verbs_cq.cq, 16, wc);
}

__attribute__((noinline)) int m_poll_recv_ex(void)
{
	return poll_ex(rcq);
}

__attribute__((noinline)) int m_poll_send_ex(void)
{
	return poll_ex(scq);
}

static inline int post_srq(void)
{
	struct ibv_recv_wr *bad;

	return mlx5_post_srq_recv(&srq->vsrq.srq, rwr, &bad);
}

__attribute__((noinline)) int m_repost(void)
{
	return post_srq();
}

/* ---- not counted: the device ---- */

static void write_cqe(struct mlx5_cq *cq, unsigned *pi, uint8_t opcode, uint16_t wqe_counter,
		      uint32_t srqn, uint32_t imm, uint32_t bytes)
{
	uint8_t *ring = cq->buf_a.ibv_buf.addr;
	struct mlx5_cqe64 *c = (void *)(ring + (*pi & (CQES - 1)) * 64);

	memset(c, 0, 63);
	c->imm_inval_pkey = htobe32(imm);
	c->byte_cnt = htobe32(bytes);
	c->sop_drop_qpn = htobe32(QPN);
	c->srqn_uidx = htobe32(srqn);
	c->wqe_counter = htobe16(wqe_counter);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	c->op_own = (opcode << 4) | ((*pi / CQES) & 1);
	(*pi)++;
}

/* The peer's WRITE_IMM lands: the device takes the SRQ's next WQE and completes it. */
static void dev_deliver(uint32_t imm)
{
	struct mlx5_wqe_srq_next_seg *w =
		(void *)((uint8_t *)srq->buf.ibv_buf.addr + (dev_srq_next << srq->wqe_shift));

	write_cqe(rcq, &dev_rcq_pi, MLX5_CQE_RESP_WR_IMM, dev_srq_next, SRQN, imm, PAYLOAD);
	dev_srq_next = be16toh(w->next_wqe_index);
}

/* The signaled WQE, the last one posted (three WQEBBs), completes. */
static void dev_complete_send(void)
{
	write_cqe(scq, &dev_scq_pi, MLX5_CQE_REQ, (uint16_t)(qp->sq.cur_post - 3), 0, 0, 0);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 0;
	const char *mode = argc > 2 ? argv[2] : "post";
	long send_completions = 0;
	int filled = 0, taken = 0;

	if (rounds <= 0 || argc > 3) {
		fprintf(stderr, "usage: rdma_core_round ROUNDS [post|ex|post-locked|ex-locked]\n");
		return 2;
	}
	ex = strncmp(mode, "ex", 2) == 0;
	locked = strstr(mode, "-locked") != NULL;
	if (!ex && strncmp(mode, "post", 4) != 0) {
		fprintf(stderr, "rdma_core_round: unknown mode %s\n", mode);
		return 2;
	}
	setup();
	/* The SRQ's first fill, as after its creation: not counted. */
	while (filled + REPOST_EVERY <= SRQ_WR) {
		must(post_srq(), "the SRQ's first post");
		filled += REPOST_EVERY;
	}
	for (int r = 0; r < rounds; r++) {
		int signaled = (r + 1) % SIGNAL_EVERY == 0;
		int n, s;

		must((ex ? m_post_ex : m_post)((uint64_t)r * 128, r, signaled), "post");
		if (signaled)
			dev_complete_send();
		dev_deliver(r);
		if (ex) {
			n = m_poll_recv_ex();
			wc[0].status = IBV_WC_SUCCESS;
			wc[0].opcode = IBV_WC_RECV_RDMA_WITH_IMM;
			wc[0].imm_data = last_imm;
		} else {
			n = m_poll_recv();
		}
		if (n != 1 || wc[0].status != IBV_WC_SUCCESS ||
		    wc[0].opcode != IBV_WC_RECV_RDMA_WITH_IMM || be32toh(wc[0].imm_data) != (uint32_t)r) {
			fprintf(stderr, "rdma_core_round: round %d: %d receive completions (status %d, opcode %d)\n",
				r, n, wc[0].status, wc[0].opcode);
			return 1;
		}
		s = ex ? m_poll_send_ex() : m_poll_send();
		if (s != signaled || (s && !ex && wc[0].status != IBV_WC_SUCCESS)) {
			fprintf(stderr, "rdma_core_round: round %d: %d send completions, expected %d\n",
				r, s, signaled);
			return 1;
		}
		send_completions += s;
		if (++taken == REPOST_EVERY) {
			must(m_repost(), "the SRQ repost");
			taken = 0;
		}
	}
	printf("%s: %d rounds, %d receive and %ld send completions checked\n", mode, rounds, rounds,
	       send_completions);
	return 0;
}
