/* 16-bit functions by table (codegen/ptx.h, cg_ptx_lut): which element stores take one, and
 * the tables, computed by the reference interpreter. Part of libburnc (kir_eval lives here);
 * the LLVM module only emits the tables it is given.
 *
 * A store qualifies when its output is f16 or bf16 and its value, followed down its operands,
 * reaches one 16-bit source and constants only. The source is the deepest such instruction
 * (a load of an f16/bf16 input or a KIR_ROUND to f16/bf16) below which everything else is
 * constant: for gelu(round(a + b)) it is the round, so the table holds the whole GELU and the
 * add stays in the kernel. Below CG_PTX_LUT_MIN instructions between them the gather would
 * cost about as much as the arithmetic, and the store is left alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/ptx.h"

/* The 16-bit type whose values instruction i gives exactly, or BURNC_DTYPE_F32 for none. */
static burnc_dtype_t exact16(const kir_kernel *k, int32_t i)
{
    const kir_inst *in = &k->insts[i];
    if (in->type != KIR_F32)
        return BURNC_DTYPE_F32;
    if (in->op == KIR_ROUND)
        return in->imm.i == KIR_BF16 ? BURNC_DTYPE_BF16 : BURNC_DTYPE_F16;
    if (in->op == KIR_LOAD) {
        burnc_dtype_t dt = k->inputs[in->a].dtype;
        if (dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16)
            return dt;
    }
    return BURNC_DTYPE_F32;
}

/* Marks in m what the value of `root` reads down to `src` (not below it); the number of
 * marked instructions other than constants and src, or -1 when a leaf other than a constant
 * (a load, an argument, an index, ...) is reached. */
static int slice(const kir_kernel *k, int32_t root, int32_t src, bool *m)
{
    memset(m, 0, (size_t)k->n_insts * sizeof *m);
    m[root] = true;
    int n = 0;
    for (int32_t i = root; i > src; i--) {
        if (!m[i])
            continue;
        const kir_inst *in = &k->insts[i];
        int ops = kir_n_operands(in->op);
        if (ops == 0) {
            if (in->op != KIR_CONST)
                return -1;
            continue;
        }
        n++;
        int32_t o[3] = {in->a, in->b, in->c};
        for (int j = 0; j < ops; j++) {
            if (o[j] < src && k->insts[o[j]].op != KIR_CONST)
                return -1; /* reaches below the source */
            m[o[j]] = true;
        }
    }
    return n;
}

/* The source of store st's table, or -1; m (n_insts) is left marking the source's slice. */
static int32_t find_source(const kir_kernel *k, int st, bool *m)
{
    if (!cg_ptx_is_elementwise(k) || st < 0 || st >= k->n_stores)
        return -1;
    const kir_store *s = &k->stores[st];
    burnc_dtype_t dt = k->outputs[s->slot].dtype;
    if ((dt != BURNC_DTYPE_F16 && dt != BURNC_DTYPE_BF16) || k->insts[s->value].type != KIR_F32)
        return -1;
    for (int32_t src = 0; src < s->value; src++) /* the deepest source first */
        if (exact16(k, src) != BURNC_DTYPE_F32 && slice(k, s->value, src, m) >= CG_PTX_LUT_MIN && m[src])
            return src;
    return -1;
}

int32_t cg_ptx_lut_source(const kir_kernel *k, int st)
{
    bool *m = k->n_insts > 0 ? malloc((size_t)k->n_insts * sizeof *m) : NULL;
    int32_t src = m ? find_source(k, st, m) : -1;
    free(m);
    return src;
}

/* Runs store st's instructions marked in m, from src up, over every 16-bit pattern of src's
 * type. */
static uint16_t *make_table(const kir_kernel *k, int st, int32_t src, const bool *m)
{
    const kir_store *s = &k->stores[st];
    int32_t *map = malloc((size_t)k->n_insts * sizeof *map);
    uint16_t *in = malloc(CG_PTX_LUT_SIZE * sizeof *in), *out = malloc(CG_PTX_LUT_SIZE * sizeof *out);
    kir_kernel t;
    kir_init(&t, 1, 1);
    bool ok = map && in && out;
    t.inputs[0] = (kir_slot){.dtype = exact16(k, src), .stride = {KIR_STRIDE_UNIT}};
    t.outputs[0] = (kir_slot){.dtype = k->outputs[s->slot].dtype, .stride = {KIR_STRIDE_UNIT}};
    t.n_inputs = t.n_outputs = 1;
    for (int32_t i = 0; ok && i <= s->value; i++) { /* constants below src come first */
        if (i != src && !m[i])
            continue;
        const kir_inst *x = &k->insts[i];
        int ops = kir_n_operands(x->op);
        if (i == src)
            map[i] = kir_emit(&t, KIR_LOAD, KIR_F32, 0, -1, -1);
        else
            map[i] = kir_emit(&t, x->op, x->type, ops > 0 ? map[x->a] : x->a, ops > 1 ? map[x->b] : x->b,
                              ops > 2 ? map[x->c] : x->c);
        if (map[i] >= 0 && i != src)
            t.insts[map[i]].imm = x->imm;
        ok = map[i] >= 0;
    }
    if (ok) {
        t.stores[t.n_stores++] = (kir_store){.slot = 0, .value = map[s->value]};
        snprintf(t.name, sizeof t.name, "lut of %.50s", k->name);
        for (int i = 0; i < CG_PTX_LUT_SIZE; i++)
            in[i] = (uint16_t)i;
        void *ins[1] = {in}, *outs[1] = {out};
        int64_t ext[1] = {CG_PTX_LUT_SIZE}, zero[1] = {0}, one[1] = {1};
        kir_args a = {.inputs = ins, .outputs = outs, .extents = ext, .in_offsets = zero, .in_strides = one,
                      .out_offsets = zero, .out_strides = one};
        ok = kir_eval(&t, &a) == BURNC_OK;
    }
    kir_free(&t);
    free(map), free(in);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

bool cg_ptx_luts_make(const kir_kernel *k, cg_ptx_luts *out)
{
    memset(out, 0, sizeof *out);
    if (!cg_ptx_is_elementwise(k) || k->n_insts <= 0)
        return true;
    bool *m = malloc((size_t)k->n_insts * sizeof *m);
    bool ok = m != NULL;
    for (int st = 0; ok && st < k->n_stores; st++) {
        int32_t src = find_source(k, st, m);
        if (src < 0)
            continue;
        cg_ptx_lut *l = &out->lut[out->n];
        *l = (cg_ptx_lut){.store = st, .src = src, .src_dt = exact16(k, src), .table = make_table(k, st, src, m)};
        ok = l->table != NULL;
        out->n += ok;
    }
    free(m);
    if (!ok)
        cg_ptx_luts_free(out);
    return ok;
}

void cg_ptx_luts_free(cg_ptx_luts *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->lut[i].table);
    memset(l, 0, sizeof *l);
}
