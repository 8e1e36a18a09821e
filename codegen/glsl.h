/* The kernel IR lowered to GLSL 450 compute shaders, and GLSL compiled to validated SPIR-V
 * (glslang's C interface, then SPIRV-Tools' spvValidate). Used by runtime/vulkan.
 *
 * Shader interface (what the runtime binds):
 *   set 0, binding 0: the launch's argument words (int64 array, cg_glsl_pack_args);
 *   binding 1 + s: input slot s; binding 1 + n_inputs + o: output slot o (whole buffers, the
 *   element offsets are arguments). f16 and bf16 are 16-bit words, bool and u8 bytes, read and
 *   written as such where the device has 8- and 16-bit storage, else through 32-bit words
 *   (cg_glsl_options); every kernel needs 64-bit integers (positions are i64 in the IR).
 * Dispatch (cg_glsl_grid): element-wise kernels take `items` positions per invocation; kernels
 *   with stages or row stores take one row per workgroup at a time, its leaves spread over the
 *   workgroup's warps of 32 lanes (kernel.h's lanes), results equal to kir_eval's bit for bit
 *   as far as the device rounds each operation correctly (include/burnc.h, Vulkan bounds).
 *   Lanes meet through subgroup shuffles where the device has them (the pairwise tree's first
 *   levels within a subgroup, whatever its size: 8 or 16 on lavapipe, 32 on NVIDIA, the rest
 *   in shared memory), else in shared memory: the tree is kernel.h's 32-lane one everywhere. */
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
    bool subgroups;          /* subgroup shuffles (basic + shuffle_relative) in compute: the
                                lanes of a leaf meet through subgroupShuffleDown in the pairwise
                                tree's order, subgroups of any power-of-two size (the levels
                                past the subgroup in shared memory) */
    bool wide;               /* positions (rows, or a row's) past 2^32: 64-bit index arithmetic
                                (a shader of its own, for launches that cg_glsl_wide says need it) */
    bool passes;             /* a cg_glsl_multipass kernel's passes (a shader of its own: the
                                row kernel does not carry their code) */
    bool words8, words16;    /* no 8- / 16-bit storage: u8 and bool / f16 and bf16 buffers are
                                arrays of 32-bit words (loads shift and mask; stores set their
                                bits with atomicAnd and atomicOr) */
} cg_glsl_options;

/* The options with defaults filled in and values clamped to their ranges. */
cg_glsl_options cg_glsl_resolve(const cg_glsl_options *opt);

/* The GLSL source of kernel k (malloc'ed), or NULL with the last error set (an invalid kernel:
 * BURNC_ERR_INTERNAL; out of memory). */
char *cg_glsl_emit(const kir_kernel *k, const cg_glsl_options *opt);

/* Argument words of one launch: how many, and packing them. */
size_t cg_glsl_arg_words(const kir_kernel *k);
void cg_glsl_pack_args(const kir_kernel *k, const kir_args *a, int64_t *words);
/* Whether a launch of these packed words needs the wide shader (options.wide): its rows, or a
 * row's positions, are 2^32 or more. */
static inline bool cg_glsl_wide(const int64_t *words) { return words[0] > 0xffffffffll || words[1] > 0xffffffffll; }

/* The divisor word of an extent d, packed beside the extents: the shaders divide a 32-bit n by
 * d without a division instruction, exactly for every n, as t = umulHi(n, m), n / d =
 * (t + ((n - t) >> s1)) >> s2, the word m | (2 s2 + s1) << 32. 0 for d = 0 or d >= 2^32, which
 * no 32-bit division meets (positions past 2^32 are divided in 64 bits). */
int64_t cg_glsl_divisor(int64_t d);

/* Multi-pass reductions: a kernel of one stage and row stores only (a whole-tensor sum, a few
 * long rows) can run as passes instead of a workgroup per row, so that a few rows fill the
 * device. Its passes are a shader of their own (cg_glsl_options.passes) with one more binding
 * (1 + n_inputs + n_outputs: scratch records of the stage's value and position, 16 bytes each
 * are enough); both shaders take four more argument words from cg_glsl_pass_word(k): the
 * pass, then per pass
 *   CG_GLSL_PASS_ROWS:   nothing (the workgroup-per-row shader, without options.passes);
 *   CG_GLSL_PASS_LEAVES: leaves per row L, -, dst: warp w (wg_size / 32 warps a workgroup,
 *                        workgroups numbered x + y * grid x) writes the record of leaf w % L of
 *                        row w / L at record dst + w;
 *   CG_GLSL_PASS_TREE:   records per row m, src, dst: invocation i folds row i / m2's chunk
 *                        i % m2 of 32 records (m2 = ceil(m / 32)) into record dst + i;
 *   CG_GLSL_PASS_FINISH: -, src: invocation r runs row r's row stores on record src + r.
 * Leaves then tree passes until one record per row, then finish: kernel.h's order exactly. */
enum { CG_GLSL_PASS_ROWS, CG_GLSL_PASS_LEAVES, CG_GLSL_PASS_TREE, CG_GLSL_PASS_FINISH };
bool cg_glsl_multipass(const kir_kernel *k);
size_t cg_glsl_pass_word(const kir_kernel *k);

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
