/* The interface between the CPU runtime and the LLVM code generator.
 *
 * The generator lives in a shared module (codegen/llvm_cpu.c, built as burnc-llvm.so beside
 * libburnc) that links libLLVM-19; libburnc opens it with dlopen only when something must be
 * compiled (DESIGN.md: a process that never compiles never loads LLVM). Compiled kernels are
 * also written to the disk cache as relocatable objects, which codegen/objload.c maps into a
 * fresh process without LLVM. */
#ifndef BURNC_CG_H
#define BURNC_CG_H

#include "kernel.h"
#include "ptx.h"
#include "ptx_mma.h"
#include "ptx_gemm.h"

/* A compiled CPU kernel: plain functions over kir_args.
 *  rows:   runs rows [begin, end) completely (stages, element stores, row stores). For a kernel
 *          without reduced axes a "row" is one position of the domain in row-major order, so
 *          rows(args, 0, numel) runs the whole kernel.
 *  leaves: only for kernels with exactly one stage and no element stores: the results of
 *          leaves [leaf_begin, leaf_end) of `row` (value in vals[i]; for ARG combiners the
 *          value in vals[i] and its position within the row in pos[i], pos may be NULL
 *          otherwise). The caller combines leaves in the order of kernel.h and calls finish.
 *  finish: the row stores of `row` given every stage's result for it (ARG stages: the
 *          position as .i).
 * Each may be NULL when the kernel does not need it (leaves and finish for element-wise
 * kernels). All are safe to call from several threads on disjoint rows. */
typedef struct cg_cpu_kernel {
    void (*rows)(const kir_args *a, int64_t begin, int64_t end);
    void (*leaves)(const kir_args *a, int64_t row, int64_t leaf_begin, int64_t leaf_end, kir_scalar *vals,
                   int64_t *pos);
    void (*finish)(const kir_args *a, int64_t row, const kir_scalar *stage_results);
    void *impl; /* owned by whoever made it (the JIT or the object loader) */
} cg_cpu_kernel;

/* Code parameters autotune may choose; all-zero means the defaults. */
typedef struct cg_cpu_options {
    int elem_width; /* lanes per vector step of element stores: 8, 16 or 32; 0: 16 with AVX-512,
                       else 8 */
} cg_cpu_options;

/* A matmul micro-kernel (codegen/llvm_gemm.c): C[mr x nr] (row stride ldc elements, column
 * stride 1) gets, for every element, a chain of fma over k = 0..kc-1 in increasing order,
 * starting from C's value when accumulate is nonzero, else from +0.0:
 *     c[i][j] = fma(a[k * mr + i], b[k * nr + j], c[i][j])
 * where a holds kc steps of mr values (a packed column sliver of A) and b kc steps of nr
 * values (a packed row sliver of B). One fma per k per element, no reassociation: the chain
 * of each element is fixed, whatever mr, nr or the blocking of K around calls. */
typedef void (*cg_gemm_fn)(int64_t kc, const void *a, const void *b, void *c, int64_t ldc, int64_t accumulate);

typedef struct cg_gemm_spec {
    int bits;  /* 32 (f32) or 64 (f64) */
    int mr, nr; /* register tile; nr a multiple of lanes */
    int lanes; /* vector lanes of the code (1, 2, 4, 8, 16) */
} cg_gemm_spec;

/* The symbol compile_gemm gives the micro-kernel: the object loader's CG_SYM_ROWS, so that
 * cg_object_load finds it (as .rows, to be cast back to cg_gemm_fn). */
#define CG_SYM_GEMM CG_SYM_ROWS

/* What the LLVM module exports, as one table found with dlsym("burnc_llvm_api"). */
enum { CG_LLVM_ABI = 6 };
typedef struct cg_llvm_api {
    int abi;          /* CG_LLVM_ABI */
    const char *llvm_version;
    /* The host's CPU name and feature string, for cache keys. */
    const char *(*host_cpu)(void);
    /* Compiles k for the host: fills out (functions callable until release) and, if obj is not
     * NULL, a malloc'ed relocatable object holding the same code (*obj, *obj_size) for the disk
     * cache. On failure returns false with the reason in err. */
    bool (*compile_cpu)(const kir_kernel *k, cg_cpu_kernel *out, void **obj, size_t *obj_size, char *err,
                        size_t err_cap);
    /* The same with code parameters (opt may be NULL: the defaults). */
    bool (*compile_cpu_with)(const kir_kernel *k, const cg_cpu_options *opt, cg_cpu_kernel *out, void **obj,
                             size_t *obj_size, char *err, size_t err_cap);
    void (*release_cpu)(cg_cpu_kernel *k);
    /* Compiles the micro-kernel of spec for the host into a malloc'ed relocatable object
     * (*obj, *obj_size), to be loaded with cg_object_load (its function is CG_SYM_GEMM). False
     * with the reason in err. */
    bool (*compile_gemm)(const cg_gemm_spec *spec, void **obj, size_t *obj_size, char *err, size_t err_cap);
    /* Lowers k to PTX for opt->sm (codegen/llvm_ptx.c; ptx.h says which entries the module
     * holds): a malloc'ed NUL-terminated text in *ptx, its length without the NUL in *ptx_size.
     * False with the reason in err (e.g. a compute capability below 7.0). luts (may be NULL:
     * none) are the kernel's 16-bit tables (cg_ptx_luts_make), put in the module's data. */
    bool (*compile_ptx)(const kir_kernel *k, const cg_ptx_options *opt, const cg_ptx_luts *luts, char **ptx,
                        size_t *ptx_size, char *err, size_t err_cap);
    /* The tensor-core matmul kernel of spec (codegen/ptx_mma.c, ptx_mma.h) as PTX text, like
     * compile_ptx. False with the reason in err (an invalid spec, sm below 8.0). */
    bool (*compile_mma_ptx)(const cg_mma_spec *spec, char **ptx, size_t *ptx_size, char *err, size_t err_cap);
    /* The SIMT matmul kernel of spec (codegen/ptx_gemm.c, ptx_gemm.h) as PTX text, like
     * compile_ptx. False with the reason in err (an unsupported tile, epilogue or sm). */
    bool (*compile_ptx_gemm)(const cg_ptx_gemm_spec *spec, char **ptx, size_t *ptx_size, char *err, size_t err_cap);
} cg_llvm_api;

/* Loads a relocatable x86-64 ELF object made by compile_cpu (codegen/objload.c): maps its
 * sections, applies its relocations (external symbols through dlsym) and finds the kernel's
 * functions. False with a reason when the object is damaged or foreign. */
bool cg_object_load(const void *obj, size_t size, cg_cpu_kernel *out, char *err, size_t err_cap);
void cg_object_release(cg_cpu_kernel *k);

/* The symbol names compile_cpu gives the three functions inside an object. */
#define CG_SYM_ROWS "burnc_k_rows"
#define CG_SYM_LEAVES "burnc_k_leaves"
#define CG_SYM_FINISH "burnc_k_finish"

#endif
