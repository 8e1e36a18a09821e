/* Autodiff internals: tape nodes, the recording hook the runtime calls, backward rules.
 * The design is described at the top of autodiff/tape.c. */
#ifndef BURNC_AD_H
#define BURNC_AD_H

#include "rt.h"

/* Node kinds: every ir_op, then the views (which are not ops, see ir/ops.def) and the copy
 * between devices. */
enum {
    AD_RESHAPE = IR_OP_COUNT, /* also squeeze, unsqueeze, identity views */
    AD_PERMUTE,
    AD_EXPAND,
    AD_SLICE,
    AD_FLIP,
    AD_TO_DEVICE,
    AD_KIND_COUNT,
};

/* What an op needs besides its inputs, enough to replay it and to run its rule. */
typedef struct ad_params {
    double scalar[2];  /* element-wise constants (converted); VAR/STD correction; PAD value */
    uint32_t flags;    /* IR_REC_SCALAR_RHS */
    uint32_t axes;     /* REDUCE, FLIP: bit mask */
    bool keepdim;      /* REDUCE */
    burnc_dtype_t dtype; /* CAST: target */
    int axis;          /* CAT, index ops, SLICE, SLICE_ASSIGN */
    int64_t first, step, count; /* SLICE, SLICE_ASSIGN */
    int rank;          /* RESHAPE, EXPAND: target shape; PERMUTE: perm */
    int64_t shape[BURNC_MAX_RANK];
    int perm[BURNC_MAX_RANK];
    int64_t pads[2 * BURNC_MAX_RANK];
    rt_device *dev;    /* TO_DEVICE: the input's device (the node holds a reference) */
} ad_params;

typedef struct ad_node ad_node;

typedef struct ad_input {
    ad_node *node;         /* its producer when it tracks gradients, else NULL */
    burnc_tensor_t *value; /* its value when kept, else NULL */
    burnc_dtype_t dtype;
    int rank;
    int64_t shape[BURNC_MAX_RANK];
} ad_input;

struct ad_node {
    atomic_int refs;     /* tensors it made, nodes that read it, a running backward */
    uint64_t seq;        /* creation order: a reverse walk in seq order is reverse-topological */
    int kind;
    bool leaf;           /* made by require_grad: out is its value; never released */
    bool recompute;      /* balanced checkpointing: out is recomputed from the inputs */
    bool released;       /* a backward pass consumed it */
    bool cached;         /* out is a recomputation made by the running backward */
    int n_in;
    ad_input *in;
    burnc_tensor_t *out; /* kept output (untracked handle), leaf value or cached recomputation */
    burnc_dtype_t dtype; /* the output's */
    int rank;
    int64_t shape[BURNC_MAX_RANK];
    ad_params p;
    /* backward scratch */
    burnc_tensor_t *grad;
    uint32_t mark;
};

/* Records the tape node of `out`, which op `kind` made from ins[0..n) with params p (NULL: all
 * zero). Call only when rt_ad_wanted(n, ins). Returns out, tracking gradients when the op is
 * differentiable and out is a float tensor; NULL (out released, last error set) when memory
 * runs out. */
burnc_tensor_t *ad_track(int kind, int n, burnc_tensor_t *const *ins, burnc_tensor_t *out, const ad_params *p);

ad_node *ad_node_retain(ad_node *n);
void ad_node_release(ad_node *n);
/* Drops what a consumed node keeps (values, parents); it stays as a tombstone for the tensors
 * that still point at it. */
void ad_node_consume(ad_node *n);
const char *ad_kind_name(int kind);

/* ---- Rules (autodiff/rules.c) ---- */
enum { AD_IN0 = 1, AD_IN1 = 2, AD_IN2 = 4, AD_OUT = 1 << 8, AD_NONDIFF = 1 << 9, AD_COMPUTE = 1 << 10 };
/* Fills gin[k] (a new reference, any shape that broadcasts to input k's, or left NULL for no
 * gradient) for every input k with n->in[k].node, from g, the gradient of the output. Runs with
 * no-grad on and scopes suspended. */
typedef burnc_status_t (*ad_rule_fn)(ad_node *n, burnc_tensor_t *g, burnc_tensor_t **gin);
typedef struct ad_rule {
    ad_rule_fn fn; /* NULL: no rule */
    unsigned needs; /* AD_IN<k>, AD_OUT, AD_NONDIFF, AD_COMPUTE (keeps its output when balanced) */
} ad_rule;
ad_rule ad_rule_of(int kind);
/* Runs node n's op again on the given input values (new reference, or NULL with the error). */
burnc_tensor_t *ad_replay(const ad_node *n, burnc_tensor_t *const *ins);

/* ---- Values during backward (autodiff/backward.c) ---- */
/* New references to input k's value and to the output's: kept, or recomputed. */
burnc_tensor_t *ad_in_value(ad_node *n, int k);
burnc_tensor_t *ad_out_value(ad_node *n);
/* g summed over the axes along which it was broadcast from `shape` (a new reference). */
burnc_tensor_t *ad_sum_to(burnc_tensor_t *g, int rank, const int64_t *shape);

#endif
