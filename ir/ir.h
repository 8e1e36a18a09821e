/* The target-independent layer: the op table, dtypes, views, records of the lazy stream, and the
 * scalar semantics every backend follows. Depends on nothing but the public header. */
#ifndef BURNC_IR_H
#define BURNC_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "burnc.h"

/* ---- The op table ------------------------------------------------------------------------ */
typedef enum ir_op {
#define X(e, name, arity, cls) IR_OP_##e,
#include "ops.def"
#undef X
    IR_OP_COUNT
} ir_op;

typedef enum ir_class {
    IR_CLASS_SOURCE,
    IR_CLASS_UNARY,
    IR_CLASS_BINARY,
    IR_CLASS_TERNARY,
    IR_CLASS_REDUCE,
    IR_CLASS_MATMUL,
    IR_CLASS_MOVE,
    IR_CLASS_INDEX,
} ir_class;

const char *ir_op_name(ir_op op);
ir_class ir_op_class(ir_op op);
int ir_op_arity(ir_op op);

/* ---- Dtypes ------------------------------------------------------------------------------ */
size_t ir_dtype_size(burnc_dtype_t dt);      /* 0 for invalid dtypes */
const char *ir_dtype_name(burnc_dtype_t dt); /* "f32", ...; "invalid" otherwise */
bool ir_dtype_valid(burnc_dtype_t dt);       /* one of the eight storage dtypes */
bool ir_dtype_is_float(burnc_dtype_t dt);    /* f32 f64 f16 bf16 */
bool ir_dtype_is_int(burnc_dtype_t dt);      /* i32 i64 u8 (not bool) */
/* The dtype binary ops between a and b compute in (see the public header); DEFAULT when either
 * is not a storage dtype. */
burnc_dtype_t ir_promote(burnc_dtype_t a, burnc_dtype_t b);

/* IEEE binary16 and bfloat16 conversions; from double they round once (no double rounding). */
uint16_t ir_f64_to_f16(double x);
uint16_t ir_f64_to_bf16(double x);
double ir_f16_to_f64(uint16_t h);
double ir_bf16_to_f64(uint16_t h);

/* Element access by dtype. Floats load exactly into double; integers and bool into int64.
 * ir_load_f of an integer gives its value as double; ir_load_i of a float truncates with the
 * cast rules (saturate, NaN -> 0). Stores round the value to the dtype once:
 *   ir_store_f: to floats by rounding to nearest even, to integers by the float-to-int cast
 *     rules (truncate, saturate, NaN -> 0), to bool by != 0;
 *   ir_store_i: to integers wrapping (two's complement), to floats by rounding, to bool by != 0. */
double ir_load_f(const void *p, burnc_dtype_t dt);
int64_t ir_load_i(const void *p, burnc_dtype_t dt);
/* The float-to-integer cast rules: truncate toward zero, saturate to [lo, hi] (hi is 2^k - 1),
 * NaN is 0; ir_trunc_sat_u64 for the whole unsigned 64-bit range. */
int64_t ir_trunc_sat(double v, int64_t lo, int64_t hi);
uint64_t ir_trunc_sat_u64(double v);
void ir_store_f(void *p, burnc_dtype_t dt, double v);
void ir_store_i(void *p, burnc_dtype_t dt, int64_t v);
/* A scalar converted to the dtype and back (what _scalar ops and full() use): rounds for
 * floats, truncates and saturates for integers, 0/1 for bool; v itself for an invalid dtype.
 * The saturated i64 maximum comes back as the double 2^63 (INT64_MAX has no double): turn it
 * into an integer with ir_load_i(&v, BURNC_DTYPE_F64), which saturates, never with a C cast.
 * Bool loads give 1 for any nonzero byte. */
double ir_scalar_to_dtype(double v, burnc_dtype_t dt);

/* ---- Scalar semantics of element-wise ops (ir/scalar.c) ---------------------------------- */
/* The exact meaning of each element-wise op, computed in double for float dtypes (the caller
 * rounds the result to the output dtype once) and in int64 for integer and bool dtypes (the
 * caller wraps it to the output dtype). `dt` is the dtype the op computes in (its inputs'
 * dtype after promotion). Comparison and logical ops return 0 or 1. */
double ir_unary_f(ir_op op, double x, const double *scalar);
int64_t ir_unary_i(ir_op op, int64_t x, burnc_dtype_t dt, const double *scalar);
double ir_binary_f(ir_op op, double a, double b);
int64_t ir_binary_i(ir_op op, int64_t a, int64_t b, burnc_dtype_t dt);

/* Integer division with burnc's semantics (Python's // and %): floor quotient, remainder with
 * the divisor's sign, both 0 for a zero divisor; INT64_MIN // -1 wraps. */
int64_t ir_floor_div(int64_t a, int64_t b);
int64_t ir_floor_mod(int64_t a, int64_t b);

/* Philox 4x32-10 (Salmon et al., SC'11): one block for a 128-bit counter and 64-bit key. */
void ir_philox4x32_block(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* The block for counter {lo, hi, 0, 0} of a 64-bit counter and key {lo, hi} of a 64-bit key. */
void ir_philox4x32(uint64_t counter, uint64_t key, uint32_t out[4]);
/* The value of element `i` of a rand (uniform [0,1)) or randn (standard normal) draw whose
 * record-time counter offset is `offset`: block w = ir_philox4x32(offset + i, key).
 * uniform: f64 uses 53 bits ((w1:w0) >> 11) * 2^-53; f32 (w0 >> 8) * 2^-24; f16
 * (w0 >> 21) * 2^-11; bf16 (w0 >> 24) * 2^-8: exact in the dtype, never 1.0.
 * normal (Box-Muller, computed in double, the caller rounds once): f64 u1 = (((w1:w0) >> 11)
 * + 1) * 2^-53, u2 = ((w3:w2) >> 11) * 2^-53; other dtypes u1 = ((w0 >> 8) + 1) * 2^-24,
 * u2 = (w2 >> 8) * 2^-24; z = sqrt(-2 log u1) * cos(2 pi u2). A non-float dtype uses the
 * f32 recipe. */
double ir_rand_uniform(uint64_t key, uint64_t offset, uint64_t i, burnc_dtype_t dt);
double ir_rand_normal(uint64_t key, uint64_t offset, uint64_t i, burnc_dtype_t dt);

/* ---- Views ------------------------------------------------------------------------------- */
/* How a tensor sees its storage: element (i0..ik) lives at offset + sum(i_d * strides[d])
 * elements from the storage's start. Strides may be 0 (broadcast) or negative (flip). */
typedef struct ir_view {
    int rank;
    int64_t offset;
    int64_t shape[BURNC_MAX_RANK];
    int64_t strides[BURNC_MAX_RANK];
} ir_view;

int64_t ir_numel(int rank, const int64_t *shape);
/* Row-major strides for a dense view of `shape`. */
void ir_view_dense(ir_view *v, int rank, const int64_t *shape);
bool ir_view_is_dense(const ir_view *v); /* row-major, no gaps (offset may be nonzero) */
/* Whether every element of v (es bytes each) lies in a buffer of size bytes: a broken view is a
 * runtime bug that must not become a wild read. */
bool ir_view_fits(const ir_view *v, int64_t es, size_t size);

/* ---- Records of the lazy stream ---------------------------------------------------------- */
struct rt_storage; /* defined by the runtime; the IR only points at it */

/* One input of a record: the storage it reads and the view it reads it through. For
 * element-wise ops the view is already broadcast to the output's shape (stride 0 where a
 * dimension stretches), so every input view has the output's rank and shape. */
typedef struct ir_operand {
    struct rt_storage *storage;
    burnc_dtype_t dtype;
    ir_view view;
} ir_operand;

enum {
    IR_REC_SCALAR_RHS = 1 << 0, /* BINARY: the right operand is scalar[0], n_in is 1 */
};

/* One recorded op. Invariants the recorder guarantees, so backends need no conversions:
 *  - UNARY, BINARY, WHERE's a and b, REDUCE, MATMUL, MOVE, INDEX data inputs have dtype
 *    `compute`; scalars are already converted to `compute` (ir_scalar_to_dtype);
 *  - the output is a new dense storage of out_shape and dtype `dtype`, which equals
 *    `compute` except for CAST (target dtype), comparisons and logical ops (bool), ARGMAX and
 *    ARGMIN (i64);
 *  - CAST: compute is the input's dtype. WHERE: in[0] is the condition, of any dtype.
 *  - REDUCE: in[0] has the input's shape; out_shape is it with the reduced axes set to 1.
 *  - MATMUL: in[0] is [B..., M, K], in[1] is [B..., K, N] (batch axes expanded), out
 *    [B..., M, N]; rank >= 2.
 *  - INDEX ops: in[1] is the index tensor (i64), i[0] the axis.
 *  - CAT: n_in inputs with out's rank, i[0] the axis.
 *  - PAD: pads[2*d], pads[2*d+1] before/after axis d, scalar[0] the value.
 *  - SLICE_ASSIGN: in[0] x, in[1] value already expanded to the slice's shape;
 *    i[0..3] = axis, start, step, count (the slice's first index, step and length). */
typedef struct ir_record {
    ir_op op;
    uint32_t flags;
    burnc_dtype_t dtype;   /* output dtype */
    burnc_dtype_t compute; /* dtype of the data inputs */
    int n_in;
    ir_operand *in; /* n_in operands */
    struct rt_storage *out;
    int out_rank;
    int64_t out_shape[BURNC_MAX_RANK];
    uint32_t axes;     /* REDUCE: bit d set when axis d is reduced */
    double scalar[3];  /* op constants (see ops.def) */
    int64_t i[4];      /* integer params (axis, slice) */
    int64_t *pads;     /* PAD: 2 * out_rank entries */
    uint64_t rng_key;  /* RAND, RANDN */
    uint64_t rng_offset;
} ir_record;

/* A group of records that one kernel executes (the reference device: always one). */
typedef struct ir_group {
    int n;
    ir_record *const *recs;
} ir_group;

#endif
