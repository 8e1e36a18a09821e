/* The CUDA matmul's two engines and the problem they share.
 *
 * runtime/cuda/gemm.c owns burnc_matmul on cuda devices: it turns a matmul record (and, when
 * fusion marked one, the epilogue kernel after it) into a cuda_mm_problem, offers it first to
 * the tensor-core engine (runtime/cuda/mma.c: f16 and bf16 operands, f32 when the device allows
 * TF32) and runs it itself otherwise (the SIMT engine: the cpu device's fma chain, bitwise equal
 * to it for f32). Both engines launch on the device's stream and return without waiting. */
#ifndef BURNC_RUNTIME_CUDA_MMA_H
#define BURNC_RUNTIME_CUDA_MMA_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/cuda/cu.h"

/* C[b] = A[b] @ B[b] for b < batch, every stride in elements (batch strides of 0 broadcast).
 * A is m x k, element (i, l) at a + b*a_bs + i*a_rs + l*a_ks; B is k x n, element (l, j) at
 * b + b*b_bs + l*b_ks + j*b_cs; C is dense row-major m x n per batch (c_bs = m*n). A transposed
 * operand is a view: a_rs = 1 and a_ks = m, say. Operands and result share the dtype. */
typedef struct cuda_mm_problem {
    burnc_dtype_t dt;
    int64_t batch, m, n, k;
    CUdeviceptr a, b, c;
    int64_t a_bs, a_rs, a_ks;
    int64_t b_bs, b_ks, b_cs;
    int64_t c_bs;
    /* The epilogue fused into the store of C (gemm.c's type), or NULL. An engine that cannot
     * fuse it declines the problem. */
    const struct cuda_mm_epilogue *epilogue;
} cuda_mm_problem;

/* The tensor-core engine. Sets *taken and launches when it takes p (sm 80+, f16 or bf16, or
 * f32 with allow_tf32); leaves *taken false and returns BURNC_OK when it does not. An error
 * is a launch or compile failure of a problem it took. */
/* Whether the engine runs matmuls of dtype dt on this device (given the TF32 setting), when
 * their layout suits it. gemm.c fuses no epilogue into such a matmul: the engine takes none,
 * and the SIMT kernel would give other bits than the unfused run. */
bool cuda_mma_dtype_ok(rt_device *dev, burnc_dtype_t dt, bool allow_tf32);

burnc_status_t cuda_mma_matmul(rt_device *dev, const cuda_mm_problem *p, bool allow_tf32, bool *taken);
/* Unloads the engine's kernels (cuda_close, before the context goes). */
void cuda_mma_free(rt_device *dev);
/* Test hook: every later problem on dev uses tile variant v of codegen/ptx_mma.h's
 * CG_MMA_TILES (-1: the heuristic, or BURNC_CUDA_MMA_TILE); false when v is not one. */
bool cuda_test_mma_force_tile(rt_device *dev, int v);
/* Test hook: how many kernels the engine compiled (PTX generated or loaded from the disk
 * cache) on dev: a second problem of the same kind must not add one. */
int cuda_test_mma_builds(rt_device *dev);

#endif
