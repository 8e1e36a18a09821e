/* Layers and activations: each forward is a few public ops on the set's current tensors. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn.h"

/* Adds "<prefix>.<what>" = t to p (t released); the slot or -1. */
static int add_named(burnc_params_t *p, const char *op, const char *prefix, const char *what, burnc_tensor_t *t)
{
    char name[300];
    int slot = -1;
    if (t && snprintf(name, sizeof name, "%s.%s", prefix, what) >= (int)sizeof name)
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: name \"%.40s...\" is too long", op, prefix);
    else if (t)
        slot = burnc_params_add(p, name, t);
    burnc_tensor_release(t);
    return slot;
}

static burnc_status_t check_init(const char *op, const void *out, const burnc_params_t *p,
                                 const burnc_device_t *dev, const char *name)
{
    if (!out || !p || !dev || !name)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: NULL %s", op,
                       !out ? "output" : !p ? "set" : !dev ? "device" : "name");
    return BURNC_OK;
}

/* Layer inits run with scopes suspended: their tensors belong to the set, not to a scope. */
static burnc_status_t linear_init(burnc_linear_t *out, burnc_params_t *p, burnc_device_t *dev, const char *name,
                                  int64_t in, int64_t nout, const burnc_linear_config_t *cfg)
{
    static const burnc_linear_config_t defaults = {0};
    const char *op = "burnc_linear_init";
    cfg = cfg ? cfg : &defaults;
    RT_TRY(check_init(op, out, p, dev, name));
    if (in < 1 || nout < 1)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: \"%s\" with %lld inputs and %lld outputs", op, name,
                       (long long)in, (long long)nout);
    int64_t shape[2] = {nout, in};
    if (cfg->weight_in_out) {
        shape[0] = in;
        shape[1] = nout;
    }
    burnc_tensor_t *w;
    switch (cfg->init) {
    case BURNC_INIT_XAVIER_UNIFORM: w = burnc_init_xavier_uniform(dev, cfg->dtype, 2, shape, in, nout, 1.0); break;
    case BURNC_INIT_ZEROS: w = burnc_zeros(dev, cfg->dtype, 2, shape); break;
    case BURNC_INIT_KAIMING_UNIFORM: w = burnc_init_kaiming_uniform(dev, cfg->dtype, 2, shape, in, sqrt(2.0)); break;
    default: return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: init kind %d", op, (int)cfg->init);
    }
    int first = burnc_params_count(p);
    int ws = add_named(p, op, name, "weight", w), bs = -1;
    if (ws >= 0 && !cfg->no_bias) {
        bs = add_named(p, op, name, "bias", burnc_zeros(dev, cfg->dtype, 1, &nout));
        if (bs < 0)
            nn_params_truncate(p, first);
    }
    if (ws < 0 || (!cfg->no_bias && bs < 0))
        return burnc_error_code();
    *out = (burnc_linear_t){.params = p, .weight = ws, .bias = bs, .weight_in_out = cfg->weight_in_out};
    return BURNC_OK;
}

burnc_status_t burnc_linear_init(burnc_linear_t *out, burnc_params_t *p, burnc_device_t *dev, const char *name,
                                 int64_t in, int64_t out_features, const burnc_linear_config_t *cfg)
{
    rt_scope_suspend();
    burnc_status_t s = linear_init(out, p, dev, name, in, out_features, cfg);
    rt_scope_resume();
    return s;
}

/* The slot exists in l's set (a layer used with a set it was not made in fails here). */
static bool slot_ok(const char *op, const burnc_params_t *p, int slot)
{
    if (!p || slot < 0 || slot >= burnc_params_count(p)) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: slot %d is not in the layer's set (%d slots)", op, slot,
                burnc_params_count(p));
        return false;
    }
    return true;
}

static burnc_tensor_t *linear_forward(const burnc_linear_t *l, burnc_tensor_t *x)
{
    const char *op = "burnc_linear_forward";
    if (!slot_ok(op, l->params, l->weight) || (l->bias >= 0 && !slot_ok(op, l->params, l->bias)))
        return NULL;
    burnc_tensor_t *w = nn_params_at(l->params, l->weight);
    int64_t in = burnc_tensor_shape(w)[l->weight_in_out ? 0 : 1];
    int rank = burnc_tensor_rank(x);
    if (rank < 1 || burnc_tensor_shape(x)[rank - 1] != in) {
        char b[160];
        rt_fail(BURNC_ERR_SHAPE, "%s: input %s does not end in %lld features", op,
                rt_shape_str(b, sizeof b, rank, burnc_tensor_shape(x)), (long long)in);
        return NULL;
    }
    burnc_tensor_t *wt = l->weight_in_out ? burnc_tensor_retain(w) : burnc_transpose(w, 0, 1);
    burnc_tensor_t *y = burnc_matmul(x, wt);
    burnc_tensor_release(wt);
    if (l->bias >= 0) {
        burnc_tensor_t *yb = burnc_add(y, nn_params_at(l->params, l->bias));
        burnc_tensor_release(y);
        y = yb;
    }
    return y;
}

burnc_tensor_t *burnc_linear_forward(const burnc_linear_t *l, burnc_tensor_t *x)
{
    if (!x)
        return NULL;
    if (!l) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_linear_forward: NULL layer");
        return NULL;
    }
    RT_PUBLIC(linear_forward(l, x));
}

static burnc_status_t layer_norm_init(burnc_layer_norm_t *out, burnc_params_t *p, burnc_device_t *dev,
                                      const char *name, int64_t dim, double eps, burnc_dtype_t dtype)
{
    const char *op = "burnc_layer_norm_init";
    RT_TRY(check_init(op, out, p, dev, name));
    if (dim < 1 || isnan(eps))
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: \"%s\" of dim %lld, eps %g", op, name, (long long)dim, eps);
    int first = burnc_params_count(p);
    int ws = add_named(p, op, name, "weight", burnc_ones(dev, dtype, 1, &dim));
    int bs = ws < 0 ? -1 : add_named(p, op, name, "bias", burnc_zeros(dev, dtype, 1, &dim));
    if (bs < 0) {
        nn_params_truncate(p, first);
        return burnc_error_code();
    }
    *out = (burnc_layer_norm_t){.params = p, .weight = ws, .bias = bs, .eps = eps > 0 ? eps : 1e-5};
    return BURNC_OK;
}

burnc_status_t burnc_layer_norm_init(burnc_layer_norm_t *out, burnc_params_t *p, burnc_device_t *dev,
                                     const char *name, int64_t dim, double eps, burnc_dtype_t dtype)
{
    rt_scope_suspend();
    burnc_status_t s = layer_norm_init(out, p, dev, name, dim, eps, dtype);
    rt_scope_resume();
    return s;
}

burnc_tensor_t *burnc_layer_norm_forward(const burnc_layer_norm_t *l, burnc_tensor_t *x)
{
    const char *op = "burnc_layer_norm_forward";
    if (!x)
        return NULL;
    if (!l) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: NULL layer", op);
        return NULL;
    }
    if (!slot_ok(op, l->params, l->weight) || !slot_ok(op, l->params, l->bias))
        return NULL;
    return burnc_layer_norm_affine(x, 1, nn_params_at(l->params, l->weight), nn_params_at(l->params, l->bias),
                                   l->eps);
}

static burnc_status_t embedding_init(burnc_embedding_t *out, burnc_params_t *p, burnc_device_t *dev,
                                     const char *name, int64_t num, int64_t dim, burnc_dtype_t dtype)
{
    const char *op = "burnc_embedding_init";
    RT_TRY(check_init(op, out, p, dev, name));
    if (num < 1 || dim < 1)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: \"%s\" of %lld x %lld", op, name, (long long)num,
                       (long long)dim);
    int ws = add_named(p, op, name, "weight", burnc_init_normal(dev, dtype, 2, (int64_t[]){num, dim}, 0, 1));
    if (ws < 0)
        return burnc_error_code();
    *out = (burnc_embedding_t){.params = p, .weight = ws};
    return BURNC_OK;
}

burnc_status_t burnc_embedding_init(burnc_embedding_t *out, burnc_params_t *p, burnc_device_t *dev,
                                    const char *name, int64_t num, int64_t dim, burnc_dtype_t dtype)
{
    rt_scope_suspend();
    burnc_status_t s = embedding_init(out, p, dev, name, num, dim, dtype);
    rt_scope_resume();
    return s;
}

static burnc_tensor_t *embedding_forward(const burnc_embedding_t *e, burnc_tensor_t *idx)
{
    const char *op = "burnc_embedding_forward";
    if (!slot_ok(op, e->params, e->weight))
        return NULL;
    int rank = burnc_tensor_rank(idx);
    if (rank >= BURNC_MAX_RANK) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: indices of rank %d leave no room for the feature axis", op, rank);
        return NULL;
    }
    burnc_tensor_t *w = nn_params_at(e->params, e->weight);
    int64_t shape[BURNC_MAX_RANK];
    memcpy(shape, burnc_tensor_shape(idx), (size_t)rank * sizeof *shape);
    shape[rank] = burnc_tensor_shape(w)[1];
    burnc_tensor_t *flat = burnc_reshape(idx, 1, (int64_t[]){-1});
    burnc_tensor_t *rows = burnc_index_select(w, 0, flat);
    burnc_tensor_t *y = burnc_reshape(rows, rank + 1, shape);
    burnc_tensor_release(rows);
    burnc_tensor_release(flat);
    return y;
}

burnc_tensor_t *burnc_embedding_forward(const burnc_embedding_t *e, burnc_tensor_t *idx)
{
    if (!idx)
        return NULL;
    if (!e) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_embedding_forward: NULL layer");
        return NULL;
    }
    RT_PUBLIC(embedding_forward(e, idx));
}

/* A new handle of x's values that scopes treat like any op result (a retain would not be). */
static burnc_tensor_t *same(burnc_tensor_t *x) { return burnc_reshape(x, burnc_tensor_rank(x), burnc_tensor_shape(x)); }

static bool is_float(burnc_dtype_t dt)
{
    return dt == BURNC_DTYPE_F32 || dt == BURNC_DTYPE_F64 || dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16;
}

static burnc_tensor_t *dropout(burnc_tensor_t *x, double p)
{
    burnc_dtype_t dt = burnc_tensor_dtype(x);
    burnc_device_t *dev = burnc_tensor_device(x);
    burnc_tensor_t *r = burnc_rand(dev, dt, burnc_tensor_rank(x), burnc_tensor_shape(x));
    burnc_device_release(dev);
    /* keep = (r >= p) as 0/1 in x's dtype, scaled: one multiply the backward pass sees through */
    burnc_tensor_t *keep = burnc_ge_scalar(r, p);
    burnc_tensor_t *mask = burnc_cast(keep, dt);
    burnc_tensor_t *scaled = burnc_mul_scalar(mask, p < 1 ? 1.0 / (1.0 - p) : 0.0);
    burnc_tensor_t *y = burnc_mul(x, scaled);
    burnc_tensor_release(scaled);
    burnc_tensor_release(mask);
    burnc_tensor_release(keep);
    burnc_tensor_release(r);
    return y;
}

burnc_tensor_t *burnc_dropout(burnc_tensor_t *x, double p, bool training)
{
    if (!x)
        return NULL;
    if (!(p >= 0 && p <= 1)) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_dropout: probability %g is outside [0, 1]", p);
        return NULL;
    }
    if (!is_float(burnc_tensor_dtype(x))) {
        rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_dropout: %s input (float dtypes only)",
                burnc_dtype_name(burnc_tensor_dtype(x)));
        return NULL;
    }
    if (!training || p == 0)
        return same(x);
    RT_PUBLIC(dropout(x, p));
}

burnc_tensor_t *burnc_activate(burnc_tensor_t *x, burnc_activation_t act)
{
    switch (act) {
    case BURNC_ACT_NONE: return x ? same(x) : NULL;
    case BURNC_ACT_RELU: return burnc_relu(x);
    case BURNC_ACT_GELU: return burnc_gelu(x);
    case BURNC_ACT_SILU: return burnc_silu(x);
    case BURNC_ACT_TANH: return burnc_tanh(x);
    case BURNC_ACT_SIGMOID: return burnc_sigmoid(x);
    case BURNC_ACT_SOFTMAX: return burnc_softmax(x, -1);
    }
    if (x)
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_activate: activation %d", (int)act);
    return NULL;
}
