/* Prints the size and every field offset of the mlx5dv.h structs that
 * host/src/fabric/verbs/mlx5dv.rs binds by hand, as "key value" lines, for
 * host/tests/verbs_mlx5dv_layout.rs to compare. */
#include <stddef.h>
#include <stdio.h>
#include <infiniband/mlx5dv.h>

#define SIZE(t) printf("size.%s %zu\n", #t, sizeof(struct t))
#define OFF(t, f) printf("off.%s.%s %zu\n", #t, #f, offsetof(struct t, f))
#define CONST(c) printf("const.%s %llu\n", #c, (unsigned long long)(c))

int main(void) {
    SIZE(mlx5dv_qp);
    OFF(mlx5dv_qp, dbrec);
    OFF(mlx5dv_qp, sq.buf);
    OFF(mlx5dv_qp, sq.wqe_cnt);
    OFF(mlx5dv_qp, sq.stride);
    OFF(mlx5dv_qp, rq.buf);
    OFF(mlx5dv_qp, rq.wqe_cnt);
    OFF(mlx5dv_qp, rq.stride);
    OFF(mlx5dv_qp, bf.reg);
    OFF(mlx5dv_qp, bf.size);
    OFF(mlx5dv_qp, comp_mask);
    OFF(mlx5dv_qp, uar_mmap_offset);
    OFF(mlx5dv_qp, tirn);
    OFF(mlx5dv_qp, tisn);
    OFF(mlx5dv_qp, rqn);
    OFF(mlx5dv_qp, sqn);
    OFF(mlx5dv_qp, tir_icm_addr);

    SIZE(mlx5dv_cq);
    OFF(mlx5dv_cq, buf);
    OFF(mlx5dv_cq, dbrec);
    OFF(mlx5dv_cq, cqe_cnt);
    OFF(mlx5dv_cq, cqe_size);
    OFF(mlx5dv_cq, cq_uar);
    OFF(mlx5dv_cq, cqn);
    OFF(mlx5dv_cq, comp_mask);

    SIZE(mlx5dv_srq);
    OFF(mlx5dv_srq, buf);
    OFF(mlx5dv_srq, dbrec);
    OFF(mlx5dv_srq, stride);
    OFF(mlx5dv_srq, head);
    OFF(mlx5dv_srq, tail);
    OFF(mlx5dv_srq, comp_mask);
    OFF(mlx5dv_srq, srqn);

    SIZE(mlx5dv_obj);
    OFF(mlx5dv_obj, qp.in);
    OFF(mlx5dv_obj, qp.out);
    OFF(mlx5dv_obj, cq.in);
    OFF(mlx5dv_obj, cq.out);
    OFF(mlx5dv_obj, srq.in);
    OFF(mlx5dv_obj, srq.out);
    OFF(mlx5dv_obj, rwq.in);
    OFF(mlx5dv_obj, dm.in);
    OFF(mlx5dv_obj, ah.in);
    OFF(mlx5dv_obj, pd.in);
    OFF(mlx5dv_obj, pd.out);

    SIZE(mlx5dv_dc_init_attr);
    OFF(mlx5dv_dc_init_attr, dc_type);
    OFF(mlx5dv_dc_init_attr, dct_access_key);

    SIZE(mlx5dv_qp_init_attr);
    OFF(mlx5dv_qp_init_attr, comp_mask);
    OFF(mlx5dv_qp_init_attr, create_flags);
    OFF(mlx5dv_qp_init_attr, dc_init_attr);
    OFF(mlx5dv_qp_init_attr, send_ops_flags);

    CONST(MLX5DV_OBJ_QP);
    CONST(MLX5DV_OBJ_CQ);
    CONST(MLX5DV_OBJ_SRQ);
    CONST(MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS);
    CONST(MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE);
    CONST(MLX5DV_SRQ_MASK_SRQN);
    return 0;
}
