/* Builders over the kernel IR that kernel.h does not declare: the KIR_ROUND helper, a whole
 * Philox block, and the rand/randn element recipes of ir/ir.h (ir_rand_uniform,
 * ir_rand_normal) in kernel instructions. Implemented in ir/kernel_ops.c beside
 * kir_unary_op, kir_binary_op and kir_philox.
 *
 * Like every builder, these return an instruction index, or -1 when the kernel ran out of
 * memory (it is then marked broken) or the request makes no sense; an instruction built on a
 * -1 operand fails kir_valid, so a caller may check once, with kir_valid, at the end. */
#ifndef BURNC_KERNEL_OPS_H
#define BURNC_KERNEL_OPS_H

#include "kernel.h"

/* KIR_ROUND: the F32 value x rounded to the precision and range of fmt (KIR_F16 or KIR_BF16),
 * as an F32 value. */
int32_t kir_round(kir_kernel *k, int32_t x, kir_type fmt);

/* The four U32 words of ir_philox4x32(counter, key) into out[0..3]. counter and key are
 * integer values (U64 expected; other integer types are converted to U64 by wrapping). False
 * when an instruction could not be emitted. kir_philox is this block's out[word]: call this
 * once where several words of one counter are used. */
bool kir_philox_block(kir_kernel *k, int32_t counter, int32_t key, int32_t out[4]);

/* Element `index` of a rand (uniform [0, 1)) draw of dtype dt whose record-time counter
 * offset is `offset`, under `key`: the block of counter offset + index (U64 wrapping; key and
 * offset are integer values, U64 expected, index any integer value), turned into a number by
 * ir_rand_uniform's recipe for dt. The result is F64 for f64 and F32 otherwise (f32, f16,
 * bf16, and the f32 recipe for non-float dtypes); its value is exact in dt and equals
 * ir_rand_uniform bitwise after the store to dt. */
int32_t kir_rand_uniform(kir_kernel *k, int32_t key, int32_t offset, int32_t index, burnc_dtype_t dt);

/* Element `index` of a randn draw: ir_rand_normal's u1 and u2 bit for bit, then Box-Muller
 * z = sqrt(-2 log u1) * cos(2 pi u2) computed in F64 for every dtype (like the reference),
 * with kir_log and kir_cos; the result is F64 and the caller rounds it once to the dtype. It
 * differs from ir_rand_normal (glibc in double) only by kir_log's and kir_cos's errors (<= 1
 * ulp of f64 each) and four roundings: a few ulps of f64, so f32, f16 and bf16 results equal
 * the reference's except where the double result lies within that distance of a rounding
 * boundary. Expected bound: |z - ref| <= 8 ulp(|z|) + 8e-15 in f64. */
int32_t kir_rand_normal(kir_kernel *k, int32_t key, int32_t offset, int32_t index, burnc_dtype_t dt);

#endif
