/* Fusion: partitions a flushed batch of records into kernels (DESIGN.md, step 2).
 *
 * Input: the batch's records in order and, per record, whether its output must be materialized
 * for a reason outside the batch (a user handle holds it, or a later batch will read it). Output:
 * groups in an order that respects every dependency; each group is either one opaque record that
 * the backend runs as is (matmul, cat, pad, the index ops: DESIGN.md's compute-bound or
 * data-dependent work) or a kernel in the kernel IR together with the values of one launch.
 * Records whose output nothing needs are dropped. Fusion depends only on ir/: storages are
 * compared as pointers, never dereferenced. */
#ifndef BURNC_FUSION_H
#define BURNC_FUSION_H

#include "kernel.h"

typedef struct fus_group {
    bool opaque;         /* run record `recs[0]` alone through the backend's record path */
    int n_recs;          /* records this group computes (indices into the batch) */
    int *recs;
    kir_kernel kernel;   /* !opaque: the kernel */
    /* !opaque: where the kernel's slots live and the values of its launch */
    struct rt_storage *in_storage[KIR_MAX_INPUTS];
    struct rt_storage *out_storage[KIR_MAX_OUTPUTS];
    int64_t extents[BURNC_MAX_RANK];
    int64_t in_offsets[KIR_MAX_INPUTS], in_strides[KIR_MAX_INPUTS * BURNC_MAX_RANK];
    int64_t out_offsets[KIR_MAX_OUTPUTS], out_strides[KIR_MAX_OUTPUTS * BURNC_MAX_RANK];
    kir_scalar scalars[64];
    uint64_t key;        /* kir_hash of the kernel: the compiled-kernel cache key */
    bool epilogue;       /* !opaque: element-wise work on the output of the matmul group just
                            before it, which a backend may run on that matmul's tiles */
    char why_cut[96];    /* why the group ended where it did (BURNC_LOG=fusion) */
} fus_group;

typedef struct fus_plan {
    int n_groups;
    fus_group *groups;
    char error[160]; /* why fus_partition failed (set on failure; the plan is then empty) */
} fus_plan;

typedef struct fus_options {
    bool fuse;        /* false: eager mode, one kernel per record (BURNC_FUSION=0) */
    int max_insts;    /* bounds on one kernel (0: defaults) */
    int max_inputs;
} fus_options;

/* needed_outside[i]: record i's output is held by a handle or read after this batch. */
burnc_status_t fus_partition(ir_record *const *recs, int n, const bool *needed_outside, const fus_options *opt,
                             fus_plan *out);
void fus_plan_free(fus_plan *p);
/* Writes the plan as Graphviz DOT (kernels as clusters) to a malloc'ed string. */
char *fus_plan_dot(const fus_plan *p, ir_record *const *recs, int n);

#endif
