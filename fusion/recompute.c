/* Recomputing a cheap value where it is read (DESIGN.md: never duplicate an expensive producer
 * into a broadcasting consumer, so duplicate only cheap ones).
 *
 * A consumer that reads a member through a view other than the member's own index map (a
 * broadcast, a transpose, a slice, a reshape) cannot take its register value. When the
 * member is cheap and nobody holds it, the consumer computes it again at its own positions:
 * the member's inputs are read through their views composed with the consumer's view. An input
 * produced by another cheap record is recomputed the same way, down to a bounded depth; the
 * rest are loads. The value is then never stored, and the consumer needs no cut. */
#include <string.h>

#include "internal.h"

/* Deeper or larger trees cost more than the traffic they save. */
enum { MAX_DEPTH = 4, MAX_NODES = 8 };

static bool mul_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }

static bool add_ok(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }

/* The first axis of a dense layout whose step divides `step` (the largest such step): the
 * axis a view's stride walks, if it walks one. */
static int axis_of_step(int rank, const int64_t *shape, const int64_t *dense, int64_t step)
{
    for (int a = 0; a < rank; a++)
        if (shape[a] > 1 && dense[a] <= step && step % dense[a] == 0)
            return a;
    return -1;
}

bool fus_compose(const ir_view *v, int rank, const int64_t *shape, const ir_view *w, ir_view *out)
{
    *out = (ir_view){.rank = v->rank, .offset = w->offset};
    memcpy(out->shape, v->shape, sizeof out->shape);
    if (ir_numel(v->rank, v->shape) == 0)
        return true; /* no positions: nothing is read */
    int64_t dense[BURNC_MAX_RANK], n = 1;
    for (int a = rank - 1; a >= 0; a--) {
        dense[a] = n;
        n *= shape[a];
    }
    if (v->offset < 0 || v->offset >= n)
        return false;
    /* the coordinates of the first position, and the box every other one stays in */
    int64_t lo[BURNC_MAX_RANK], hi[BURNC_MAX_RANK], rem = v->offset;
    for (int a = 0; a < rank; a++) {
        lo[a] = hi[a] = rem / dense[a];
        rem %= dense[a];
        int64_t t;
        if (!mul_ok(lo[a], w->strides[a], &t) || !add_ok(out->offset, t, &out->offset))
            return false;
    }
    for (int d = 0; d < v->rank; d++) {
        int64_t s = v->strides[d];
        if (v->shape[d] == 1 || s == 0)
            continue;
        int a = axis_of_step(rank, shape, dense, s < 0 ? -s : s);
        if (a < 0)
            return false;
        int64_t m = s / dense[a], span;
        if (!mul_ok(m, v->shape[d] - 1, &span) || !mul_ok(m, w->strides[a], &out->strides[d]))
            return false;
        int64_t *edge = span > 0 ? &hi[a] : &lo[a];
        if (!add_ok(*edge, span, edge))
            return false;
    }
    /* within the box the coordinates never carry into the next axis: the map is affine */
    for (int a = 0; a < rank; a++)
        if (lo[a] < 0 || hi[a] > shape[a] - 1)
            return false;
    return true;
}

bool fus_recurse_into(const fus_ctx *c, int q, int depth)
{
    return q >= 0 && c->recomp[q] && depth + 1 < MAX_DEPTH;
}

static bool walk(const fus_ctx *c, int p, const ir_view *v, int depth, int *nodes, fus_leaf_fn leaf, void *ctx)
{
    if (++*nodes > MAX_NODES)
        return false;
    const ir_record *rec = c->recs[p];
    for (int j = 0; j < rec->n_in; j++) {
        ir_view w;
        if (!fus_compose(v, rec->out_rank, rec->out_shape, &rec->in[j].view, &w))
            return false;
        int q = fus_prod(c, p, j);
        bool ok = fus_recurse_into(c, q, depth) ? walk(c, q, &w, depth + 1, nodes, leaf, ctx) : leaf(ctx, p, j, &w);
        if (!ok)
            return false;
    }
    return true;
}

bool fus_inline_walk(const fus_ctx *c, int p, const ir_view *v, fus_leaf_fn leaf, void *ctx)
{
    int nodes = 0;
    return walk(c, p, v, 0, &nodes, leaf, ctx);
}
