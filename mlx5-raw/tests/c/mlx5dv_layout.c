/* Prints every size, offset and constant of <infiniband/mlx5dv.h> that mlx5-raw mirrors,
 * and the bytes rdma-core's own inline helpers produce for a few segments, so the Rust
 * test (mlx5dv_crosscheck.rs) can compare them with our layouts byte for byte.
 * Output: one "key value" pair per line; byte strings are lowercase hex without spaces. */
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/mlx5dv.h>

#define SIZE(t) printf("size.%s %zu\n", #t, sizeof(struct t))
#define OFF(t, f) printf("off.%s.%s %zu\n", #t, #f, offsetof(struct t, f))
#define CONST(c) printf("const.%s %llu\n", #c, (unsigned long long)(c))

static void hex(const char *key, const void *p, size_t n) {
    const unsigned char *b = p;
    printf("bytes.%s ", key);
    for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
    printf("\n");
}

int main(void) {
    SIZE(mlx5_wqe_ctrl_seg);
    OFF(mlx5_wqe_ctrl_seg, opmod_idx_opcode);
    OFF(mlx5_wqe_ctrl_seg, qpn_ds);
    OFF(mlx5_wqe_ctrl_seg, signature);
    OFF(mlx5_wqe_ctrl_seg, dci_stream_channel_id);
    OFF(mlx5_wqe_ctrl_seg, fm_ce_se);
    OFF(mlx5_wqe_ctrl_seg, imm);

    SIZE(mlx5_wqe_raddr_seg);
    OFF(mlx5_wqe_raddr_seg, raddr);
    OFF(mlx5_wqe_raddr_seg, rkey);
    OFF(mlx5_wqe_raddr_seg, reserved);

    SIZE(mlx5_wqe_data_seg);
    OFF(mlx5_wqe_data_seg, byte_count);
    OFF(mlx5_wqe_data_seg, lkey);
    OFF(mlx5_wqe_data_seg, addr);

    SIZE(mlx5_wqe_inl_data_seg);
    OFF(mlx5_wqe_inl_data_seg, byte_count);

    SIZE(mlx5_wqe_srq_next_seg);
    OFF(mlx5_wqe_srq_next_seg, rsvd0);
    OFF(mlx5_wqe_srq_next_seg, next_wqe_index);
    OFF(mlx5_wqe_srq_next_seg, signature);
    OFF(mlx5_wqe_srq_next_seg, rsvd1);

    SIZE(mlx5_cqe64);
    OFF(mlx5_cqe64, ml_path);
    OFF(mlx5_cqe64, slid);
    OFF(mlx5_cqe64, flags_rqpn);
    OFF(mlx5_cqe64, srqn_uidx);
    OFF(mlx5_cqe64, imm_inval_pkey);
    OFF(mlx5_cqe64, byte_cnt);
    OFF(mlx5_cqe64, timestamp);
    OFF(mlx5_cqe64, sop_drop_qpn);
    OFF(mlx5_cqe64, wqe_counter);
    OFF(mlx5_cqe64, signature);
    OFF(mlx5_cqe64, op_own);

    SIZE(mlx5_err_cqe);
    OFF(mlx5_err_cqe, rsvd0);
    OFF(mlx5_err_cqe, srqn);
    OFF(mlx5_err_cqe, rsvd1);
    OFF(mlx5_err_cqe, vendor_err_synd);
    OFF(mlx5_err_cqe, syndrome);
    OFF(mlx5_err_cqe, s_wqe_opcode_qpn);
    OFF(mlx5_err_cqe, wqe_counter);
    OFF(mlx5_err_cqe, signature);
    OFF(mlx5_err_cqe, op_own);

    CONST(MLX5_OPCODE_NOP);
    CONST(MLX5_OPCODE_RDMA_WRITE);
    CONST(MLX5_OPCODE_RDMA_WRITE_IMM);
    CONST(MLX5_OPCODE_SEND);
    CONST(MLX5_OPCODE_SEND_IMM);
    CONST(MLX5_OPCODE_RDMA_READ);
    CONST(MLX5_CQE_REQ);
    CONST(MLX5_CQE_RESP_WR_IMM);
    CONST(MLX5_CQE_RESP_SEND);
    CONST(MLX5_CQE_RESP_SEND_IMM);
    CONST(MLX5_CQE_RESP_SEND_INV);
    CONST(MLX5_CQE_REQ_ERR);
    CONST(MLX5_CQE_RESP_ERR);
    CONST(MLX5_CQE_INVALID);
    CONST(MLX5_CQE_OWNER_MASK);
    CONST(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
    CONST(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
    CONST(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
    CONST(MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    CONST(MLX5_CQE_SYNDROME_MW_BIND_ERR);
    CONST(MLX5_CQE_SYNDROME_BAD_RESP_ERR);
    CONST(MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR);
    CONST(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
    CONST(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
    CONST(MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
    CONST(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
    CONST(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
    CONST(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR);
    CONST(MLX5_WQE_CTRL_CQ_UPDATE);
    CONST(MLX5_WQE_CTRL_SOLICITED);
    CONST(MLX5_WQE_CTRL_FENCE);
    CONST(MLX5_SEND_WQE_BB);
    CONST(MLX5_INLINE_SEG);
    CONST(MLX5_INVALID_LKEY);
    CONST(MLX5_RCV_DBR);
    CONST(MLX5_SND_DBR);

    /* Segments built by rdma-core's own helpers. Vector 1 is reference TV1. */
    struct mlx5_wqe_ctrl_seg ctrl;
    const uint8_t imm_bytes[4] = {0xde, 0xad, 0xbe, 0xef};
    uint32_t imm;
    memcpy(&imm, imm_bytes, 4); /* imm is raw bytes: copied, not swapped */
    memset(&ctrl, 0, sizeof ctrl);
    mlx5dv_set_ctrl_seg(&ctrl, 0x1234, MLX5_OPCODE_RDMA_WRITE_IMM, 0, 0xabcde,
                        MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED, 3, 0, imm);
    hex("ctrl_tv1", &ctrl, sizeof ctrl);
    memset(&ctrl, 0, sizeof ctrl);
    mlx5dv_set_ctrl_seg(&ctrl, 0xffff, MLX5_OPCODE_RDMA_READ, 0, 0xffffff, 0, 63, 0, 0);
    hex("ctrl_max", &ctrl, sizeof ctrl);
    memset(&ctrl, 0, sizeof ctrl);
    mlx5dv_set_ctrl_seg(&ctrl, 7, MLX5_OPCODE_SEND, 0, 0x12, MLX5_WQE_CTRL_CQ_UPDATE, 2, 0, 0);
    hex("ctrl_tv2", &ctrl, sizeof ctrl);
    memset(&ctrl, 0, sizeof ctrl);
    mlx5dv_set_ctrl_seg(&ctrl, 0, MLX5_OPCODE_NOP, 0, 1, MLX5_WQE_CTRL_FENCE, 1, 0, 0);
    hex("ctrl_nop_fence", &ctrl, sizeof ctrl);

    struct mlx5_wqe_data_seg data;
    mlx5dv_set_data_seg(&data, 4096, 0x123456, 0x7f00aabbcc00ULL);
    hex("data_tv1", &data, sizeof data);
    mlx5dv_set_data_seg(&data, 0, MLX5_INVALID_LKEY, 0);
    hex("data_terminator", &data, sizeof data);

    struct mlx5_wqe_raddr_seg raddr;
    memset(&raddr, 0, sizeof raddr);
    raddr.raddr = htobe64(0x7f0011223340ULL);
    raddr.rkey = htobe32(0xa1b2c3);
    hex("raddr_tv1", &raddr, sizeof raddr);

    struct mlx5_wqe_inl_data_seg inl;
    inl.byte_count = htobe32(5 | MLX5_INLINE_SEG);
    hex("inline_hdr_5", &inl, sizeof inl);

    struct mlx5_wqe_srq_next_seg next;
    memset(&next, 0, sizeof next);
    next.next_wqe_index = htobe16(0x0102);
    hex("srq_next_0102", &next, sizeof next);

    /* Reference TV3: responder WRITE_IMM CQE, then read back through the header's getters. */
    struct mlx5_cqe64 cqe;
    memset(&cqe, 0, sizeof cqe);
    cqe.srqn_uidx = htobe32(0x77);
    memcpy(&cqe.imm_inval_pkey, imm_bytes, 4);
    cqe.byte_cnt = htobe32(4096);
    cqe.sop_drop_qpn = htobe32(0xabcdf);
    cqe.wqe_counter = htobe16(5);
    cqe.op_own = (MLX5_CQE_RESP_WR_IMM << 4) | (1 << 1) | 1;
    hex("cqe_tv3", &cqe, sizeof cqe);
    printf("get.cqe_tv3.opcode %u\n", mlx5dv_get_cqe_opcode(&cqe));
    printf("get.cqe_tv3.owner %u\n", mlx5dv_get_cqe_owner(&cqe));
    printf("get.cqe_tv3.se %u\n", mlx5dv_get_cqe_se(&cqe));
    printf("get.cqe_tv3.format %u\n", mlx5dv_get_cqe_format(&cqe));

    /* A requester error CQE: REMOTE_ACCESS_ERR on an RDMA_WRITE_IMM, wqe_counter 0x0203. */
    struct mlx5_err_cqe err;
    memset(&err, 0, sizeof err);
    err.srqn = htobe32(0x42);
    err.vendor_err_synd = 0x88;
    err.syndrome = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
    err.s_wqe_opcode_qpn = htobe32(((uint32_t)MLX5_OPCODE_RDMA_WRITE_IMM << 24) | 0xabcde);
    err.wqe_counter = htobe16(0x0203);
    err.op_own = (MLX5_CQE_REQ_ERR << 4) | 0;
    hex("err_cqe", &err, sizeof err);
    return 0;
}
