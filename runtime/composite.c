/* softmax, log_softmax and layer_norm, recorded as their elementary ops so that fusion sees
 * through them. They run with scopes suspended (inside RT_PUBLIC), so the public ops they call
 * return internal references, dropped here as soon as they are recorded into. */
#include "rt.h"

/* Drops a reference and returns `keep`: lets a chain read one line per step. */
static burnc_tensor_t *drop(burnc_tensor_t *t, burnc_tensor_t *keep)
{
    if (t)
        rt_tensor_unref(t);
    return keep;
}

static burnc_tensor_t *as_float(burnc_tensor_t *x)
{
    rt_device *dev = x->st->dev;
    return rt_cast(x, ir_dtype_is_float(x->dtype) ? x->dtype : dev->float_dtype);
}

/* x - max(x, axis), and the axis as a list. */
static burnc_tensor_t *shifted(burnc_tensor_t *x, int axis, const char *op)
{
    int a;
    if (x->view.rank == 0) {
        rt_fail(BURNC_ERR_AXIS, "%s: a rank-0 tensor has no axis %d", op, axis);
        return NULL;
    }
    if (rt_axis(op, axis, x->view.rank, &a) != BURNC_OK)
        return NULL;
    burnc_tensor_t *f = as_float(x);
    if (!f)
        return NULL;
    burnc_tensor_t *m = burnc_max(f, 1, &a, true);
    return drop(m, drop(f, burnc_sub(f, m)));
}

static burnc_tensor_t *softmax(burnc_tensor_t *x, int axis, bool log_form)
{
    const char *op = log_form ? "burnc_log_softmax" : "burnc_softmax";
    burnc_tensor_t *d = shifted(x, axis, op);
    if (!d)
        return NULL;
    int a = axis < 0 ? axis + x->view.rank : axis;
    burnc_tensor_t *e = burnc_exp(d);
    burnc_tensor_t *s = burnc_sum(e, 1, &a, true);
    if (!log_form) { /* one division a row: e * (1/s), within an ulp of e / s */
        burnc_tensor_t *r = drop(s, burnc_reciprocal(s));
        return drop(d, drop(r, drop(e, burnc_mul(e, r))));
    }
    burnc_tensor_t *l = burnc_log(s);
    return drop(d, drop(e, drop(s, drop(l, burnc_sub(d, l)))));
}

burnc_tensor_t *burnc_softmax(burnc_tensor_t *x, int axis)
{
    if (!x)
        return NULL;
    RT_PUBLIC(softmax(x, axis, false));
}

burnc_tensor_t *burnc_log_softmax(burnc_tensor_t *x, int axis)
{
    if (!x)
        return NULL;
    RT_PUBLIC(softmax(x, axis, true));
}

/* (x - mean) * (1 / sqrt(var + eps)) over the last `nr` axes; var = mean((x - mean)^2). The
 * reciprocal is taken once a row, so an element costs a multiply instead of a division (a
 * division per element held the fused GPU kernels below the copy bandwidth), at most an ulp
 * from (x - mean) / sqrt(var + eps). */
static burnc_tensor_t *layer_norm(burnc_tensor_t *x, int nr, double eps, const char *op)
{
    int rank = x->view.rank;
    if (nr < 1 || nr > rank) {
        rt_fail(BURNC_ERR_AXIS, "%s: normalized_rank %d is outside 1..%d (the tensor's rank)", op, nr, rank);
        return NULL;
    }
    int axes[BURNC_MAX_RANK];
    for (int i = 0; i < nr; i++)
        axes[i] = rank - nr + i;
    burnc_tensor_t *f = as_float(x);
    if (!f)
        return NULL;
    burnc_tensor_t *mean = burnc_mean(f, nr, axes, true);
    burnc_tensor_t *c = drop(f, drop(mean, burnc_sub(f, mean)));
    burnc_tensor_t *sq = burnc_mul(c, c);
    burnc_tensor_t *var = drop(sq, burnc_mean(sq, nr, axes, true));
    burnc_tensor_t *ve = drop(var, burnc_add_scalar(var, eps));
    burnc_tensor_t *sd = drop(ve, burnc_sqrt(ve));
    burnc_tensor_t *inv = drop(sd, burnc_reciprocal(sd));
    return drop(c, drop(inv, burnc_mul(c, inv)));
}

burnc_tensor_t *burnc_layer_norm(burnc_tensor_t *x, int normalized_rank, double eps)
{
    if (!x)
        return NULL;
    RT_PUBLIC(layer_norm(x, normalized_rank, eps, "burnc_layer_norm"));
}

static burnc_tensor_t *layer_norm_affine(burnc_tensor_t *x, int nr, burnc_tensor_t *w, burnc_tensor_t *b, double eps)
{
    burnc_tensor_t *n = layer_norm(x, nr, eps, "burnc_layer_norm_affine");
    burnc_tensor_t *scaled = drop(n, burnc_mul(n, w));
    return drop(scaled, burnc_add(scaled, b));
}

burnc_tensor_t *burnc_layer_norm_affine(burnc_tensor_t *x, int normalized_rank, burnc_tensor_t *weight,
                                        burnc_tensor_t *bias, double eps)
{
    if (!x || !weight || !bias)
        return NULL;
    RT_PUBLIC(layer_norm_affine(x, normalized_rank, weight, bias, eps));
}
