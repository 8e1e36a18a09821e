/* DESIGN — reverse-mode autodiff over the lazy stream.
 *
 * Context. As in Burn, autodiff belongs to the device handle: burnc_device_autodiff(dev) makes a
 * small handle (a struct burnc_device with only refs, `base` and `checkpointing` set) that
 * shares base's stream, pool and configuration. Tensors made on it, and every result computed
 * from them, carry it in tensor->ctx; rt_dev() resolves a handle to its device at every public
 * device entry, so the runtime below never sees autodiff handles. Equality compares devices.
 *
 * Tape. The op recorders (runtime/ops.c, views.c, copy.c, tensor.c) call ad_track on the
 * result of an op that read a tracked tensor (tensor->ad set) outside a no-grad scope. The node
 * holds the op kind (an ir_op, or a view kind: views are not records), the parameters needed to
 * replay the op and to run its rule, each input's shape and dtype, its producer node (tracked
 * inputs) and, where needed, its value. Nodes are numbered in creation order, so walking a
 * loss's ancestors by decreasing number is a reverse topological order. Tensors and child nodes
 * hold references on nodes; a node never points at its output tensor (it keeps an untracked
 * alias when it keeps the value), so there are no cycles.
 *
 * Rules. ir/ops.def names each op's rule (autodiff/rules.c) and the values it reads. Rules are
 * written with the public ops and run with no-grad on, so the backward pass is recorded into
 * the same lazy stream and fused like the forward pass. A rule returns gradients that broadcast
 * to its inputs; backward sums them back to each input's shape (ad_sum_to) and accumulates them.
 * A leaf's gradient is what the loss gives it; first order only.
 *
 * Checkpointing. Without it (BURNC_CHECKPOINT_NONE) a node keeps exactly the values its rule
 * reads (its inputs, its output). With BURNC_CHECKPOINT_BALANCED, memory-bound nodes
 * (element-wise, views, copies, index ops) keep no tracked value: when a rule needs one,
 * backward replays the op from its inputs' values, recursively, and caches the result until
 * that node has been processed. Compute-bound nodes (matmul, reductions, and element-wise ops
 * dearer to recompute than to reread, such as gelu: rules.c, costly) keep their outputs, and
 * so does a memory-bound node whose value an element-wise node reads by broadcast (it is
 * smaller than that reader's result, and replayed it would need a kernel of its own), so
 * the recursion stops there, at leaves, and at untracked inputs (which a memory-bound node
 * keeps, being unable to recompute them). Element-wise results are bitwise the same however
 * they are fused, and reductions are never recomputed, so the gradients are bitwise the same
 * with and without it; the forward pass no longer holds its intermediates, which fusion then
 * keeps in registers, and peak memory falls.
 *
 * Release. backward consumes each non-leaf node once its rule has run (every reader of its
 * values came before it): the node drops its values and parents and stays as a tombstone, so a
 * second backward through it fails with a clear error. After a matmul's rule the device runs
 * what is recorded, so that the buffers of the values dropped so far are freed during the pass:
 * a whole backward pass in one flush would hold every value it reads until its end (a flush
 * frees buffers once it is done), and checkpointing would save nothing at the peak. */
#include <stdlib.h>
#include <string.h>

#include "autodiff/ad.h"

_Thread_local int ad_no_grad_depth;
static atomic_uint_fast64_t next_seq;

void burnc_no_grad_begin(void) { ad_no_grad_depth++; }
void burnc_no_grad_end(void)
{
    if (ad_no_grad_depth > 0)
        ad_no_grad_depth--;
}

/* ---- Device context ---- */
burnc_device_t *burnc_device_autodiff(burnc_device_t *dev)
{
    if (!dev) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_device_autodiff: device is NULL");
        return NULL;
    }
    if (dev->base)
        return burnc_device_retain(dev);
    rt_device *h = calloc(1, sizeof *h);
    if (!h) {
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_device_autodiff: out of memory");
        return NULL;
    }
    atomic_init(&h->refs, 1);
    atomic_init(&h->handles, 1);
    h->base = burnc_device_retain(dev);
    h->checkpointing = BURNC_CHECKPOINT_NONE;
    return h;
}

burnc_device_t *burnc_device_without_autodiff(burnc_device_t *dev)
{
    if (!dev) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_device_without_autodiff: device is NULL");
        return NULL;
    }
    return burnc_device_retain(rt_dev(dev));
}

bool burnc_device_is_autodiff(const burnc_device_t *dev) { return dev && dev->base; }

burnc_status_t burnc_device_gradient_checkpointing(burnc_device_t *dev)
{
    if (!dev)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_device_gradient_checkpointing: device is NULL");
    if (!dev->base)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_device_gradient_checkpointing: %s is a device without "
                       "autodiff (use burnc_device_autodiff first)", dev->spec);
    dev->checkpointing = BURNC_CHECKPOINT_BALANCED;
    return BURNC_OK;
}

burnc_checkpointing_t burnc_device_gradient_checkpointing_strategy(const burnc_device_t *dev)
{
    return dev && dev->base ? (burnc_checkpointing_t)dev->checkpointing : BURNC_CHECKPOINT_NONE;
}

/* ---- Nodes ---- */
static const char *const view_names[] = {"reshape", "permute", "expand", "slice", "flip", "to_device"};

const char *ad_kind_name(int kind)
{
    if (kind >= 0 && kind < IR_OP_COUNT)
        return ir_op_name((ir_op)kind);
    if (kind >= AD_RESHAPE && kind < AD_KIND_COUNT)
        return view_names[kind - AD_RESHAPE];
    return "invalid";
}

ad_node *ad_node_retain(ad_node *n)
{
    if (n)
        atomic_fetch_add(&n->refs, 1);
    return n;
}

static void drop_values(ad_node *n)
{
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k].value) {
            rt_tensor_unref(n->in[k].value);
            n->in[k].value = NULL;
        }
    if (n->out) {
        rt_tensor_unref(n->out);
        n->out = NULL;
    }
    if (n->grad) {
        rt_tensor_unref(n->grad);
        n->grad = NULL;
    }
}

/* Iterative: a long chain of nodes must not recurse once per node. */
void ad_node_release(ad_node *n)
{
    ad_node **stack = NULL;
    int sp = 0, cap = 0;
    while (n || sp) {
        if (!n)
            n = stack[--sp];
        if (atomic_fetch_sub(&n->refs, 1) != 1) {
            n = NULL;
            continue;
        }
        drop_values(n);
        if (n->kind == AD_TO_DEVICE && n->p.dev)
            rt_device_unref(n->p.dev);
        for (int k = 0; k < n->n_in; k++) {
            ad_node *p = n->in[k].node;
            if (!p)
                continue;
            if (sp == cap) {
                int nc = cap ? 2 * cap : 16;
                ad_node **ns = realloc(stack, (size_t)nc * sizeof *ns);
                if (!ns) {
                    ad_node_release(p); /* no memory for the stack: recurse this once */
                    continue;
                }
                stack = ns;
                cap = nc;
            }
            stack[sp++] = p;
        }
        free(n);
        n = NULL;
    }
    free(stack);
}

void ad_node_consume(ad_node *n)
{
    if (n->leaf || n->released)
        return;
    drop_values(n);
    n->released = true;
    n->cached = false;
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k].node) {
            ad_node_release(n->in[k].node);
            n->in[k].node = NULL;
        }
}

/* An untracked handle on t's values, for a node to keep (scopes never own it). */
static burnc_tensor_t *alias(burnc_tensor_t *t)
{
    rt_scope_suspend();
    burnc_tensor_t *a = rt_tensor_new(t->st, t->dtype, &t->view);
    rt_scope_resume();
    return a;
}

/* Whether a node can give its output value during backward. */
static bool provides(const ad_node *p) { return p->leaf || p->out || p->recompute; }

static ad_node *node_new(int kind, int n_in, const burnc_tensor_t *out)
{
    ad_node *n = calloc(1, sizeof *n + (size_t)n_in * sizeof(ad_input));
    if (!n)
        return NULL;
    atomic_init(&n->refs, 1);
    n->seq = atomic_fetch_add(&next_seq, 1);
    n->kind = kind;
    n->n_in = n_in;
    n->in = (ad_input *)(n + 1);
    n->dtype = out->dtype;
    n->rank = out->view.rank;
    memcpy(n->shape, out->view.shape, sizeof n->shape);
    return n;
}

burnc_tensor_t *ad_track(int kind, int n_in, burnc_tensor_t *const *ins, burnc_tensor_t *out, const ad_params *p)
{
    const ad_rule rule = ad_rule_of(kind);
    if (!out || (rule.needs & AD_NONDIFF) || !ir_dtype_is_float(out->dtype))
        return out;
    ad_node *n = node_new(kind, n_in, out);
    if (!n)
        goto oom;
    if (p)
        n->p = *p;
    if (kind == AD_TO_DEVICE && n->p.dev)
        atomic_fetch_add(&n->p.dev->refs, 1);
    bool balanced = out->ctx && out->ctx->checkpointing == BURNC_CHECKPOINT_BALANCED;
    n->recompute = balanced && !(rule.needs & AD_COMPUTE);
    ir_class cls = balanced && kind < IR_OP_COUNT ? ir_op_class((ir_op)kind) : IR_CLASS_MOVE;
    bool elementwise = cls == IR_CLASS_UNARY || cls == IR_CLASS_BINARY || cls == IR_CLASS_TERNARY;
    for (int k = 0; k < n_in; k++) {
        burnc_tensor_t *x = ins[k];
        ad_input *in = &n->in[k];
        in->dtype = x->dtype;
        in->rank = x->view.rank;
        memcpy(in->shape, x->view.shape, sizeof in->shape);
        in->node = ad_node_retain(x->ad);
        bool needed = k < 8 && (rule.needs >> k & 1);
        if (elementwise && in->node && in->node->recompute &&
            ir_numel(x->view.rank, x->view.shape) < ir_numel(out->view.rank, out->view.shape)) {
            /* read by broadcast (a LayerNorm's 1 / sqrt(var + eps)): smaller than what reads
             * it, so kept, not replayed; replayed, it ran as a kernel of its own before every
             * reader (on the H200, 7 launches a step of the deep MLP) */
            if (!(in->node->out = alias(x)))
                goto oom;
            in->node->recompute = false;
        }
        bool reachable = in->node && provides(in->node);
        bool keep = n->recompute ? !reachable : balanced ? needed && !reachable : needed;
        /* an alias, never a retain: the caller's scope may own x, and a retain would make a
         * later burnc_tensor_release of x take the scope's reference */
        if (keep && !(in->value = alias(x)))
            goto oom;
    }
    if (balanced ? !n->recompute : (rule.needs & AD_OUT) != 0) {
        if (!(n->out = alias(out)))
            goto oom;
    }
    if (out->ad) /* never set on a fresh result; kept safe all the same */
        ad_node_release(out->ad);
    out->ad = n;
    return out;
oom:
    if (n)
        ad_node_release(n);
    rt_tensor_unref(out);
    rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_%s: out of memory for its autodiff node", ad_kind_name(kind));
    return NULL;
}

/* ---- Leaves ---- */
burnc_tensor_t *burnc_tensor_require_grad(burnc_tensor_t *t)
{
    if (!t)
        return NULL;
    if (!ir_dtype_is_float(t->dtype)) {
        rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_tensor_require_grad: gradients need a float tensor, got %s",
                ir_dtype_name(t->dtype));
        return NULL;
    }
    if (!t->ctx) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_tensor_require_grad: the tensor was made on %s without "
                "autodiff (make it on the handle burnc_device_autodiff gives)", t->st->dev->spec);
        return NULL;
    }
    rt_scope_suspend();
    burnc_tensor_t *h = rt_view(t, &t->view);
    ad_node *n = h ? node_new(AD_RESHAPE, 0, t) : NULL;
    if (n) {
        n->leaf = true;
        n->out = alias(t);
    }
    rt_scope_resume();
    if (!n || !n->out) {
        if (n)
            ad_node_release(n);
        if (h) {
            rt_tensor_unref(h);
            rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_tensor_require_grad: out of memory");
        }
        return NULL;
    }
    h->ad = n;
    rt_scope_register(h);
    return h;
}

bool burnc_tensor_requires_grad(const burnc_tensor_t *t) { return t && t->ad; }

burnc_tensor_t *burnc_tensor_detach(burnc_tensor_t *t)
{
    if (!t)
        return NULL;
    RT_PUBLIC(rt_view(t, &t->view)); /* a view carries the context, never the node */
}
