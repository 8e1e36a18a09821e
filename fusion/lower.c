/* Lowering a group to the kernel IR: the kernel's axes, its slots, one instruction sequence per
 * member, the reduction stages and the stores, and the values of the launch.
 *
 * Every op's meaning comes from the builders of ir/kernel_ops.c and ir/math.c (kir_unary_op,
 * kir_binary_op, kir_round, kir_rand_uniform, kir_rand_normal); this file adds only what lies
 * between ops: loads, record constants as arguments, casts (KIR_CONVERT, and one rounding to
 * f16/bf16), rounding to f16/bf16 after every op (so a fused kernel gives the bits eager mode
 * stores), the reductions' combiners, and element positions. Record constants, extents,
 * strides, offsets and RNG offsets and keys are arguments, never constants: a loop whose
 * scalars change reuses one kernel. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kernel_ops.h"

typedef struct lw {
    const fus_ctx *c;
    const fus_domain *d;
    const int *mem;
    int n_mem;
    int gi; /* the group's index in c->group */
    fus_group *g;
    kir_kernel *k;
    /* kernel axis a covers domain axes merged into a run ending at inner[a] (-1: the axis
     * added to a domain without axes) */
    int n_ax, n_outer;
    int inner[BURNC_MAX_RANK];
    int64_t ext[BURNC_MAX_RANK];
    fus_slot_key keys[KIR_MAX_INPUTS];
    int n_keys;
    int32_t load[KIR_MAX_INPUTS];
    int64_t (*vecs)[BURNC_MAX_RANK]; /* plan_slots: every slot's index map */
    int n_vecs;
    fus_group_src *src;
    bool broken; /* a bound partition promised was exceeded */
} lw;

static bool positional(ir_op op)
{
    return op == IR_OP_ARANGE || op == IR_OP_EYE || op == IR_OP_RAND || op == IR_OP_RANDN;
}

static bool narrow(burnc_dtype_t dt)
{
    return dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16;
}

static bool in_group(const lw *w, int r)
{
    return r >= 0 && w->c->group[r] == w->gi;
}

/* ---- Axes and slots ---------------------------------------------------------------------- */

/* Domain axes a (outer) and b (next inner) are one run for every index map. */
static bool mergeable(int64_t (*vecs)[BURNC_MAX_RANK], int n, int a, int b, int64_t ext_b)
{
    for (int i = 0; i < n; i++) {
        int64_t want;
        if (__builtin_mul_overflow(vecs[i][b], ext_b, &want) || vecs[i][a] != want)
            return false;
    }
    return true;
}

/* Kept axes first, reduced last (kernel.h's n_outer); adjacent axes that every index map
 * walks contiguously become one: fewer loops, longer vectors, and one kernel for every shape
 * that differs only in how it splits a contiguous run. */
static void plan_axes(lw *w, int64_t (*vecs)[BURNC_MAX_RANK], int n_vecs)
{
    const fus_domain *d = w->d;
    int order[BURNC_MAX_RANK], n = 0, n_kept;
    for (int t = 0; t < d->rank; t++)
        if (!(d->mask >> t & 1))
            order[n++] = t;
    n_kept = n;
    for (int t = 0; t < d->rank; t++)
        if (d->mask >> t & 1)
            order[n++] = t;
    w->n_ax = w->n_outer = 0;
    for (int i = 0; i < n; i++) {
        int t = order[i];
        bool same_side = i > 0 && (i < n_kept) == (i - 1 < n_kept);
        if (same_side && mergeable(vecs, n_vecs, w->inner[w->n_ax - 1], t, d->shape[t])) {
            w->ext[w->n_ax - 1] *= d->shape[t];
            w->inner[w->n_ax - 1] = t;
        } else {
            w->inner[w->n_ax] = t;
            w->ext[w->n_ax++] = d->shape[t];
        }
        if (i == n_kept - 1)
            w->n_outer = w->n_ax;
    }
    if (w->n_ax == 0) {
        w->inner[0] = -1;
        w->ext[0] = 1;
        w->n_ax = w->n_outer = 1;
    }
}

static int64_t kstride(const lw *w, const int64_t *v, int a)
{
    return w->inner[a] >= 0 ? v[w->inner[a]] : 0;
}

static void set_slot(const lw *w, kir_slot *slot, burnc_dtype_t dt, const int64_t *v, int64_t *strides)
{
    slot->dtype = dt;
    for (int a = 0; a < w->n_ax; a++) {
        int64_t s = kstride(w, v, a);
        strides[a] = s;
        slot->stride[a] = s == 0 ? KIR_STRIDE_ZERO : s == 1 ? KIR_STRIDE_UNIT : KIR_STRIDE_ANY;
    }
}

static int find_key(const lw *w, const fus_slot_key *key)
{
    for (int i = 0; i < w->n_keys; i++)
        if (fus_key_equal(&w->keys[i], key, w->d->rank))
            return i;
    return -1;
}

/* A new input slot for operand k of record r read as key says (its index map one more vector
 * for plan_axes). */
static void add_slot(lw *w, const fus_slot_key *key, int r, int k)
{
    if (find_key(w, key) >= 0)
        return;
    if (w->n_keys == KIR_MAX_INPUTS) {
        w->broken = true;
        return;
    }
    if (w->src) {
        w->src->in_rec[w->n_keys] = r;
        w->src->in_k[w->n_keys] = (uint8_t)k;
    }
    w->keys[w->n_keys++] = *key;
    memcpy(w->vecs[w->n_vecs++], key->strides, sizeof key->strides);
}

typedef struct leaf_slots {
    lw *w;
    const int8_t *map;
} leaf_slots;

static bool add_leaf_slot(void *ctx, int node, int k, const ir_view *v)
{
    leaf_slots *ls = ctx;
    fus_slot_key key;
    fus_view_key(ls->w->d, ls->map, &ls->w->c->recs[node]->in[k], v, &key);
    add_slot(ls->w, &key, node, k);
    return true;
}

/* Input slots in order of first use, output slots in member order, and the axes. */
static bool plan_slots(lw *w)
{
    const fus_ctx *c = w->c;
    w->vecs = malloc((size_t)(KIR_MAX_INPUTS + 2 * w->n_mem + 1) * sizeof *w->vecs);
    if (!w->vecs)
        return false;
    int n_out = 0;
    for (int i = 0; i < w->n_mem; i++) {
        int r = w->mem[i];
        int8_t map[BURNC_MAX_RANK];
        fus_record_map(c, w->d, r, map);
        for (int k = 0; k < c->recs[r]->n_in; k++) {
            int pr = fus_prod(c, r, k);
            leaf_slots ls = {w, map};
            if (fus_inl(c, r, k)) {
                if (!fus_inline_walk(c, pr, &c->recs[r]->in[k].view, add_leaf_slot, &ls))
                    w->broken = true;
            } else if (!in_group(w, pr)) {
                fus_slot_key key;
                fus_operand_key(c, w->d, r, k, &key);
                add_slot(w, &key, r, k);
            }
        }
        if (c->out[r] || positional(c->recs[r]->op))
            fus_out_strides(w->d, c->level[r], w->vecs[w->n_vecs++]);
        n_out += c->out[r];
    }
    int64_t(*vecs)[BURNC_MAX_RANK] = w->vecs;
    int n_vecs = w->n_vecs;
    if (n_out > KIR_MAX_OUTPUTS)
        w->broken = true;
    plan_axes(w, vecs, n_vecs);
    free(vecs);
    w->vecs = NULL;

    kir_kernel *k = w->k;
    fus_group *g = w->g;
    kir_init(k, w->n_ax, w->n_outer);
    for (int a = 0; a < w->n_ax; a++)
        g->extents[a] = w->ext[a];
    k->n_inputs = w->n_keys;
    for (int s = 0; s < w->n_keys; s++) {
        set_slot(w, &k->inputs[s], w->keys[s].dtype, w->keys[s].strides, &g->in_strides[s * w->n_ax]);
        g->in_offsets[s] = w->keys[s].offset;
        g->in_storage[s] = (struct rt_storage *)w->keys[s].st;
        w->load[s] = -1;
    }
    for (int i = 0; i < w->n_mem && k->n_outputs < KIR_MAX_OUTPUTS; i++) {
        int r = w->mem[i];
        if (!c->out[r])
            continue;
        int o = k->n_outputs++;
        int64_t v[BURNC_MAX_RANK];
        fus_out_strides(w->d, c->level[r], v);
        set_slot(w, &k->outputs[o], c->recs[r]->dtype, v, &g->out_strides[o * w->n_ax]);
        g->out_offsets[o] = 0;
        g->out_storage[o] = c->recs[r]->out;
        if (w->src)
            w->src->out_rec[o] = r;
    }
    return true;
}

/* ---- Instructions ------------------------------------------------------------------------ */

static int32_t emit(lw *w, kir_opcode op, kir_type t, int32_t a, int32_t b, int32_t c)
{
    return kir_emit(w->k, op, t, a, b, c);
}

static kir_type type_of(const lw *w, int32_t v)
{
    return v >= 0 && v < w->k->n_insts ? (kir_type)w->k->insts[v].type : KIR_F32;
}

kir_scalar fus_arg_value(const ir_record *r, const fus_arg_src *src)
{
    kir_scalar s = {.u = 0};
    if (src->kind == FUS_ARG_RNG_OFFSET)
        s.u = r->rng_offset;
    else if (src->kind == FUS_ARG_RNG_KEY)
        s.u = r->rng_key;
    else if (src->kind == FUS_ARG_SCALAR) {
        /* a record constant, already converted to its dtype by the recorder */
        double v = r->scalar[src->index < 3 ? src->index : 0];
        if (kir_type_is_float((kir_type)src->type))
            s.f = v;
        else if (src->type == KIR_BOOL)
            s.i = v != 0;
        else
            s.i = ir_load_i(&v, BURNC_DTYPE_F64); /* saturates: 2^63 is i64's maximum */
    }
    return s;
}

static int32_t arg(lw *w, kir_type t, fus_arg_src from, kir_scalar fixed)
{
    if (w->k->n_scalars >= FUS_MAX_SCALARS) {
        w->broken = true;
        return -1;
    }
    int i = w->k->n_scalars++;
    from.type = (uint8_t)t;
    w->g->scalars[i] = from.kind == FUS_ARG_FIXED ? fixed : fus_arg_value(w->c->recs[from.rec], &from);
    if (w->src)
        w->src->args[i] = from;
    return emit(w, KIR_ARG, t, i, -1, -1);
}

/* Record r's scalar[index] as an argument of type t. */
static int32_t arg_scalar(lw *w, kir_type t, int r, int index)
{
    return arg(w, t, (fus_arg_src){.rec = r, .kind = FUS_ARG_SCALAR, .index = (uint8_t)index}, (kir_scalar){.u = 0});
}

/* A value the structure fixes (strides, extents). */
static int32_t arg_fixed_i64(lw *w, int64_t v)
{
    return arg(w, KIR_I64, (fus_arg_src){.rec = -1, .kind = FUS_ARG_FIXED}, (kir_scalar){.i = v});
}

static int32_t arg_rng(lw *w, int r, fus_arg_kind kind)
{
    return arg(w, KIR_U64, (fus_arg_src){.rec = r, .kind = (uint8_t)kind}, (kir_scalar){.u = 0});
}

/* Rounds an f32 value to the precision of an f16/bf16 result (as the store would). */
static int32_t round_to(lw *w, int32_t x, burnc_dtype_t dt)
{
    if (!narrow(dt) || x < 0)
        return x;
    return kir_round(w->k, x, dt == BURNC_DTYPE_F16 ? KIR_F16 : KIR_BF16);
}

/* f64 -> f32 rounded to odd: truncate, then set the last bit when anything was lost. Rounding
 * that to f16/bf16 (at least two bits shorter) gives the correctly rounded result of the f64
 * value, where two round-to-nearest steps could round a near-tie the wrong way. */
static int32_t round_odd_f32(lw *w, int32_t x)
{
    int32_t y = emit(w, KIR_CONVERT, KIR_F32, x, -1, -1);
    int32_t back = emit(w, KIR_CONVERT, KIR_F64, y, -1, -1);
    int32_t inexact = emit(w, KIR_NE, KIR_BOOL, back, x, -1);
    int32_t away = emit(w, KIR_GT, KIR_BOOL, emit(w, KIR_ABS, KIR_F64, back, -1, -1),
                        emit(w, KIR_ABS, KIR_F64, x, -1, -1), -1);
    int32_t bits = emit(w, KIR_BITCAST, KIR_U32, y, -1, -1);
    int32_t one = kir_const_i(w->k, KIR_U32, 1);
    int32_t toward = emit(w, KIR_SELECT, KIR_U32, away, emit(w, KIR_SUB, KIR_U32, bits, one, -1), bits);
    int32_t odd = emit(w, KIR_BITCAST, KIR_F32, emit(w, KIR_OR, KIR_U32, toward, one, -1), -1, -1);
    int32_t finite = emit(w, KIR_LT, KIR_BOOL, emit(w, KIR_ABS, KIR_F32, y, -1, -1),
                          kir_const_f(w->k, KIR_F32, INFINITY), -1);
    int32_t use = emit(w, KIR_AND, KIR_BOOL, inexact, finite, -1);
    return emit(w, KIR_SELECT, KIR_F32, use, odd, y);
}

/* i64 -> f64 rounded to odd, the same way: beyond 2^53 a conversion can lose bits. The
 * conversion back saturates only at 2^63, where every narrow rounding agrees anyway. */
static int32_t round_odd_f64(lw *w, int32_t x)
{
    int32_t d = emit(w, KIR_CONVERT, KIR_F64, x, -1, -1);
    int32_t back = emit(w, KIR_CONVERT, KIR_I64, d, -1, -1);
    int32_t inexact = emit(w, KIR_NE, KIR_BOOL, back, x, -1);
    int32_t up = emit(w, KIR_GT, KIR_BOOL, back, x, -1), down = emit(w, KIR_LT, KIR_BOOL, back, x, -1);
    int32_t nonneg = emit(w, KIR_GE, KIR_BOOL, x, kir_const_i(w->k, KIR_I64, 0), -1);
    int32_t away = emit(w, KIR_SELECT, KIR_BOOL, nonneg, up, down);
    int32_t bits = emit(w, KIR_BITCAST, KIR_U64, d, -1, -1);
    int32_t one = kir_const_i(w->k, KIR_U64, 1);
    int32_t toward = emit(w, KIR_SELECT, KIR_U64, away, emit(w, KIR_SUB, KIR_U64, bits, one, -1), bits);
    int32_t odd = emit(w, KIR_BITCAST, KIR_F64, emit(w, KIR_OR, KIR_U64, toward, one, -1), -1, -1);
    return emit(w, KIR_SELECT, KIR_F64, inexact, odd, d);
}

/* A value of type `from` converted to dtype `to` by the cast rules, rounded once. */
static int32_t cast_to(lw *w, int32_t x, burnc_dtype_t to)
{
    kir_type from = type_of(w, x), tt = kir_type_of(to);
    if (!narrow(to))
        return from == tt ? x : emit(w, KIR_CONVERT, tt, x, -1, -1);
    if (from == KIR_F32)
        return round_to(w, x, to);
    if (from == KIR_BOOL || from == KIR_U8) /* exact in f32 */
        return round_to(w, emit(w, KIR_CONVERT, KIR_F32, x, -1, -1), to);
    /* wider values go through f64, exact for 32-bit integers, to odd for i64 */
    int32_t d = from == KIR_F64   ? x
                : from == KIR_I64 ? round_odd_f64(w, x)
                                  : emit(w, KIR_CONVERT, KIR_F64, x, -1, -1);
    return round_to(w, round_odd_f32(w, d), to);
}

static int32_t load(lw *w, const fus_slot_key *key)
{
    int s = find_key(w, key);
    if (s < 0) {
        w->broken = true;
        return -1;
    }
    if (w->load[s] < 0)
        w->load[s] = emit(w, KIR_LOAD, kir_type_of(key->dtype), s, -1, -1);
    return w->load[s];
}

static int32_t apply(lw *w, int r, const int32_t *x);

/* Record p computed again at the positions of v (a view of p's output in the shape of the
 * member whose axes `map` gives), as recompute.c walks it. */
static int32_t recompute(lw *w, const int8_t *map, int p, const ir_view *v, int depth)
{
    const ir_record *rec = w->c->recs[p];
    int32_t x[KIR_MAX_INPUTS];
    for (int j = 0; j < rec->n_in; j++) {
        ir_view wj;
        if (!fus_compose(v, rec->out_rank, rec->out_shape, &rec->in[j].view, &wj)) {
            w->broken = true;
            return -1;
        }
        int q = fus_prod(w->c, p, j);
        if (fus_recurse_into(w->c, q, depth)) {
            x[j] = recompute(w, map, q, &wj, depth + 1);
        } else {
            fus_slot_key key;
            fus_view_key(w->d, map, &rec->in[j], &wj, &key);
            x[j] = load(w, &key);
        }
    }
    return apply(w, p, x);
}

/* The value of input k of record r: recomputed, a member's register, or a load. */
static int32_t operand(lw *w, int r, int k)
{
    int pr = fus_prod(w->c, r, k);
    if (fus_inl(w->c, r, k)) {
        int8_t map[BURNC_MAX_RANK];
        fus_record_map(w->c, w->d, r, map);
        return recompute(w, map, pr, &w->c->recs[r]->in[k].view, 0);
    }
    if (in_group(w, pr))
        return w->c->val[pr];
    fus_slot_key key;
    fus_operand_key(w->c, w->d, r, k, &key);
    return load(w, &key);
}

/* The row-major index of the member's element at the current position (I64). */
static int32_t linear_index(lw *w, int r)
{
    int64_t v[BURNC_MAX_RANK];
    fus_out_strides(w->d, w->c->level[r], v);
    int32_t acc = -1;
    for (int a = 0; a < w->n_ax; a++) {
        int64_t s = kstride(w, v, a);
        if (s == 0)
            continue;
        int32_t term = emit(w, KIR_INDEX, KIR_I64, a, -1, -1);
        if (s != 1)
            term = emit(w, KIR_MUL, KIR_I64, term, arg_fixed_i64(w, s), -1);
        acc = acc < 0 ? term : emit(w, KIR_ADD, KIR_I64, acc, term, -1);
    }
    return acc < 0 ? kir_const_i(w->k, KIR_I64, 0) : acc;
}

/* ---- Sources ----------------------------------------------------------------------------- */

/* rand and randn through the recipes of ir/kernel_ops.c: counter offset and key are arguments,
 * the element index is the member's row-major position. */
static int32_t lower_random(lw *w, int r)
{
    const ir_record *rec = w->c->recs[r];
    int32_t offset = arg_rng(w, r, FUS_ARG_RNG_OFFSET);
    int32_t key = arg_rng(w, r, FUS_ARG_RNG_KEY);
    int32_t index = linear_index(w, r);
    int32_t v = rec->op == IR_OP_RAND ? kir_rand_uniform(w->k, key, offset, index, rec->dtype)
                                      : kir_rand_normal(w->k, key, offset, index, rec->dtype);
    return v < 0 ? v : cast_to(w, v, rec->dtype);
}

static int32_t lower_source(lw *w, int r)
{
    const ir_record *rec = w->c->recs[r];
    switch (rec->op) {
    case IR_OP_FULL: return arg_scalar(w, kir_type_of(rec->dtype), r, 0);
    case IR_OP_ARANGE: { /* start + i * step in f64, rounded once */
        int32_t start = arg_scalar(w, KIR_F64, r, 0);
        int32_t step = arg_scalar(w, KIR_F64, r, 1);
        int32_t i = emit(w, KIR_CONVERT, KIR_F64, linear_index(w, r), -1, -1);
        int32_t v = emit(w, KIR_ADD, KIR_F64, start, emit(w, KIR_MUL, KIR_F64, i, step, -1), -1);
        return cast_to(w, v, rec->dtype);
    }
    case IR_OP_EYE: { /* element i of a dense [n, m]: i / m == i % m */
        int32_t m = arg_fixed_i64(w, rec->out_rank >= 1 ? rec->out_shape[rec->out_rank - 1] : 1);
        int32_t i = linear_index(w, r);
        int32_t row = emit(w, KIR_DIV, KIR_I64, i, m, -1), col = emit(w, KIR_REM, KIR_I64, i, m, -1);
        int32_t on = emit(w, KIR_EQ, KIR_BOOL, row, col, -1);
        return cast_to(w, on, rec->dtype);
    }
    default: return lower_random(w, r);
    }
}

/* ---- Element-wise ------------------------------------------------------------------------ */

static int32_t lower_unary(lw *w, int r, int32_t x)
{
    const ir_record *rec = w->c->recs[r];
    if (rec->op == IR_OP_CAST)
        return cast_to(w, x, rec->dtype);
    kir_type t = kir_type_of(rec->compute);
    int32_t sc[2] = {-1, -1};
    if (rec->op == IR_OP_CLAMP) {
        sc[0] = arg_scalar(w, t, r, 0);
        sc[1] = arg_scalar(w, t, r, 1);
    }
    return round_to(w, kir_unary_op_to(w->k, rec->op, t, x, sc, rec->dtype), rec->dtype);
}

static int32_t lower_binary(lw *w, int r, int32_t a, int32_t b)
{
    const ir_record *rec = w->c->recs[r];
    kir_type t = kir_type_of(rec->compute);
    if (rec->flags & IR_REC_SCALAR_RHS)
        b = arg_scalar(w, t, r, 0);
    return round_to(w, kir_binary_op(w->k, rec->op, t, a, b), rec->dtype);
}

/* WHERE moves the chosen element unchanged; any condition dtype counts as != 0. */
static int32_t lower_where(lw *w, int32_t c, int32_t a, int32_t b)
{
    if (type_of(w, c) != KIR_BOOL)
        c = emit(w, KIR_CONVERT, KIR_BOOL, c, -1, -1);
    return emit(w, KIR_SELECT, type_of(w, a), c, a, b);
}

/* ---- Reductions -------------------------------------------------------------------------- */

static int32_t stage(lw *w, kir_combiner comb, int32_t value, kir_type result)
{
    kir_kernel *k = w->k;
    if (k->n_stages >= KIR_MAX_STAGES || value < 0) {
        w->broken = true;
        return -1;
    }
    int s = k->n_stages++;
    k->stages[s] = (kir_stage){.combiner = (uint8_t)comb, .value = value};
    return emit(w, KIR_REDUCED, result, s, -1, -1);
}

static int32_t row_len(lw *w, kir_type t)
{
    return emit(w, KIR_CONVERT, t, emit(w, KIR_ROW_LEN, KIR_I64, -1, -1, -1), -1, -1);
}

/* Two passes, as the reference: the mean, then the squared deviations from it; the divisor
 * n - correction, NaN when it is not positive. */
static int32_t lower_var(lw *w, int r, int32_t x, kir_type t)
{
    const ir_record *rec = w->c->recs[r];
    kir_kernel *k = w->k;
    int32_t n = row_len(w, t);
    int32_t mean = kir_binary_op(k, IR_OP_DIV, t, stage(w, KIR_COMBINE_SUM, x, t), n);
    int32_t dev = kir_binary_op(k, IR_OP_SUB, t, x, mean);
    int32_t ss = stage(w, KIR_COMBINE_SUM, kir_binary_op(k, IR_OP_MUL, t, dev, dev), t);
    int32_t denom = kir_binary_op(k, IR_OP_SUB, t, n, arg_scalar(w, t, r, 0));
    int32_t var = kir_binary_op(k, IR_OP_DIV, t, ss, denom);
    int32_t ok = kir_binary_op(k, IR_OP_GT, t, denom, kir_const_f(k, t, 0.0));
    var = emit(w, KIR_SELECT, t, ok, var, kir_const_f(k, t, NAN));
    return rec->op == IR_OP_STD ? kir_unary_op(k, IR_OP_SQRT, t, var, NULL) : var;
}

static int32_t lower_reduce(lw *w, int r, int32_t x)
{
    const ir_record *rec = w->c->recs[r];
    kir_type t = type_of(w, x);
    int32_t v;
    switch (rec->op) {
    case IR_OP_SUM: v = stage(w, KIR_COMBINE_SUM, x, t); break;
    case IR_OP_MEAN: v = kir_binary_op(w->k, IR_OP_DIV, t, stage(w, KIR_COMBINE_SUM, x, t), row_len(w, t)); break;
    case IR_OP_PROD: v = stage(w, KIR_COMBINE_PROD, x, t); break;
    case IR_OP_MAX: return stage(w, KIR_COMBINE_MAX, x, t); /* an element: nothing to round */
    case IR_OP_MIN: return stage(w, KIR_COMBINE_MIN, x, t);
    case IR_OP_ARGMAX: return stage(w, KIR_COMBINE_ARGMAX, x, KIR_I64);
    case IR_OP_ARGMIN: return stage(w, KIR_COMBINE_ARGMIN, x, KIR_I64);
    default: v = lower_var(w, r, x, t); break;
    }
    return round_to(w, v, rec->dtype);
}

/* Record r's op applied to the values x[] of its operands. */
static int32_t apply(lw *w, int r, const int32_t *x)
{
    const ir_record *rec = w->c->recs[r];
    for (int k = 0; k < rec->n_in; k++)
        if (x[k] < 0)
            return -1;
    switch (ir_op_class(rec->op)) {
    case IR_CLASS_SOURCE: return lower_source(w, r);
    case IR_CLASS_UNARY: return lower_unary(w, r, x[0]);
    case IR_CLASS_BINARY: return lower_binary(w, r, x[0], rec->n_in > 1 ? x[1] : -1);
    case IR_CLASS_TERNARY: return lower_where(w, x[0], x[1], x[2]);
    case IR_CLASS_REDUCE: return lower_reduce(w, r, x[0]);
    case IR_CLASS_MOVE: return x[0]; /* copy: the value itself */
    default: w->broken = true; return -1;
    }
}

static int32_t lower_member(lw *w, int r)
{
    int32_t x[KIR_MAX_INPUTS];
    for (int k = 0; k < w->c->recs[r]->n_in; k++)
        x[k] = operand(w, r, k);
    return apply(w, r, x);
}

/* ---- The group --------------------------------------------------------------------------- */

static void name_kernel(lw *w, bool eager)
{
    char *p = w->k->name;
    size_t cap = sizeof w->k->name, n = 0;
    n += (size_t)snprintf(p, cap, "%s", eager || w->n_mem == 1 ? "" : "fused");
    for (int i = 0; i < w->n_mem && n < cap; i++)
        n += (size_t)snprintf(p + n, cap - n, "%s%s", n ? "_" : "", ir_op_name(w->c->recs[w->mem[i]]->op));
}

static void add_stores(lw *w)
{
    kir_kernel *k = w->k;
    for (int i = 0; i < w->n_mem && k->n_stores < k->n_outputs; i++) {
        int r = w->mem[i];
        if (!w->c->out[r])
            continue;
        int s = k->n_stores++;
        k->stores[s] = (kir_store){.slot = s, .value = w->c->val[r], .row = w->c->level[r] == FUS_ROW};
    }
}

burnc_status_t fus_lower(const fus_ctx *c, const fus_domain *d, const int *members, int n_members, bool eager,
                         fus_group *out, fus_group_src *src, char *err, size_t err_cap)
{
    lw w = {.c = c, .d = d, .mem = members, .n_mem = n_members, .gi = c->group[members[0]], .g = out,
            .k = &out->kernel, .src = src};
    out->opaque = false;
    out->recs = malloc((size_t)n_members * sizeof *out->recs);
    if (!out->recs || !plan_slots(&w))
        return BURNC_ERR_OUT_OF_MEMORY;
    memcpy(out->recs, members, (size_t)n_members * sizeof *members);
    out->n_recs = n_members;
    for (int i = 0; i < n_members && !w.broken; i++) {
        int r = members[i];
        c->val[r] = lower_member(&w, r);
        if (w.k->cap_insts < 0)
            return BURNC_ERR_OUT_OF_MEMORY;
        if (c->val[r] < 0)
            w.broken = true;
    }
    if (w.broken) {
        snprintf(err, err_cap, "fusion: group of %s went past a bound partition checked",
                 ir_op_name(c->recs[members[0]]->op));
        return BURNC_ERR_INTERNAL;
    }
    add_stores(&w);
    name_kernel(&w, eager);
    char why[128];
    if (!kir_valid(w.k, why, sizeof why)) {
        snprintf(err, err_cap, "fusion: invalid kernel %s: %s", w.k->name, why);
        return BURNC_ERR_INTERNAL;
    }
    out->key = kir_hash(w.k);
    return BURNC_OK;
}
