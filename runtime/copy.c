/* Movement ops that copy: contiguous, cat, stack, pad, and the index ops. */
#include <string.h>

#include "autodiff/ad.h"
#include "rt.h"

static rt_device *device_of(const char *op, burnc_tensor_t *const *ts, int n)
{
    rt_device *dev = ts[0]->st->dev;
    for (int i = 1; i < n; i++)
        if (ts[i]->st->dev != dev) {
            rt_fail(BURNC_ERR_DEVICE_MISMATCH, "%s: operands live on %s and %s", op, dev->spec, ts[i]->st->dev->spec);
            return NULL;
        }
    return dev;
}

/* out, with its tape node when an input tracks gradients (autodiff/tape.c). */
static burnc_tensor_t *track(ir_op op, int n, burnc_tensor_t *const *ins, burnc_tensor_t *out, const ad_params *p)
{
    return out && rt_ad_wanted(n, ins) ? ad_track(op, n, ins, out, p) : out;
}

static void set_out_shape(ir_record *r, int rank, const int64_t *shape)
{
    r->out_rank = rank;
    if (rank)
        memcpy(r->out_shape, shape, (size_t)rank * sizeof *shape);
}

burnc_tensor_t *burnc_contiguous(burnc_tensor_t *x)
{
    if (!x)
        return NULL;
    if (ir_view_is_dense(&x->view))
        RT_PUBLIC(rt_ad_reshape(x, rt_view(x, &x->view)));
    rt_device *dev = x->st->dev;
    ir_record *r = rt_record_begin(dev, IR_OP_COPY, 1);
    if (!r)
        return NULL;
    r->dtype = r->compute = x->dtype;
    set_out_shape(r, x->view.rank, x->view.shape);
    rt_record_input(r, 0, x, NULL);
    RT_PUBLIC(track(IR_OP_COPY, 1, &x, rt_record_commit(dev, r), NULL));
}

static burnc_tensor_t *cat(int n, burnc_tensor_t *const *xs, int axis)
{
    const char *op = "burnc_cat";
    rt_device *dev = device_of(op, xs, n);
    if (!dev)
        return NULL;
    int rank = xs[0]->view.rank, a;
    if (rank == 0) {
        rt_fail(BURNC_ERR_SHAPE, "%s: rank-0 tensors cannot be joined (use burnc_stack)", op);
        return NULL;
    }
    if (rt_axis(op, axis, rank, &a) != BURNC_OK)
        return NULL;
    int64_t shape[BURNC_MAX_RANK];
    memcpy(shape, xs[0]->view.shape, sizeof shape);
    shape[a] = 0;
    burnc_dtype_t dt = xs[0]->dtype;
    for (int i = 0; i < n; i++) {
        bool fits = xs[i]->view.rank == rank;
        for (int d = 0; fits && d < rank; d++)
            fits = d == a || xs[i]->view.shape[d] == xs[0]->view.shape[d];
        if (!fits) {
            char s0[200], si[200];
            rt_fail(BURNC_ERR_SHAPE, "%s: tensor %d has shape %s, which does not fit %s along axis %d", op, i,
                    rt_shape_str(si, sizeof si, xs[i]->view.rank, xs[i]->view.shape),
                    rt_shape_str(s0, sizeof s0, rank, xs[0]->view.shape), a);
            return NULL;
        }
        shape[a] += xs[i]->view.shape[a];
        dt = ir_promote(dt, xs[i]->dtype);
    }
    if (rt_check_shape(op, rank, shape, dt) != BURNC_OK)
        return NULL;
    burnc_tensor_t *cs[n];
    int made = 0;
    for (; made < n; made++)
        if (!(cs[made] = rt_cast(xs[made], dt)))
            break;
    burnc_tensor_t *out = NULL;
    ir_record *r = made == n ? rt_record_begin(dev, IR_OP_CAT, n) : NULL;
    if (r) {
        r->dtype = r->compute = dt;
        r->i[0] = a;
        set_out_shape(r, rank, shape);
        for (int i = 0; i < n; i++)
            rt_record_input(r, i, cs[i], NULL);
        out = track(IR_OP_CAT, n, cs, rt_record_commit(dev, r), &(ad_params){.axis = a});
    }
    for (int i = 0; i < made; i++)
        rt_tensor_unref(cs[i]);
    return out;
}

static bool any_null(int n, burnc_tensor_t *const *xs)
{
    for (int i = 0; i < n; i++)
        if (!xs[i])
            return true;
    return false;
}

static burnc_status_t check_list(const char *op, int n, burnc_tensor_t *const *xs)
{
    if (n < 1 || n > 4096 || !xs)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: %d tensors given (1..4096)", op, n);
    return BURNC_OK;
}

burnc_tensor_t *burnc_cat(int n, burnc_tensor_t *const *xs, int axis)
{
    if (check_list("burnc_cat", n, xs) != BURNC_OK || any_null(n, xs))
        return NULL;
    RT_PUBLIC(cat(n, xs, axis));
}

static burnc_tensor_t *stack(int n, burnc_tensor_t *const *xs, int axis)
{
    int rank = xs[0]->view.rank;
    for (int i = 1; i < n; i++)
        if (xs[i]->view.rank != rank || memcmp(xs[i]->view.shape, xs[0]->view.shape, (size_t)rank * 8) != 0) {
            char s0[200], si[200];
            rt_fail(BURNC_ERR_SHAPE, "burnc_stack: tensor %d has shape %s, tensor 0 %s", i,
                    rt_shape_str(si, sizeof si, xs[i]->view.rank, xs[i]->view.shape),
                    rt_shape_str(s0, sizeof s0, rank, xs[0]->view.shape));
            return NULL;
        }
    burnc_tensor_t *us[n];
    int made = 0;
    for (; made < n; made++)
        if (!(us[made] = rt_unsqueeze(xs[made], axis)))
            break;
    burnc_tensor_t *out = made == n ? cat(n, us, axis < 0 ? axis + rank + 1 : axis) : NULL;
    for (int i = 0; i < made; i++)
        rt_tensor_unref(us[i]);
    return out;
}

burnc_tensor_t *burnc_stack(int n, burnc_tensor_t *const *xs, int axis)
{
    if (check_list("burnc_stack", n, xs) != BURNC_OK || any_null(n, xs))
        return NULL;
    RT_PUBLIC(stack(n, xs, axis));
}

static burnc_tensor_t *pad(burnc_tensor_t *x, const int64_t *pads, double value)
{
    const char *op = "burnc_pad";
    int rank = x->view.rank;
    if (rank && !pads) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: pads is NULL", op);
        return NULL;
    }
    int64_t shape[BURNC_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        int64_t n;
        if (__builtin_add_overflow(x->view.shape[d], pads[2 * d], &n) ||
            __builtin_add_overflow(n, pads[2 * d + 1], &n) || n < 0) {
            rt_fail(BURNC_ERR_SHAPE, "%s: pads %lld and %lld make axis %d of size %lld negative or too large", op,
                    (long long)pads[2 * d], (long long)pads[2 * d + 1], d, (long long)x->view.shape[d]);
            return NULL;
        }
        shape[d] = n;
    }
    rt_device *dev = x->st->dev;
    if (rt_check_shape(op, rank, shape, x->dtype) != BURNC_OK)
        return NULL;
    ir_record *r = rt_record_begin(dev, IR_OP_PAD, 1);
    if (!r)
        return NULL;
    r->pads = rt_record_alloc(dev, (size_t)(2 * rank + 1) * sizeof *r->pads);
    if (!r->pads) {
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "%s: out of memory while recording", op);
        r->n_in = 0;
        rt_record_abort(dev, r);
        return NULL;
    }
    memcpy(r->pads, pads, (size_t)(2 * rank) * sizeof *pads);
    r->dtype = r->compute = x->dtype;
    r->scalar[0] = ir_scalar_to_dtype(value, x->dtype);
    set_out_shape(r, rank, shape);
    rt_record_input(r, 0, x, NULL);
    burnc_tensor_t *out = rt_record_commit(dev, r);
    if (!out || !rt_ad_wanted(1, &x))
        return out;
    ad_params p = {.scalar = {ir_scalar_to_dtype(value, x->dtype)}};
    memcpy(p.pads, pads, (size_t)(2 * rank) * sizeof *pads);
    return ad_track(IR_OP_PAD, 1, &x, out, &p);
}

burnc_tensor_t *burnc_pad(burnc_tensor_t *x, const int64_t *pads, double value)
{
    if (!x)
        return NULL;
    RT_PUBLIC(pad(x, pads, value));
}

/* ---- Index ops ---- */
static burnc_status_t check_index(const char *op, const burnc_tensor_t *idx)
{
    if (idx->dtype != BURNC_DTYPE_I32 && idx->dtype != BURNC_DTYPE_I64)
        return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "%s: indices must be i32 or i64, got %s", op,
                       ir_dtype_name(idx->dtype));
    return BURNC_OK;
}

static burnc_status_t refuse_bool_x(const char *op, const burnc_tensor_t *x)
{
    if (x->dtype == BURNC_DTYPE_BOOL)
        return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "%s: does not add into bool tensors (cast first)", op);
    return BURNC_OK;
}

/* Records an index op over n operands: the one at idx_slot as i64 indices (-1: none), the
 * others cast to dt. params (may be NULL) fill i[1..3]. */
static burnc_tensor_t *record_index(ir_op op, burnc_dtype_t dt, int axis, int n, burnc_tensor_t *const *xs,
                                    int idx_slot, int rank, const int64_t *shape, const int64_t *params)
{
    rt_device *dev = xs[0]->st->dev;
    burnc_tensor_t *cs[3] = {0};
    int made = 0;
    for (; made < n; made++)
        if (!(cs[made] = rt_cast(xs[made], made == idx_slot ? BURNC_DTYPE_I64 : dt)))
            break;
    burnc_tensor_t *out = NULL;
    ir_record *r = made == n ? rt_record_begin(dev, op, n) : NULL;
    if (r) {
        r->dtype = r->compute = dt;
        r->i[0] = axis;
        if (params)
            memcpy(&r->i[1], params, 3 * sizeof *params);
        set_out_shape(r, rank, shape);
        for (int k = 0; k < n; k++)
            rt_record_input(r, k, cs[k], NULL);
        out = rt_record_commit(dev, r);
        if (out && rt_ad_wanted(n, cs)) {
            ad_params p = {.axis = axis};
            if (params)
                p.first = params[0], p.step = params[1], p.count = params[2];
            out = ad_track(op, n, cs, out, &p);
        }
    }
    for (int k = 0; k < made; k++)
        rt_tensor_unref(cs[k]);
    return out;
}

static burnc_tensor_t *index_select(burnc_tensor_t *x, int axis, burnc_tensor_t *idx)
{
    const char *op = "burnc_index_select";
    burnc_tensor_t *ts[2] = {x, idx};
    int a;
    if (!device_of(op, ts, 2) || check_index(op, idx) != BURNC_OK)
        return NULL;
    if (x->view.rank == 0 || rt_axis(op, axis, x->view.rank, &a) != BURNC_OK) {
        if (x->view.rank == 0)
            rt_fail(BURNC_ERR_AXIS, "%s: a rank-0 tensor has no axis %d", op, axis);
        return NULL;
    }
    if (idx->view.rank != 1) {
        rt_fail(BURNC_ERR_SHAPE, "%s: indices must be 1-D, got rank %d", op, idx->view.rank);
        return NULL;
    }
    int64_t shape[BURNC_MAX_RANK];
    memcpy(shape, x->view.shape, sizeof shape);
    shape[a] = idx->view.shape[0];
    return record_index(IR_OP_INDEX_SELECT, x->dtype, a, 2, ts, 1, x->view.rank, shape, NULL);
}

burnc_tensor_t *burnc_index_select(burnc_tensor_t *x, int axis, burnc_tensor_t *idx)
{
    if (!x || !idx)
        return NULL;
    RT_PUBLIC(index_select(x, axis, idx));
}

/* gather / scatter_add: idx has x's rank and is no larger than x on the other axes. */
static burnc_status_t check_gather_shapes(const char *op, const burnc_tensor_t *x, const burnc_tensor_t *idx,
                                          int axis, int *a)
{
    char sx[200], si[200];
    if (x->view.rank == 0)
        return rt_fail(BURNC_ERR_AXIS, "%s: a rank-0 tensor has no axis %d", op, axis);
    RT_TRY(rt_axis(op, axis, x->view.rank, a));
    bool ok = idx->view.rank == x->view.rank;
    for (int d = 0; ok && d < x->view.rank; d++)
        ok = d == *a || idx->view.shape[d] <= x->view.shape[d];
    if (!ok)
        return rt_fail(BURNC_ERR_SHAPE, "%s: index shape %s does not fit input shape %s along axis %d", op,
                       rt_shape_str(si, sizeof si, idx->view.rank, idx->view.shape),
                       rt_shape_str(sx, sizeof sx, x->view.rank, x->view.shape), *a);
    return BURNC_OK;
}

static burnc_tensor_t *gather(burnc_tensor_t *x, int axis, burnc_tensor_t *idx)
{
    const char *op = "burnc_gather";
    burnc_tensor_t *ts[2] = {x, idx};
    int a;
    if (!device_of(op, ts, 2) || check_index(op, idx) != BURNC_OK ||
        check_gather_shapes(op, x, idx, axis, &a) != BURNC_OK)
        return NULL;
    return record_index(IR_OP_GATHER, x->dtype, a, 2, ts, 1, idx->view.rank, idx->view.shape, NULL);
}

burnc_tensor_t *burnc_gather(burnc_tensor_t *x, int axis, burnc_tensor_t *idx)
{
    if (!x || !idx)
        return NULL;
    RT_PUBLIC(gather(x, axis, idx));
}

static burnc_tensor_t *scatter_add(burnc_tensor_t *x, int axis, burnc_tensor_t *idx, burnc_tensor_t *src)
{
    const char *op = "burnc_scatter_add";
    burnc_tensor_t *ts[3] = {x, idx, src};
    int a;
    if (!device_of(op, ts, 3) || check_index(op, idx) != BURNC_OK || refuse_bool_x(op, x) != BURNC_OK ||
        check_gather_shapes(op, x, idx, axis, &a) != BURNC_OK)
        return NULL;
    if (src->view.rank != idx->view.rank ||
        memcmp(src->view.shape, idx->view.shape, (size_t)idx->view.rank * sizeof(int64_t)) != 0) {
        char si[200], ss[200];
        rt_fail(BURNC_ERR_SHAPE, "%s: src shape %s differs from index shape %s", op,
                rt_shape_str(ss, sizeof ss, src->view.rank, src->view.shape),
                rt_shape_str(si, sizeof si, idx->view.rank, idx->view.shape));
        return NULL;
    }
    return record_index(IR_OP_SCATTER_ADD, x->dtype, a, 3, ts, 1, x->view.rank, x->view.shape, NULL);
}

burnc_tensor_t *burnc_scatter_add(burnc_tensor_t *x, int axis, burnc_tensor_t *idx, burnc_tensor_t *src)
{
    if (!x || !idx || !src)
        return NULL;
    RT_PUBLIC(scatter_add(x, axis, idx, src));
}

static burnc_tensor_t *index_add(burnc_tensor_t *x, int axis, burnc_tensor_t *idx, burnc_tensor_t *src)
{
    const char *op = "burnc_index_add";
    burnc_tensor_t *ts[3] = {x, idx, src};
    int a;
    if (!device_of(op, ts, 3) || check_index(op, idx) != BURNC_OK || refuse_bool_x(op, x) != BURNC_OK)
        return NULL;
    if (x->view.rank == 0) {
        rt_fail(BURNC_ERR_AXIS, "%s: a rank-0 tensor has no axis %d", op, axis);
        return NULL;
    }
    if (rt_axis(op, axis, x->view.rank, &a) != BURNC_OK)
        return NULL;
    bool ok = idx->view.rank == 1 && src->view.rank == x->view.rank;
    for (int d = 0; ok && d < x->view.rank; d++)
        ok = src->view.shape[d] == (d == a ? idx->view.shape[0] : x->view.shape[d]);
    if (!ok) {
        char sx[200], si[200], ss[200];
        rt_fail(BURNC_ERR_SHAPE, "%s: input %s, index %s and src %s do not fit along axis %d", op,
                rt_shape_str(sx, sizeof sx, x->view.rank, x->view.shape),
                rt_shape_str(si, sizeof si, idx->view.rank, idx->view.shape),
                rt_shape_str(ss, sizeof ss, src->view.rank, src->view.shape), a);
        return NULL;
    }
    return record_index(IR_OP_INDEX_ADD, x->dtype, a, 3, ts, 1, x->view.rank, x->view.shape, NULL);
}

burnc_tensor_t *burnc_index_add(burnc_tensor_t *x, int axis, burnc_tensor_t *idx, burnc_tensor_t *src)
{
    if (!x || !idx || !src)
        return NULL;
    RT_PUBLIC(index_add(x, axis, idx, src));
}

static burnc_tensor_t *slice_assign(burnc_tensor_t *x, int axis, int64_t start, int64_t stop, int64_t step,
                                    burnc_tensor_t *value)
{
    const char *op = "burnc_slice_assign";
    burnc_tensor_t *ts[2] = {x, value};
    int a;
    int64_t first, count;
    if (!device_of(op, ts, 2))
        return NULL;
    if (x->view.rank == 0) {
        rt_fail(BURNC_ERR_AXIS, "%s: a rank-0 tensor has no axis %d", op, axis);
        return NULL;
    }
    if (rt_axis(op, axis, x->view.rank, &a) != BURNC_OK ||
        rt_slice_bounds(op, x->view.shape[a], start, stop, step, &first, &count) != BURNC_OK)
        return NULL;
    int64_t slice[BURNC_MAX_RANK];
    memcpy(slice, x->view.shape, sizeof slice);
    slice[a] = count;
    burnc_tensor_t *v = rt_expand_view(value, x->view.rank, slice, op);
    if (!v)
        return NULL;
    burnc_tensor_t *pair[2] = {x, v};
    int64_t params[3] = {first, step, count};
    burnc_tensor_t *out = record_index(IR_OP_SLICE_ASSIGN, x->dtype, a, 2, pair, -1, x->view.rank, x->view.shape,
                                       params);
    rt_tensor_unref(v);
    return out;
}

burnc_tensor_t *burnc_slice_assign(burnc_tensor_t *x, int axis, int64_t start, int64_t stop, int64_t step,
                                   burnc_tensor_t *value)
{
    if (!x || !value)
        return NULL;
    RT_PUBLIC(slice_assign(x, axis, start, stop, step, value));
}
