/* The contract between the CUDA runtime (runtime/cuda/) and the PTX code generator.
 *
 * Two halves:
 *  - codegen/llvm_ptx.c, in the LLVM module (burnc-llvm.so, reached through cg_llvm_api's
 *    compile_ptx), lowers one kir_kernel to PTX text holding every entry the kernel may need;
 *  - codegen/ptx_plan.c, in libburnc (no LLVM: a warm process loads cached cubins and still
 *    has to plan its launches), turns one launch of that kernel (kir_args) into an ordered
 *    list of CUDA launches: entry, grid, block, dynamic shared memory, and the packed
 *    parameter block.
 * Both derive everything from the kernel's structure and the options, so the PTX and the plan
 * agree without passing anything else between them.
 *
 * Every entry takes exactly one parameter: a byval struct of 8-byte words whose layout is
 * cg_ptx_params_layout's (device addresses, extents, offsets, strides, scalars, then the
 * words of the launch itself). The runtime passes it as CU_LAUNCH_PARAM_BUFFER_POINTER.
 *
 * Numerics (DESIGN.md): every op rounds (add.rn/mul.rn/... only; no contraction, fma only for
 * KIR_FMA), no .ftz, reductions in kernel.h's order, so element-wise results equal the cpu
 * device's bitwise and reductions equal kir_eval's. */
#ifndef BURNC_PTX_H
#define BURNC_PTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel.h"

/* Code parameters autotune may choose; all-zero means the defaults of the generator. */
typedef struct cg_ptx_options {
    int sm;          /* compute capability x 10 + minor: 90 for sm_90 (required) */
    int block;       /* threads per block of the main entry: 64..1024, a multiple of 32; 0: default */
    int items;       /* element-wise: positions per thread (1, 2, 4, 8); 0: default */
    int rows_per_block; /* row kernels with short rows: rows (warps) per block; 0: default */
} cg_ptx_options;

enum { CG_PTX_MAX_LAUNCHES = 16, CG_PTX_MAX_PARAM_WORDS = 512 };

typedef struct cg_ptx_launch {
    char entry[32];          /* the .entry name in the PTX */
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_bytes;   /* dynamic shared memory */
    uint32_t n_words;        /* parameter block: words[0..n_words) */
    uint64_t words[CG_PTX_MAX_PARAM_WORDS];
} cg_ptx_launch;

typedef struct cg_ptx_plan {
    int n;                               /* launches, run in order on one stream */
    cg_ptx_launch launch[CG_PTX_MAX_LAUNCHES];
    size_t scratch_bytes;                /* device scratch the launches need (multi-pass reductions) */
} cg_ptx_plan;

/* Plans the launches of kernel k for the values of args, whose inputs/outputs hold device
 * addresses (CUdeviceptr cast to void *). Call once with scratch == 0 to learn
 * plan->scratch_bytes; when it is nonzero, call again with the address of that much device
 * memory (256-byte aligned) to get the final plan. False with a reason (in why) when the
 * launch cannot be planned (a size past the device's grid limits). */
bool cg_ptx_plan_launches(const kir_kernel *k, const cg_ptx_options *opt, const kir_args *args, uint64_t scratch,
                          cg_ptx_plan *plan, char *why, size_t why_cap);

#endif
