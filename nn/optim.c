/* Optimizers. Each parameter's update is one chain of element-wise ops over the parameter, its
 * gradient and its state, so fusion runs it as one kernel that reads each once and writes the
 * new parameter and state once; the set's old tensors are released right after, which lets the
 * kernel write in place. Scalars (bias corrections) are computed on the host per step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

typedef enum { OPT_SGD, OPT_ADAM, OPT_ADAMW } opt_kind;

struct burnc_optim {
    opt_kind kind;
    double lr, momentum, weight_decay, beta1, beta2, eps;
    bool nesterov;
    int64_t steps;
    const burnc_params_t *bound; /* the set stepped first; state is per slot of it */
    int n;
    burnc_tensor_t **s1, **s2; /* momentum buffers, or Adam's first and second moments */
};

static const char *kind_name(opt_kind k) { return k == OPT_SGD ? "sgd" : k == OPT_ADAM ? "adam" : "adamw"; }

static burnc_optim_t *optim_new(opt_kind kind, double lr, double momentum, double wd, bool nesterov, double b1,
                                double b2, double eps)
{
    const char *op = kind == OPT_SGD ? "burnc_optim_sgd" : kind == OPT_ADAM ? "burnc_optim_adam" : "burnc_optim_adamw";
    /* written so that NaN fails every test */
    if (!(lr >= 0 && isfinite(lr)) || !(wd >= 0 && isfinite(wd)) || !(momentum >= 0 && isfinite(momentum)) ||
        !(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1) || !(eps >= 0 && isfinite(eps)) || (nesterov && momentum == 0)) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT,
                "%s: lr %g, momentum %g, weight_decay %g, nesterov %d, betas (%g, %g), eps %g", op, lr, momentum, wd,
                (int)nesterov, b1, b2, eps);
        return NULL;
    }
    burnc_optim_t *o = calloc(1, sizeof *o);
    if (!o) {
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "%s: out of memory", op);
        return NULL;
    }
    *o = (burnc_optim_t){.kind = kind, .lr = lr, .momentum = momentum, .weight_decay = wd, .beta1 = b1,
                         .beta2 = b2, .eps = eps, .nesterov = nesterov};
    return o;
}

burnc_optim_t *burnc_optim_sgd(double lr, double momentum, double weight_decay, bool nesterov)
{
    return optim_new(OPT_SGD, lr, momentum, weight_decay, nesterov, 0, 0, 0);
}

burnc_optim_t *burnc_optim_adam(double lr, double beta1, double beta2, double eps, double weight_decay)
{
    return optim_new(OPT_ADAM, lr, 0, weight_decay, false, beta1, beta2, eps);
}

burnc_optim_t *burnc_optim_adamw(double lr, double beta1, double beta2, double eps, double weight_decay)
{
    return optim_new(OPT_ADAMW, lr, 0, weight_decay, false, beta1, beta2, eps);
}

void burnc_optim_release(burnc_optim_t *o)
{
    if (!o)
        return;
    for (int i = 0; i < o->n; i++) {
        burnc_tensor_release(o->s1[i]);
        burnc_tensor_release(o->s2[i]);
    }
    free(o->s1);
    free(o->s2);
    free(o);
}

burnc_status_t burnc_optim_set_lr(burnc_optim_t *o, double lr)
{
    if (!o || !(lr >= 0 && isfinite(lr)))
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_optim_set_lr: %s lr %g", o ? "" : "NULL optimizer,", lr);
    o->lr = lr;
    return BURNC_OK;
}

int64_t burnc_optim_steps(const burnc_optim_t *o) { return o ? o->steps : 0; }

/* Binds o to p at its first step; later steps must bring the same set. */
static burnc_status_t bind(burnc_optim_t *o, const burnc_params_t *p)
{
    int n = burnc_params_count(p);
    if (o->bound) {
        if (o->bound != p || o->n != n)
            return rt_fail(BURNC_ERR_INVALID_ARGUMENT,
                           "burnc_optim_step: the optimizer holds state for another set (%d slots; given %d)", o->n, n);
        return BURNC_OK;
    }
    o->s1 = calloc((size_t)n + 1, sizeof *o->s1);
    o->s2 = calloc((size_t)n + 1, sizeof *o->s2);
    if (!o->s1 || !o->s2) {
        free(o->s1);
        free(o->s2);
        o->s1 = o->s2 = NULL;
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_optim_step: out of memory for %d slots", n);
    }
    o->bound = p;
    o->n = n;
    return BURNC_OK;
}

static burnc_status_t check_grad(const burnc_params_t *p, int i, burnc_tensor_t *g)
{
    burnc_tensor_t *w = nn_params_at(p, i);
    int rank = burnc_tensor_rank(w);
    char a[160], b[160];
    if (burnc_tensor_rank(g) != rank ||
        memcmp(burnc_tensor_shape(g), burnc_tensor_shape(w), (size_t)rank * sizeof(int64_t)))
        return rt_fail(BURNC_ERR_SHAPE, "burnc_optim_step: gradient %s for \"%s\" of shape %s",
                       rt_shape_str(b, sizeof b, burnc_tensor_rank(g), burnc_tensor_shape(g)), burnc_params_name(p, i),
                       rt_shape_str(a, sizeof a, rank, burnc_tensor_shape(w)));
    if (burnc_tensor_dtype(g) != burnc_tensor_dtype(w))
        return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_optim_step: %s gradient for \"%s\" of %s",
                       burnc_dtype_name(burnc_tensor_dtype(g)), burnc_params_name(p, i),
                       burnc_dtype_name(burnc_tensor_dtype(w)));
    switch (burnc_tensor_dtype(w)) {
    case BURNC_DTYPE_F32: case BURNC_DTYPE_F64: case BURNC_DTYPE_F16: case BURNC_DTYPE_BF16: break;
    default:
        return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_optim_step: \"%s\" is %s (float parameters only)",
                       burnc_params_name(p, i), burnc_dtype_name(burnc_tensor_dtype(w)));
    }
    burnc_device_t *d0 = burnc_tensor_device(w), *d1 = burnc_tensor_device(g);
    bool same = burnc_device_equal(d0, d1);
    burnc_device_release(d0);
    burnc_device_release(d1);
    if (!same)
        return rt_fail(BURNC_ERR_DEVICE_MISMATCH, "burnc_optim_step: the gradient of \"%s\" lives on another device",
                       burnc_params_name(p, i));
    return BURNC_OK;
}

/* a + b * s, releasing a (consumed) and keeping b. */
static burnc_tensor_t *axpy(burnc_tensor_t *a, burnc_tensor_t *b, double s)
{
    burnc_tensor_t *bs = burnc_mul_scalar(b, s);
    burnc_tensor_t *y = burnc_add(a, bs);
    burnc_tensor_release(bs);
    burnc_tensor_release(a);
    return y;
}

/* SGD on one slot: the new parameter; o->s1[i] updated. */
static burnc_tensor_t *sgd(burnc_optim_t *o, int i, burnc_tensor_t *w, burnc_tensor_t *grad)
{
    burnc_tensor_t *g = burnc_tensor_retain(grad);
    if (o->weight_decay != 0)
        g = axpy(g, w, o->weight_decay);
    burnc_tensor_t *d = g;
    if (o->momentum != 0) {
        /* the first buffer is g itself: a handle of our own, as the caller's may belong to a scope */
        burnc_tensor_t *buf = burnc_tensor_detach(g);
        if (o->s1[i]) {
            burnc_tensor_t *mb = burnc_mul_scalar(o->s1[i], o->momentum);
            burnc_tensor_release(buf);
            buf = burnc_add(mb, g);
            burnc_tensor_release(mb);
        }
        burnc_tensor_release(o->s1[i]);
        o->s1[i] = buf;
        d = o->nesterov ? axpy(burnc_tensor_retain(g), buf, o->momentum) : burnc_tensor_retain(buf);
        burnc_tensor_release(g);
    }
    burnc_tensor_t *step = burnc_mul_scalar(d, o->lr);
    burnc_tensor_t *y = burnc_sub(w, step);
    burnc_tensor_release(step);
    burnc_tensor_release(d);
    return y;
}

/* x * a + b * s (both kept): the moment update, x NULL at the first step (zero state). */
static burnc_tensor_t *moment(burnc_tensor_t *x, double a, burnc_tensor_t *b, double s)
{
    burnc_tensor_t *bs = burnc_mul_scalar(b, s);
    if (!x)
        return bs;
    burnc_tensor_t *xa = burnc_mul_scalar(x, a);
    burnc_tensor_t *y = burnc_add(xa, bs);
    burnc_tensor_release(xa);
    burnc_tensor_release(bs);
    return y;
}

/* Adam and AdamW on one slot (torch.optim's formulas and order of operations). */
static burnc_tensor_t *adam(burnc_optim_t *o, int i, burnc_tensor_t *w, burnc_tensor_t *grad)
{
    double t = (double)o->steps + 1;
    double bc1 = 1 - pow(o->beta1, t), bc2 = 1 - pow(o->beta2, t);
    burnc_tensor_t *p = burnc_tensor_retain(w), *g = burnc_tensor_retain(grad);
    if (o->weight_decay != 0 && o->kind == OPT_ADAMW) {
        burnc_tensor_t *pd = burnc_mul_scalar(p, 1 - o->lr * o->weight_decay);
        burnc_tensor_release(p);
        p = pd;
    } else if (o->weight_decay != 0) {
        g = axpy(g, w, o->weight_decay);
    }
    burnc_tensor_t *m = moment(o->s1[i], o->beta1, g, 1 - o->beta1);
    burnc_tensor_t *g2 = burnc_mul(g, g);
    burnc_tensor_t *v = moment(o->s2[i], o->beta2, g2, 1 - o->beta2);
    burnc_tensor_release(g2);
    burnc_tensor_release(g);
    burnc_tensor_t *root = burnc_sqrt(v);
    burnc_tensor_t *scaled = burnc_div_scalar(root, sqrt(bc2));
    burnc_tensor_t *denom = burnc_add_scalar(scaled, o->eps);
    burnc_tensor_t *ratio = burnc_div(m, denom);
    burnc_tensor_t *step = burnc_mul_scalar(ratio, o->lr / bc1);
    burnc_tensor_t *y = burnc_sub(p, step);
    burnc_tensor_t *tmp[] = {step, ratio, denom, scaled, root, p};
    for (size_t k = 0; k < sizeof tmp / sizeof *tmp; k++)
        burnc_tensor_release(tmp[k]);
    burnc_tensor_release(o->s1[i]);
    burnc_tensor_release(o->s2[i]);
    o->s1[i] = m;
    o->s2[i] = v;
    return y;
}

static burnc_status_t step_all(burnc_optim_t *o, burnc_params_t *p, burnc_tensor_t *const *grads)
{
    burnc_status_t s = BURNC_OK;
    for (int i = 0; i < o->n && s == BURNC_OK; i++) {
        if (!grads[i])
            continue;
        burnc_tensor_t *w = nn_params_at(p, i);
        burnc_tensor_t *y = o->kind == OPT_SGD ? sgd(o, i, w, grads[i]) : adam(o, i, w, grads[i]);
        s = nn_params_update(p, i, y);
    }
    return s;
}

burnc_status_t burnc_optim_step_tensors(burnc_optim_t *o, burnc_params_t *p, burnc_tensor_t *const *grads)
{
    if (!o || !p || !grads)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_optim_step: NULL %s",
                       !o ? "optimizer" : !p ? "set" : "gradient list");
    RT_TRY(bind(o, p));
    /* Every gradient is checked before anything changes: a bad one leaves the set as it was. */
    for (int i = 0; i < o->n; i++)
        if (grads[i])
            RT_TRY(check_grad(p, i, grads[i]));
    rt_scope_suspend();
    burnc_no_grad_begin();
    burnc_status_t s = step_all(o, p, grads);
    burnc_no_grad_end();
    rt_scope_resume();
    if (s == BURNC_OK)
        o->steps++;
    else
        rt_log("runtime", "%s step %lld failed: the set may be partly updated", kind_name(o->kind),
               (long long)o->steps + 1);
    return s;
}

burnc_status_t burnc_optim_step(burnc_optim_t *o, burnc_params_t *p, const burnc_grads_t *grads)
{
    if (!o || !p || !grads)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_optim_step: NULL %s",
                       !o ? "optimizer" : !p ? "set" : "gradients");
    int n = burnc_params_count(p);
    burnc_tensor_t **g = calloc((size_t)n + 1, sizeof *g);
    if (!g)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_optim_step: out of memory");
    burnc_status_t s = BURNC_OK;
    rt_scope_suspend();
    for (int i = 0; i < n && s == BURNC_OK; i++) {
        burnc_tensor_t *w = nn_params_at(p, i);
        if (burnc_tensor_requires_grad(w) && !(g[i] = burnc_grad(grads, w)))
            s = burnc_error_code();
    }
    rt_scope_resume();
    if (s == BURNC_OK)
        s = burnc_optim_step_tensors(o, p, g);
    for (int i = 0; i < n; i++)
        burnc_tensor_release(g[i]);
    free(g);
    return s;
}
