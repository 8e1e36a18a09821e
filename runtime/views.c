/* Movement ops that are views: a new handle over the same storage, no work recorded. */
#include <string.h>

#include "autodiff/ad.h"
#include "rt.h"

burnc_status_t rt_axis(const char *op, int axis, int rank, int *out)
{
    int n = rank > 0 ? rank : 1;
    if (axis < -n || axis >= n || (rank == 0 && axis != 0 && axis != -1))
        return rt_fail(BURNC_ERR_AXIS, "%s: axis %d is out of range for rank %d", op, axis, rank);
    *out = axis < 0 ? axis + n : axis;
    return BURNC_OK;
}

/* The view keeps x's autodiff context; its tape node (if any) is the caller's to record. */
burnc_tensor_t *rt_view(burnc_tensor_t *x, const ir_view *v)
{
    burnc_tensor_t *t = rt_tensor_new(x->st, x->dtype, v);
    if (t && x->ctx)
        rt_tensor_set_ctx(t, x->ctx);
    return t;
}

/* Views record tape nodes of their own kinds when x tracks gradients (autodiff/tape.c). */
static burnc_tensor_t *track_view(burnc_tensor_t *x, burnc_tensor_t *out, int kind, ad_params *p)
{
    p->rank = out->view.rank;
    memcpy(p->shape, out->view.shape, sizeof p->shape);
    return ad_track(kind, 1, &x, out, p);
}

burnc_tensor_t *rt_ad_reshape(burnc_tensor_t *x, burnc_tensor_t *out)
{
    if (!out || !rt_ad_wanted(1, &x))
        return out;
    ad_params p = {.rank = 0};
    return track_view(x, out, AD_RESHAPE, &p);
}

/* Strides for viewing a dense-in-pieces layout under a new shape, or false when the layout
 * cannot express it (then reshape copies). Groups of old axes that are contiguous with each
 * other map onto groups of new axes with the same element count. */
static bool reshape_strides(const ir_view *v, int rank, const int64_t *shape, int64_t *strides)
{
    int64_t numel = ir_numel(v->rank, v->shape);
    if (numel == 0) {
        ir_view d;
        ir_view_dense(&d, rank, shape);
        memcpy(strides, d.strides, sizeof d.strides);
        return true;
    }
    int o = 0, n = 0;
    while (o < v->rank || n < rank) {
        /* skip size-1 axes: any stride works for them */
        if (n < rank && shape[n] == 1) {
            strides[n++] = 1;
            continue;
        }
        if (o < v->rank && v->shape[o] == 1) {
            o++;
            continue;
        }
        if (o >= v->rank || n >= rank)
            return false;
        /* grow a group of old axes [o0, o) and new axes [n0, n) until their counts match */
        int o0 = o, n0 = n;
        int64_t old_count = v->shape[o++], new_count = shape[n++];
        while (old_count != new_count) {
            if (old_count < new_count) {
                if (o >= v->rank)
                    return false;
                if (v->shape[o] != 1 && v->strides[o - 1] != v->strides[o] * v->shape[o])
                    return false;
                old_count *= v->shape[o++];
            } else {
                if (n >= rank)
                    return false;
                new_count *= shape[n++];
            }
        }
        /* the old group must be contiguous within itself */
        int64_t inner = v->strides[o - 1];
        for (int d = o - 1; d > o0; d--)
            if (v->shape[d] != 1 && v->strides[d - 1] != v->strides[d] * v->shape[d])
                return false;
        for (int d = n - 1; d >= n0; d--) {
            strides[d] = inner;
            inner *= shape[d];
        }
    }
    return true;
}

static burnc_tensor_t *reshape(burnc_tensor_t *x, int rank, const int64_t *shape_in)
{
    const char *op = "burnc_reshape";
    if (rank < 0 || rank > BURNC_MAX_RANK) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: rank %d is outside 0..%d", op, rank, BURNC_MAX_RANK);
        return NULL;
    }
    if (rank > 0 && !shape_in) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: shape is NULL for rank %d", op, rank);
        return NULL;
    }
    int64_t shape[BURNC_MAX_RANK];
    int infer = -1;
    int64_t known = 1;
    for (int d = 0; d < rank; d++) {
        shape[d] = shape_in[d];
        if (shape[d] == -1 && infer < 0) {
            infer = d;
            continue;
        }
        if (shape[d] < 0) {
            rt_fail(BURNC_ERR_OVERFLOW, "%s: dimension %d is %lld (only one -1 is allowed)", op, d,
                    (long long)shape[d]);
            return NULL;
        }
        if (__builtin_mul_overflow(known, shape[d], &known)) {
            rt_fail(BURNC_ERR_OVERFLOW, "%s: the new shape has more than 2^63 elements", op);
            return NULL;
        }
    }
    int64_t numel = ir_numel(x->view.rank, x->view.shape);
    char a[200], b[200];
    if (infer >= 0) {
        if (known == 0 || numel % known) {
            rt_fail(BURNC_ERR_SHAPE, "%s: cannot infer the -1 of %s from %lld elements", op,
                    rt_shape_str(a, sizeof a, rank, shape), (long long)numel);
            return NULL;
        }
        shape[infer] = numel / known;
        known = numel;
    }
    if (known != numel) {
        rt_fail(BURNC_ERR_SHAPE, "%s: shape %s (%lld elements) does not fit %s (%lld elements)", op,
                rt_shape_str(a, sizeof a, rank, shape), (long long)known,
                rt_shape_str(b, sizeof b, x->view.rank, x->view.shape), (long long)numel);
        return NULL;
    }
    ir_view v = {.rank = rank, .offset = x->view.offset};
    memcpy(v.shape, shape, (size_t)rank * sizeof *shape);
    if (reshape_strides(&x->view, rank, shape, v.strides))
        return rt_view(x, &v);
    burnc_tensor_t *c = burnc_contiguous(x);
    if (!c)
        return NULL;
    ir_view_dense(&v, rank, shape);
    v.offset = c->view.offset;
    burnc_tensor_t *out = rt_view(c, &v);
    rt_tensor_unref(c);
    return out;
}

burnc_tensor_t *burnc_reshape(burnc_tensor_t *x, int rank, const int64_t *shape)
{
    if (!x)
        return NULL;
    RT_PUBLIC(rt_ad_reshape(x, reshape(x, rank, shape)));
}

static burnc_tensor_t *permute(burnc_tensor_t *x, int rank, const int *perm)
{
    const char *op = "burnc_permute";
    if (rank != x->view.rank || (rank && !perm)) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_permute: %d axes given for a tensor of rank %d", rank,
                x->view.rank);
        return NULL;
    }
    ir_view v = x->view;
    bool seen[BURNC_MAX_RANK] = {0};
    for (int d = 0; d < rank; d++) {
        int a = 0;
        if (rt_axis(op, perm[d], rank, &a) != BURNC_OK)
            return NULL;
        if (seen[a]) {
            rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_permute: axis %d appears twice", a);
            return NULL;
        }
        seen[a] = true;
        v.shape[d] = x->view.shape[a];
        v.strides[d] = x->view.strides[a];
    }
    burnc_tensor_t *out = rt_view(x, &v);
    if (!out || !rt_ad_wanted(1, &x))
        return out;
    ad_params p = {.rank = 0};
    for (int d = 0; d < rank; d++)
        rt_axis(op, perm[d], rank, &p.perm[d]);
    return track_view(x, out, AD_PERMUTE, &p);
}

burnc_tensor_t *burnc_permute(burnc_tensor_t *x, int rank, const int *perm)
{
    if (!x)
        return NULL;
    RT_PUBLIC(permute(x, rank, perm));
}

burnc_tensor_t *burnc_transpose(burnc_tensor_t *x, int axis0, int axis1)
{
    if (!x)
        return NULL;
    int a = 0, b = 0;
    if (rt_axis("burnc_transpose", axis0, x->view.rank, &a) != BURNC_OK ||
        rt_axis("burnc_transpose", axis1, x->view.rank, &b) != BURNC_OK)
        return NULL;
    int perm[BURNC_MAX_RANK];
    for (int d = 0; d < x->view.rank; d++)
        perm[d] = d == a ? b : d == b ? a : d;
    RT_PUBLIC(permute(x, x->view.rank, perm));
}

burnc_tensor_t *rt_expand_view(burnc_tensor_t *x, int rank, const int64_t *shape, const char *op)
{
    char a[200], b[200];
    if (rank < x->view.rank || rank > BURNC_MAX_RANK || (rank && !shape)) {
        rt_fail(BURNC_ERR_SHAPE, "%s: cannot expand rank %d to rank %d", op, x->view.rank, rank);
        return NULL;
    }
    ir_view v = {.rank = rank, .offset = x->view.offset};
    int lead = rank - x->view.rank;
    for (int d = 0; d < rank; d++) {
        int64_t in = d >= lead ? x->view.shape[d - lead] : 1;
        int64_t want = shape[d] == -1 && d >= lead ? in : shape[d];
        if (want < 0 || (in != want && in != 1)) {
            rt_fail(BURNC_ERR_SHAPE, "%s: cannot expand %s to %s", op,
                    rt_shape_str(a, sizeof a, x->view.rank, x->view.shape), rt_shape_str(b, sizeof b, rank, shape));
            return NULL;
        }
        v.shape[d] = want;
        v.strides[d] = d >= lead && in == want ? x->view.strides[d - lead] : 0;
    }
    if (rt_check_shape(op, rank, v.shape, x->dtype) != BURNC_OK)
        return NULL;
    burnc_tensor_t *out = rt_view(x, &v);
    if (!out || !rt_ad_wanted(1, &x))
        return out;
    ad_params p = {.rank = 0};
    return track_view(x, out, AD_EXPAND, &p);
}

burnc_tensor_t *burnc_expand(burnc_tensor_t *x, int rank, const int64_t *shape)
{
    if (!x)
        return NULL;
    RT_PUBLIC(rt_expand_view(x, rank, shape, "burnc_expand"));
}

/* Python slice bounds of an axis of size n: first index and length. */
burnc_status_t rt_slice_bounds(const char *op, int64_t n, int64_t start, int64_t stop, int64_t step,
                               int64_t *first, int64_t *count)
{
    if (step == 0)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: slice step is 0", op);
    if (step == INT64_MIN)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: slice step %lld is too small", op, (long long)step);
    int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? n : n - 1;
    if (start < 0)
        start = start < -n ? lo : start + n;
    else if (start > hi)
        start = hi;
    if (stop < 0)
        stop = stop < -n ? lo : stop + n;
    else if (stop > hi)
        stop = hi;
    int64_t len = 0;
    if (step > 0 && stop > start)
        len = (stop - start - 1) / step + 1;
    else if (step < 0 && start > stop)
        len = (start - stop - 1) / (-step) + 1;
    *first = start;
    *count = len;
    return BURNC_OK;
}

burnc_tensor_t *burnc_slice(burnc_tensor_t *x, int axis, int64_t start, int64_t stop, int64_t step)
{
    if (!x)
        return NULL;
    int a = 0;
    int64_t first, count;
    if (x->view.rank == 0) {
        rt_fail(BURNC_ERR_AXIS, "burnc_slice: a rank-0 tensor has no axis to slice");
        return NULL;
    }
    if (rt_axis("burnc_slice", axis, x->view.rank, &a) != BURNC_OK ||
        rt_slice_bounds("burnc_slice", x->view.shape[a], start, stop, step, &first, &count) != BURNC_OK)
        return NULL;
    ir_view v = x->view;
    if (count > 0)
        v.offset += first * v.strides[a];
    v.shape[a] = count;
    v.strides[a] *= step;
    rt_scope_suspend();
    burnc_tensor_t *out = rt_view(x, &v);
    if (out && rt_ad_wanted(1, &x)) {
        ad_params p = {.axis = a, .first = first, .step = step, .count = count};
        out = track_view(x, out, AD_SLICE, &p);
    }
    rt_scope_resume();
    if (out)
        rt_scope_register(out);
    return out;
}

/* Reads axes[0..naxes) (naxes 0: all) into a mask; refuses repeats. */
burnc_status_t rt_axes_mask(const char *op, int naxes, const int *axes, int rank, uint32_t *mask)
{
    if (naxes < 0 || (naxes > 0 && !axes))
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: %d axes given with %s list", op, naxes,
                       axes ? "an" : "a NULL");
    if (naxes == 0) {
        *mask = rank ? (1u << rank) - 1 : 0;
        return BURNC_OK;
    }
    *mask = 0;
    for (int i = 0; i < naxes; i++) {
        int a = 0;
        RT_TRY(rt_axis(op, axes[i], rank, &a));
        if (rank == 0)
            continue;
        if (*mask & (1u << a))
            return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: axis %d is listed twice", op, axes[i]);
        *mask |= 1u << a;
    }
    return BURNC_OK;
}

burnc_tensor_t *burnc_flip(burnc_tensor_t *x, int naxes, const int *axes)
{
    if (!x)
        return NULL;
    uint32_t mask;
    if (rt_axes_mask("burnc_flip", naxes, axes, x->view.rank, &mask) != BURNC_OK)
        return NULL;
    ir_view v = x->view;
    for (int d = 0; d < v.rank; d++)
        if ((mask >> d & 1) && v.shape[d] > 0) {
            v.offset += (v.shape[d] - 1) * v.strides[d];
            v.strides[d] = -v.strides[d];
        }
    rt_scope_suspend();
    burnc_tensor_t *out = rt_view(x, &v);
    if (out && rt_ad_wanted(1, &x)) {
        ad_params p = {.axes = mask};
        out = track_view(x, out, AD_FLIP, &p);
    }
    rt_scope_resume();
    if (out)
        rt_scope_register(out);
    return out;
}

burnc_tensor_t *burnc_squeeze(burnc_tensor_t *x, int naxes, const int *axes)
{
    if (!x)
        return NULL;
    uint32_t mask = 0;
    if (naxes == 0) {
        for (int d = 0; d < x->view.rank; d++)
            mask |= (uint32_t)(x->view.shape[d] == 1) << d;
    } else if (rt_axes_mask("burnc_squeeze", naxes, axes, x->view.rank, &mask) != BURNC_OK) {
        return NULL;
    }
    ir_view v = {.offset = x->view.offset};
    for (int d = 0; d < x->view.rank; d++) {
        if (!(mask >> d & 1)) {
            v.shape[v.rank] = x->view.shape[d];
            v.strides[v.rank++] = x->view.strides[d];
        } else if (x->view.shape[d] != 1) {
            rt_fail(BURNC_ERR_SHAPE, "burnc_squeeze: axis %d has size %lld, not 1", d, (long long)x->view.shape[d]);
            return NULL;
        }
    }
    RT_PUBLIC(rt_ad_reshape(x, rt_view(x, &v)));
}

burnc_tensor_t *rt_unsqueeze(burnc_tensor_t *x, int axis)
{
    int r = x->view.rank, a;
    if (r == BURNC_MAX_RANK) {
        rt_fail(BURNC_ERR_SHAPE, "burnc_unsqueeze: rank %d is already the largest", r);
        return NULL;
    }
    if (axis < -(r + 1) || axis > r) {
        rt_fail(BURNC_ERR_AXIS, "burnc_unsqueeze: axis %d is out of range for rank %d (-%d..%d)", axis, r, r + 1, r);
        return NULL;
    }
    a = axis < 0 ? axis + r + 1 : axis;
    ir_view v = {.rank = r + 1, .offset = x->view.offset};
    for (int d = 0, s = 0; d <= r; d++) {
        if (d == a) {
            v.shape[d] = 1;
            v.strides[d] = s < r ? x->view.strides[s] * (x->view.shape[s] ? x->view.shape[s] : 1) : 1;
            continue;
        }
        v.shape[d] = x->view.shape[s];
        v.strides[d] = x->view.strides[s++];
    }
    return rt_ad_reshape(x, rt_view(x, &v));
}

burnc_tensor_t *burnc_unsqueeze(burnc_tensor_t *x, int axis)
{
    if (!x)
        return NULL;
    RT_PUBLIC(rt_unsqueeze(x, axis));
}
