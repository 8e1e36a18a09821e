/* The backward pass: walk a loss's ancestors in reverse creation order, run each node's rule,
 * sum the gradients back to each input's shape, collect the leaves' gradients. */
#include <stdlib.h>
#include <string.h>

#include "autodiff/ad.h"

struct burnc_grads {
    int n, cap;
    ad_node **leaf;        /* referenced */
    burnc_tensor_t **grad; /* untracked, internal references */
};

static atomic_uint walk_mark = 1;

/* ---- Values ---- */
burnc_tensor_t *ad_out_value(ad_node *n)
{
    if (n->out)
        return burnc_tensor_retain(n->out);
    if (!n->recompute || n->released) {
        rt_fail(BURNC_ERR_INTERNAL, "burnc_backward: the value of %s was neither kept nor recomputable",
                ad_kind_name(n->kind));
        return NULL;
    }
    burnc_tensor_t *stack_ins[4] = {0}, **ins = n->n_in <= 4 ? stack_ins : calloc((size_t)n->n_in, sizeof *ins);
    if (!ins) {
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_backward: out of memory");
        return NULL;
    }
    int got = 0;
    for (; got < n->n_in; got++)
        if (!(ins[got] = ad_in_value(n, got)))
            break;
    burnc_tensor_t *out = got == n->n_in ? ad_replay(n, ins) : NULL;
    for (int k = 0; k < got; k++)
        rt_tensor_unref(ins[k]);
    if (ins != stack_ins)
        free(ins);
    if (!out)
        return NULL;
    /* kept until this node has been processed: every reader of it comes before it */
    n->out = out;
    n->cached = true;
    return burnc_tensor_retain(out);
}

burnc_tensor_t *ad_in_value(ad_node *n, int k)
{
    if (n->in[k].value)
        return burnc_tensor_retain(n->in[k].value);
    if (!n->in[k].node) {
        rt_fail(BURNC_ERR_INTERNAL, "burnc_backward: input %d of %s was not kept", k, ad_kind_name(n->kind));
        return NULL;
    }
    return ad_out_value(n->in[k].node);
}

static void drop_cache(ad_node *n)
{
    if (n->cached) {
        rt_tensor_unref(n->out);
        n->out = NULL;
        n->cached = false;
    }
}

burnc_tensor_t *ad_sum_to(burnc_tensor_t *g, int rank, const int64_t *shape)
{
    /* shapes aligned at the right: sum the axes the input lacks or has as 1 */
    int gr = g->view.rank, lead = gr - rank, axes[BURNC_MAX_RANK], na = 0;
    bool match = true; /* every axis kept has the input's size */
    for (int d = 0; d < gr; d++) {
        if (d < lead || (shape[d - lead] == 1 && g->view.shape[d] != 1))
            axes[na++] = d;
        else if (shape[d - lead] != g->view.shape[d])
            match = false;
    }
    if (na == 0 && match && gr == rank)
        return burnc_tensor_retain(g);
    burnc_tensor_t *s = na ? burnc_sum(g, na, axes, true) : burnc_tensor_retain(g);
    if (!s)
        return NULL;
    /* drop the summed leading axes, then broadcast what a rule gave smaller than the input */
    int kr = lead > 0 ? rank : gr;
    burnc_tensor_t *k = burnc_reshape(s, kr, s->view.shape + (gr - kr));
    burnc_tensor_t *r = k ? burnc_expand(k, rank, shape) : NULL;
    rt_tensor_unref(s);
    if (k)
        rt_tensor_unref(k);
    return r;
}

/* ---- The walk ---- */
static int by_seq_desc(const void *a, const void *b)
{
    const ad_node *x = *(ad_node *const *)a, *y = *(ad_node *const *)b;
    return x->seq < y->seq ? 1 : x->seq > y->seq ? -1 : 0;
}

/* The ancestors of root (root included), each referenced, in reverse creation order. */
static burnc_status_t collect(ad_node *root, ad_node ***out, int *count)
{
    uint32_t mark = atomic_fetch_add(&walk_mark, 1);
    int n = 0, cap = 64, sp = 0;
    ad_node **all = malloc((size_t)cap * sizeof *all), **stack = malloc((size_t)cap * sizeof *stack);
    burnc_status_t s = BURNC_OK;
    if (!all || !stack)
        goto oom;
    root->mark = mark;
    stack[sp++] = root;
    while (sp) {
        ad_node *v = stack[--sp];
        if (v->released) {
            s = rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_backward: a backward pass already consumed the graph "
                        "through %s (first order only: one backward per graph)", ad_kind_name(v->kind));
            goto fail;
        }
        if (!v->leaf && !ad_rule_of(v->kind).fn) {
            s = rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_backward: op %s has no backward rule",
                        ad_kind_name(v->kind));
            goto fail;
        }
        if (n == cap || sp + v->n_in > cap) {
            cap = 2 * (cap > sp + v->n_in ? cap : sp + v->n_in);
            ad_node **na = realloc(all, (size_t)cap * sizeof *na);
            if (na)
                all = na;
            ad_node **ns = na ? realloc(stack, (size_t)cap * sizeof *ns) : NULL;
            if (!ns)
                goto oom;
            stack = ns;
        }
        all[n++] = ad_node_retain(v);
        for (int k = 0; k < v->n_in; k++) {
            ad_node *p = v->in[k].node;
            if (p && p->mark != mark) {
                p->mark = mark;
                stack[sp++] = p;
            }
        }
    }
    free(stack);
    qsort(all, (size_t)n, sizeof *all, by_seq_desc);
    *out = all;
    *count = n;
    return BURNC_OK;
oom:
    s = rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_backward: out of memory");
fail:
    for (int i = 0; i < n; i++)
        ad_node_release(all[i]);
    free(all);
    free(stack);
    return s;
}

static burnc_status_t accumulate(burnc_tensor_t **acc, burnc_tensor_t *g)
{
    if (!*acc) {
        *acc = burnc_tensor_retain(g);
        return BURNC_OK;
    }
    burnc_tensor_t *sum = burnc_add(*acc, g);
    if (!sum)
        return burnc_error_code();
    rt_tensor_unref(*acc);
    *acc = sum;
    return BURNC_OK;
}

/* Gives input k of n its share of the gradient: summed to its shape, in its dtype. */
static burnc_status_t pass_down(ad_node *n, int k, burnc_tensor_t *g)
{
    ad_input *in = &n->in[k];
    burnc_tensor_t *fit = ad_sum_to(g, in->rank, in->shape);
    if (fit && fit->dtype != in->dtype) {
        burnc_tensor_t *c = burnc_cast(fit, in->dtype);
        rt_tensor_unref(fit);
        fit = c;
    }
    if (!fit)
        return burnc_error_code() ? burnc_error_code() : BURNC_ERR_INTERNAL;
    burnc_status_t s = accumulate(&in->node->grad, fit);
    rt_tensor_unref(fit);
    return s;
}

static burnc_status_t run_node(ad_node *n)
{
    burnc_tensor_t *stack_gin[4] = {0}, **gin = n->n_in <= 4 ? stack_gin : calloc((size_t)n->n_in, sizeof *gin);
    if (!gin)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_backward: out of memory");
    burnc_status_t s = ad_rule_of(n->kind).fn(n, n->grad, gin);
    for (int k = 0; k < n->n_in; k++) {
        if (s == BURNC_OK && gin[k] && n->in[k].node)
            s = pass_down(n, k, gin[k]);
        if (gin[k])
            rt_tensor_unref(gin[k]);
    }
    if (gin != stack_gin)
        free(gin);
    return s;
}

static burnc_status_t grads_add(burnc_grads_t *gr, ad_node *leaf, burnc_tensor_t *g)
{
    for (int i = 0; i < gr->n; i++)
        if (gr->leaf[i] == leaf)
            return accumulate(&gr->grad[i], g);
    if (gr->n == gr->cap) {
        int cap = gr->cap ? 2 * gr->cap : 16;
        ad_node **l = realloc(gr->leaf, (size_t)cap * sizeof *l);
        if (l)
            gr->leaf = l;
        burnc_tensor_t **t = l ? realloc(gr->grad, (size_t)cap * sizeof *t) : NULL;
        if (!t)
            return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_backward: out of memory");
        gr->grad = t;
        gr->cap = cap;
    }
    gr->leaf[gr->n] = ad_node_retain(leaf);
    gr->grad[gr->n++] = burnc_tensor_retain(g);
    return BURNC_OK;
}

static void grads_clear(burnc_grads_t *gr)
{
    for (int i = 0; i < gr->n; i++) {
        ad_node_release(gr->leaf[i]);
        rt_tensor_unref(gr->grad[i]);
    }
    free(gr->leaf);
    free(gr->grad);
    memset(gr, 0, sizeof *gr);
}

/* Runs what dev has recorded; failures are reported by the next sync or read. */
static void flush_quietly(rt_device *dev)
{
    rt_error_state saved;
    rt_error_save(&saved);
    rt_flush(dev);
    rt_error_restore(&saved);
}

/* The leaves' gradients of loss into a fresh `fresh`; consumes the graph on success. */
static burnc_status_t backward(burnc_tensor_t *loss, burnc_grads_t *fresh)
{
    if (!loss)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_backward: loss is NULL");
    if (!loss->ad)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_backward: the loss tracks no gradient (no input of it "
                       "requires grad, or it was computed under no-grad or detached)");
    ad_node **order = NULL;
    int count = 0;
    RT_TRY(collect(loss->ad, &order, &count));
    /* A device that queues its work (a GPU) starts on the forward pass while the host records
     * the backward pass: the first matmul rule's flush would otherwise launch it only after
     * that recording (on the H200 the deep MLP's step waited 70-90 us of it). Where a flush runs
     * on this thread (cpu, ref) it would only part the loss's forward from its backward. */
    if (loss->st->dev->be->queued)
        flush_quietly(loss->st->dev);
    burnc_status_t s = BURNC_OK;
    ad_node *root = loss->ad;
    rt_scope_suspend();
    ad_no_grad_depth++;
    root->grad = burnc_ones(loss->st->dev, loss->dtype, loss->view.rank, loss->view.shape);
    if (!root->grad)
        s = burnc_error_code();
    for (int i = 0; i < count && s == BURNC_OK; i++) {
        ad_node *n = order[i];
        rt_device *dev = n->grad ? n->grad->st->dev : NULL;
        if (n->grad)
            s = n->leaf ? grads_add(fresh, n, n->grad) : run_node(n);
        if (s != BURNC_OK)
            break;
        /* Every reader of n's values came before it: drop them now. After a matmul's rule the
         * device runs what is recorded, so that the buffers of the values dropped so far (kept
         * or recomputed) are freed during the pass instead of at its end. */
        ad_node_consume(n);
        if (dev && n->kind == IR_OP_MATMUL)
            flush_quietly(dev);
    }
    for (int i = 0; i < count; i++) {
        ad_node *n = order[i];
        if (n->grad) {
            rt_tensor_unref(n->grad);
            n->grad = NULL;
        }
        drop_cache(n);
        ad_node_release(n);
    }
    free(order);
    ad_no_grad_depth--;
    rt_scope_resume();
    return s;
}

burnc_grads_t *burnc_backward(burnc_tensor_t *loss)
{
    burnc_grads_t *gr = calloc(1, sizeof *gr);
    if (!gr) {
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_backward: out of memory");
        return NULL;
    }
    if (backward(loss, gr) != BURNC_OK) {
        grads_clear(gr);
        free(gr);
        return NULL;
    }
    return gr;
}

burnc_status_t burnc_backward_accumulate(burnc_grads_t *grads, burnc_tensor_t *loss)
{
    if (!grads)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_backward_accumulate: grads is NULL");
    burnc_grads_t fresh = {0};
    burnc_status_t s = backward(loss, &fresh);
    /* merged into a copy first, so that a failure leaves grads as they were */
    burnc_grads_t merged = {0};
    rt_scope_suspend();
    ad_no_grad_depth++;
    for (int i = 0; s == BURNC_OK && i < grads->n; i++)
        s = grads_add(&merged, grads->leaf[i], grads->grad[i]);
    for (int i = 0; s == BURNC_OK && i < fresh.n; i++)
        s = grads_add(&merged, fresh.leaf[i], fresh.grad[i]);
    ad_no_grad_depth--;
    rt_scope_resume();
    grads_clear(&fresh);
    if (s != BURNC_OK) {
        grads_clear(&merged);
        return s;
    }
    grads_clear(grads);
    *grads = merged;
    return BURNC_OK;
}

burnc_tensor_t *burnc_grad(const burnc_grads_t *grads, burnc_tensor_t *t)
{
    if (!grads || !t) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_grad: %s is NULL", grads ? "tensor" : "grads");
        return NULL;
    }
    if (!t->ad || !t->ad->leaf) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_grad: the tensor %s (gradients are kept for the leaves made "
                "by burnc_tensor_require_grad)", t->ad ? "is not a leaf" : "does not require grad");
        return NULL;
    }
    int i = 0;
    while (i < grads->n && grads->leaf[i] != t->ad)
        i++;
    if (i < grads->n)
        RT_PUBLIC(rt_view(grads->grad[i], &grads->grad[i]->view));
    /* a leaf the loss does not depend on */
    RT_PUBLIC(burnc_zeros(t->st->dev, t->dtype, t->view.rank, t->view.shape));
}

void burnc_grads_release(burnc_grads_t *grads)
{
    if (!grads)
        return;
    grads_clear(grads);
    free(grads);
}
