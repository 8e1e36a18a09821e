/* Partitions a flushed batch into kernels (DESIGN.md, step 2).
 *
 * One pass in record order puts each live record into a group: an opaque group of its own
 * (matmul, cat, pad, index ops), a group it can join, or a new group. A record joins a group
 * when its shape fits the group's domain (squeezed, see internal.h), every value it reads from
 * the group comes out of a register (the view it reads through is the member's own dense
 * index map) or is recomputed (recompute.c: cheap values read through a broadcast, transpose,
 * slice or reshape), every other group it reads comes earlier, and the kernel stays within its
 * bounds. Groups are created in order and a record only ever reads earlier groups or its own,
 * so the creation order is a dependency order.
 *
 * A value lives only in registers unless the user holds it (needed_outside) or a record of
 * another group loads it: only then does its kernel store it. A member whose every reader
 * recomputes it is dropped. Reading an expensive member (a transcendental, a reduction, a
 * float division or square root) through another view is a cut: it is stored, computed once,
 * and the reader goes to a later kernel, so an expensive producer is never duplicated into a
 * broadcasting consumer. The number of stores is known only once every consumer is placed, so
 * a group that ends up with more than KIR_MAX_OUTPUTS is split where its stores overflow and
 * the pass runs again (each retry adds splits, so this ends). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum {
    DEFAULT_MAX_INSTS = 2048, /* compile time grows with kernel size (a new chain: <= 20 ms) */
    SIBLING_WINDOW = 8, /* how many recent unrelated groups a record may join */
    CHEAP_INSTS = 10,   /* an op this small is recomputed rather than stored and cut */
    KEY_WORDS_ON_STACK = 512, /* the plan cache key of a batch of about 25 element-wise ops */
};

typedef struct pgroup {
    fus_domain dom;
    bool opaque;
    int *members;
    int n_members, cap_members;
    fus_slot_key keys[KIR_MAX_INPUTS];
    int n_keys;
    int n_insts, n_stages, n_scalars;
    char why[96];
} pgroup;

typedef struct part {
    fus_ctx c;
    const bool *needed_outside;
    bool fuse;
    int max_insts, max_inputs;
    bool *live_all; /* needed by the user or by a live record */
    bool *live;     /* of those, the ones still computed (recomputed values drop out) */
    bool *no_join;
    bool *sunk;     /* stored for its products' readers (sink_products), NULL before */
    pgroup *groups;
    int n_groups, cap_groups;
    int est[IR_OP_COUNT][KIR_F64 + 1][2]; /* instructions an op expands to, by result width 16 or
                                            * more (0: not measured yet) */
} part;

/* ---- Records ----------------------------------------------------------------------------- */

static bool is_opaque(const ir_record *r)
{
    switch (ir_op_class(r->op)) {
    case IR_CLASS_MATMUL:
    case IR_CLASS_INDEX: return true;
    case IR_CLASS_MOVE: return r->op != IR_OP_COPY;
    default: return false;
    }
}

/* Sources whose value depends on the element's position: they need its linear index. */
static bool is_positional(ir_op op)
{
    return op == IR_OP_ARANGE || op == IR_OP_EYE || op == IR_OP_RAND || op == IR_OP_RANDN;
}

static int stages_of(const ir_record *r)
{
    if (!fus_is_reduce(r))
        return 0;
    return r->op == IR_OP_VAR || r->op == IR_OP_STD ? 2 : 1;
}

/* Scalar arguments the lowering gives the record (lower.c keeps to these counts). */
static int scalars_of(const ir_record *r, int dom_rank)
{
    int n = is_positional(r->op) ? dom_rank : 0;
    switch (r->op) {
    case IR_OP_FULL: return 1;
    case IR_OP_ARANGE: return n + 2;
    case IR_OP_EYE: return n + 1;
    case IR_OP_RAND:
    case IR_OP_RANDN: return n + 2;
    case IR_OP_CLAMP: return 2;
    case IR_OP_VAR:
    case IR_OP_STD: return 1;
    default: return (r->flags & IR_REC_SCALAR_RHS) ? 1 : 0;
    }
}

/* Instructions an element-wise op expands to, measured once per (op, type) by building it
 * into a scratch kernel: the bound on kernel size then counts what codegen really sees. */
static int measure(part *p, const ir_record *r)
{
    kir_type t = kir_type_of(r->compute);
    bool half = r->dtype == BURNC_DTYPE_F16 || r->dtype == BURNC_DTYPE_BF16;
    int *slot = &p->est[r->op][t][half];
    if (!*slot)
        *slot = kir_op_insts(r->op, t, r->dtype);
    return *slot;
}

static int est_insts(part *p, const ir_record *r)
{
    int loads = r->n_in + 1;
    switch (ir_op_class(r->op)) {
    case IR_CLASS_UNARY:
        if (r->op == IR_OP_CAST)
            return loads + 16;
        /* fall through */
    case IR_CLASS_BINARY: return loads + measure(p, r);
    case IR_CLASS_SOURCE:
        return r->op == IR_OP_RANDN ? 400 : r->op == IR_OP_RAND ? 150 : 16;
    case IR_CLASS_REDUCE: return loads + 16;
    default: return loads + 2;
    }
}

/* ---- Producers and liveness -------------------------------------------------------------- */

/* prod[]: which record of the batch writes each operand (a record only reads earlier ones). */
static burnc_status_t find_producers(part *p)
{
    fus_ctx *c = &p->c;
    fus_pmap m;
    if (!fus_pmap_init(&m, c->n)) {
        fus_pmap_free(&m);
        return BURNC_ERR_OUT_OF_MEMORY;
    }
    for (int r = 0; r < c->n; r++) {
        const ir_record *rec = c->recs[r];
        for (int k = 0; k < rec->n_in; k++) {
            int pr = fus_pmap_get(&m, rec->in[k].storage);
            c->prod[c->prod_start[r] + k] = pr < r ? pr : -1;
        }
        if (rec->out)
            fus_pmap_put(&m, rec->out, r);
    }
    fus_pmap_free(&m);
    return BURNC_OK;
}

static void find_live(part *p)
{
    fus_ctx *c = &p->c;
    for (int r = c->n - 1; r >= 0; r--) {
        p->live_all[r] = p->live_all[r] || !p->needed_outside || p->needed_outside[r];
        if (!p->live_all[r])
            continue;
        for (int k = 0; k < c->recs[r]->n_in; k++) {
            int pr = fus_prod(c, r, k);
            if (pr >= 0)
                p->live_all[pr] = true;
        }
    }
}

static bool narrow(burnc_dtype_t dt) { return dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16; }

/* A float division or square root: one kernel-IR instruction, but the correctly rounded
 * sequence behind it is long (on the H200, with its slow-path calls, several times a GELU's
 * share of the deep MLP's GELU backward: that kernel took 58-60 us recomputing a LayerNorm's
 * 1 / sqrt(var + eps) at each of its 4M positions, against 43 reading stored values). A
 * one-element result is the same at every position, so the generated loops compute it once
 * (LLVM hoists it): a mean's 1 / N in the backward pass is recomputed, not a kernel of its
 * own. */
static bool ieee_long(const ir_record *r)
{
    bool fp = kir_type_is_float(kir_type_of(r->compute));
    return fp && ir_numel(r->out_rank, r->out_shape) != 1 &&
           (r->op == IR_OP_DIV || r->op == IR_OP_SQRT || r->op == IR_OP_RSQRT || r->op == IR_OP_RECIPROCAL);
}

/* Cheap enough to compute again wherever it is read: a few instructions, nothing
 * transcendental, no division or square root, no position-dependent source. */
static bool cheap(part *p, const ir_record *r)
{
    switch (ir_op_class(r->op)) {
    case IR_CLASS_SOURCE: return r->op == IR_OP_FULL;
    case IR_CLASS_UNARY:
        if (r->op == IR_OP_CAST) /* one conversion, unless it must round an f64 or a wide int twice */
            return !narrow(r->dtype) || kir_type_of(r->compute) == KIR_F32 || r->compute == BURNC_DTYPE_U8 ||
                   r->compute == BURNC_DTYPE_BOOL;
        return measure(p, r) <= CHEAP_INSTS && !ieee_long(r);
    case IR_CLASS_BINARY: return measure(p, r) <= CHEAP_INSTS && !ieee_long(r);
    case IR_CLASS_TERNARY: return true;
    case IR_CLASS_MOVE: /* a plain copy (a reshaping one walks another shape) */
        return r->op == IR_OP_COPY && r->in[0].view.rank == r->out_rank &&
               memcmp(r->in[0].view.shape, r->out_shape, (size_t)r->out_rank * sizeof *r->out_shape) == 0;
    default: return false;
    }
}

/* recomp[]: what consumers may compute again instead of reading (never what the user holds:
 * it is stored anyway). */
static void find_recomputable(part *p)
{
    for (int r = 0; r < p->c.n; r++)
        p->c.recomp[r] = p->fuse && p->live_all[r] && p->needed_outside && !p->needed_outside[r] &&
                         cheap(p, p->c.recs[r]);
}

/* ---- Groups ------------------------------------------------------------------------------ */

/* Writes why a record cannot join a group; returns false. */
static bool refuse(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool refuse(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return false;
}

/* The reason a group ended, kept from the first record that could not join it. */
static void set_why(pgroup *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_why(pgroup *g, const char *fmt, ...)
{
    if (g->why[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->why, sizeof g->why, fmt, ap);
    va_end(ap);
}

static bool add_member(pgroup *g, int r)
{
    if (g->n_members == g->cap_members) {
        int cap = g->cap_members ? 2 * g->cap_members : 8;
        int *m = realloc(g->members, (size_t)cap * sizeof *m);
        if (!m)
            return false;
        g->members = m;
        g->cap_members = cap;
    }
    g->members[g->n_members++] = r;
    return true;
}

static uint32_t reduce_mask(const ir_record *r, const int8_t *map)
{
    uint32_t m = 0;
    for (int a = 0; a < r->in[0].view.rank; a++)
        if ((r->axes >> a & 1) && map[a] >= 0)
            m |= 1u << map[a];
    return m;
}

/* The record's level in group g (FUS_FULL or FUS_ROW), or -1 when its shape does not fit;
 * map receives its axes over the domain. */
static int fit_level(const pgroup *g, const ir_record *r, int8_t *map)
{
    int rank;
    const int64_t *shape;
    fus_dom_shape(r, &rank, &shape);
    if (fus_axis_map(&g->dom, FUS_FULL, rank, shape, map))
        return FUS_FULL;
    if (!fus_is_reduce(r) && g->dom.reduce && fus_axis_map(&g->dom, FUS_ROW, rank, shape, map))
        return FUS_ROW;
    return -1;
}

/* The operand reads exactly the producer's value at the current position. */
static bool reads_register(const part *p, const fus_domain *d, int r, int k, int pr)
{
    fus_slot_key key;
    fus_operand_key(&p->c, d, r, k, &key);
    int64_t want[BURNC_MAX_RANK];
    fus_out_strides(d, p->c.level[pr], want);
    if (key.offset != 0 || key.dtype != p->c.recs[pr]->dtype)
        return false;
    for (int t = 0; t < d->rank; t++)
        if (key.strides[t] != want[t])
            return false;
    return true;
}

/* The input slots a group would have: its own and those a record adds (its loads, and the
 * loads of the values it recomputes), within the bound on inputs. */
typedef struct keyset {
    const pgroup *g;
    fus_slot_key fresh[KIR_MAX_INPUTS];
    int n_fresh, max;
} keyset;

static bool keyset_add(keyset *ks, const fus_slot_key *key)
{
    int rank = ks->g->dom.rank;
    for (int i = 0; i < ks->g->n_keys; i++)
        if (fus_key_equal(&ks->g->keys[i], key, rank))
            return true;
    for (int i = 0; i < ks->n_fresh; i++)
        if (fus_key_equal(&ks->fresh[i], key, rank))
            return true;
    if (ks->g->n_keys + ks->n_fresh >= ks->max)
        return false;
    ks->fresh[ks->n_fresh++] = *key;
    return true;
}

/* What joining a group takes: the record's level, which operands it recomputes, the slots it
 * adds and its cost. */
typedef struct join_plan {
    uint8_t level;
    bool inl[KIR_MAX_INPUTS];
    keyset ks;
    int insts;
} join_plan;

/* A load of a recomputed value: it must read memory written before the group runs. */
typedef struct leaf_check {
    const part *p;
    int gi;
    const fus_domain *dom;
    const int8_t *map;
    keyset *ks;
    int loads, full; /* loads, and new slots that move along every axis of the domain */
} leaf_check;

static bool check_leaf(void *ctx, int node, int k, const ir_view *v)
{
    leaf_check *lc = ctx;
    int q = fus_prod(&lc->p->c, node, k);
    if (q >= 0 && (lc->p->c.group[q] < 0 || lc->p->c.group[q] >= lc->gi))
        return false;
    fus_slot_key key;
    fus_view_key(lc->dom, lc->map, &lc->p->c.recs[node]->in[k], v, &key);
    lc->loads++;
    int fresh = lc->ks->n_fresh;
    if (!keyset_add(lc->ks, &key))
        return false;
    bool full = lc->ks->n_fresh > fresh && !(q >= 0 && lc->p->sunk && lc->p->sunk[q]);
    for (int t = 0; full && t < lc->dom->rank; t++)
        full = key.strides[t] != 0;
    lc->full += full;
    return true;
}

/* Operand k of r recomputed in group gi (keys added to jp on success). */
static bool try_recompute(const part *p, int gi, const fus_domain *dom, const int8_t *map, int r, int k,
                          join_plan *jp)
{
    int pr = fus_prod(&p->c, r, k);
    if (pr < 0 || !p->c.recomp[pr])
        return false;
    keyset trial = jp->ks;
    leaf_check lc = {.p = p, .gi = gi, .dom = dom, .map = map, .ks = &trial};
    if (!fus_inline_walk(&p->c, pr, &p->c.recs[r]->in[k].view, check_leaf, &lc))
        return false;
    /* Reading the value instead moves at most two tensors (its store, unless it is stored anyway,
     * and the load), and from an earlier kernel it needs no cut. So a recomputation that reads
     * three new tensors, or two of an earlier kernel, is refused. On the H200, in burnc-bench's
     * deep MLP step: the bias gradient took 30.6 us recomputing the LayerNorm's input gradient
     * from two tensors and four row vectors, 12-14 us reading it; the LayerNorm backward, which
     * recomputed the GELU's backward from three tensors, went 41.7 -> 27-28 us. */
    if (lc.full > 2 || (lc.full == 2 && p->c.group[pr] != gi))
        return false;
    jp->ks = trial;
    jp->inl[k] = true;
    jp->insts += 8 * (lc.loads + 1);
    return true;
}

/* How a record is checked against a group. A record starting a group is always accepted
 * (FIRST_PLAIN: it loads what it reads, whatever the bounds); FIRST tries it with what it
 * recomputes, within the bound on inputs. */
typedef enum join_mode { JOIN, FIRST, FIRST_PLAIN } join_mode;

/* Whether record r can join group gi; on success what it takes, on failure why (for the log). */
static bool can_join(part *p, int gi, int r, join_mode mode, join_plan *jp, char *why, size_t cap)
{
    bool first = mode != JOIN;
    pgroup *g = &p->groups[gi];
    const ir_record *rec = p->c.recs[r];
    const char *name = ir_op_name(rec->op);
    if (g->opaque)
        return refuse(why, cap, "opaque");
    int8_t map[BURNC_MAX_RANK];
    int lv = fit_level(g, rec, map);
    if (lv < 0)
        return refuse(why, cap, "%s iterates another shape", name);
    fus_domain dom = g->dom;
    if (fus_is_reduce(rec)) {
        uint32_t m = reduce_mask(rec, map);
        if (dom.reduce && m != dom.mask)
            return refuse(why, cap, "%s reduces other axes", name);
        if (!first && g->n_stages + stages_of(rec) > KIR_MAX_STAGES)
            return refuse(why, cap, "%s: at most %d reduction stages", name, KIR_MAX_STAGES);
        dom.reduce = true;
        dom.mask = m;
    }
    *jp = (join_plan){.level = fus_is_reduce(rec) ? FUS_ROW : (uint8_t)lv, /* a reduction's value is per row */
                      .ks = {.g = g, .max = mode == FIRST_PLAIN ? KIR_MAX_INPUTS : p->max_inputs},
                      .insts = est_insts(p, rec)};
    /* Operand keys and register checks see the member at its level in the joined domain. */
    uint8_t saved = p->c.level[r];
    p->c.level[r] = (uint8_t)lv;
    bool ok = true;
    for (int k = 0; ok && k < rec->n_in; k++) {
        int pr = fus_prod(&p->c, r, k);
        if (pr >= 0 && p->c.group[pr] == gi && reads_register(p, &dom, r, k, pr))
            continue;
        if (mode != FIRST_PLAIN && try_recompute(p, gi, &dom, map, r, k, jp))
            continue;
        if (pr >= 0 && p->c.group[pr] == gi)
            ok = refuse(why, cap, "%s reads %s through a view", name, ir_op_name(p->c.recs[pr]->op));
        else if (pr >= 0 && p->c.group[pr] > gi)
            ok = refuse(why, cap, "%s also reads a later kernel", name);
        else {
            fus_slot_key key;
            fus_operand_key(&p->c, &dom, r, k, &key);
            if (!keyset_add(&jp->ks, &key))
                ok = refuse(why, cap, "%s: at most %d inputs", name, p->max_inputs);
        }
    }
    p->c.level[r] = saved;
    if (!ok || first)
        return ok;
    if (g->n_insts + jp->insts > p->max_insts)
        return refuse(why, cap, "%s: at most %d instructions", name, p->max_insts);
    if (g->n_scalars + scalars_of(rec, dom.rank) > FUS_MAX_SCALARS)
        return refuse(why, cap, "%s: at most %d scalars", name, FUS_MAX_SCALARS);
    return true;
}

/* Adds r to group gi as jp says. */
static bool join(part *p, int gi, int r, const join_plan *jp)
{
    pgroup *g = &p->groups[gi];
    const ir_record *rec = p->c.recs[r];
    if (!add_member(g, r))
        return false;
    p->c.group[r] = gi;
    p->c.level[r] = jp->level;
    if (g->opaque)
        return true;
    if (fus_is_reduce(rec) && !g->dom.reduce) {
        int8_t map[BURNC_MAX_RANK];
        fit_level(g, rec, map);
        g->dom.reduce = true;
        g->dom.mask = reduce_mask(rec, map);
    }
    for (int k = 0; k < rec->n_in; k++)
        p->c.inl[p->c.prod_start[r] + k] = jp->inl[k];
    for (int i = 0; i < jp->ks.n_fresh && g->n_keys < KIR_MAX_INPUTS; i++)
        g->keys[g->n_keys++] = jp->ks.fresh[i];
    g->n_insts += jp->insts;
    g->n_stages += stages_of(rec);
    g->n_scalars += scalars_of(rec, g->dom.rank);
    return true;
}

static bool new_group(part *p, int r)
{
    if (p->n_groups == p->cap_groups) {
        int cap = p->cap_groups ? 2 * p->cap_groups : 16;
        pgroup *gs = realloc(p->groups, (size_t)cap * sizeof *gs);
        if (!gs)
            return false;
        p->groups = gs;
        p->cap_groups = cap;
    }
    int gi = p->n_groups++;
    pgroup *g = &p->groups[gi];
    memset(g, 0, sizeof *g);
    const ir_record *rec = p->c.recs[r];
    g->opaque = is_opaque(rec);
    join_plan jp = {.level = FUS_FULL};
    if (g->opaque) {
        snprintf(g->why, sizeof g->why, "%s runs alone (opaque)", ir_op_name(rec->op));
        return join(p, gi, r, &jp);
    }
    int rank;
    const int64_t *shape;
    fus_dom_shape(rec, &rank, &shape);
    for (int a = 0; a < rank; a++)
        if (shape[a] != 1)
            g->dom.shape[g->dom.rank++] = shape[a];
    char why[96];
    if (!can_join(p, gi, r, FIRST, &jp, why, sizeof why))
        can_join(p, gi, r, FIRST_PLAIN, &jp, why, sizeof why); /* its own shape, earlier groups: fits */
    return join(p, gi, r, &jp);
}

/* The groups to try for r, best first: those of its producers, latest first (register values
 * and what it recomputes), then recent groups after all of them (siblings share launches and
 * inputs). */
static int candidates(const part *p, int r, int *out, int cap)
{
    const ir_record *rec = p->c.recs[r];
    int n = 0, latest = -1;
    for (int k = 0; k < rec->n_in; k++) {
        int gi = fus_prod(&p->c, r, k) >= 0 ? p->c.group[fus_prod(&p->c, r, k)] : -1;
        bool seen = gi < 0;
        for (int i = 0; i < n && !seen; i++)
            seen = out[i] == gi;
        if (seen || n == cap)
            continue;
        int at = n++;
        while (at > 0 && out[at - 1] < gi) { /* keep descending order */
            out[at] = out[at - 1];
            at--;
        }
        out[at] = gi;
        latest = gi > latest ? gi : latest;
    }
    for (int gi = p->n_groups - 1; gi > latest && n < cap && gi >= p->n_groups - SIBLING_WINDOW; gi--)
        out[n++] = gi;
    return n;
}

static bool place(part *p, int r)
{
    if (p->no_join[r]) /* a split of the last pass: the groups r reads end here */
        for (int k = 0; k < p->c.recs[r]->n_in; k++) {
            int pr = fus_prod(&p->c, r, k);
            if (pr >= 0 && p->c.group[pr] >= 0)
                set_why(&p->groups[p->c.group[pr]], "split: at most %d outputs per kernel", KIR_MAX_OUTPUTS);
        }
    if (is_opaque(p->c.recs[r]) || !p->fuse || p->no_join[r])
        return new_group(p, r);
    int cand[KIR_MAX_INPUTS + SIBLING_WINDOW];
    int n = candidates(p, r, cand, KIR_MAX_INPUTS + SIBLING_WINDOW);
    char why[96];
    join_plan jp;
    for (int i = 0; i < n; i++) {
        if (can_join(p, cand[i], r, JOIN, &jp, why, sizeof why))
            return join(p, cand[i], r, &jp);
        /* a group r reads and cannot join ends here (the first reason is the one kept) */
        for (int k = 0; k < p->c.recs[r]->n_in; k++) {
            int pr = fus_prod(&p->c, r, k);
            if (pr >= 0 && p->c.group[pr] == cand[i])
                set_why(&p->groups[cand[i]], "%s", why);
        }
    }
    return new_group(p, r);
}

static void free_groups(part *p)
{
    for (int i = 0; i < p->n_groups; i++)
        free(p->groups[i].members);
    free(p->groups);
    p->groups = NULL;
    p->n_groups = p->cap_groups = 0;
}

static bool mark_leaf(void *ctx, int node, int k, const ir_view *v)
{
    (void)v;
    fus_ctx *c = ctx;
    int q = fus_prod(c, node, k);
    if (q >= 0)
        c->out[q] = true;
    return true;
}

/* Which members are stored: held by the user, or read from memory by another group (directly
 * or by the loads of a value it recomputes). */
static void find_outputs(part *p)
{
    fus_ctx *c = &p->c;
    for (int r = 0; r < c->n; r++)
        c->out[r] = p->live[r] && (!p->needed_outside || p->needed_outside[r]);
    for (int r = 0; r < c->n; r++) {
        if (!p->live[r])
            continue;
        for (int k = 0; k < c->recs[r]->n_in; k++) {
            int pr = fus_prod(c, r, k);
            if (fus_inl(c, r, k))
                fus_inline_walk(c, pr, &c->recs[r]->in[k].view, mark_leaf, c);
            else if (pr >= 0 && c->group[pr] != c->group[r])
                c->out[pr] = true;
        }
    }
}

/* Drops members that nothing reads any more (every reader recomputes them); true when one
 * was dropped, which may free their own producers. */
static bool prune(part *p, bool *reg)
{
    fus_ctx *c = &p->c;
    memset(reg, 0, (size_t)(c->n > 0 ? c->n : 0) * sizeof *reg);
    for (int r = 0; r < c->n; r++)
        for (int k = 0; p->live[r] && k < c->recs[r]->n_in; k++) {
            int pr = fus_prod(c, r, k);
            if (pr >= 0 && !fus_inl(c, r, k) && c->group[pr] == c->group[r])
                reg[pr] = true;
        }
    bool dropped = false;
    for (int gi = 0; gi < p->n_groups; gi++) {
        pgroup *g = &p->groups[gi];
        int kept = 0;
        for (int i = 0; i < g->n_members; i++) {
            int m = g->members[i];
            if (!g->opaque && !c->out[m] && !reg[m]) {
                p->live[m] = false;
                c->group[m] = -1;
                dropped = true;
            } else {
                g->members[kept++] = m;
            }
        }
        g->n_members = kept;
    }
    return dropped;
}

/* Removes the groups pruning emptied; the order (a dependency order) is kept. */
static void compact_groups(part *p)
{
    int n = 0;
    for (int gi = 0; gi < p->n_groups; gi++) {
        if (p->groups[gi].n_members == 0) {
            free(p->groups[gi].members);
            continue;
        }
        p->groups[n] = p->groups[gi];
        for (int i = 0; i < p->groups[n].n_members; i++)
            p->c.group[p->groups[n].members[i]] = n;
        n++;
    }
    p->n_groups = n;
}

/* Marks where groups with more than KIR_MAX_OUTPUTS stores split: at every member whose
 * store would overflow the part of the group since the last split. Returns how many. (A split
 * may make an earlier part store more, what a later member loaded from it: the next pass
 * splits again where needed.) */
static int split_overflows(part *p)
{
    int splits = 0;
    for (int gi = 0; gi < p->n_groups; gi++) {
        const pgroup *g = &p->groups[gi];
        int stores = 0;
        for (int i = 0; i < g->n_members && !g->opaque; i++) {
            int m = g->members[i];
            if (!p->c.out[m] || ++stores <= KIR_MAX_OUTPUTS)
                continue;
            p->no_join[m] = true;
            stores = 1;
            splits++;
        }
    }
    return splits;
}

static burnc_status_t assign(part *p)
{
    fus_ctx *c = &p->c;
    bool *reg = malloc((size_t)(c->n ? c->n : 1) * sizeof *reg);
    if (!reg)
        return BURNC_ERR_OUT_OF_MEMORY;
    for (;;) {
        memcpy(p->live, p->live_all, (size_t)(c->n > 0 ? c->n : 0) * sizeof *p->live);
        memset(c->inl, 0, (size_t)(c->n_ops > 0 ? c->n_ops : 0) * sizeof *c->inl);
        for (int r = 0; r < c->n; r++)
            c->group[r] = -1;
        for (int r = 0; r < c->n; r++)
            if (p->live[r] && !place(p, r)) {
                free(reg);
                return BURNC_ERR_OUT_OF_MEMORY;
            }
        do
            find_outputs(p);
        while (prune(p, reg));
        compact_groups(p);
        if (split_overflows(p) == 0)
            break;
        free_groups(p);
    }
    free(reg);
    return BURNC_OK;
}

/* ---- Storing a shared operand instead of its products ----------------------------------- */

/* Bytes the groups store, of values that move along every axis of their domain. */
static int64_t full_store_bytes(const part *p)
{
    int64_t bytes = 0;
    for (int gi = 0; gi < p->n_groups; gi++) {
        const pgroup *g = &p->groups[gi];
        for (int i = 0; i < g->n_members && !g->opaque; i++) {
            const ir_record *rec = p->c.recs[g->members[i]];
            if (p->c.out[g->members[i]] && p->c.level[g->members[i]] == FUS_FULL)
                bytes += ir_numel(rec->out_rank, rec->out_shape) * (int64_t)ir_dtype_size(rec->dtype);
        }
    }
    return bytes;
}

/* Whether member x of group gi (full, unstored, recomputable) is the register operand of at
 * least two stored, recomputable full members: products that a later group reads and could
 * compute from x (a LayerNorm's backward: its column kernel stored dy * rstd and dy * (x -
 * mean) for its row kernel, which recomputes x - mean anyway; storing dy instead moves one
 * tensor less twice, 32 MB a block of the deep MLP). */
static bool shared_operand(const part *p, int gi, int x)
{
    const fus_ctx *c = &p->c;
    if (c->out[x] || !c->recomp[x] || c->level[x] != FUS_FULL)
        return false;
    const pgroup *g = &p->groups[gi];
    int readers = 0;
    for (int i = 0; i < g->n_members; i++) {
        int e = g->members[i];
        if (!c->out[e] || !c->recomp[e] || c->level[e] != FUS_FULL)
            continue;
        bool reads = false;
        for (int k = 0; k < c->recs[e]->n_in; k++)
            reads |= fus_prod(c, e, k) == x && !fus_inl(c, e, k);
        readers += reads;
    }
    return readers >= 2;
}

/* Where a group stores several cheap products of one operand for later groups, that operand
 * is stored instead (no longer recomputable, so the readers' recomputations stop at it and
 * load it) when the partition that gives stores fewer bytes. */
static burnc_status_t sink_products(part *p)
{
    fus_ctx *c = &p->c;
    size_t n = (size_t)(c->n ? c->n : 1);
    bool *kept = malloc(2 * n * sizeof *kept), *no_join = kept ? kept + n : NULL;
    p->sunk = calloc(n, sizeof *p->sunk);
    if (!kept || !p->sunk) {
        free(kept);
        return BURNC_ERR_OUT_OF_MEMORY;
    }
    memcpy(kept, c->recomp, (size_t)c->n * sizeof *kept);
    memcpy(no_join, p->no_join, (size_t)c->n * sizeof *no_join); /* the trial's splits are its own */
    bool any = false;
    for (int gi = 0; gi < p->n_groups; gi++)
        for (int i = 0; i < p->groups[gi].n_members && !p->groups[gi].opaque; i++)
            if (shared_operand(p, gi, p->groups[gi].members[i])) {
                c->recomp[p->groups[gi].members[i]] = false;
                p->sunk[p->groups[gi].members[i]] = true;
                any = true;
            }
    burnc_status_t s = BURNC_OK;
    if (any) {
        int64_t before = full_store_bytes(p);
        free_groups(p);
        s = assign(p);
        if (s == BURNC_OK && full_store_bytes(p) >= before) {
            memcpy(c->recomp, kept, (size_t)c->n * sizeof *kept);
            memcpy(p->no_join, no_join, (size_t)c->n * sizeof *no_join);
            memset(p->sunk, 0, (size_t)c->n * sizeof *p->sunk);
            free_groups(p);
            s = assign(p);
        }
    }
    free(kept);
    return s;
}

/* ---- The plan ---------------------------------------------------------------------------- */

static void final_why(part *p, pgroup *g)
{
    if (g->why[0])
        return;
    if (!p->fuse)
        snprintf(g->why, sizeof g->why, "eager mode: one kernel per record");
    else
        snprintf(g->why, sizeof g->why, "no later record could join");
}

/* An element-wise kernel right after an opaque matmul that reads the matmul's output is that
 * matmul's epilogue: the backend may run it on the product's tiles as they become final (the
 * cpu device does when the kernel reads the product at the positions it writes). */
static void mark_epilogue(const part *p, fus_plan *out, int gi)
{
    fus_group *fg = &out->groups[gi], *prev = gi > 0 ? &out->groups[gi - 1] : NULL;
    if (!prev || !prev->opaque || fg->opaque || p->c.recs[prev->recs[0]]->op != IR_OP_MATMUL ||
        fg->kernel.n_stages || fg->kernel.n_outer != fg->kernel.rank)
        return;
    for (int i = 0; i < fg->kernel.n_inputs; i++)
        if (fg->in_storage[i] == p->c.recs[prev->recs[0]]->out)
            fg->epilogue = true;
}

static burnc_status_t build_plan(part *p, fus_plan *out, fus_group_src *srcs)
{
    out->groups = calloc((size_t)(p->n_groups ? p->n_groups : 1), sizeof *out->groups);
    if (!out->groups)
        return BURNC_ERR_OUT_OF_MEMORY;
    for (int gi = 0; gi < p->n_groups; gi++) {
        pgroup *g = &p->groups[gi];
        fus_group *fg = &out->groups[gi];
        out->n_groups = gi + 1;
        final_why(p, g);
        if (g->opaque) {
            fg->opaque = true;
            fg->recs = malloc(sizeof *fg->recs);
            if (!fg->recs)
                return BURNC_ERR_OUT_OF_MEMORY;
            fg->n_recs = 1;
            fg->recs[0] = g->members[0];
        } else {
            burnc_status_t s = fus_lower(&p->c, &g->dom, g->members, g->n_members, !p->fuse, fg, &srcs[gi],
                                         out->error, sizeof out->error);
            if (s != BURNC_OK)
                return s;
        }
        snprintf(fg->why_cut, sizeof fg->why_cut, "%s", g->why);
        mark_epilogue(p, out, gi);
    }
    return BURNC_OK;
}

static burnc_status_t alloc_ctx(part *p, ir_record *const *recs, int n)
{
    fus_ctx *c = &p->c;
    c->recs = recs;
    c->n = n;
    size_t m = (size_t)(n ? n : 1);
    c->group = malloc(m * sizeof *c->group);
    c->level = calloc(m, sizeof *c->level);
    c->out = calloc(m, sizeof *c->out);
    c->prod_start = malloc(m * sizeof *c->prod_start);
    c->val = malloc(m * sizeof *c->val);
    c->recomp = calloc(m, sizeof *c->recomp);
    p->live = calloc(m, sizeof *p->live);
    p->live_all = calloc(m, sizeof *p->live_all);
    p->no_join = calloc(m, sizeof *p->no_join);
    if (!c->group || !c->level || !c->out || !c->prod_start || !c->val || !c->recomp || !p->live || !p->live_all ||
        !p->no_join)
        return BURNC_ERR_OUT_OF_MEMORY;
    size_t n_ops = 0;
    for (int r = 0; r < n; r++) {
        c->prod_start[r] = (int)n_ops;
        n_ops += (size_t)(recs[r]->n_in > 0 ? recs[r]->n_in : 0);
    }
    c->n_ops = (int)n_ops;
    c->prod = malloc((n_ops ? n_ops : 1) * sizeof *c->prod);
    c->inl = calloc(n_ops ? n_ops : 1, sizeof *c->inl);
    return c->prod && c->inl ? BURNC_OK : BURNC_ERR_OUT_OF_MEMORY;
}

static void free_ctx(part *p)
{
    free_groups(p);
    free(p->c.group);
    free(p->c.level);
    free(p->c.out);
    free(p->c.prod_start);
    free(p->c.prod);
    free(p->c.val);
    free(p->c.inl);
    free(p->c.recomp);
    free(p->live);
    free(p->live_all);
    free(p->no_join);
    free(p->sunk);
}

/* Records the batch could not have produced: the caller's bug, reported instead of followed. */
static bool records_sane(ir_record *const *recs, int n)
{
    for (int r = 0; r < n; r++) {
        const ir_record *rec = recs[r];
        if (!rec || (unsigned)rec->op >= IR_OP_COUNT || rec->n_in < 0 || (rec->n_in && !rec->in) ||
            rec->out_rank < 0 || rec->out_rank > BURNC_MAX_RANK)
            return false;
        for (int k = 0; k < rec->n_in; k++)
            if (rec->in[k].view.rank < 0 || rec->in[k].view.rank > BURNC_MAX_RANK)
                return false;
        if (!is_opaque(rec) && ir_op_class(rec->op) != IR_CLASS_SOURCE && rec->n_in < 1)
            return false;
        if (!is_opaque(rec) && rec->n_in > KIR_MAX_INPUTS)
            return false;
    }
    return true;
}

burnc_status_t fus_partition(ir_record *const *recs, int n, const bool *needed_outside, const fus_options *opt,
                             fus_plan *out)
{
    memset(out, 0, sizeof *out);
    if (n < 0 || (n > 0 && !recs) || !records_sane(recs, n)) {
        snprintf(out->error, sizeof out->error, "fusion: a malformed batch of %d records", n);
        return BURNC_ERR_INTERNAL;
    }
    fus_key key;
    int64_t key_buf[KEY_WORDS_ON_STACK];
    bool cacheable = fus_key_make(recs, n, needed_outside, opt, &key, key_buf, KEY_WORDS_ON_STACK);
    if (cacheable && fus_cache_lookup(&key, recs, out)) {
        fus_key_free(&key);
        return BURNC_OK;
    }
    part p = {.needed_outside = needed_outside, .fuse = !opt || opt->fuse};
    p.max_insts = opt && opt->max_insts > 0 ? opt->max_insts : DEFAULT_MAX_INSTS;
    p.max_inputs = opt && opt->max_inputs > 0 && opt->max_inputs < KIR_MAX_INPUTS ? opt->max_inputs : KIR_MAX_INPUTS;
    fus_group_src *srcs = NULL;
    burnc_status_t s = alloc_ctx(&p, recs, n);
    if (s == BURNC_OK)
        s = find_producers(&p);
    if (s == BURNC_OK) {
        find_live(&p);
        find_recomputable(&p);
        s = assign(&p);
    }
    if (s == BURNC_OK && p.fuse)
        s = sink_products(&p);
    if (s == BURNC_OK) {
        srcs = calloc((size_t)(p.n_groups ? p.n_groups : 1), sizeof *srcs);
        s = srcs ? build_plan(&p, out, srcs) : BURNC_ERR_OUT_OF_MEMORY;
    }
    free_ctx(&p);
    if (s == BURNC_OK && cacheable)
        fus_cache_insert(&key, out, srcs);
    free(srcs);
    fus_key_free(&key);
    if (s != BURNC_OK) {
        if (s == BURNC_ERR_OUT_OF_MEMORY && !out->error[0])
            snprintf(out->error, sizeof out->error, "fusion: out of memory");
        char keep[sizeof out->error];
        memcpy(keep, out->error, sizeof keep);
        fus_plan_free(out);
        memcpy(out->error, keep, sizeof keep);
    }
    return s;
}

void fus_plan_free(fus_plan *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_groups; i++) {
        free(p->groups[i].recs);
        kir_free(&p->groups[i].kernel);
    }
    free(p->groups);
    memset(p, 0, sizeof *p);
}
