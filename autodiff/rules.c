/* Backward rules, one per differentiable op (named in ir/ops.def's BW column) and per view kind,
 * and the replay of memory-bound ops for checkpointing. Rules are written with the public ops:
 * they run with no-grad on and scopes suspended, so every handle they make is an internal
 * reference, collected in a `tmp` list and dropped at the end. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff/ad.h"
#include "kernel.h"

typedef struct tmp {
    burnc_tensor_t *t[64];
    int n;
} tmp;

static burnc_tensor_t *tmp_add(tmp *s, burnc_tensor_t *t)
{
    if (t && s->n < (int)(sizeof s->t / sizeof s->t[0]))
        s->t[s->n++] = t;
    return t; /* a full list would leak: rules stay far below it */
}

#define T(e) tmp_add(&tl, (e))
#define IN(k) T(ad_in_value(n, (k)))
#define OUTV T(ad_out_value(n))
#define W(k) (n->in[(k)].node != NULL)
#define SCALAR_RHS (n->p.flags & IR_REC_SCALAR_RHS)
#define DEV(t) ((t) ? (t)->st->dev : NULL)

/* Drops the temporaries; fails unless every tracked input not in `optional` got a gradient. */
static burnc_status_t fin(tmp *s, ad_node *n, burnc_tensor_t **gin, unsigned optional)
{
    for (int i = 0; i < s->n; i++)
        rt_tensor_unref(s->t[i]);
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k].node && !gin[k] && !(k < 32 && (optional >> k & 1))) {
            burnc_status_t c = burnc_error_code();
            return c != BURNC_OK ? c : rt_fail(BURNC_ERR_INTERNAL, "burnc_backward: the rule of %s failed",
                                               ad_kind_name(n->kind));
        }
    return BURNC_OK;
}

#define RULE(name) static burnc_status_t ad_bw_##name(ad_node *n, burnc_tensor_t *g, burnc_tensor_t **gin)
#define BEGIN tmp tl = {.n = 0}
#define END(optional) return fin(&tl, n, gin, (optional))

static burnc_tensor_t *zero_like(burnc_tensor_t *g) { return g ? burnc_zeros(DEV(g), g->dtype, 0, NULL) : NULL; }

static burnc_tensor_t *zeros_of(const ad_input *in, burnc_tensor_t *g)
{
    return g ? burnc_zeros(DEV(g), in->dtype, in->rank, in->shape) : NULL;
}

/* ---- Element-wise, unary ---- */
RULE(neg)
{
    BEGIN;
    gin[0] = burnc_neg(g);
    END(0);
}
RULE(abs)
{
    BEGIN;
    gin[0] = burnc_mul(g, T(burnc_sign(IN(0))));
    END(0);
}
RULE(exp)
{
    BEGIN;
    gin[0] = burnc_mul(g, OUTV);
    END(0);
}
RULE(exp2)
{
    BEGIN;
    gin[0] = burnc_mul(g, T(burnc_mul_scalar(OUTV, M_LN2)));
    END(0);
}
RULE(expm1)
{
    BEGIN;
    gin[0] = burnc_mul(g, T(burnc_add_scalar(OUTV, 1)));
    END(0);
}
RULE(log)
{
    BEGIN;
    gin[0] = burnc_div(g, IN(0));
    END(0);
}
RULE(log2)
{
    BEGIN;
    gin[0] = burnc_div(g, T(burnc_mul_scalar(IN(0), M_LN2)));
    END(0);
}
RULE(log1p)
{
    BEGIN;
    gin[0] = burnc_div(g, T(burnc_add_scalar(IN(0), 1)));
    END(0);
}
RULE(sqrt)
{
    BEGIN;
    gin[0] = burnc_div(T(burnc_mul_scalar(g, 0.5)), OUTV);
    END(0);
}
RULE(rsqrt) /* d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3 */
{
    BEGIN;
    burnc_tensor_t *y = OUTV;
    gin[0] = burnc_mul(T(burnc_mul_scalar(g, -0.5)), T(burnc_mul(y, T(burnc_mul(y, y)))));
    END(0);
}
RULE(reciprocal)
{
    BEGIN;
    burnc_tensor_t *y = OUTV;
    gin[0] = burnc_mul(T(burnc_neg(g)), T(burnc_mul(y, y)));
    END(0);
}
RULE(sin)
{
    BEGIN;
    gin[0] = burnc_mul(g, T(burnc_cos(IN(0))));
    END(0);
}
RULE(cos)
{
    BEGIN;
    gin[0] = burnc_mul(T(burnc_neg(g)), T(burnc_sin(IN(0))));
    END(0);
}
RULE(tan)
{
    BEGIN;
    burnc_tensor_t *y = OUTV;
    gin[0] = burnc_mul(g, T(burnc_add_scalar(T(burnc_mul(y, y)), 1)));
    END(0);
}
RULE(tanh)
{
    BEGIN;
    burnc_tensor_t *y = OUTV;
    gin[0] = burnc_mul(g, T(burnc_add_scalar(T(burnc_neg(T(burnc_mul(y, y)))), 1)));
    END(0);
}
RULE(sigmoid)
{
    BEGIN;
    burnc_tensor_t *y = OUTV;
    burnc_tensor_t *one_minus = T(burnc_add_scalar(T(burnc_neg(y)), 1));
    gin[0] = burnc_mul(g, T(burnc_mul(y, one_minus)));
    END(0);
}
RULE(relu)
{
    BEGIN;
    gin[0] = burnc_where(T(burnc_gt_scalar(IN(0), 0)), g, T(zero_like(g)));
    END(0);
}
RULE(gelu) /* Phi(x) + x phi(x), one op: no cancellation in 1 + erf for x << 0 */
{
    BEGIN;
    gin[0] = burnc_mul(g, T(burnc_gelu_grad(IN(0))));
    END(0);
}
RULE(silu) /* s (1 + x (1 - s)) */
{
    BEGIN;
    burnc_tensor_t *x = IN(0);
    burnc_tensor_t *s = T(burnc_sigmoid(x));
    burnc_tensor_t *inner = T(burnc_add_scalar(T(burnc_mul(x, T(burnc_add_scalar(T(burnc_neg(s)), 1)))), 1));
    gin[0] = burnc_mul(g, T(burnc_mul(s, inner)));
    END(0);
}
RULE(erf)
{
    BEGIN;
    burnc_tensor_t *x = IN(0);
    gin[0] = burnc_mul(g, T(burnc_mul_scalar(T(burnc_exp(T(burnc_neg(T(burnc_mul(x, x)))))), M_2_SQRTPI)));
    END(0);
}
RULE(cast)
{
    BEGIN;
    gin[0] = burnc_cast(g, n->in[0].dtype);
    END(0);
}
RULE(clamp)
{
    BEGIN;
    burnc_tensor_t *x = IN(0);
    burnc_tensor_t *inside =
        T(burnc_logical_and(T(burnc_ge_scalar(x, n->p.scalar[0])), T(burnc_le_scalar(x, n->p.scalar[1]))));
    gin[0] = burnc_where(inside, g, T(zero_like(g)));
    END(0);
}

/* ---- Element-wise, binary (a scalar right operand when SCALAR_RHS) ---- */
RULE(add)
{
    BEGIN;
    gin[0] = W(0) ? burnc_tensor_retain(g) : NULL;
    if (!SCALAR_RHS && W(1))
        gin[1] = burnc_tensor_retain(g);
    END(0);
}
RULE(sub)
{
    BEGIN;
    gin[0] = W(0) ? burnc_tensor_retain(g) : NULL;
    if (!SCALAR_RHS && W(1))
        gin[1] = burnc_neg(g);
    END(0);
}
RULE(mul)
{
    BEGIN;
    if (SCALAR_RHS) {
        gin[0] = burnc_mul_scalar(g, n->p.scalar[0]);
    } else {
        if (W(0))
            gin[0] = burnc_mul(g, IN(1));
        if (W(1))
            gin[1] = burnc_mul(g, IN(0));
    }
    END(0);
}
RULE(div) /* d(a/b)/db = -y/b */
{
    BEGIN;
    if (SCALAR_RHS) {
        gin[0] = burnc_div_scalar(g, n->p.scalar[0]);
    } else {
        burnc_tensor_t *b = IN(1);
        if (W(0))
            gin[0] = burnc_div(g, b);
        if (W(1))
            gin[1] = burnc_neg(T(burnc_mul(g, T(burnc_div(OUTV, b)))));
    }
    END(0);
}
RULE(pow) /* b a^(b-1), 0 where b == 0; y log a, 0 where a == 0 and b >= 0 (as PyTorch) */
{
    BEGIN;
    burnc_tensor_t *a = IN(0);
    if (SCALAR_RHS) {
        double s = n->p.scalar[0];
        if (s != 0)
            gin[0] = burnc_mul(g, T(burnc_mul_scalar(T(burnc_pow_scalar(a, s - 1)), s)));
        END(1);
    }
    burnc_tensor_t *b = IN(1), *zero = T(zero_like(g));
    if (W(0)) {
        burnc_tensor_t *d = T(burnc_mul(b, T(burnc_pow(a, T(burnc_sub_scalar(b, 1))))));
        gin[0] = burnc_where(T(burnc_eq_scalar(b, 0)), zero, T(burnc_mul(g, d)));
    }
    if (W(1)) {
        burnc_tensor_t *mask = T(burnc_logical_and(T(burnc_eq_scalar(a, 0)), T(burnc_ge_scalar(b, 0))));
        gin[1] = burnc_where(mask, zero, T(burnc_mul(g, T(burnc_mul(OUTV, T(burnc_log(a)))))));
    }
    END(0);
}

/* maximum/minimum: the winner takes g, a tie splits it in halves (as PyTorch). */
static burnc_status_t extremum2(ad_node *n, burnc_tensor_t *g, burnc_tensor_t **gin, bool is_max)
{
    BEGIN;
    burnc_tensor_t *a = IN(0), *win, *tie;
    burnc_dtype_t dt = g->dtype;
    if (SCALAR_RHS) {
        double s = n->p.scalar[0];
        win = T(is_max ? burnc_gt_scalar(a, s) : burnc_lt_scalar(a, s));
        tie = T(burnc_eq_scalar(a, s));
    } else {
        burnc_tensor_t *b = IN(1);
        win = T(is_max ? burnc_gt(a, b) : burnc_lt(a, b));
        tie = T(burnc_eq(a, b));
    }
    burnc_tensor_t *w = T(burnc_add(T(burnc_cast(win, dt)), T(burnc_mul_scalar(T(burnc_cast(tie, dt)), 0.5))));
    burnc_tensor_t *ga = T(burnc_mul(g, w));
    gin[0] = W(0) ? burnc_tensor_retain(ga) : NULL;
    if (!SCALAR_RHS && W(1))
        gin[1] = burnc_sub(g, ga);
    END(0);
}
RULE(maximum) { return extremum2(n, g, gin, true); }
RULE(minimum) { return extremum2(n, g, gin, false); }
RULE(remainder) /* a - b floor(a / b) */
{
    BEGIN;
    gin[0] = W(0) ? burnc_tensor_retain(g) : NULL;
    if (!SCALAR_RHS && W(1))
        gin[1] = burnc_neg(T(burnc_mul(g, T(burnc_floor(T(burnc_div(IN(0), IN(1))))))));
    END(0);
}
RULE(atan2) /* atan2(a, b): (b, -a) / (a^2 + b^2) */
{
    BEGIN;
    burnc_tensor_t *a = IN(0);
    if (SCALAR_RHS) {
        double s = n->p.scalar[0];
        burnc_tensor_t *den = T(burnc_add_scalar(T(burnc_mul(a, a)), s * s));
        gin[0] = burnc_div(T(burnc_mul_scalar(g, s)), den);
        END(0);
    }
    burnc_tensor_t *b = IN(1);
    burnc_tensor_t *den = T(burnc_add(T(burnc_mul(a, a)), T(burnc_mul(b, b))));
    if (W(0))
        gin[0] = burnc_div(T(burnc_mul(g, b)), den);
    if (W(1))
        gin[1] = burnc_div(T(burnc_mul(T(burnc_neg(g)), a)), den);
    END(0);
}
RULE(where) /* the condition gets no gradient */
{
    BEGIN;
    burnc_tensor_t *c = IN(0), *zero = T(zero_like(g));
    if (W(1))
        gin[1] = burnc_where(c, g, zero);
    if (W(2))
        gin[2] = burnc_where(c, zero, g);
    END(1);
}

/* ---- Reductions ---- */
/* The reduced axes as a list, their element count, and the input shape with them set to 1. */
static int reduced(const ad_node *n, int *axes, double *count, int64_t *kshape)
{
    const ad_input *x = &n->in[0];
    int na = 0;
    *count = 1;
    for (int d = 0; d < x->rank; d++) {
        kshape[d] = x->shape[d];
        if (n->p.axes >> d & 1) {
            axes[na++] = d;
            *count *= (double)x->shape[d];
            kshape[d] = 1;
        }
    }
    return na;
}

/* g (or the output) with the reduced axes kept as size 1. */
static burnc_tensor_t *kept(const ad_node *n, burnc_tensor_t *t)
{
    int axes[BURNC_MAX_RANK];
    int64_t kshape[BURNC_MAX_RANK];
    double count;
    reduced(n, axes, &count, kshape);
    return t ? burnc_reshape(t, n->in[0].rank, kshape) : NULL;
}

static burnc_tensor_t *expand_in(const ad_node *n, burnc_tensor_t *t)
{
    return t ? burnc_expand(t, n->in[0].rank, n->in[0].shape) : NULL;
}

RULE(sum)
{
    BEGIN;
    gin[0] = expand_in(n, T(kept(n, g)));
    END(0);
}
RULE(mean)
{
    BEGIN;
    int axes[BURNC_MAX_RANK];
    int64_t ks[BURNC_MAX_RANK];
    double count;
    reduced(n, axes, &count, ks);
    gin[0] = expand_in(n, T(burnc_div_scalar(T(kept(n, g)), count)));
    END(0);
}
RULE(prod) /* y / x where no element is 0; with one zero only that element gets the rest's product */
{
    BEGIN;
    int axes[BURNC_MAX_RANK];
    int64_t ks[BURNC_MAX_RANK];
    double count;
    int na = reduced(n, axes, &count, ks);
    burnc_tensor_t *x = IN(0), *y = T(kept(n, OUTV)), *gk = T(kept(n, g)), *zero = T(zero_like(g));
    burnc_tensor_t *is0 = T(burnc_eq_scalar(x, 0));
    burnc_tensor_t *zeros = T(burnc_sum(T(burnc_cast(is0, g->dtype)), na, axes, true));
    burnc_tensor_t *others = T(burnc_prod(T(burnc_where(is0, T(burnc_ones(DEV(g), g->dtype, 0, NULL)), x)), na, axes,
                                          true));
    burnc_tensor_t *at_zero = T(burnc_where(T(burnc_eq_scalar(zeros, 1)), others, zero));
    burnc_tensor_t *elsewhere = T(burnc_where(T(burnc_eq_scalar(zeros, 0)), T(burnc_div(y, x)), zero));
    gin[0] = burnc_mul(gk, T(burnc_where(is0, at_zero, elsewhere)));
    END(0);
}
RULE(extreme) /* max, min: split evenly between the elements equal to the result */
{
    BEGIN;
    int axes[BURNC_MAX_RANK];
    int64_t ks[BURNC_MAX_RANK];
    double count;
    int na = reduced(n, axes, &count, ks);
    burnc_tensor_t *hit = T(burnc_cast(T(burnc_eq(IN(0), T(kept(n, OUTV)))), g->dtype));
    burnc_tensor_t *share = T(burnc_div(T(kept(n, g)), T(burnc_sum(hit, na, axes, true))));
    gin[0] = burnc_mul(hit, share);
    END(0);
}
/* x - mean(x) over the reduced axes */
static burnc_tensor_t *centered(ad_node *n, tmp *s, burnc_tensor_t *x)
{
    int axes[BURNC_MAX_RANK];
    int64_t ks[BURNC_MAX_RANK];
    double count;
    int na = reduced(n, axes, &count, ks);
    burnc_tensor_t *m = x ? tmp_add(s, burnc_mean(x, na, axes, true)) : NULL;
    return burnc_sub(x, m);
}
RULE(var) /* 2 (x - mean) / (count - correction) */
{
    BEGIN;
    int axes[BURNC_MAX_RANK];
    int64_t ks[BURNC_MAX_RANK];
    double count;
    reduced(n, axes, &count, ks);
    burnc_tensor_t *c = T(centered(n, &tl, IN(0)));
    gin[0] = burnc_div_scalar(T(burnc_mul_scalar(T(burnc_mul(T(kept(n, g)), c)), 2)), count - n->p.scalar[0]);
    END(0);
}
RULE(std) /* (x - mean) / ((count - correction) y) */
{
    BEGIN;
    int axes[BURNC_MAX_RANK];
    int64_t ks[BURNC_MAX_RANK];
    double count;
    reduced(n, axes, &count, ks);
    burnc_tensor_t *c = T(centered(n, &tl, IN(0)));
    burnc_tensor_t *den = T(burnc_mul_scalar(T(kept(n, OUTV)), count - n->p.scalar[0]));
    gin[0] = burnc_div(T(burnc_mul(T(kept(n, g)), c)), den);
    END(0);
}

/* ---- Matmul ---- */
/* Whether x's last two axes are swapped in memory (x @ w^T's transposed weight). */
static bool transposed(const burnc_tensor_t *x)
{
    int r = x ? x->view.rank : 0;
    return r >= 2 && x->view.shape[r - 2] > 1 && x->view.shape[r - 1] > 1 && x->view.strides[r - 2] == 1 &&
           x->view.strides[r - 1] != 1;
}

/* p @ q laid out like `like`, the operand it is the gradient of: when that is transposed, as
 * (q^T @ p^T)^T, which the transpose's rule turns back into the storage's own layout (a
 * Linear's weight gradient, contiguous for the optimizer instead of copied). The same bits:
 * every element is the same chain over k, each product's factors swapped. */
static burnc_tensor_t *matmul_like(tmp *tl, const burnc_tensor_t *like, burnc_tensor_t *p, burnc_tensor_t *q)
{
    if (!transposed(like))
        return burnc_matmul(p, q);
    burnc_tensor_t *t = tmp_add(tl, burnc_matmul(tmp_add(tl, burnc_transpose(q, -1, -2)),
                                                 tmp_add(tl, burnc_transpose(p, -1, -2))));
    return burnc_transpose(t, -1, -2);
}

/* x^T @ y for matrices x [M, P] and y [M, Q] of f32 or f64 whose rows make 2 to ROW_CHUNKS
 * chunks of ROW_CHUNK, when the partials take no more memory than x and y: a batched matmul
 * of the chunks' [P, Q] products, added in chunk order (one element-wise kernel), else NULL.
 * A weight's gradient contracts over the batch: one chain of M steps per element leaves P x Q
 * chains, too few to fill a GPU (the deep MLP's 1024 x 1024 weight gradient over a batch of
 * 4096: 220 us on the H200, against 193 + 9 for four chunks and their sum), while chunks give
 * it M / ROW_CHUNK times as many. The graph is the same on every device, so the gradients'
 * bits are too. (burnc_sum over the chunk axis reads four values a row through a warp: 880 us
 * there.) */
enum { ROW_CHUNK = 1024, ROW_CHUNKS = KIR_MAX_INPUTS };

static burnc_tensor_t *rows_product_chunked(tmp *tl, burnc_tensor_t *x, burnc_tensor_t *y)
{
    if (!x || !y || x->view.rank != 2 || y->view.rank != 2 || x->dtype != y->dtype ||
        (x->dtype != BURNC_DTYPE_F32 && x->dtype != BURNC_DTYPE_F64))
        return NULL;
    int64_t m = x->view.shape[0], c = m / ROW_CHUNK, pc = x->view.shape[1], qc = y->view.shape[1];
    if (m % ROW_CHUNK != 0 || c < 2 || c > ROW_CHUNKS || y->view.shape[0] != m || c * pc * qc > m * (pc + qc))
        return NULL; /* (the partials may take no more memory than the operands) */
    int64_t xs[3] = {c, ROW_CHUNK, pc}, ys[3] = {c, ROW_CHUNK, qc};
    burnc_tensor_t *xc = tmp_add(tl, burnc_transpose(tmp_add(tl, burnc_reshape(x, 3, xs)), 1, 2));
    burnc_tensor_t *parts = tmp_add(tl, burnc_matmul(xc, tmp_add(tl, burnc_reshape(y, 3, ys))));
    burnc_tensor_t *sum = tmp_add(tl, burnc_slice(parts, 0, 0, 1, 1));
    for (int64_t i = 1; i < c; i++)
        sum = tmp_add(tl, burnc_add(sum, tmp_add(tl, burnc_slice(parts, 0, i, i + 1, 1))));
    return burnc_reshape(sum, 2, (int64_t[]){pc, qc});
}

/* x^T @ y laid out like `like` (matmul_like's rule), in row chunks where that applies. */
static burnc_tensor_t *rows_product_like(tmp *tl, const burnc_tensor_t *like, burnc_tensor_t *x, burnc_tensor_t *y)
{
    bool tr = transposed(like);
    burnc_tensor_t *t = tr ? rows_product_chunked(tl, y, x) : rows_product_chunked(tl, x, y);
    if (!t)
        return matmul_like(tl, like, tmp_add(tl, burnc_transpose(x, -1, -2)), y);
    return tr ? burnc_transpose(tmp_add(tl, t), -1, -2) : t;
}

/* numpy.matmul's gradients: 1-D operands are matrices [1, K] and [K, 1] with the added axis
 * dropped from the output, batch axes broadcast (summed back by backward). B's gradient of
 * matrices contracts over A's rows: rows_product_like. */
RULE(matmul)
{
    BEGIN;
    const ad_input *ia = &n->in[0], *ib = &n->in[1];
    burnc_tensor_t *a = IN(0), *b = IN(1);
    if (ia->rank == 1)
        a = T(burnc_unsqueeze(a, 0));
    if (ib->rank == 1)
        b = T(burnc_unsqueeze(b, 1));
    burnc_tensor_t *g2 = g;
    if (ia->rank == 1)
        g2 = T(burnc_unsqueeze(g2, g2 ? g2->view.rank - (ib->rank == 1 ? 0 : 1) : 0));
    if (ib->rank == 1)
        g2 = T(burnc_unsqueeze(g2, -1));
    if (W(0)) {
        burnc_tensor_t *ga = T(matmul_like(&tl, a, g2, T(burnc_transpose(b, -1, -2))));
        if (ia->rank == 1) {
            int64_t ks[2] = {1, ia->shape[0]};
            ga = T(ad_sum_to(ga, 2, ks));
        }
        gin[0] = !ga ? NULL : ia->rank == 1 ? burnc_reshape(ga, 1, ia->shape) : ad_sum_to(ga, ia->rank, ia->shape);
    }
    if (W(1)) {
        burnc_tensor_t *gb = ia->rank == 2 && ib->rank == 2 ? T(rows_product_like(&tl, b, a, g2))
                                                            : T(matmul_like(&tl, b, T(burnc_transpose(a, -1, -2)), g2));
        if (ib->rank == 1) {
            int64_t ks[2] = {ib->shape[0], 1};
            gb = T(ad_sum_to(gb, 2, ks));
        }
        gin[1] = !gb ? NULL : ib->rank == 1 ? burnc_reshape(gb, 1, ib->shape) : ad_sum_to(gb, ib->rank, ib->shape);
    }
    END(0);
}

/* ---- Copies and index ops ---- */
RULE(copy)
{
    BEGIN;
    gin[0] = burnc_tensor_retain(g);
    END(0);
}
RULE(cat)
{
    BEGIN;
    int64_t off = 0;
    for (int k = 0; k < n->n_in; k++) {
        int64_t len = n->in[k].shape[n->p.axis];
        if (W(k))
            gin[k] = burnc_slice(g, n->p.axis, off, off + len, 1);
        off += len;
    }
    END(0);
}
RULE(pad) /* negative pads crop, so the gradient is g padded by the opposite amounts */
{
    BEGIN;
    int64_t neg[2 * BURNC_MAX_RANK];
    for (int i = 0; i < 2 * n->in[0].rank; i++)
        neg[i] = -n->p.pads[i];
    gin[0] = burnc_pad(g, neg, 0);
    END(0);
}
RULE(index_select)
{
    BEGIN;
    gin[0] = burnc_index_add(T(zeros_of(&n->in[0], g)), n->p.axis, IN(1), g);
    END(0);
}
RULE(gather)
{
    BEGIN;
    gin[0] = burnc_scatter_add(T(zeros_of(&n->in[0], g)), n->p.axis, IN(1), g);
    END(0);
}
RULE(scatter_add)
{
    BEGIN;
    gin[0] = W(0) ? burnc_tensor_retain(g) : NULL;
    if (W(2))
        gin[2] = burnc_gather(g, n->p.axis, IN(1));
    END(0);
}
RULE(index_add)
{
    BEGIN;
    gin[0] = W(0) ? burnc_tensor_retain(g) : NULL;
    if (W(2))
        gin[2] = burnc_index_select(g, n->p.axis, IN(1));
    END(0);
}

/* Python stop of the slice first, first + step, ... (count elements): "to the start" when it
 * would be negative, which Python would count from the end. */
static int64_t slice_stop(const ad_params *p)
{
    int64_t stop = p->first + p->count * p->step;
    return p->count == 0 ? p->first : stop < 0 ? INT64_MIN : stop;
}

RULE(slice_assign)
{
    BEGIN;
    const ad_params *p = &n->p;
    if (W(0))
        gin[0] = burnc_slice_assign(g, p->axis, p->first, slice_stop(p), p->step, T(zero_like(g)));
    if (W(1))
        gin[1] = burnc_slice(g, p->axis, p->first, slice_stop(p), p->step);
    END(0);
}

/* ---- Views ---- */
RULE(reshape)
{
    BEGIN;
    gin[0] = burnc_reshape(g, n->in[0].rank, n->in[0].shape);
    END(0);
}
RULE(permute)
{
    BEGIN;
    int inv[BURNC_MAX_RANK];
    for (int d = 0; d < n->p.rank; d++)
        inv[n->p.perm[d]] = d;
    gin[0] = burnc_permute(g, n->p.rank, inv);
    END(0);
}
RULE(expand) /* backward sums g back to the input's shape */
{
    BEGIN;
    gin[0] = burnc_tensor_retain(g);
    END(0);
}
RULE(slice)
{
    BEGIN;
    const ad_params *p = &n->p;
    gin[0] = burnc_slice_assign(T(zeros_of(&n->in[0], g)), p->axis, p->first, slice_stop(p), p->step, g);
    END(0);
}
static int mask_axes(uint32_t mask, int rank, int *axes)
{
    int na = 0;
    for (int d = 0; d < rank; d++)
        if (mask >> d & 1)
            axes[na++] = d;
    return na;
}
RULE(flip)
{
    BEGIN;
    int axes[BURNC_MAX_RANK];
    int na = mask_axes(n->p.axes, n->in[0].rank, axes);
    gin[0] = na ? burnc_flip(g, na, axes) : burnc_tensor_retain(g);
    END(0);
}
RULE(to_device)
{
    BEGIN;
    gin[0] = burnc_tensor_to_device(g, n->p.dev);
    END(0);
}

/* ---- The table ---- */
/* Never called: ad_track makes no node for these ops. */
static burnc_status_t ad_bw_nondiff(ad_node *n, burnc_tensor_t *g, burnc_tensor_t **gin)
{
    (void)n, (void)g, (void)gin;
    return rt_fail(BURNC_ERR_INTERNAL, "burnc_backward: a non-differentiable op was recorded");
}
#define ad_bw_none NULL
enum { IN0 = AD_IN0, IN1 = AD_IN1, IN2 = AD_IN2, OUT = AD_OUT };
static const ad_rule op_rules[IR_OP_COUNT] = {
#define X(e, nm, ar, c) [IR_OP_##e] =
#define BW(rule, needs) {ad_bw_##rule, needs},
#include "ops.def"
#undef BW
#undef X
};
static const ad_rule view_rules[AD_KIND_COUNT - AD_RESHAPE] = {
    [AD_RESHAPE - AD_RESHAPE] = {ad_bw_reshape, 0},
    [AD_PERMUTE - AD_RESHAPE] = {ad_bw_permute, 0},
    [AD_EXPAND - AD_RESHAPE] = {ad_bw_expand, 0},
    [AD_SLICE - AD_RESHAPE] = {ad_bw_slice, 0},
    [AD_FLIP - AD_RESHAPE] = {ad_bw_flip, 0},
    [AD_TO_DEVICE - AD_RESHAPE] = {ad_bw_to_device, AD_COMPUTE},
};

/* An element-wise op whose f32 form takes more than KEEP_INSTS kernel-IR instructions an
 * element (pow 213, gelu 171; gelu_grad 125, tanh 119, erf 102, exp 58, add 1) costs more
 * to compute again in the backward pass than to store and read back: balanced checkpointing
 * keeps its output, as a matmul's. Recomputed, the deep MLP's GELU (then 237) was a second
 * pass over the batch in every block's backward: on the H200 that step with balanced
 * checkpointing took 6.18-6.29 ms, and 5.80-5.84 with GELU kept (5.76-5.77 without
 * checkpointing); its peak went 437 -> 420 MB, as the backward no longer materializes
 * recomputed GELU outputs for the weight gradients. */
enum { KEEP_INSTS = 128 };

static bool costly(int op)
{
    static atomic_int insts[IR_OP_COUNT]; /* measured once; 0: not yet */
    int n = atomic_load(&insts[op]);
    if (!n) {
        n = kir_op_insts((ir_op)op, KIR_F32, BURNC_DTYPE_F32);
        atomic_store(&insts[op], n);
    }
    return n > KEEP_INSTS;
}

ad_rule ad_rule_of(int kind)
{
    if (kind >= AD_RESHAPE && kind < AD_KIND_COUNT)
        return view_rules[kind - AD_RESHAPE];
    if (kind < 0 || kind >= IR_OP_COUNT)
        return (ad_rule){NULL, 0};
    ad_rule r = op_rules[kind];
    if (r.fn == ad_bw_nondiff)
        r.needs |= AD_NONDIFF;
    ir_class c = ir_op_class((ir_op)kind);
    if (c == IR_CLASS_REDUCE || c == IR_CLASS_MATMUL || (c == IR_CLASS_UNARY && kind != IR_OP_CAST && costly(kind)) ||
        (c == IR_CLASS_BINARY && costly(kind)))
        r.needs |= AD_COMPUTE;
    return r;
}

/* ---- Replay (balanced checkpointing) ---- */
typedef burnc_tensor_t *(*unary_fn)(burnc_tensor_t *);
typedef burnc_tensor_t *(*binary_fn)(burnc_tensor_t *, burnc_tensor_t *);
typedef burnc_tensor_t *(*binary_scalar_fn)(burnc_tensor_t *, double);

static const unary_fn unary_fns[IR_OP_COUNT] = {
    [IR_OP_NEG] = burnc_neg, [IR_OP_ABS] = burnc_abs, [IR_OP_EXP] = burnc_exp, [IR_OP_EXP2] = burnc_exp2,
    [IR_OP_EXPM1] = burnc_expm1, [IR_OP_LOG] = burnc_log, [IR_OP_LOG2] = burnc_log2, [IR_OP_LOG1P] = burnc_log1p,
    [IR_OP_SQRT] = burnc_sqrt, [IR_OP_RSQRT] = burnc_rsqrt, [IR_OP_RECIPROCAL] = burnc_reciprocal,
    [IR_OP_SIN] = burnc_sin, [IR_OP_COS] = burnc_cos, [IR_OP_TAN] = burnc_tan, [IR_OP_TANH] = burnc_tanh,
    [IR_OP_SIGMOID] = burnc_sigmoid, [IR_OP_RELU] = burnc_relu, [IR_OP_GELU] = burnc_gelu, [IR_OP_SILU] = burnc_silu,
    [IR_OP_GELU_GRAD] = burnc_gelu_grad, [IR_OP_ERF] = burnc_erf,
};
static const binary_fn binary_fns[IR_OP_COUNT] = {
    [IR_OP_ADD] = burnc_add, [IR_OP_SUB] = burnc_sub, [IR_OP_MUL] = burnc_mul, [IR_OP_DIV] = burnc_div,
    [IR_OP_POW] = burnc_pow, [IR_OP_MAXIMUM] = burnc_maximum, [IR_OP_MINIMUM] = burnc_minimum,
    [IR_OP_REMAINDER] = burnc_remainder, [IR_OP_ATAN2] = burnc_atan2,
};
static const binary_scalar_fn binary_scalar_fns[IR_OP_COUNT] = {
    [IR_OP_ADD] = burnc_add_scalar, [IR_OP_SUB] = burnc_sub_scalar, [IR_OP_MUL] = burnc_mul_scalar,
    [IR_OP_DIV] = burnc_div_scalar, [IR_OP_POW] = burnc_pow_scalar, [IR_OP_MAXIMUM] = burnc_maximum_scalar,
    [IR_OP_MINIMUM] = burnc_minimum_scalar, [IR_OP_REMAINDER] = burnc_remainder_scalar,
    [IR_OP_ATAN2] = burnc_atan2_scalar,
};

/* The inputs are values of the same dtypes as when the op was recorded, so the public op
 * records the same op with the same constants (scalars were stored converted, and converting
 * again changes nothing): the same bits. */
burnc_tensor_t *ad_replay(const ad_node *n, burnc_tensor_t *const *in)
{
    const ad_params *p = &n->p;
    int axes[BURNC_MAX_RANK];
    switch (n->kind) {
    case IR_OP_CAST:
        return burnc_cast(in[0], p->dtype);
    case IR_OP_CLAMP:
        return burnc_clamp(in[0], p->scalar[0], p->scalar[1]);
    case IR_OP_WHERE:
        return burnc_where(in[0], in[1], in[2]);
    case IR_OP_COPY:
        return burnc_contiguous(in[0]);
    case IR_OP_CAT:
        return burnc_cat(n->n_in, in, p->axis);
    case IR_OP_PAD:
        return burnc_pad(in[0], p->pads, p->scalar[0]);
    case IR_OP_INDEX_SELECT:
        return burnc_index_select(in[0], p->axis, in[1]);
    case IR_OP_GATHER:
        return burnc_gather(in[0], p->axis, in[1]);
    case IR_OP_SCATTER_ADD:
        return burnc_scatter_add(in[0], p->axis, in[1], in[2]);
    case IR_OP_INDEX_ADD:
        return burnc_index_add(in[0], p->axis, in[1], in[2]);
    case IR_OP_SLICE_ASSIGN:
        return burnc_slice_assign(in[0], p->axis, p->first, slice_stop(p), p->step, in[1]);
    case AD_RESHAPE:
        return burnc_reshape(in[0], p->rank, p->shape);
    case AD_PERMUTE:
        return burnc_permute(in[0], p->rank, p->perm);
    case AD_EXPAND:
        return burnc_expand(in[0], p->rank, p->shape);
    case AD_SLICE:
        return burnc_slice(in[0], p->axis, p->first, slice_stop(p), p->step);
    case AD_FLIP: {
        int na = mask_axes(p->axes, n->in[0].rank, axes);
        return na ? burnc_flip(in[0], na, axes) : burnc_tensor_retain(in[0]);
    }
    default:
        break;
    }
    if (n->kind < IR_OP_COUNT && unary_fns[n->kind])
        return unary_fns[n->kind](in[0]);
    if (n->kind < IR_OP_COUNT && (p->flags & IR_REC_SCALAR_RHS) && binary_scalar_fns[n->kind])
        return binary_scalar_fns[n->kind](in[0], p->scalar[0]);
    if (n->kind < IR_OP_COUNT && binary_fns[n->kind])
        return binary_fns[n->kind](in[0], in[1]);
    rt_fail(BURNC_ERR_INTERNAL, "burnc_backward: %s cannot be recomputed", ad_kind_name(n->kind));
    return NULL;
}
