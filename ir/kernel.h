/* The kernel IR: a target-independent description of one kernel, produced by fusion/ from the
 * records of the lazy stream and lowered by codegen/ (LLVM for x86 and PTX, GLSL for SPIR-V) and
 * by the interpreter in ir/kernel_eval.c (the executable definition of the semantics below).
 *
 * Shape of a kernel
 *   The iteration domain has `rank` axes; the first `n_outer` are independent work ("rows"), the
 *   others (`rank - n_outer`, possibly 0) are reduced. A purely element-wise kernel has
 *   n_outer == rank. Extents are runtime arguments, never baked in (the plan cache reuses a
 *   compiled kernel for every shape of the same structure).
 *   For every row, the kernel runs its reduction stages in order, then its element stores, then
 *   its row stores:
 *     stage s: evaluates stage[s].value at every position of the row's reduced sub-domain and
 *              combines the values with stage[s].combiner; the result is KIR_REDUCED(s), usable
 *              by later stages and by stores;
 *     element stores: evaluated at every position of the row's reduced sub-domain (for an
 *              element-wise kernel: at every position of the domain);
 *     row stores: evaluated once per row (their values may not depend on reduced positions).
 *   Rows are independent: GPUs give a row's leaves to warps of a cooperative group, the CPU
 *   splits rows (or, for few long rows, leaves) across its threads.
 *
 * Values
 *   `insts` is an SSA list: an instruction's operands are earlier instructions. Every op rounds
 *   its result to its type; there is no implicit contraction or reassociation (KIR_FMA is the only
 *   fused operation). f16 and bf16 exist only in memory: loads widen them to f32 exactly, stores
 *   round to nearest even, and the fusion pass rounds every intermediate of an f16/bf16 op with
 *   KIR_ROUND so fused results equal eager ones bitwise.
 *
 * Reduction order (DESIGN.md, Numerics): the row's reduced positions are numbered 0..n-1 in
 * row-major order of the reduced axes. They are cut into leaves of KIR_LEAF positions (the last
 * one shorter). Within a leaf, position j feeds lane j % KIR_LANES; each lane combines its values
 * in increasing position order, starting from the combiner's identity (SUM +0.0, PROD 1, MAX
 * -inf or the type's minimum, MIN +inf or its maximum); the lanes are then combined by a
 * pairwise tree (lane 2i with 2i+1, then pairs of pairs, ...). The leaf results are combined by
 * the same pairwise tree over leaves (an odd last element is carried up unchanged, which equals
 * padding with the identity: a row's leaves may therefore be split at power-of-two-aligned
 * boundaries across threads, blocks or launches and combined later with the same result).
 * ARGMAX and ARGMIN keep the first position of the extreme (a NaN counts as the extreme, the
 * first NaN wins), which this order preserves. The result depends only on the values and n: not
 * on threads, the backend, or tuning.
 * On GPUs a leaf maps to a warp (lanes = threads, the lane tree = 5 shuffles; checked on the
 * H200, see scripts/gpu/NOTES.md); rows that do not fit on chip re-read the row per stage. 
 */
#ifndef BURNC_KERNEL_H
#define BURNC_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir.h"

enum { KIR_LEAF = 4096, KIR_LANES = 32, KIR_MAX_INPUTS = 16, KIR_MAX_OUTPUTS = 8, KIR_MAX_STAGES = 4 };

/* Value types. F16 and BF16 are storage types only (a load gives F32). */
typedef enum kir_type {
    KIR_BOOL,
    KIR_U8,
    KIR_I32,
    KIR_U32,
    KIR_I64,
    KIR_U64,
    KIR_F32,
    KIR_F64,
    KIR_F16,
    KIR_BF16,
} kir_type;

typedef enum kir_opcode {
    /* leaves */
    KIR_LOAD,    /* a = input slot: the element at the current position, widened (f16/bf16 -> f32,
                    bool and u8 as stored) */
    KIR_CONST,   /* imm, of the instruction's type */
    KIR_ARG,     /* a = scalar argument index (kir_args.scalars), taken as the type (f64 value
                    rounded for f32, i64/u64 value wrapped for integer types) */
    KIR_INDEX,   /* a = domain axis: the current position along it (I64) */
    KIR_EXTENT,  /* a = domain axis: its extent (I64) */
    KIR_ROW_LEN, /* the number of reduced positions of a row (I64; 1 without reduced axes) */
    KIR_REDUCED, /* a = stage: its result for the current row (the stage's type; I64 for ARG*) */
    /* unary (operand a) */
    KIR_NEG,
    KIR_ABS,
    KIR_SQRT,  /* correctly rounded */
    KIR_FLOOR, /* floor ceil trunc rint: exact; rint is round half to even */
    KIR_CEIL,
    KIR_TRUNC,
    KIR_RINT,
    KIR_NOT,     /* integers: bitwise not; bool: logical not */
    KIR_CONVERT, /* to the instruction's type, by burnc's cast rules: float -> int truncates,
                    saturates, NaN -> 0; int -> float and float -> float round to nearest even;
                    anything -> bool is != 0 (NaN true); int -> int wraps */
    KIR_BITCAST, /* reinterpret bits as the instruction's type (same width) */
    KIR_ROUND,   /* f32 -> f32 rounded to the precision and range of imm.i (KIR_F16 or KIR_BF16) */
    /* binary (operands a, b of one type) */
    KIR_ADD,
    KIR_SUB,
    KIR_MUL,
    KIR_DIV,   /* floats: IEEE; integers: floor division, 0 for a zero divisor, wrapping */
    KIR_REM,   /* floats: C fmod (exact); integers: floor remainder (sign of the divisor), 0 for a
                  zero divisor */
    KIR_MULHI, /* u32/u64: the high half of the double-width product */
    KIR_AND,
    KIR_OR,
    KIR_XOR,
    KIR_SHL, /* shift counts are taken modulo the width */
    KIR_SHR, /* logical for unsigned types, arithmetic for signed */
    KIR_EQ,  /* comparisons give BOOL; floats compare ordered (NaN: false), except NE (true) */
    KIR_NE,
    KIR_LT,
    KIR_LE,
    KIR_GT,
    KIR_GE,
    /* ternary */
    KIR_FMA,    /* a * b + c rounded once */
    KIR_SELECT, /* a (BOOL) ? b : c */
    KIR_OPCODE_COUNT
} kir_opcode;

/* Operands an instruction of opcode op reads (a, then b, then c): leaves none, unary ops and
 * KIR_ROUND one, binary ops and compares two, FMA and SELECT three. */
static inline int kir_n_operands(int op) { return op <= KIR_REDUCED ? 0 : op <= KIR_ROUND ? 1 : op <= KIR_GE ? 2 : 3; }

typedef union kir_scalar {
    double f;
    int64_t i;
    uint64_t u;
} kir_scalar;

typedef struct kir_inst {
    uint8_t op;   /* kir_opcode */
    uint8_t type; /* kir_type of the result */
    int32_t a, b, c;
    kir_scalar imm;
} kir_inst;

/* How a slot's stride along a domain axis is known: specializations that change the code. */
typedef enum kir_stride {
    KIR_STRIDE_ZERO, /* broadcast along this axis */
    KIR_STRIDE_UNIT, /* 1 element */
    KIR_STRIDE_ANY,  /* a runtime value */
} kir_stride;

/* An input or output buffer and its index map: element at domain position p lives at
 * offset + sum(p[d] * stride[d]) elements from the buffer's base (offset and strides are
 * arguments; the classes are part of the kernel). Row-level outputs ignore reduced axes. */
typedef struct kir_slot {
    burnc_dtype_t dtype;
    uint8_t stride[BURNC_MAX_RANK]; /* kir_stride per domain axis */
} kir_slot;

typedef enum kir_combiner {
    KIR_COMBINE_SUM,
    KIR_COMBINE_PROD,
    KIR_COMBINE_MAX, /* NaN propagates */
    KIR_COMBINE_MIN,
    KIR_COMBINE_ARGMAX, /* result I64: position within the row (first extreme, NaN first) */
    KIR_COMBINE_ARGMIN,
} kir_combiner;

typedef struct kir_stage {
    uint8_t combiner; /* kir_combiner */
    int32_t value;    /* instruction evaluated at each reduced position */
} kir_stage;

typedef struct kir_store {
    int32_t slot;  /* output slot */
    int32_t value; /* instruction */
    bool row;      /* once per row (true) or at every position (false) */
} kir_store;

typedef struct kir_kernel {
    int rank, n_outer;
    int n_inputs, n_outputs, n_scalars;
    kir_slot inputs[KIR_MAX_INPUTS];
    kir_slot outputs[KIR_MAX_OUTPUTS];
    int n_stages;
    kir_stage stages[KIR_MAX_STAGES];
    int n_stores;
    kir_store stores[KIR_MAX_OUTPUTS];
    /* Per output: 1 + the input slot whose buffer it overwrites in place (0: its own buffer).
     * The runtime sets it (DESIGN.md, step 2) when the output is written by element stores
     * only, at exactly the elements the input is read from, in the same dtype, and nothing
     * reads that input later; every value at a position is computed before its stores, so
     * reading and overwriting the same element is safe. Codegen then drops its no-alias
     * promises. Part of the kernel's structure (the hash). */
    uint8_t in_place[KIR_MAX_OUTPUTS];
    int n_insts, cap_insts;
    kir_inst *insts;
    char name[64]; /* for logs and dumps: "fused_exp_mul_add" */
} kir_kernel;

/* The runtime values of one launch. */
typedef struct kir_args {
    void *const *inputs;        /* base address of each input buffer */
    void *const *outputs;       /* base address of each output buffer */
    const int64_t *extents;     /* [rank] */
    const int64_t *in_offsets;  /* [n_inputs], in elements */
    const int64_t *in_strides;  /* [n_inputs * rank], in elements */
    const int64_t *out_offsets; /* [n_outputs] */
    const int64_t *out_strides; /* [n_outputs * rank] (row outputs: 0 on reduced axes) */
    const kir_scalar *scalars;  /* [n_scalars] */
    uint32_t stream;            /* bit o: output o is large and read back from memory anyway, so
                                   its element stores may bypass the caches (a hint; the values
                                   written are the same) */
} kir_args;

/* ---- Building (ir/kernel.c) -------------------------------------------------------------- */
void kir_init(kir_kernel *k, int rank, int n_outer);
void kir_free(kir_kernel *k);
/* Appends an instruction; returns its index, or -1 when out of memory (then the kernel is
 * marked broken and kir_valid fails). */
int32_t kir_emit(kir_kernel *k, kir_opcode op, kir_type type, int32_t a, int32_t b, int32_t c);
int32_t kir_const_f(kir_kernel *k, kir_type type, double v);
int32_t kir_const_i(kir_kernel *k, kir_type type, int64_t v);
/* Checks the invariants (operand order and types, slots, stages, stores); false with a reason. */
bool kir_valid(const kir_kernel *k, char *why, size_t cap);
/* A 64-bit hash of the kernel's structure (everything but the arguments): the plan/kernel
 * cache key together with the target. */
uint64_t kir_hash(const kir_kernel *k);
/* Human-readable listing, for BURNC_DUMP_DIR and logs. Returns a malloc'ed string. */
char *kir_print(const kir_kernel *k);
kir_type kir_type_of(burnc_dtype_t dt); /* the value type a load of dt gives */
bool kir_type_is_float(kir_type t);
bool kir_type_is_signed(kir_type t);
int kir_type_bits(kir_type t);

/* ---- Math written once (ir/math.c) ------------------------------------------------------- */
/* Each expands into basic instructions (add, mul, fma, div, sqrt, compare, select, convert,
 * bitcast, floor/rint) for KIR_F32 or KIR_F64 values; every codegen lowers the same sequence.
 * Maximum errors against the correctly rounded result are measured over the whole input
 * range by tests/test_math.c and documented in include/burnc.h. */
int32_t kir_exp(kir_kernel *k, int32_t x);
int32_t kir_exp2(kir_kernel *k, int32_t x);
int32_t kir_expm1(kir_kernel *k, int32_t x);
int32_t kir_log(kir_kernel *k, int32_t x);
int32_t kir_log2(kir_kernel *k, int32_t x);
int32_t kir_log1p(kir_kernel *k, int32_t x);
int32_t kir_sin(kir_kernel *k, int32_t x);
int32_t kir_cos(kir_kernel *k, int32_t x);
int32_t kir_tan(kir_kernel *k, int32_t x);
int32_t kir_tanh(kir_kernel *k, int32_t x);
int32_t kir_erf(kir_kernel *k, int32_t x);
int32_t kir_erfc(kir_kernel *k, int32_t x);
/* gelu x = x Phi(x) for f32 only (-1 for f64: ir/kernel_ops.c composes it from erfc); kir_gelu16
 * is accurate only to what a result rounded to f16 or bf16 next needs, for half the work. */
int32_t kir_gelu(kir_kernel *k, int32_t x);
int32_t kir_gelu16(kir_kernel *k, int32_t x);
/* gelu's derivative Phi(x) + x phi(x), f32 only (f64: ir/kernel_ops.c composes it from erfc). */
int32_t kir_gelu_grad(kir_kernel *k, int32_t x);
int32_t kir_sigmoid(kir_kernel *k, int32_t x);
int32_t kir_atan2(kir_kernel *k, int32_t y, int32_t x);
int32_t kir_pow(kir_kernel *k, int32_t x, int32_t y);
/* Element-wise ops of ops.def in terms of the above and basic instructions, with burnc's
 * semantics (ir/scalar.c is the double-precision definition): the one place fusion turns a
 * record's op into instructions. `t` is the compute type; scalar[] are the record's constants
 * already emitted as instructions where the op uses them. */
int32_t kir_unary_op(kir_kernel *k, ir_op op, kir_type t, int32_t x, const int32_t *scalars);
/* kir_unary_op for a result the caller rounds to dtype `to` next: where the f32 math of an op
 * has a form accurate just to a 16-bit result (gelu), f16 and bf16 results take it. */
int32_t kir_unary_op_to(kir_kernel *k, ir_op op, kir_type t, int32_t x, const int32_t *scalars, burnc_dtype_t to);
int32_t kir_binary_op(kir_kernel *k, ir_op op, kir_type t, int32_t a, int32_t b);
/* The instructions element-wise op `op` (unary or binary) expands to for one element of
 * compute type t rounded to `to` next, constants included: built into a scratch kernel, so a
 * bound on it counts what codegen sees. */
int kir_op_insts(ir_op op, kir_type t, burnc_dtype_t to);
/* Philox 4x32-10 word `word` (0..3) for a 64-bit counter and key given as U64 values. */
int32_t kir_philox(kir_kernel *k, int32_t counter, int32_t key, int word);

/* ---- Interpreting (ir/kernel_eval.c) ----------------------------------------------------- */
/* Runs the kernel on the host, one position at a time, exactly as specified above (the
 * reduction order included). The oracle of every codegen: their results must equal it
 * bitwise. */
burnc_status_t kir_eval(const kir_kernel *k, const kir_args *args);

#endif
