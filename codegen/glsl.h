/* The kernel IR lowered to GLSL 450 compute shaders, and GLSL compiled to validated SPIR-V
 * (glslang's C interface, then SPIRV-Tools' spvValidate). Used by runtime/vulkan.
 *
 * Shader interface (what the runtime binds):
 *   set 0, binding 0: the launch's argument words (int64 array, cg_glsl_pack_args);
 *   binding 1 + s: input slot s; binding 1 + n_inputs + o: output slot o (whole buffers, the
 *   element offsets are arguments). f16 and bf16 are 16-bit words, bool and u8 bytes: the
 *   device needs 8- and 16-bit storage for kernels that touch them, and 64-bit integers for
 *   every kernel (positions are i64 in the IR).
 * Dispatch (cg_glsl_grid): element-wise kernels take `items` positions per invocation; kernels
 *   with stages or row stores take one row per workgroup at a time, its leaves spread over the
 *   workgroup's warps of 32 lanes (kernel.h's lanes), results equal to kir_eval's bit for bit
 *   as far as the device rounds each operation correctly (include/burnc.h, Vulkan bounds).
 *   Lanes meet in shared memory, not through subgroup operations: subgroup sizes vary (8 on
 *   lavapipe, 32 on NVIDIA) and the tree must be kernel.h's 32-lane one on every device. */
#ifndef BURNC_CG_GLSL_H
#define BURNC_CG_GLSL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel.h"

/* Code parameters (autotune's candidates); all-zero means the defaults. */
typedef struct cg_glsl_options {
    int wg_size; /* invocations per workgroup, a multiple of 32 in 32..1024 (default 256) */
    int items;   /* element-wise: positions per invocation, 1..16 (default 4) */
    bool no_f64; /* the device has no f64: f32 fma, division and sqrt are the device's own */
    bool denorm32, denorm64; /* the device can preserve f32 / f64 denormals (float controls) */
    bool nan32, nan64;       /* the device can promise signed zeros, infinities and NaNs in f32 /
                                f64 (SignedZeroInfNanPreserve): without it a driver may assume no
                                NaN and turn a NaN-aware max into a NaN-dropping one */
    bool fused32, fused64;   /* the device's own fma rounds once (probed at open): used as is */
} cg_glsl_options;

/* The options with defaults filled in and values clamped to their ranges. */
cg_glsl_options cg_glsl_resolve(const cg_glsl_options *opt);

/* The GLSL source of kernel k (malloc'ed), or NULL with the last error set (an invalid kernel:
 * BURNC_ERR_INTERNAL; out of memory). */
char *cg_glsl_emit(const kir_kernel *k, const cg_glsl_options *opt);

/* Argument words of one launch: how many, and packing them. */
size_t cg_glsl_arg_words(const kir_kernel *k);
void cg_glsl_pack_args(const kir_kernel *k, const kir_args *a, int64_t *words);

/* Workgroups to dispatch (x, y) for a launch over `extents`; 0 when there is nothing to do. */
void cg_glsl_grid(const kir_kernel *k, const cg_glsl_options *opt, const int64_t *extents, uint32_t grid[2]);

/* A tiled matmul (MATMUL records of f32, f64, f16 or bf16 operands of `rank`): each element the
 * cpu device's fma chain (include/burnc.h), so results equal it bit for bit. 16x16 workgroups;
 * dispatch (ceil(N/16), ceil(M/16), batches). Bindings: 0 the argument words, 1 A, 2 B, 3 the
 * dense output. NULL with the last error set when out of memory. */
char *cg_glsl_matmul(burnc_dtype_t dt, int rank, const cg_glsl_options *opt);
size_t cg_glsl_matmul_words(void);
/* The argument words: the output's shape, K, and each operand's element offset and strides. */
void cg_glsl_matmul_pack(int rank, const int64_t *out_shape, int64_t k, int64_t a_off, const int64_t *a_strides,
                         int64_t b_off, const int64_t *b_strides, int64_t *words);

/* Compiles GLSL compute source to SPIR-V and validates it for Vulkan 1.1. On success
 * *words (malloc'ed) holds *n_words words. BURNC_ERR_COMPILE with glslang's or the
 * validator's log naming `what` when the source is rejected. Thread safe. */
burnc_status_t cg_glsl_compile(const char *what, const char *src, uint32_t **words, size_t *n_words);

/* "glslang-MAJOR.MINOR.PATCH", for cache keys. */
const char *cg_glsl_compiler(void);

/* How many sources cg_glsl_compile has compiled in this process (for tests and logs). */
long cg_glsl_compile_count(void);

#endif
