/* Matmul on cuda devices (runtime/cuda/gemm.c, the SIMT engine and the routing; tune_mm.c, its
 * autotune family). Private to runtime/cuda. */
#ifndef BURNC_RUNTIME_CUDA_GEMM_H
#define BURNC_RUNTIME_CUDA_GEMM_H

#include "autotune.h"
#include "runtime/cuda/mma.h"

/* The device's matmul state (kernels, the held matmul): made at open, freed at close (before
 * the context goes). */
burnc_status_t cuda_gemm_init(rt_device *dev);
void cuda_gemm_free(rt_device *dev);
/* Whether gemm.c runs the record: float matmuls (integer ones keep the host path). */
bool cuda_gemm_handles(const ir_record *rec);
/* Takes a float matmul record (bufs: A, B, C) and holds it until the next launch shows whether
 * it has an epilogue (cuda_gemm_kernel_launched) or something else needs the stream
 * (cuda_gemm_flush). Errors: a record whose views do not fit its buffers (BURNC_ERR_INTERNAL),
 * or the failure of an earlier held matmul released now. */
burnc_status_t cuda_gemm_launch(rt_device *dev, const ir_record *rec, rt_buffer *const *bufs);
/* Enqueues the held matmul, if any, unfused. Call before anything else goes on the stream or
 * waits for it, without the device's stream lock. A failure is also recorded on the device
 * for the next sync. */
burnc_status_t cuda_gemm_flush(rt_device *dev);
/* Called at every launch_kernel before the kernel runs: when it is the held matmul's epilogue
 * and fits, runs both as one kernel and sets *fused (the caller then launches nothing);
 * otherwise releases the held matmul first. */
burnc_status_t cuda_gemm_kernel_launched(rt_device *dev, const kir_kernel *k, const kir_args *args,
                                         rt_buffer *const *ins, rt_buffer *const *outs, bool epilogue, bool *fused);

/* ---- Autotune (tune_mm.c) ---- */
/* The SIMT tile (index into CG_PTX_GEMM_TILES, valid[] true) for p: family "cuda.matmul". */
int cuda_mm_choose_tile(rt_device *dev, const cuda_mm_problem *p, const bool *valid);
/* The heuristic: the best large-square tile, smaller tiles when the grid would not fill the
 * GPU. */
int cuda_mm_heuristic(const cuda_device *cd, const cuda_mm_problem *p, const bool *valid);
/* at_decide for q, timing candidates on private buffers shaped like p (gemm.c). */
int cuda_mm_tune(rt_device *dev, const cuda_mm_problem *p, const at_query *q, at_outcome *how);

/* Timing matmul candidates for autotune (both engines): p is the problem laid out densely in
 * one batch over private operands of a_bytes, b_bytes and c_bytes, which are made (A and B
 * zero-filled: every candidate does the same work) on the first timing only, so a decision
 * found in memory or in the store costs no allocation and no device work. run launches
 * candidate c on p. */
typedef struct cuda_mm_timing {
    rt_device *dev;
    cuda_mm_problem p;
    size_t a_bytes, b_bytes, c_bytes;
    burnc_status_t (*run)(struct cuda_mm_timing *t, int c);
    bool tried;
    rt_buffer *buf[3];
    CUevent ev[2];
} cuda_mm_timing;
/* at_decide for q with t's timings; frees what they made. */
int cuda_mm_timed_decide(cuda_mm_timing *t, const at_query *q, at_outcome *how);

/* ---- Test hooks ---- */
/* Every SIMT launch uses tile t (-1: autotune decides); false when t is not a tile. */
bool cuda_test_gemm_force_tile(rt_device *dev, int t);
/* Which epilogues that fit are fused: the cheap ones (the default; gemm.c, EPI_MAX_COST), none,
 * or all whatever their cost. */
enum { CUDA_EPI_BY_COST, CUDA_EPI_NEVER, CUDA_EPI_ALWAYS };
void cuda_test_gemm_set_epilogues(rt_device *dev, int mode);
/* Whether problems are offered to the tensor-core engine first (on by default; off: every
 * float matmul runs the SIMT fma chain). */
void cuda_test_gemm_set_mma(rt_device *dev, bool on);
/* Kernels the SIMT engine built, and epilogues it fused, on dev so far. */
void cuda_test_gemm_counts(rt_device *dev, int *builds, int *fused);

#endif
