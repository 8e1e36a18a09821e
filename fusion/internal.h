/* Private to fusion/: what partition.c decides and lower.c turns into kernels.
 *
 * Shapes are compared "squeezed": a group's domain is the shape of its first record with every
 * extent-1 axis removed, and a record belongs to it when its own shape squeezes to the same
 * axes (all of them: the FULL level) or to the axes that the group's reduction keeps (the ROW
 * level: one value per row, broadcast along the reduced axes). Views are then written as
 * strides over the domain's axes, so "the consumer reads the producer's register value" is a
 * comparison of two stride vectors, whatever reshapes and unit axes lie between them. */
#ifndef BURNC_FUSION_INTERNAL_H
#define BURNC_FUSION_INTERNAL_H

#include "fusion.h"

enum { FUS_FULL = 0, FUS_ROW = 1 };
enum { FUS_MAX_SCALARS = (int)(sizeof(((fus_group *)0)->scalars) / sizeof(kir_scalar)) };

/* A group's iteration domain before the kernel's axes are chosen. */
typedef struct fus_domain {
    int rank;                       /* axes of extent != 1 */
    int64_t shape[BURNC_MAX_RANK];
    bool reduce;                    /* has a reduction: `mask` is fixed */
    uint32_t mask;                  /* reduced axes (bit t: domain axis t) */
} fus_domain;

/* One input slot as partition counts it and lower.c builds it: the same storage, dtype,
 * offset and index map is one slot, loaded once. */
typedef struct fus_slot_key {
    const struct rt_storage *st;
    burnc_dtype_t dtype;
    int64_t offset;
    int64_t strides[BURNC_MAX_RANK]; /* over the domain's axes */
} fus_slot_key;

/* The batch as partition.c sees it, shared with lower.c. */
typedef struct fus_ctx {
    ir_record *const *recs;
    int n;
    int *group;       /* per record: its group, -1 when dropped */
    uint8_t *level;   /* per record: FUS_FULL or FUS_ROW within its group */
    bool *out;        /* per record: materialized (a store of its value) */
    int *prod_start;  /* per record: its first operand's index in prod */
    int *prod;        /* per operand: the record of this batch that produces it, else -1 */
    int n_ops;
    bool *inl;        /* per operand: recomputed where it is read (recompute.c), not loaded */
    bool *recomp;     /* per record: cheap and not held by the user: may be recomputed */
    int32_t *val;     /* lower.c scratch: a member's value instruction */
} fus_ctx;

static inline int fus_prod(const fus_ctx *c, int r, int k) { return c->prod[c->prod_start[r] + k]; }
static inline bool fus_inl(const fus_ctx *c, int r, int k) { return c->inl[c->prod_start[r] + k]; }

/* The shape a record iterates over: its output's, except for reductions and copies, which
 * walk their input (a copy may reshape: its output is written in its input's row-major order). */
void fus_dom_shape(const ir_record *r, int *rank, const int64_t **shape);
bool fus_is_reduce(const ir_record *r);
/* For each axis of `shape` the domain axis it is at `level`, -1 for an extent-1 axis; false
 * when the shape does not squeeze to the domain's axes of that level. */
bool fus_axis_map(const fus_domain *d, int level, int rank, const int64_t *shape, int8_t *map);
/* A view's strides over the domain axes through an axis map (0 where nothing maps). */
void fus_map_strides(const fus_domain *d, const int8_t *map, const ir_view *v, int64_t *out);
/* Where a member at `level` writes its dense output: row-major strides over the level's axes,
 * 0 on the others. */
void fus_out_strides(const fus_domain *d, int level, int64_t *out);
/* Record r's axes over domain d at its level (a reduction's input: FULL). */
bool fus_record_map(const fus_ctx *c, const fus_domain *d, int r, int8_t *map);
/* The slot key of operand op's storage read through view v (of the shape map describes). */
void fus_view_key(const fus_domain *d, const int8_t *map, const ir_operand *op, const ir_view *v, fus_slot_key *key);
/* The slot key of input k of record r (a member at its level of a group with domain d). */
void fus_operand_key(const fus_ctx *c, const fus_domain *d, int r, int k, fus_slot_key *key);
bool fus_key_equal(const fus_slot_key *a, const fus_slot_key *b, int rank);

/* ---- Recomputing cheap values (recompute.c) ---------------------------------------------- */
/* The view of shape v->shape over w's storage that reads, at each position, what v reads from
 * a dense buffer of `shape` whose elements w reads: v composed with w. False when v is not an
 * affine map of positions into the coordinates of `shape` (a stride that would carry). */
bool fus_compose(const ir_view *v, int rank, const int64_t *shape, const ir_view *w, ir_view *out);
/* Whether a recomputed record at `depth` recomputes its operand produced by q too. */
bool fus_recurse_into(const fus_ctx *c, int q, int depth);
/* Called for each load of a recomputed value: operand k of record node, read through v. */
typedef bool (*fus_leaf_fn)(void *ctx, int node, int k, const ir_view *v);
/* Walks the loads that recompute record p at the positions of v (a view of p's output); false
 * when a view does not compose, the tree is too large, or leaf says no. */
bool fus_inline_walk(const fus_ctx *c, int p, const ir_view *v, fus_leaf_fn leaf, void *ctx);

/* Where a kernel's launch values come from, so that a cached plan can be filled in for
 * another batch of the same structure: everything else in a group is fixed by the structure. */
typedef enum fus_arg_kind {
    FUS_ARG_FIXED,      /* fixed by the structure (a stride, a column count): the value kept */
    FUS_ARG_SCALAR,     /* the record's scalar[index] as an argument of `type` */
    FUS_ARG_RNG_OFFSET, /* the record's rng_offset */
    FUS_ARG_RNG_KEY,    /* the record's rng_key */
} fus_arg_kind;

typedef struct fus_arg_src {
    int32_t rec;
    uint8_t kind;  /* fus_arg_kind */
    uint8_t index; /* FUS_ARG_SCALAR: which scalar */
    uint8_t type;  /* kir_type of the argument */
} fus_arg_src;

typedef struct fus_group_src {
    fus_arg_src args[FUS_MAX_SCALARS];
    int32_t in_rec[KIR_MAX_INPUTS]; /* input slot s reads operand in_k[s] of record in_rec[s] */
    uint8_t in_k[KIR_MAX_INPUTS];
    int32_t out_rec[KIR_MAX_OUTPUTS]; /* output slot o is record out_rec[o]'s storage */
} fus_group_src;

/* The value of an argument whose source is not FUS_ARG_FIXED. */
kir_scalar fus_arg_value(const ir_record *r, const fus_arg_src *src);

/* Builds group `out` (kernel, slots, launch values, key) from members (record indices, in
 * order) with domain d, and where its launch values come from into src. BURNC_ERR_OUT_OF_MEMORY,
 * or BURNC_ERR_INTERNAL with a reason in err when the kernel fails kir_valid. */
burnc_status_t fus_lower(const fus_ctx *c, const fus_domain *d, const int *members, int n_members, bool eager,
                         fus_group *out, fus_group_src *src, char *err, size_t err_cap);

/* ---- Storages to integers (ptrmap.c) ----------------------------------------------------- */
enum { FUS_PMAP_SMALL = 128 };
typedef struct fus_pmap {
    const struct rt_storage **keys;
    int *vals;
    size_t mask;
    /* a small batch's map, allocated with the map: a loop's flush keys its batch with one */
    const struct rt_storage *small_keys[FUS_PMAP_SMALL];
    int small_vals[FUS_PMAP_SMALL];
} fus_pmap;

bool fus_pmap_init(fus_pmap *m, int n); /* room for n entries; false when out of memory */
void fus_pmap_free(fus_pmap *m);
void fus_pmap_put(fus_pmap *m, const struct rt_storage *k, int v);
int fus_pmap_get(const fus_pmap *m, const struct rt_storage *k); /* -1 when absent */

/* ---- The plan cache (cache.c) ------------------------------------------------------------ */
/* A batch's structure as words: everything partition and lowering look at except record
 * constants, RNG offsets and keys and the storages' addresses (only which operands share a
 * storage). Equal words give the same plan up to those launch values. */
typedef struct fus_key {
    int64_t *words;
    size_t n, cap;
    bool borrowed; /* words is fus_key_make's buf: not freed */
} fus_key;

/* false when out of memory or the batch is too large to be worth caching. The words go in buf
 * (buf_cap words, may be NULL) when they fit: a loop's flush allocates nothing for its key. */
bool fus_key_make(ir_record *const *recs, int n, const bool *needed_outside, const fus_options *opt, fus_key *k,
                  int64_t *buf, size_t buf_cap);
void fus_key_free(fus_key *k);
/* On a hit fills `out` for this batch's records and returns true. */
bool fus_cache_lookup(const fus_key *k, ir_record *const *recs, fus_plan *out);
/* Keeps a copy of plan p (made for the batch of key k, with the sources of each group). */
void fus_cache_insert(const fus_key *k, const fus_plan *p, const fus_group_src *srcs);
/* For tests: lookups that hit and missed since the start, and emptying the cache. */
void fus_cache_stats(uint64_t *hits, uint64_t *misses);
void fus_cache_clear(void);

#endif
