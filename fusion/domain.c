/* Domains and index maps: how a record's shape and views line up with its group's axes. */
#include <string.h>

#include "internal.h"

bool fus_is_reduce(const ir_record *r)
{
    return ir_op_class(r->op) == IR_CLASS_REDUCE;
}

void fus_dom_shape(const ir_record *r, int *rank, const int64_t **shape)
{
    if ((fus_is_reduce(r) || r->op == IR_OP_COPY) && r->n_in >= 1) {
        *rank = r->in[0].view.rank;
        *shape = r->in[0].view.shape;
    } else {
        *rank = r->out_rank;
        *shape = r->out_shape;
    }
}

/* Whether domain axis t belongs to `level` (ROW: only the axes a reduction keeps). */
static bool on_level(const fus_domain *d, int level, int t)
{
    return level == FUS_FULL || !(d->mask >> t & 1);
}

bool fus_axis_map(const fus_domain *d, int level, int rank, const int64_t *shape, int8_t *map)
{
    if (rank < 0 || rank > BURNC_MAX_RANK)
        return false;
    int t = 0;
    for (int a = 0; a < rank; a++) {
        map[a] = -1;
        if (shape[a] == 1)
            continue;
        while (t < d->rank && !on_level(d, level, t))
            t++;
        if (t >= d->rank || d->shape[t] != shape[a])
            return false;
        map[a] = (int8_t)t++;
    }
    while (t < d->rank && !on_level(d, level, t))
        t++;
    return t == d->rank;
}

void fus_map_strides(const fus_domain *d, const int8_t *map, const ir_view *v, int64_t *out)
{
    memset(out, 0, BURNC_MAX_RANK * sizeof *out);
    for (int a = 0; a < v->rank; a++)
        if (map[a] >= 0 && map[a] < d->rank)
            out[map[a]] = v->strides[a];
}

void fus_out_strides(const fus_domain *d, int level, int64_t *out)
{
    memset(out, 0, BURNC_MAX_RANK * sizeof *out);
    int64_t stride = 1;
    for (int t = d->rank - 1; t >= 0; t--) {
        if (!on_level(d, level, t))
            continue;
        out[t] = stride;
        stride *= d->shape[t] > 0 ? d->shape[t] : 1; /* as ir_view_dense */
    }
}

bool fus_record_map(const fus_ctx *c, const fus_domain *d, int r, int8_t *map)
{
    const ir_record *rec = c->recs[r];
    int rank;
    const int64_t *shape;
    fus_dom_shape(rec, &rank, &shape);
    /* a reduction reads its input at every position; other members at their own level */
    int level = fus_is_reduce(rec) ? FUS_FULL : c->level[r];
    if (fus_axis_map(d, level, rank, shape, map))
        return true;
    memset(map, -1, BURNC_MAX_RANK); /* partition never asks for a member that does not fit */
    return false;
}

void fus_view_key(const fus_domain *d, const int8_t *map, const ir_operand *op, const ir_view *v, fus_slot_key *key)
{
    memset(key, 0, sizeof *key);
    key->st = op->storage;
    key->dtype = op->dtype;
    key->offset = v->offset;
    fus_map_strides(d, map, v, key->strides);
}

void fus_operand_key(const fus_ctx *c, const fus_domain *d, int r, int k, fus_slot_key *key)
{
    int8_t map[BURNC_MAX_RANK];
    fus_record_map(c, d, r, map);
    const ir_operand *op = &c->recs[r]->in[k];
    fus_view_key(d, map, op, &op->view, key);
}

bool fus_key_equal(const fus_slot_key *a, const fus_slot_key *b, int rank)
{
    if (a->st != b->st || a->dtype != b->dtype || a->offset != b->offset)
        return false;
    for (int t = 0; t < rank; t++)
        if (a->strides[t] != b->strides[t])
            return false;
    return true;
}
