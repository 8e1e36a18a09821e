/* What the code generator suites share: the LLVM module opened from BURNC_LLVM_MODULE, and
 * short builders of kernel IR (ir/kernel.h) that keep a test's kernel readable as a formula.
 *
 * Slot stride classes are written one character per axis: '0' (broadcast), '1' (unit), any
 * other character (a stride given at launch). */
#ifndef BURNC_TESTS_KIR_BUILD_H
#define BURNC_TESTS_KIR_BUILD_H

#include <dlfcn.h>

#include "codegen/cg.h"
#include "kernel.h"
#include "tests/common.h"

/* The module's table, opened once per test process. Without BURNC_LLVM_MODULE the test is
 * skipped saying skip_why, or fails when skip_why is NULL (the suite cannot do without it). */
static inline const cg_llvm_api *kb_llvm_api(const char *skip_why)
{
    static const cg_llvm_api *api;
    if (api)
        return api;
    const char *path = getenv("BURNC_LLVM_MODULE");
    if ((!path || !*path) && skip_why)
        cr_skip("BURNC_LLVM_MODULE is not set: %s", skip_why);
    cr_assert(path && *path, "BURNC_LLVM_MODULE is not set: this suite needs the burnc-llvm module, which every "
                             "build with llvm-19-dev has");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(h, "cannot open the LLVM module %s: %s", path, dlerror());
    api = dlsym(h, "burnc_llvm_api");
    cr_assert(api, "%s has no burnc_llvm_api", path);
    cr_assert_eq(api->abi, CG_LLVM_ABI);
    return api;
}

static inline void classes(kir_slot *s, burnc_dtype_t dt, const char *cls)
{
    s->dtype = dt;
    for (int d = 0; cls[d]; d++)
        s->stride[d] = cls[d] == '0' ? KIR_STRIDE_ZERO : cls[d] == '1' ? KIR_STRIDE_UNIT : KIR_STRIDE_ANY;
}

static inline int in_slot(kir_kernel *k, burnc_dtype_t dt, const char *cls)
{
    classes(&k->inputs[k->n_inputs], dt, cls);
    return k->n_inputs++;
}

static inline int out_slot(kir_kernel *k, burnc_dtype_t dt, const char *cls)
{
    classes(&k->outputs[k->n_outputs], dt, cls);
    return k->n_outputs++;
}

static inline int32_t LD(kir_kernel *k, int slot)
{
    return kir_emit(k, KIR_LOAD, kir_type_of(k->inputs[slot].dtype), slot, -1, -1);
}

static inline int32_t OP1(kir_kernel *k, kir_opcode op, kir_type t, int32_t a) { return kir_emit(k, op, t, a, -1, -1); }
static inline int32_t OP2(kir_kernel *k, kir_opcode op, kir_type t, int32_t a, int32_t b)
{
    return kir_emit(k, op, t, a, b, -1);
}
static inline int32_t OP3(kir_kernel *k, kir_opcode op, kir_type t, int32_t a, int32_t b, int32_t c)
{
    return kir_emit(k, op, t, a, b, c);
}

/* a (f32) rounded to the precision of fmt (f16, bf16), as a fused kernel rounds every op. */
static inline int32_t ROUND(kir_kernel *k, int32_t a, kir_type fmt)
{
    int32_t i = kir_emit(k, KIR_ROUND, KIR_F32, a, -1, -1);
    k->insts[i].imm.i = fmt;
    return i;
}

/* row: one value per row (a reduction's result), else one per position. */
static inline void STORE(kir_kernel *k, int slot, int32_t v, bool row)
{
    k->stores[k->n_stores++] = (kir_store){.slot = slot, .value = v, .row = row};
}

static inline int STAGE(kir_kernel *k, kir_combiner comb, int32_t v)
{
    k->stages[k->n_stages] = (kir_stage){.combiner = (uint8_t)comb, .value = v};
    return k->n_stages++;
}

/* Stage s's result (arg combiners give an i64 index). */
static inline int32_t REDUCED(kir_kernel *k, int s)
{
    int c = k->stages[s].combiner;
    kir_type t = c == KIR_COMBINE_ARGMAX || c == KIR_COMBINE_ARGMIN ? KIR_I64 : k->insts[k->stages[s].value].type;
    return kir_emit(k, KIR_REDUCED, t, s, -1, -1);
}

static inline bool has_op(const kir_kernel *k, kir_opcode op)
{
    for (int i = 0; i < k->n_insts; i++)
        if (k->insts[i].op == op)
            return true;
    return false;
}

#endif
