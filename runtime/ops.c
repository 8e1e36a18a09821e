/* Recording ops: checks, promotion, broadcasting, then one record on the device's stream. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "autodiff/ad.h"
#include "rt.h"

/* ---- Checks ---- */
/* The public name of an op, for messages: a constant for the plain form (free on the recording
 * path), formatted only for the _scalar forms, whose names are needed on error paths alone. */
static const char *pname(ir_op op, bool scalar)
{
    static const char *const names[IR_OP_COUNT] = {
#define X(e, nm, ar, c) [IR_OP_##e] = "burnc_" nm,
#include "ops.def"
#undef X
    };
    if (!scalar)
        return names[op];
    static _Thread_local char buf[64];
    snprintf(buf, sizeof buf, "%s_scalar", names[op]);
    return buf;
}
static char *shape_of(char *buf, size_t cap, const burnc_tensor_t *t)
{
    return (char *)rt_shape_str(buf, cap, t->view.rank, t->view.shape);
}

static rt_device *same_device(ir_op op, burnc_tensor_t *const *ts, int n)
{
    rt_device *dev = ts[0]->st->dev;
    for (int i = 1; i < n; i++)
        if (ts[i]->st->dev != dev) {
            rt_fail(BURNC_ERR_DEVICE_MISMATCH, "%s: operands live on %s and %s; move one with burnc_tensor_to_device",
                    pname(op, false), dev->spec, ts[i]->st->dev->spec);
            return NULL;
        }
    return dev;
}

static burnc_status_t refuse_bool(const char *op, burnc_dtype_t dt)
{
    if (dt == BURNC_DTYPE_BOOL)
        return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "%s: does not take bool tensors (cast first)", op);
    return BURNC_OK;
}

static burnc_status_t broadcast(ir_op op, int n, burnc_tensor_t *const *ts, int *rank, int64_t *shape)
{
    int r = 0;
    for (int i = 0; i < n; i++)
        r = ts[i]->view.rank > r ? ts[i]->view.rank : r;
    for (int d = 0; d < r; d++)
        shape[d] = 1;
    for (int i = 0; i < n; i++) {
        int lead = r - ts[i]->view.rank;
        for (int d = lead; d < r; d++) {
            int64_t s = ts[i]->view.shape[d - lead];
            if (s == shape[d] || s == 1)
                continue;
            if (shape[d] != 1) {
                char a[200], b[200];
                return rt_fail(BURNC_ERR_SHAPE, "%s: shapes %s and %s do not broadcast", pname(op, false),
                               shape_of(a, sizeof a, ts[0]), shape_of(b, sizeof b, ts[i]));
            }
            shape[d] = s;
        }
    }
    *rank = r;
    return BURNC_OK;
}

/* v (of rank <= `rank`) stretched in place to an output shape, stride 0 where it broadcasts.
 * In place, in the record: a view built on the stack and copied in cost more than the rest of
 * recording an element-wise operand. From the last axis down, axis d reads axis d - lead,
 * which is not written yet. */
static void broadcast_view(ir_view *v, int rank, const int64_t *shape)
{
    int lead = rank - v->rank;
    for (int d = rank - 1; d >= 0; d--) {
        v->strides[d] = d >= lead && v->shape[d - lead] == shape[d] ? v->strides[d - lead] : 0;
        v->shape[d] = shape[d];
    }
    v->rank = rank;
}

burnc_tensor_t *rt_cast(burnc_tensor_t *x, burnc_dtype_t dt)
{
    if (x->dtype == dt)
        return burnc_tensor_retain(x);
    rt_device *dev = x->st->dev;
    ir_record *r = rt_record_begin(dev, IR_OP_CAST, 1);
    if (!r)
        return NULL;
    r->dtype = dt;
    r->compute = x->dtype;
    r->out_rank = x->view.rank;
    memcpy(r->out_shape, x->view.shape, sizeof r->out_shape);
    rt_record_input(r, 0, x, NULL);
    burnc_tensor_t *out = rt_record_commit(dev, r);
    if (!out || !rt_ad_wanted(1, &x))
        return out;
    ad_params p = {.dtype = dt};
    return ad_track(IR_OP_CAST, 1, &x, out, &p);
}

/* ---- Element-wise ---- */
/* xs[0..n) in dtype dt, into cs: an operand that has dt already is borrowed (a retain and an
 * unref per operand were a good part of recording a small op), the others are cast (new
 * references, for drop_casts). False, with nothing left to drop, when a cast fails. */
static bool cast_operands(int n, burnc_tensor_t *const *xs, burnc_dtype_t dt, burnc_tensor_t **cs)
{
    for (int i = 0; i < n; i++) {
        cs[i] = xs[i]->dtype == dt ? xs[i] : rt_cast(xs[i], dt);
        if (!cs[i]) {
            while (i-- > 0)
                if (cs[i] != xs[i])
                    rt_tensor_unref(cs[i]);
            return false;
        }
    }
    return true;
}

static void drop_casts(int n, burnc_tensor_t *const *xs, burnc_tensor_t *const *cs)
{
    for (int i = 0; i < n; i++)
        if (cs[i] != xs[i])
            rt_tensor_unref(cs[i]);
}

static bool float_only(ir_op op)
{
    switch (op) {
    case IR_OP_EXP: case IR_OP_EXP2: case IR_OP_EXPM1: case IR_OP_LOG: case IR_OP_LOG2: case IR_OP_LOG1P:
    case IR_OP_SQRT: case IR_OP_RSQRT: case IR_OP_RECIPROCAL: case IR_OP_SIN: case IR_OP_COS: case IR_OP_TAN:
    case IR_OP_TANH: case IR_OP_SIGMOID: case IR_OP_GELU: case IR_OP_GELU_GRAD: case IR_OP_SILU: case IR_OP_ERF:
    case IR_OP_ATAN2:
        return true;
    default:
        return false;
    }
}

static bool bool_result(ir_op op)
{
    return op == IR_OP_LOGICAL_NOT || (op >= IR_OP_EQ && op <= IR_OP_LOGICAL_XOR);
}

/* Ops that take any dtype, bool included. */
static bool takes_bool(ir_op op) { return bool_result(op); }

/* The dtype an element-wise op computes in, given its operands' promoted dtype. */
static burnc_status_t compute_dtype(ir_op op, bool scalar, rt_device *dev, burnc_dtype_t dt, burnc_dtype_t *out)
{
    if (float_only(op) && !ir_dtype_is_float(dt))
        dt = dev->float_dtype;
    else if (!takes_bool(op) && dt == BURNC_DTYPE_BOOL)
        return refuse_bool(pname(op, scalar), dt);
    *out = dt;
    return BURNC_OK;
}

/* Records an element-wise op over n operands already cast to `compute` and broadcast. */
static burnc_tensor_t *record_elementwise(ir_op op, burnc_dtype_t compute, burnc_dtype_t out_dt, int n,
                                          burnc_tensor_t *const *xs, int rank, const int64_t *shape,
                                          const double *scalars, int nscalars, uint32_t flags)
{
    rt_device *dev = xs[0]->st->dev;
    ir_record *r = rt_record_begin(dev, op, n);
    if (!r)
        return NULL;
    r->dtype = out_dt;
    r->compute = compute;
    r->flags = flags;
    r->out_rank = rank;
    memcpy(r->out_shape, shape, (size_t)rank * sizeof *shape);
    for (int i = 0; i < nscalars; i++)
        r->scalar[i] = scalars[i];
    for (int k = 0; k < n; k++) {
        rt_record_input(r, k, xs[k], NULL);
        broadcast_view(&r->in[k].view, rank, shape);
    }
    burnc_tensor_t *out = rt_record_commit(dev, r);
    if (!out || !rt_ad_wanted(n, xs))
        return out;
    ad_params p = {.flags = flags};
    for (int i = 0; i < nscalars; i++)
        p.scalar[i] = scalars[i];
    return ad_track(op, n, xs, out, &p);
}

static burnc_tensor_t *unary(ir_op op, burnc_tensor_t *x, const double *scalars, int nscalars)
{
    rt_device *dev = x->st->dev;
    burnc_dtype_t dt = BURNC_DTYPE_F32;
    if (compute_dtype(op, false, dev, x->dtype, &dt) != BURNC_OK)
        return NULL;
    double conv[2] = {0, 0};
    for (int i = 0; i < nscalars; i++)
        conv[i] = ir_scalar_to_dtype(scalars[i], dt);
    burnc_tensor_t *c;
    if (!cast_operands(1, &x, dt, &c))
        return NULL;
    burnc_tensor_t *out = record_elementwise(op, dt, bool_result(op) ? BURNC_DTYPE_BOOL : dt, 1, &c, c->view.rank,
                                             c->view.shape, conv, nscalars, 0);
    drop_casts(1, &x, &c);
    return out;
}

static burnc_tensor_t *binary(ir_op op, burnc_tensor_t *a, burnc_tensor_t *b)
{
    burnc_tensor_t *ts[2] = {a, b};
    rt_device *dev = same_device(op, ts, 2);
    int rank = 0;
    int64_t shape[BURNC_MAX_RANK];
    burnc_dtype_t dt = BURNC_DTYPE_F32;
    if (!dev || broadcast(op, 2, ts, &rank, shape) != BURNC_OK ||
        compute_dtype(op, false, dev, ir_promote(a->dtype, b->dtype), &dt) != BURNC_OK)
        return NULL;
    burnc_tensor_t *c[2];
    if (!cast_operands(2, ts, dt, c))
        return NULL;
    burnc_tensor_t *out = record_elementwise(op, dt, bool_result(op) ? BURNC_DTYPE_BOOL : dt, 2, c, rank, shape,
                                             NULL, 0, 0);
    drop_casts(2, ts, c);
    return out;
}

static burnc_tensor_t *binary_scalar(ir_op op, burnc_tensor_t *a, double s)
{
    burnc_dtype_t dt = BURNC_DTYPE_F32;
    if (compute_dtype(op, true, a->st->dev, a->dtype, &dt) != BURNC_OK)
        return NULL;
    double conv = ir_scalar_to_dtype(s, dt);
    burnc_tensor_t *c;
    if (!cast_operands(1, &a, dt, &c))
        return NULL;
    burnc_tensor_t *out = record_elementwise(op, dt, bool_result(op) ? BURNC_DTYPE_BOOL : dt, 1, &c, c->view.rank,
                                             c->view.shape, &conv, 1, IR_REC_SCALAR_RHS);
    drop_casts(1, &a, &c);
    return out;
}

#define UNARY_OP(NAME, OP)                          \
    burnc_tensor_t *burnc_##NAME(burnc_tensor_t *x) \
    {                                               \
        if (!x)                                     \
            return NULL;                            \
        RT_PUBLIC(unary(OP, x, NULL, 0));           \
    }
#define X(name) UNARY_OP(name, (ir_op)op_of_##name)
enum {
    op_of_neg = IR_OP_NEG, op_of_abs = IR_OP_ABS, op_of_sign = IR_OP_SIGN, op_of_exp = IR_OP_EXP,
    op_of_exp2 = IR_OP_EXP2, op_of_expm1 = IR_OP_EXPM1, op_of_log = IR_OP_LOG, op_of_log2 = IR_OP_LOG2,
    op_of_log1p = IR_OP_LOG1P, op_of_sqrt = IR_OP_SQRT, op_of_rsqrt = IR_OP_RSQRT,
    op_of_reciprocal = IR_OP_RECIPROCAL, op_of_sin = IR_OP_SIN, op_of_cos = IR_OP_COS, op_of_tan = IR_OP_TAN,
    op_of_tanh = IR_OP_TANH, op_of_sigmoid = IR_OP_SIGMOID, op_of_relu = IR_OP_RELU, op_of_gelu = IR_OP_GELU,
    op_of_gelu_grad = IR_OP_GELU_GRAD, op_of_silu = IR_OP_SILU, op_of_erf = IR_OP_ERF, op_of_floor = IR_OP_FLOOR,
    op_of_ceil = IR_OP_CEIL, op_of_round = IR_OP_ROUND, op_of_logical_not = IR_OP_LOGICAL_NOT,
    op_of_add = IR_OP_ADD, op_of_sub = IR_OP_SUB, op_of_mul = IR_OP_MUL, op_of_div = IR_OP_DIV,
    op_of_pow = IR_OP_POW, op_of_maximum = IR_OP_MAXIMUM, op_of_minimum = IR_OP_MINIMUM,
    op_of_remainder = IR_OP_REMAINDER, op_of_atan2 = IR_OP_ATAN2, op_of_eq = IR_OP_EQ, op_of_ne = IR_OP_NE,
    op_of_lt = IR_OP_LT, op_of_le = IR_OP_LE, op_of_gt = IR_OP_GT, op_of_ge = IR_OP_GE,
    op_of_logical_and = IR_OP_LOGICAL_AND, op_of_logical_or = IR_OP_LOGICAL_OR,
    op_of_logical_xor = IR_OP_LOGICAL_XOR,
};
BURNC_UNARY_OPS(X)
#undef X

#define X(name)                                                      \
    burnc_tensor_t *burnc_##name(burnc_tensor_t *a, burnc_tensor_t *b) \
    {                                                                \
        if (!a || !b)                                                \
            return NULL;                                             \
        RT_PUBLIC(binary((ir_op)op_of_##name, a, b));                       \
    }                                                                \
    burnc_tensor_t *burnc_##name##_scalar(burnc_tensor_t *a, double s) \
    {                                                                \
        if (!a)                                                      \
            return NULL;                                             \
        RT_PUBLIC(binary_scalar((ir_op)op_of_##name, a, s));                \
    }
BURNC_BINARY_OPS(X)
#undef X

static burnc_tensor_t *where(burnc_tensor_t *cond, burnc_tensor_t *a, burnc_tensor_t *b)
{
    burnc_tensor_t *ts[3] = {cond, a, b};
    rt_device *dev = same_device(IR_OP_WHERE, ts, 3);
    int rank = 0;
    int64_t shape[BURNC_MAX_RANK];
    if (!dev || broadcast(IR_OP_WHERE, 3, ts, &rank, shape) != BURNC_OK)
        return NULL;
    burnc_dtype_t dt = ir_promote(a->dtype, b->dtype);
    burnc_tensor_t *c[3] = {cond};
    if (!cast_operands(2, ts + 1, dt, c + 1))
        return NULL;
    burnc_tensor_t *out = record_elementwise(IR_OP_WHERE, dt, dt, 3, c, rank, shape, NULL, 0, 0);
    drop_casts(2, ts + 1, c + 1);
    return out;
}

burnc_tensor_t *burnc_where(burnc_tensor_t *cond, burnc_tensor_t *a, burnc_tensor_t *b)
{
    if (!cond || !a || !b)
        return NULL;
    RT_PUBLIC(where(cond, a, b));
}

burnc_tensor_t *burnc_clamp(burnc_tensor_t *x, double lo, double hi)
{
    if (!x)
        return NULL;
    double s[2] = {lo, hi};
    RT_PUBLIC(unary(IR_OP_CLAMP, x, s, 2));
}

burnc_tensor_t *burnc_cast(burnc_tensor_t *x, burnc_dtype_t dtype)
{
    if (!x)
        return NULL;
    if (!ir_dtype_valid(dtype)) {
        rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_cast: %d is not a storage dtype", (int)dtype);
        return NULL;
    }
    if (rt_check_dtype("burnc_cast", x->st->dev, &dtype) != BURNC_OK)
        return NULL;
    if (dtype == x->dtype)
        RT_PUBLIC(rt_ad_reshape(x, rt_view(x, &x->view)));
    RT_PUBLIC(rt_cast(x, dtype));
}

/* ---- Reductions ---- */
static burnc_tensor_t *reduce(ir_op op, burnc_tensor_t *x, uint32_t mask, bool keepdim, double correction)
{
    const char *name = pname(op, false);
    rt_device *dev = x->st->dev;
    burnc_dtype_t dt = x->dtype;
    switch (op) {
    case IR_OP_SUM:
    case IR_OP_PROD:
        if (!ir_dtype_is_float(dt))
            dt = BURNC_DTYPE_I64;
        break;
    case IR_OP_MEAN:
    case IR_OP_VAR:
    case IR_OP_STD:
        if (!ir_dtype_is_float(dt)) {
            rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "%s: needs a float tensor, got %s (cast first)", name,
                    ir_dtype_name(dt));
            return NULL;
        }
        break;
    default:
        if (refuse_bool(name, dt) != BURNC_OK)
            return NULL;
        for (int d = 0; d < x->view.rank; d++)
            if ((mask >> d & 1) && x->view.shape[d] == 0) {
                char s[200];
                rt_fail(BURNC_ERR_SHAPE, "%s: cannot reduce axis %d of size 0 (shape %s)", name, d,
                        shape_of(s, sizeof s, x));
                return NULL;
            }
    }
    burnc_tensor_t *c = rt_cast(x, dt);
    if (!c)
        return NULL;
    ir_record *r = rt_record_begin(dev, op, 1);
    if (!r) {
        rt_tensor_unref(c);
        return NULL;
    }
    r->compute = dt;
    r->dtype = op == IR_OP_ARGMAX || op == IR_OP_ARGMIN ? BURNC_DTYPE_I64 : dt;
    r->axes = mask;
    r->scalar[0] = correction;
    r->out_rank = c->view.rank;
    for (int d = 0; d < c->view.rank; d++)
        r->out_shape[d] = (mask >> d & 1) ? 1 : c->view.shape[d];
    rt_record_input(r, 0, c, NULL);
    burnc_tensor_t *out = rt_record_commit(dev, r);
    if (out && !keepdim) {
        ir_view v = {.offset = 0};
        for (int d = 0; d < out->view.rank; d++)
            if (!(mask >> d & 1)) {
                v.shape[v.rank] = out->view.shape[d];
                v.strides[v.rank++] = out->view.strides[d];
            }
        burnc_tensor_t *squeezed = rt_view(out, &v);
        rt_tensor_unref(out);
        out = squeezed;
    }
    /* one node from the input to the (squeezed) result */
    if (!out || !rt_ad_wanted(1, &c)) {
        rt_tensor_unref(c);
        return out;
    }
    ad_params p = {.axes = mask, .keepdim = keepdim, .scalar = {correction}};
    out = ad_track(op, 1, &c, out, &p);
    rt_tensor_unref(c);
    return out;
}

/* The internal form composites use: axes already checked. */
burnc_tensor_t *rt_reduce(ir_op op, burnc_tensor_t *x, uint32_t mask, bool keepdim, double correction)
{
    return reduce(op, x, mask, keepdim, correction);
}

static burnc_tensor_t *reduce_public(ir_op op, burnc_tensor_t *x, int naxes, const int *axes, bool keepdim,
                                     double correction)
{
    const char *name = pname(op, false);
    uint32_t mask;
    if (rt_axes_mask(name, naxes, axes, x->view.rank, &mask) != BURNC_OK)
        return NULL;
    return reduce(op, x, mask, keepdim, correction);
}

#define REDUCE_OP(NAME, OP)                                                                        \
    burnc_tensor_t *burnc_##NAME(burnc_tensor_t *x, int naxes, const int *axes, bool keepdim)     \
    {                                                                                              \
        if (!x)                                                                                    \
            return NULL;                                                                           \
        RT_PUBLIC(reduce_public(OP, x, naxes, axes, keepdim, 0));                                  \
    }
REDUCE_OP(sum, IR_OP_SUM)
REDUCE_OP(mean, IR_OP_MEAN)
REDUCE_OP(prod, IR_OP_PROD)
REDUCE_OP(max, IR_OP_MAX)
REDUCE_OP(min, IR_OP_MIN)

burnc_tensor_t *burnc_var(burnc_tensor_t *x, int naxes, const int *axes, double correction, bool keepdim)
{
    if (!x)
        return NULL;
    RT_PUBLIC(reduce_public(IR_OP_VAR, x, naxes, axes, keepdim, correction));
}

burnc_tensor_t *burnc_std(burnc_tensor_t *x, int naxes, const int *axes, double correction, bool keepdim)
{
    if (!x)
        return NULL;
    RT_PUBLIC(reduce_public(IR_OP_STD, x, naxes, axes, keepdim, correction));
}

static burnc_tensor_t *arg_reduce(ir_op op, burnc_tensor_t *x, int axis, bool keepdim)
{
    const char *name = pname(op, false);
    int a = 0;
    if (x->view.rank == 0) {
        rt_fail(BURNC_ERR_AXIS, "%s: a rank-0 tensor has no axis %d", name, axis);
        return NULL;
    }
    if (rt_axis(name, axis, x->view.rank, &a) != BURNC_OK)
        return NULL;
    return reduce(op, x, 1u << a, keepdim, 0);
}

burnc_tensor_t *burnc_argmax(burnc_tensor_t *x, int axis, bool keepdim)
{
    if (!x)
        return NULL;
    RT_PUBLIC(arg_reduce(IR_OP_ARGMAX, x, axis, keepdim));
}

burnc_tensor_t *burnc_argmin(burnc_tensor_t *x, int axis, bool keepdim)
{
    if (!x)
        return NULL;
    RT_PUBLIC(arg_reduce(IR_OP_ARGMIN, x, axis, keepdim));
}

/* ---- Matmul ---- */
/* A 1-D operand as a matrix: [1, K] on the left, [K, 1] on the right. */
static ir_view matrix_view(const ir_view *v, bool left)
{
    ir_view m = *v;
    if (v->rank != 1)
        return m;
    m.rank = 2;
    if (left) {
        m.shape[0] = 1, m.strides[0] = 0;
        m.shape[1] = v->shape[0], m.strides[1] = v->strides[0];
    } else {
        m.shape[1] = 1, m.strides[1] = 0;
    }
    return m;
}

static burnc_tensor_t *matmul(burnc_tensor_t *a, burnc_tensor_t *b)
{
    const char *name = "burnc_matmul";
    burnc_tensor_t *ts[2] = {a, b};
    rt_device *dev = same_device(IR_OP_MATMUL, ts, 2);
    if (!dev)
        return NULL;
    char sa[200], sb[200];
    if (a->view.rank == 0 || b->view.rank == 0) {
        rt_fail(BURNC_ERR_SHAPE, "%s: operands need rank >= 1, got %s and %s", name, shape_of(sa, sizeof sa, a),
                shape_of(sb, sizeof sb, b));
        return NULL;
    }
    burnc_dtype_t dt = ir_promote(a->dtype, b->dtype);
    if (refuse_bool(name, dt) != BURNC_OK)
        return NULL;
    ir_view va = matrix_view(&a->view, true), vb = matrix_view(&b->view, false);
    int64_t M = va.shape[va.rank - 2], K = va.shape[va.rank - 1], N = vb.shape[vb.rank - 1];
    if (vb.shape[vb.rank - 2] != K) {
        rt_fail(BURNC_ERR_SHAPE, "%s: shapes %s and %s do not match (%lld columns vs %lld rows)", name,
                shape_of(sa, sizeof sa, a), shape_of(sb, sizeof sb, b), (long long)K,
                (long long)vb.shape[vb.rank - 2]);
        return NULL;
    }
    /* batch axes broadcast like element-wise shapes */
    int ba = va.rank - 2, bb = vb.rank - 2, rb = ba > bb ? ba : bb;
    int64_t shape[BURNC_MAX_RANK];
    for (int d = 0; d < rb; d++) {
        int64_t x = d >= rb - ba ? va.shape[d - (rb - ba)] : 1, y = d >= rb - bb ? vb.shape[d - (rb - bb)] : 1;
        if (x != y && x != 1 && y != 1) {
            rt_fail(BURNC_ERR_SHAPE, "%s: batch axes of %s and %s do not broadcast", name, shape_of(sa, sizeof sa, a),
                    shape_of(sb, sizeof sb, b));
            return NULL;
        }
        shape[d] = x == 1 ? y : x;
    }
    burnc_tensor_t *c[2] = {rt_cast(a, dt), NULL};
    c[1] = c[0] ? rt_cast(b, dt) : NULL;
    ir_record *r = c[1] ? rt_record_begin(dev, IR_OP_MATMUL, 2) : NULL;
    burnc_tensor_t *out = NULL;
    if (r) {
        r->dtype = r->compute = dt;
        r->out_rank = rb + 2;
        memcpy(r->out_shape, shape, (size_t)rb * sizeof *shape);
        r->out_shape[rb] = M;
        r->out_shape[rb + 1] = N;
        for (int k = 0; k < 2; k++) {
            ir_view m = matrix_view(&c[k]->view, k == 0);
            int64_t want[BURNC_MAX_RANK];
            memcpy(want, shape, (size_t)rb * sizeof *shape);
            want[rb] = k == 0 ? M : K;
            want[rb + 1] = k == 0 ? K : N;
            rt_record_input(r, k, c[k], &m);
            broadcast_view(&r->in[k].view, rb + 2, want);
        }
        out = rt_record_commit(dev, r);
    }
    if (out && (a->view.rank == 1 || b->view.rank == 1)) {
        /* drop the axes that 1-D operands added */
        ir_view v = {.offset = 0};
        for (int d = 0; d < out->view.rank; d++) {
            if ((d == rb && a->view.rank == 1) || (d == rb + 1 && b->view.rank == 1))
                continue;
            v.shape[v.rank] = out->view.shape[d];
            v.strides[v.rank++] = out->view.strides[d];
        }
        burnc_tensor_t *o = rt_view(out, &v);
        rt_tensor_unref(out);
        out = o;
    }
    /* one node from the (cast) operands to the result */
    if (out && rt_ad_wanted(2, c))
        out = ad_track(IR_OP_MATMUL, 2, c, out, NULL);
    for (int k = 0; k < 2; k++)
        if (c[k])
            rt_tensor_unref(c[k]);
    return out;
}

burnc_tensor_t *burnc_matmul(burnc_tensor_t *a, burnc_tensor_t *b)
{
    if (!a || !b)
        return NULL;
    RT_PUBLIC(matmul(a, b));
}
