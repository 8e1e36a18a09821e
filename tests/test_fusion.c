/* Fusion: the plans fus_partition makes from batches of records, and what their kernels
 * compute. Records are built here directly, with storages that are only distinct addresses
 * (fusion compares them, never dereferences them). Each batch is then run three ways on host
 * buffers: every record through the reference kernels (the oracle), the fused plan's kernels
 * through kir_eval, and the eager plan's kernels through kir_eval. Fused and eager must agree
 * bit for bit; both must agree with the reference within a tolerance that covers the math
 * functions' documented errors and the f32 reduction order (the reference sums in double). */
#include <stdint.h>

#include "common.h"
#include "fusion/internal.h"
#include "rt.h"

enum { MAXR = 256, MAXS = 512, MAXIN = 3 };

/* ---- Batches ----------------------------------------------------------------------------- */

/* A batch under construction. Storage s is the address fake_storage + s. */
typedef struct tb {
    ir_record recs[MAXR];
    ir_record *ptrs[MAXR];
    ir_operand ops[MAXR][MAXIN];
    int64_t pads[MAXR][2 * BURNC_MAX_RANK];
    bool needed[MAXR];
    int n;
    int n_st;
    burnc_dtype_t st_dtype[MAXS];
    int64_t st_numel[MAXS];
    int st_producer[MAXS]; /* record index, -1 for an input from outside the batch */
} tb;

static char fake_storage[MAXS];

static struct rt_storage *st_ptr(int s) { return (struct rt_storage *)(void *)&fake_storage[s]; }
static int st_id(const struct rt_storage *p) { return (int)((const char *)(const void *)p - fake_storage); }

/* A tensor: a storage seen through a view. */
typedef struct tt {
    int st;
    burnc_dtype_t dt;
    ir_view v;
} tt;

static tb *tb_new(void)
{
    tb *b = calloc(1, sizeof *b);
    cr_assert_not_null(b);
    return b;
}

static int new_storage(tb *b, burnc_dtype_t dt, int64_t numel, int producer)
{
    cr_assert_lt(b->n_st, MAXS);
    int s = b->n_st++;
    b->st_dtype[s] = dt;
    b->st_numel[s] = numel;
    b->st_producer[s] = producer;
    return s;
}

/* A dense tensor from outside the batch (its data is filled in at run time). */
static tt input(tb *b, burnc_dtype_t dt, int rank, const int64_t *shape)
{
    tt t = {.dt = dt};
    ir_view_dense(&t.v, rank, shape);
    t.st = new_storage(b, dt, ir_numel(rank, shape), -1);
    return t;
}

static ir_record *begin(tb *b, ir_op op, int n_in)
{
    cr_assert_lt(b->n, MAXR);
    cr_assert_leq(n_in, MAXIN);
    ir_record *r = &b->recs[b->n];
    memset(r, 0, sizeof *r);
    r->op = op;
    r->n_in = n_in;
    r->in = b->ops[b->n];
    return r;
}

static void set_input(ir_record *r, int k, tt x, const ir_view *v)
{
    r->in[k] = (ir_operand){.storage = st_ptr(x.st), .dtype = x.dt, .view = v ? *v : x.v};
}

static tt commit(tb *b, ir_record *r)
{
    int i = b->n++;
    b->ptrs[i] = r;
    tt t = {.dt = r->dtype};
    ir_view_dense(&t.v, r->out_rank, r->out_shape);
    t.st = new_storage(b, r->dtype, ir_numel(r->out_rank, r->out_shape), i);
    r->out = st_ptr(t.st);
    return t;
}

static void keep(tb *b, tt t)
{
    cr_assert_geq(b->st_producer[t.st], 0, "keep of an input");
    b->needed[b->st_producer[t.st]] = true;
}

/* numpy broadcasting of the operands' shapes, as the recorder does it. */
static int bcast_shape(int n, const tt *xs, int64_t *shape)
{
    int r = 0;
    for (int i = 0; i < n; i++)
        r = xs[i].v.rank > r ? xs[i].v.rank : r;
    for (int d = 0; d < r; d++)
        shape[d] = 1;
    for (int i = 0; i < n; i++) {
        int lead = r - xs[i].v.rank;
        for (int d = lead; d < r; d++) {
            int64_t s = xs[i].v.shape[d - lead];
            if (s != 1) {
                cr_assert(shape[d] == 1 || shape[d] == s, "test bug: shapes do not broadcast");
                shape[d] = s;
            }
        }
    }
    return r;
}

static ir_view bcast_view(const ir_view *x, int rank, const int64_t *shape)
{
    ir_view v = {.rank = rank, .offset = x->offset};
    int lead = rank - x->rank;
    for (int d = 0; d < rank; d++) {
        v.shape[d] = shape[d];
        v.strides[d] = d >= lead && x->shape[d - lead] == shape[d] ? x->strides[d - lead] : 0;
    }
    return v;
}

static bool bool_result(ir_op op)
{
    return op == IR_OP_LOGICAL_NOT || (op >= IR_OP_EQ && op <= IR_OP_LOGICAL_XOR);
}

static tt elementwise(tb *b, ir_op op, int n, const tt *xs, const double *sc, int n_sc, uint32_t flags)
{
    ir_record *r = begin(b, op, n);
    int64_t shape[BURNC_MAX_RANK];
    r->out_rank = bcast_shape(n, xs, shape);
    memcpy(r->out_shape, shape, sizeof shape);
    burnc_dtype_t compute = op == IR_OP_WHERE ? xs[1].dt : xs[0].dt;
    r->compute = compute;
    r->dtype = bool_result(op) ? BURNC_DTYPE_BOOL : compute;
    r->flags = flags;
    for (int i = 0; i < n_sc; i++)
        r->scalar[i] = ir_scalar_to_dtype(sc[i], compute);
    for (int k = 0; k < n; k++) {
        ir_view v = bcast_view(&xs[k].v, r->out_rank, shape);
        set_input(r, k, xs[k], &v);
    }
    return commit(b, r);
}

static tt un(tb *b, ir_op op, tt x) { return elementwise(b, op, 1, &x, NULL, 0, 0); }

static tt bin(tb *b, ir_op op, tt x, tt y)
{
    tt xs[2] = {x, y};
    return elementwise(b, op, 2, xs, NULL, 0, 0);
}

static tt bin_s(tb *b, ir_op op, tt x, double s) { return elementwise(b, op, 1, &x, &s, 1, IR_REC_SCALAR_RHS); }

static tt clamp(tb *b, tt x, double lo, double hi)
{
    const double s[2] = {lo, hi};
    return elementwise(b, IR_OP_CLAMP, 1, &x, s, 2, 0);
}

static tt where(tb *b, tt c, tt x, tt y)
{
    tt xs[3] = {c, x, y};
    return elementwise(b, IR_OP_WHERE, 3, xs, NULL, 0, 0);
}

static tt cast(tb *b, tt x, burnc_dtype_t dt)
{
    ir_record *r = begin(b, IR_OP_CAST, 1);
    r->dtype = dt;
    r->compute = x.dt;
    r->out_rank = x.v.rank;
    memcpy(r->out_shape, x.v.shape, sizeof r->out_shape);
    set_input(r, 0, x, NULL);
    return commit(b, r);
}

/* A reduction over the axes in mask, keeping them with extent 1. */
static tt reduce(tb *b, ir_op op, tt x, uint32_t mask, double correction)
{
    ir_record *r = begin(b, op, 1);
    r->compute = x.dt;
    r->dtype = op == IR_OP_ARGMAX || op == IR_OP_ARGMIN ? BURNC_DTYPE_I64 : x.dt;
    r->axes = mask;
    r->scalar[0] = correction;
    r->out_rank = x.v.rank;
    for (int d = 0; d < x.v.rank; d++)
        r->out_shape[d] = (mask >> d & 1) ? 1 : x.v.shape[d];
    set_input(r, 0, x, NULL);
    return commit(b, r);
}

static tt source(tb *b, ir_op op, burnc_dtype_t dt, int rank, const int64_t *shape)
{
    ir_record *r = begin(b, op, 0);
    r->dtype = r->compute = dt;
    r->out_rank = rank;
    memcpy(r->out_shape, shape, (size_t)rank * sizeof *shape);
    return commit(b, r);
}

static tt full(tb *b, burnc_dtype_t dt, int rank, const int64_t *shape, double v)
{
    tt t = source(b, IR_OP_FULL, dt, rank, shape);
    b->recs[b->n - 1].scalar[0] = ir_scalar_to_dtype(v, dt);
    return t;
}

static tt draw(tb *b, ir_op op, burnc_dtype_t dt, int rank, const int64_t *shape, uint64_t key, uint64_t offset)
{
    tt t = source(b, op, dt, rank, shape);
    b->recs[b->n - 1].rng_key = key;
    b->recs[b->n - 1].rng_offset = offset;
    return t;
}

static tt copy_to(tb *b, tt x, int rank, const int64_t *shape)
{
    ir_record *r = begin(b, IR_OP_COPY, 1);
    r->dtype = r->compute = x.dt;
    r->out_rank = rank;
    memcpy(r->out_shape, shape, (size_t)rank * sizeof *shape);
    set_input(r, 0, x, NULL);
    return commit(b, r);
}

static tt copy(tb *b, tt x) { return copy_to(b, x, x.v.rank, x.v.shape); }

static tt matmul(tb *b, tt x, tt y)
{
    ir_record *r = begin(b, IR_OP_MATMUL, 2);
    r->dtype = r->compute = x.dt;
    r->out_rank = 2;
    r->out_shape[0] = x.v.shape[0];
    r->out_shape[1] = y.v.shape[1];
    set_input(r, 0, x, NULL);
    set_input(r, 1, y, NULL);
    return commit(b, r);
}

/* ---- Views ------------------------------------------------------------------------------- */

static tt permute(tt x, const int *perm)
{
    tt t = x;
    for (int d = 0; d < x.v.rank; d++) {
        t.v.shape[d] = x.v.shape[perm[d]];
        t.v.strides[d] = x.v.strides[perm[d]];
    }
    return t;
}

static tt transpose(tt x) { return permute(x, (const int[]){1, 0}); }

static tt slice(tt x, int axis, int64_t start, int64_t count, int64_t step)
{
    tt t = x;
    t.v.offset += start * x.v.strides[axis];
    t.v.shape[axis] = count;
    t.v.strides[axis] *= step;
    return t;
}

/* A reshape of a dense tensor. */
static tt reshape(tt x, int rank, const int64_t *shape)
{
    cr_assert(ir_view_is_dense(&x.v) && ir_numel(rank, shape) == ir_numel(x.v.rank, x.v.shape));
    tt t = x;
    int64_t off = x.v.offset;
    ir_view_dense(&t.v, rank, shape);
    t.v.offset = off;
    return t;
}

/* ---- Running ----------------------------------------------------------------------------- */

typedef struct mem {
    void *buf[MAXS];
    size_t bytes[MAXS];
} mem;

static uint64_t rng_next(uint64_t *s)
{
    *s += UINT64_C(0x9E3779B97F4A7C15);
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static double rng_uniform(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * ldexp((double)(rng_next(s) >> 11), -53);
}

/* Buffers for every storage; inputs get values from the seed (small integers for integer
 * dtypes, [-2, 2) for floats), outputs a garbage pattern that nothing should leave. */
static void mem_init(const tb *b, mem *m, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    for (int s = 0; s < b->n_st; s++) {
        size_t es = ir_dtype_size(b->st_dtype[s]);
        m->bytes[s] = (size_t)b->st_numel[s] * es;
        m->buf[s] = malloc(m->bytes[s] ? m->bytes[s] : 1);
        cr_assert_not_null(m->buf[s]);
        memset(m->buf[s], 0xA5, m->bytes[s]);
        if (b->st_producer[s] >= 0)
            continue;
        uint64_t rs = seed * 1000003 + (uint64_t)s;
        for (int64_t i = 0; i < b->st_numel[s]; i++) {
            char *p = (char *)m->buf[s] + (size_t)i * es;
            if (ir_dtype_is_float(b->st_dtype[s]))
                ir_store_f(p, b->st_dtype[s], rng_uniform(&rs, -2.0, 2.0));
            else
                ir_store_i(p, b->st_dtype[s], (int64_t)(rng_next(&rs) % 300) - 40);
        }
    }
}

static void mem_free(mem *m)
{
    for (int s = 0; s < MAXS; s++)
        free(m->buf[s]);
}

static void run_record(const tb *b, mem *m, int i)
{
    const ir_record *r = b->ptrs[i];
    rt_buffer bufs[MAXIN + 1];
    rt_buffer *ptrs[MAXIN + 1];
    for (int k = 0; k <= r->n_in; k++) {
        int s = st_id(k < r->n_in ? r->in[k].storage : r->out);
        bufs[k] = (rt_buffer){.size = m->bytes[s], .host = m->buf[s]};
        ptrs[k] = &bufs[k];
    }
    /* the reference device's own kernel for the record (it needs no device) */
    ir_record *one = b->ptrs[i];
    ir_group g = {.n = 1, .recs = &one};
    rt_kernel *k = NULL;
    burnc_status_t st = rt_ref_backend.compile(NULL, &g, &k);
    cr_assert_eq(st, BURNC_OK, "reference compile of #%d %s: %s", i, ir_op_name(r->op), burnc_error_message());
    rt_buffer *const *rec_bufs = ptrs;
    st = rt_ref_backend.launch(NULL, k, &g, &rec_bufs);
    rt_ref_backend.kernel_free(NULL, k);
    cr_assert_eq(st, BURNC_OK, "reference run of #%d %s: %s", i, ir_op_name(r->op), burnc_error_message());
}

/* The oracle: every record, in order. */
static void run_ref(const tb *b, mem *m)
{
    for (int i = 0; i < b->n; i++)
        run_record(b, m, i);
}

/* The device kernels run on: BURNC_TEST_DEVICE when it names one other than ref (opaque records
 * still run on the host's reference kernels), else none (NULL): kir_eval on the host. The caller
 * releases it before the test's leak check (a driver's live objects are not all visible to
 * LeakSanitizer). Skips the test, saying why, when the device cannot be opened. */
static burnc_device_t *test_device(void)
{
    const char *spec = getenv("BURNC_TEST_DEVICE");
    if (!spec || !*spec || strcmp(spec, "ref") == 0)
        return NULL;
    burnc_device_t *dev = burnc_device_open(spec);
    if (!dev)
        cr_skip_test("device '%s' is not available: %s", spec, burnc_error_message());
    return dev;
}

/* Runs one kernel on dev through its backend, on copies of the host buffers. */
static void run_on_device(burnc_device_t *dev, const kir_kernel *k, const kir_args *a, void **host_in,
                          const size_t *in_bytes, void **host_out, const size_t *out_bytes)
{
    rt_device *d = dev;
    rt_buffer *ib[KIR_MAX_INPUTS], *ob[KIR_MAX_OUTPUTS];
    for (int s = 0; s < k->n_inputs; s++) {
        cr_assert_eq(d->be->alloc(d, in_bytes[s], &ib[s]), BURNC_OK, "%s", burnc_error_message());
        cr_assert_eq(d->be->write(d, ib[s], 0, host_in[s], in_bytes[s]), BURNC_OK, "%s", burnc_error_message());
    }
    for (int o = 0; o < k->n_outputs; o++) {
        cr_assert_eq(d->be->alloc(d, out_bytes[o], &ob[o]), BURNC_OK, "%s", burnc_error_message());
        cr_assert_eq(d->be->write(d, ob[o], 0, host_out[o], out_bytes[o]), BURNC_OK, "%s", burnc_error_message());
    }
    rt_kernel *rk;
    burnc_status_t st = d->be->compile_kernel(d, k, kir_hash(k), &rk);
    cr_assert_eq(st, BURNC_OK, "%s on %s: %s", k->name, burnc_device_spec(dev), burnc_error_message());
    st = d->be->launch_kernel(d, rk, a, ib, ob, false);
    if (st == BURNC_OK)
        st = d->be->sync(d);
    cr_assert_eq(st, BURNC_OK, "%s on %s: %s", k->name, burnc_device_spec(dev), burnc_error_message());
    for (int o = 0; o < k->n_outputs; o++) {
        cr_assert_eq(d->be->read(d, ob[o], 0, host_out[o], out_bytes[o]), BURNC_OK, "%s", burnc_error_message());
        d->be->free(d, ob[o]);
    }
    for (int s = 0; s < k->n_inputs; s++)
        d->be->free(d, ib[s]);
}

static void run_plan(const tb *b, const fus_plan *p, mem *m)
{
    burnc_device_t *dev = test_device();
    for (int gi = 0; gi < p->n_groups; gi++) {
        const fus_group *g = &p->groups[gi];
        if (g->opaque) {
            run_record(b, m, g->recs[0]);
            continue;
        }
        const kir_kernel *k = &g->kernel;
        void *ins[KIR_MAX_INPUTS], *outs[KIR_MAX_OUTPUTS];
        for (int s = 0; s < k->n_inputs; s++)
            ins[s] = m->buf[st_id(g->in_storage[s])];
        for (int o = 0; o < k->n_outputs; o++)
            outs[o] = m->buf[st_id(g->out_storage[o])];
        kir_args a = {.inputs = ins, .outputs = outs, .extents = g->extents, .in_offsets = g->in_offsets,
                      .in_strides = g->in_strides, .out_offsets = g->out_offsets, .out_strides = g->out_strides,
                      .scalars = g->scalars};
        if (dev) {
            size_t in_b[KIR_MAX_INPUTS], out_b[KIR_MAX_OUTPUTS];
            for (int s = 0; s < k->n_inputs; s++)
                in_b[s] = m->bytes[st_id(g->in_storage[s])];
            for (int o = 0; o < k->n_outputs; o++)
                out_b[o] = m->bytes[st_id(g->out_storage[o])];
            run_on_device(dev, k, &a, ins, in_b, outs, out_b);
            continue;
        }
        burnc_status_t st = kir_eval(k, &a);
        cr_assert_eq(st, BURNC_OK, "kir_eval of group %d (%s): %s", gi, k->name, burnc_error_message());
    }
    burnc_device_release(dev);
}

/* Every group reads only what outside inputs and earlier groups wrote; every needed record is
 * written exactly once; opaque groups hold the ops that must run alone. */
static void check_structure(const tb *b, const fus_plan *p)
{
    int writer[MAXS];
    for (int s = 0; s < MAXS; s++)
        writer[s] = -1;
    for (int gi = 0; gi < p->n_groups; gi++) {
        const fus_group *g = &p->groups[gi];
        cr_assert_gt(g->n_recs, 0);
        cr_assert(g->why_cut[0] != '\0', "group %d has no reason for its cut", gi);
        int n_reads = g->opaque ? b->ptrs[g->recs[0]]->n_in : g->kernel.n_inputs;
        for (int k = 0; k < n_reads; k++) {
            int s = st_id(g->opaque ? b->ptrs[g->recs[0]]->in[k].storage : g->in_storage[k]);
            cr_assert(b->st_producer[s] < 0 || writer[s] >= 0, "group %d reads storage %d before it is written",
                      gi, s);
        }
        if (g->opaque) {
            cr_assert_eq(g->n_recs, 1);
            ir_class c = ir_op_class(b->ptrs[g->recs[0]]->op);
            cr_assert(c == IR_CLASS_MATMUL || c == IR_CLASS_INDEX || c == IR_CLASS_MOVE);
            writer[st_id(b->ptrs[g->recs[0]]->out)] = gi;
            continue;
        }
        char why[160];
        cr_assert(kir_valid(&g->kernel, why, sizeof why), "group %d: %s", gi, why);
        cr_assert_eq(g->key, kir_hash(&g->kernel));
        for (int o = 0; o < g->kernel.n_outputs; o++) {
            int s = st_id(g->out_storage[o]);
            cr_assert_eq(writer[s], -1, "storage %d written twice", s);
            writer[s] = gi;
        }
    }
    for (int i = 0; i < b->n; i++)
        if (b->needed[i])
            cr_assert_geq(writer[st_id(b->ptrs[i]->out)], 0, "needed record #%d (%s) is never written", i,
                          ir_op_name(b->ptrs[i]->op));
}

/* BT_FUSION_DUMP=1 prints every plan's kernels (for a failing test). */
static void dump_plan(const fus_plan *p, bool fuse)
{
    if (!getenv("BT_FUSION_DUMP"))
        return;
    fprintf(stderr, "---- %s plan: %d groups\n", fuse ? "fused" : "eager", p->n_groups);
    for (int gi = 0; gi < p->n_groups; gi++) {
        const fus_group *g = &p->groups[gi];
        fprintf(stderr, "group %d (%s): cut: %s\n", gi, g->opaque ? "opaque" : g->kernel.name, g->why_cut);
        if (g->opaque)
            continue;
        char *txt = kir_print(&g->kernel);
        fprintf(stderr, "%s", txt ? txt : "(no listing)\n");
        free(txt);
        for (int a = 0; a < g->kernel.rank; a++)
            fprintf(stderr, "  extent[%d] = %lld\n", a, (long long)g->extents[a]);
    }
}

static fus_plan plan(const tb *b, bool fuse)
{
    fus_plan p;
    fus_options o = {.fuse = fuse};
    burnc_status_t s = fus_partition((ir_record *const *)b->ptrs, b->n, b->needed, &o, &p);
    cr_assert_eq(s, BURNC_OK, "fus_partition: %s (%s)", burnc_status_name(s), p.error);
    dump_plan(&p, fuse);
    check_structure(b, &p);
    return p;
}

static int n_kernels(const fus_plan *p)
{
    int n = 0;
    for (int i = 0; i < p->n_groups; i++)
        n += !p->groups[i].opaque;
    return n;
}

/* Where the group holding record i is, or -1 when the record was dropped. */
static int group_of(const fus_plan *p, int i)
{
    for (int gi = 0; gi < p->n_groups; gi++)
        for (int j = 0; j < p->groups[gi].n_recs; j++)
            if (p->groups[gi].recs[j] == i)
                return gi;
    return -1;
}

static bool is_stored(const fus_plan *p, int s)
{
    for (int gi = 0; gi < p->n_groups; gi++)
        for (int o = 0; !p->groups[gi].opaque && o < p->groups[gi].kernel.n_outputs; o++)
            if (st_id(p->groups[gi].out_storage[o]) == s)
                return true;
    return false;
}

/* Tolerances of compare(): BITWISE for fused against eager; EXACT against the reference for
 * integers and exactly rounded ops (any NaN equals any NaN: the reference's NaN has its own
 * sign); otherwise within atol + rtol * |want|. */
static const double BITWISE = -2, EXACT = -1;

static void compare(const tb *b, int s, const mem *got, const mem *want, double rtol, double atol, const char *what)
{
    burnc_dtype_t dt = b->st_dtype[s];
    size_t es = ir_dtype_size(dt);
    for (int64_t i = 0; i < b->st_numel[s]; i++) {
        const char *pg = (const char *)got->buf[s] + (size_t)i * es;
        const char *pw = (const char *)want->buf[s] + (size_t)i * es;
        if (memcmp(pg, pw, es) == 0)
            continue;
        bool nans = ir_dtype_is_float(dt) && isnan(ir_load_f(pg, dt)) && isnan(ir_load_f(pw, dt));
        if (rtol == EXACT && nans)
            continue;
        cr_assert(rtol >= 0 && ir_dtype_is_float(dt),
                  "%s: storage %d (#%d %s, %s) element %lld differs: %.17g vs %.17g", what, s, b->st_producer[s],
                  ir_op_name(b->ptrs[b->st_producer[s]]->op), ir_dtype_name(dt), (long long)i, ir_load_f(pg, dt),
                  ir_load_f(pw, dt));
        double g = ir_load_f(pg, dt), w = ir_load_f(pw, dt);
        bool ok = (isnan(g) && isnan(w)) || g == w || fabs(g - w) <= atol + rtol * fabs(w);
        cr_assert(ok, "%s: storage %d (#%d %s, %s) element %lld: %.17g, reference %.17g", what, s,
                  b->st_producer[s], ir_op_name(b->ptrs[b->st_producer[s]]->op), ir_dtype_name(dt), (long long)i, g,
                  w);
    }
}

/* Runs the batch fused, eager and through the reference; checks fused == eager bitwise and
 * both against the reference. Returns the fused plan (the caller frees it). */
static fus_plan check_runs(const tb *b, double rtol, double atol, uint64_t seed)
{
    fus_plan fused = plan(b, true), eager = plan(b, false);
    mem ref, mf, me;
    mem_init(b, &ref, seed);
    mem_init(b, &mf, seed);
    mem_init(b, &me, seed);
    run_ref(b, &ref);
    run_plan(b, &fused, &mf);
    run_plan(b, &eager, &me);
    for (int i = 0; i < b->n; i++) {
        if (!b->needed[i])
            continue;
        int s = st_id(b->ptrs[i]->out);
        compare(b, s, &mf, &me, BITWISE, 0, "fused vs eager");
        compare(b, s, &mf, &ref, rtol, atol, "fused vs reference");
    }
    mem_free(&ref);
    mem_free(&mf);
    mem_free(&me);
    fus_plan_free(&eager);
    return fused;
}

/* ---- Composite patterns ------------------------------------------------------------------ */

static const int64_t ROWS_COLS[2] = {6, 37};

/* Burn's custom GELU written with elementary ops, then * w + b. */
static tt gelu_chain(tb *b, tt x, tt w, tt bias)
{
    tt t = bin_s(b, IR_OP_DIV, x, 1.41421356237309504880);
    t = un(b, IR_OP_ERF, t);
    t = bin_s(b, IR_OP_ADD, t, 1.0);
    t = bin(b, IR_OP_MUL, x, t);
    t = bin_s(b, IR_OP_DIV, t, 2.0);
    t = bin(b, IR_OP_MUL, t, w);
    return bin(b, IR_OP_ADD, t, bias);
}

/* As runtime/composite.c records them. */
static tt softmax(tb *b, tt x, int axis, bool log_form)
{
    uint32_t m = 1u << axis;
    tt mx = reduce(b, IR_OP_MAX, x, m, 0);
    tt d = bin(b, IR_OP_SUB, x, mx);
    tt e = un(b, IR_OP_EXP, d);
    tt s = reduce(b, IR_OP_SUM, e, m, 0);
    if (!log_form)
        return bin(b, IR_OP_DIV, e, s);
    return bin(b, IR_OP_SUB, d, un(b, IR_OP_LOG, s));
}

static tt layer_norm(tb *b, tt x, uint32_t axes, double eps)
{
    tt mean = reduce(b, IR_OP_MEAN, x, axes, 0);
    tt c = bin(b, IR_OP_SUB, x, mean);
    tt sq = bin(b, IR_OP_MUL, c, c);
    tt var = reduce(b, IR_OP_MEAN, sq, axes, 0);
    tt ve = bin_s(b, IR_OP_ADD, var, eps);
    tt sd = un(b, IR_OP_SQRT, ve);
    return bin(b, IR_OP_DIV, c, sd);
}

static const double F32_RTOL = 2e-5, F32_ATOL = 2e-6;

Test(fusion, gelu_chain_is_one_kernel)
{
    tb *b = tb_new();
    const int64_t n[1] = {1000};
    tt x = input(b, BURNC_DTYPE_F32, 1, n), w = input(b, BURNC_DTYPE_F32, 1, n);
    tt bias = input(b, BURNC_DTYPE_F32, 1, n);
    keep(b, gelu_chain(b, x, w, bias));
    fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 1);
    cr_assert_eq(p.n_groups, 1, "%d groups", p.n_groups);
    const fus_group *g = &p.groups[0];
    cr_assert_eq(g->n_recs, 7);
    cr_assert_eq(g->kernel.n_inputs, 3, "x, w and b are loaded once each");
    cr_assert_eq(g->kernel.n_outputs, 1);
    cr_assert_eq(g->kernel.rank, 1);
    cr_assert_eq(g->kernel.inputs[0].stride[0], KIR_STRIDE_UNIT);
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

Test(fusion, softmax_and_log_softmax_rows)
{
    for (int log_form = 0; log_form < 2; log_form++) {
        for (int axis = 0; axis < 2; axis++) {
            tb *b = tb_new();
            tt x = input(b, BURNC_DTYPE_F32, 2, ROWS_COLS);
            keep(b, softmax(b, x, axis, log_form));
            fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 2);
            cr_assert_leq(n_kernels(&p), 2, "%s over axis %d: %d kernels", log_form ? "log_softmax" : "softmax",
                          axis, n_kernels(&p));
            cr_assert_eq(p.groups[0].kernel.n_stages, 2);
            cr_assert_eq(p.groups[0].kernel.n_outer, 1);
            cr_assert_eq(p.groups[0].kernel.n_outputs, 1, "only the result is stored");
            fus_plan_free(&p);
            free(b);
        }
    }
    BT_LEAK_CHECK();
}

Test(fusion, layer_norm_rows)
{
    tb *b = tb_new();
    const int64_t shape[3] = {3, 5, 16};
    tt x = input(b, BURNC_DTYPE_F32, 3, shape);
    keep(b, layer_norm(b, x, 1u << 2, 1e-5));
    fus_plan p = check_runs(b, 1e-4, 1e-5, 3);
    cr_assert_leq(n_kernels(&p), 2);
    cr_assert_eq(p.n_groups, 1);
    /* the two kept axes walk one contiguous run: one outer axis */
    cr_assert_eq(p.groups[0].kernel.rank, 2);
    cr_assert_eq(p.groups[0].kernel.n_outer, 1);
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

Test(fusion, layer_norm_affine_over_two_axes)
{
    tb *b = tb_new();
    const int64_t shape[3] = {4, 3, 8}, last[2] = {3, 8};
    tt x = input(b, BURNC_DTYPE_F32, 3, shape);
    tt w = input(b, BURNC_DTYPE_F32, 2, last), bias = input(b, BURNC_DTYPE_F32, 2, last);
    tt n = layer_norm(b, x, 6u, 1e-5);
    keep(b, bin(b, IR_OP_ADD, bin(b, IR_OP_MUL, n, w), bias));
    fus_plan p = check_runs(b, 1e-4, 1e-5, 4);
    cr_assert_eq(n_kernels(&p), 1);
    /* the two reduced axes are contiguous for every slot: one reduced axis */
    cr_assert_eq(p.groups[0].kernel.rank, 2);
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

/* x [N, M] against a row [M], a column [N, 1] and scalars: ten ops, one kernel. */
static tt chain10(tb *b, tt x, tt row, tt col, double s0, double s1)
{
    tt t = bin(b, IR_OP_MUL, x, row);
    t = bin(b, IR_OP_ADD, t, col);
    t = bin_s(b, IR_OP_MUL, t, s0);
    t = un(b, IR_OP_TANH, t);
    t = bin(b, IR_OP_SUB, t, row);
    t = bin_s(b, IR_OP_ADD, t, s1);
    t = bin(b, IR_OP_MAXIMUM, t, col);
    t = un(b, IR_OP_ABS, t);
    t = bin(b, IR_OP_MUL, t, x);
    return clamp(b, t, -1.5, s1 + 1.0);
}

Test(fusion, broadcasting_chain_of_ten_is_one_kernel)
{
    tb *b = tb_new();
    const int64_t nm[2] = {9, 33}, m[1] = {33}, n1[2] = {9, 1};
    tt x = input(b, BURNC_DTYPE_F32, 2, nm), row = input(b, BURNC_DTYPE_F32, 1, m);
    tt col = input(b, BURNC_DTYPE_F32, 2, n1);
    keep(b, chain10(b, x, row, col, 0.75, 0.25));
    fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 5);
    cr_assert_eq(p.n_groups, 1);
    cr_assert_eq(p.groups[0].n_recs, 10);
    const kir_kernel *k = &p.groups[0].kernel;
    cr_assert_eq(k->n_inputs, 3);
    /* row broadcasts along axis 0, col along axis 1 */
    bool zero_seen = false;
    for (int s = 0; s < k->n_inputs; s++)
        for (int a = 0; a < k->rank; a++)
            zero_seen |= k->inputs[s].stride[a] == KIR_STRIDE_ZERO;
    cr_assert(zero_seen);
    cr_assert_geq(k->n_scalars, 4, "scalars are arguments");
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

/* An expensive value read through a broadcast is computed once and stored: a transcendental
 * (variant 0), and, though each is one kernel-IR instruction, a LayerNorm's 1 / sqrt(var + eps)
 * (variant 1) and a float division (variant 2), whose correctly rounded sequences are long. */
Test(fusion, expensive_producer_read_by_broadcast_is_materialized)
{
    for (int variant = 0; variant < 3; variant++) {
        tb *b = tb_new();
        const int64_t m[1] = {17}, nm[2] = {5, 17};
        tt a = input(b, BURNC_DTYPE_F32, 1, m), x = input(b, BURNC_DTYPE_F32, 2, nm);
        tt e = variant == 0   ? un(b, IR_OP_EXP, a)
               : variant == 1 ? un(b, IR_OP_RECIPROCAL, un(b, IR_OP_SQRT, bin_s(b, IR_OP_ADD, un(b, IR_OP_ABS, a), 1e-5)))
                              : bin_s(b, IR_OP_DIV, a, 3.0);
        keep(b, bin(b, IR_OP_ADD, x, e)); /* e broadcast over 5 rows */
        fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 6 + (uint64_t)variant);
        cr_assert_eq(p.n_groups, 2, "variant %d: %d groups", variant, p.n_groups);
        cr_assert(is_stored(&p, e.st), "variant %d: the value is computed once and stored", variant);
        /* the consumer loads it with a broadcast index map */
        const fus_group *g = &p.groups[p.n_groups - 1];
        bool bc = false;
        for (int s = 0; s < g->kernel.n_inputs; s++)
            if (st_id(g->in_storage[s]) == e.st)
                bc = g->kernel.inputs[s].stride[0] == KIR_STRIDE_ZERO;
        cr_assert(bc, "variant %d", variant);
        cr_assert(strstr(p.groups[0].why_cut, "shape") != NULL, "variant %d, why: %s", variant, p.groups[0].why_cut);
        fus_plan_free(&p);
        free(b);
    }
    BT_LEAK_CHECK();
}

/* Cheap values read through a broadcast, a transpose or a reshape are computed again where
 * they are read: never stored, no cut. So is a one-element division or square root (variants 4
 * and 5: the same at every position, computed once by the generated loops), where a longer one
 * is stored (expensive_producer_read_by_broadcast_is_materialized). */
Test(fusion, cheap_producers_are_recomputed)
{
    for (int variant = 0; variant < 6; variant++) {
        tb *b = tb_new();
        const int64_t m[1] = {17}, nm[2] = {5, 17}, sq[2] = {7, 7}, six[1] = {6}, two3[2] = {2, 3}, one[1] = {1};
        tt mid, out;
        if (variant == 0) { /* broadcast over rows */
            tt c = input(b, BURNC_DTYPE_F32, 1, m), x = input(b, BURNC_DTYPE_F32, 2, nm);
            mid = bin_s(b, IR_OP_MUL, c, 2.0);
            out = bin(b, IR_OP_ADD, x, mid);
        } else if (variant == 1) { /* a chain of two, broadcast */
            tt c = input(b, BURNC_DTYPE_F32, 1, m), x = input(b, BURNC_DTYPE_F32, 2, nm);
            mid = bin_s(b, IR_OP_ADD, bin_s(b, IR_OP_MUL, c, 2.0), 1.0);
            out = bin(b, IR_OP_MUL, x, mid);
        } else if (variant == 2) { /* transposed */
            tt x = input(b, BURNC_DTYPE_F32, 2, sq), y = input(b, BURNC_DTYPE_F32, 2, sq);
            mid = bin_s(b, IR_OP_MUL, x, 3.0);
            out = bin(b, IR_OP_ADD, transpose(mid), y);
        } else if (variant == 3) { /* reshaped */
            tt a = input(b, BURNC_DTYPE_F32, 1, six), w = input(b, BURNC_DTYPE_F32, 2, two3);
            mid = bin_s(b, IR_OP_ADD, a, 1.0);
            out = bin(b, IR_OP_MUL, reshape(mid, 2, two3), w);
        } else { /* one element, broadcast */
            tt c = input(b, BURNC_DTYPE_F32, 1, one), x = input(b, BURNC_DTYPE_F32, 2, nm);
            mid = variant == 4 ? bin_s(b, IR_OP_DIV, c, 3.0) : un(b, IR_OP_SQRT, un(b, IR_OP_ABS, c));
            out = bin(b, IR_OP_MUL, x, mid);
        }
        keep(b, out);
        fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 400 + (uint64_t)variant);
        cr_assert_eq(p.n_groups, 1, "variant %d: %d groups", variant, p.n_groups);
        cr_assert(!is_stored(&p, mid.st), "variant %d: the cheap value is stored", variant);
        cr_assert_eq(p.groups[0].kernel.n_outputs, 1);
        fus_plan_free(&p);
        free(b);
    }
    BT_LEAK_CHECK();
}

/* A LayerNorm's backward: a column group (the GELU's backward and gamma's sums) makes dy, and a
 * later row group reads two cheap products of it, dy * rstd and dy * xc. The column group
 * stores dy instead of the two products, which the row group computes again from it (it reads
 * xc anyway): one tensor written and one read less. */
Test(fusion, shared_operand_of_products_is_stored_instead)
{
    tb *b = tb_new();
    const int64_t nd[2] = {6, 37}, d[1] = {37}, n1[2] = {6, 1};
    tt g = input(b, BURNC_DTYPE_F32, 2, nd), z = input(b, BURNC_DTYPE_F32, 2, nd), gamma = input(b, BURNC_DTYPE_F32, 1, d);
    tt r = input(b, BURNC_DTYPE_F32, 2, n1), xc = input(b, BURNC_DTYPE_F32, 2, nd);
    tt dz = bin(b, IR_OP_MUL, g, un(b, IR_OP_TANH, z));
    tt dbeta = reduce(b, IR_OP_SUM, dz, 1u, 0);
    tt dy = bin(b, IR_OP_MUL, dz, gamma);
    tt pa = bin(b, IR_OP_MUL, dy, r), pb = bin(b, IR_OP_MUL, dy, xc);
    tt s = reduce(b, IR_OP_SUM, pb, 2u, 0);
    tt out = bin(b, IR_OP_ADD, pa, bin(b, IR_OP_MUL, xc, s));
    keep(b, dbeta);
    keep(b, out);
    fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 470);
    cr_assert_eq(n_kernels(&p), 2, "%d kernels", n_kernels(&p));
    cr_assert(is_stored(&p, dy.st), "dy is not stored");
    cr_assert(!is_stored(&p, pa.st) && !is_stored(&p, pb.st), "a product of dy is stored");
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

/* What the user holds is stored anyway: a broadcast reader loads it. */
Test(fusion, held_values_are_loaded_not_recomputed)
{
    tb *b = tb_new();
    const int64_t m[1] = {17}, nm[2] = {5, 17};
    tt c = input(b, BURNC_DTYPE_F32, 1, m), x = input(b, BURNC_DTYPE_F32, 2, nm);
    tt mid = bin_s(b, IR_OP_MUL, c, 2.0);
    keep(b, mid);
    keep(b, bin(b, IR_OP_ADD, x, mid));
    fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 410);
    cr_assert_eq(p.n_groups, 2);
    cr_assert(is_stored(&p, mid.st));
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

/* Recomputing a cheap value is refused where reading it moves fewer tensors: three new ones
 * (variant 1), or two of an earlier kernel, which stores the value for the reader (variant 2,
 * a column sum after a row sum, as a LayerNorm's backward and its bias gradient). Two new
 * tensors in the reader's own kernel are still recomputed (variant 0): reading would cost a
 * cut, a store and a load. */
Test(fusion, recomputing_from_many_tensors_is_refused)
{
    for (int variant = 0; variant < 3; variant++) {
        tb *b = tb_new();
        const int64_t sq[2] = {7, 7};
        tt x = input(b, BURNC_DTYPE_F32, 2, sq), w = input(b, BURNC_DTYPE_F32, 2, sq),
           y = input(b, BURNC_DTYPE_F32, 2, sq);
        tt mid = bin(b, IR_OP_ADD, x, w);
        if (variant == 1)
            mid = bin(b, IR_OP_MUL, mid, y);
        if (variant == 2) {
            keep(b, bin(b, IR_OP_SUB, mid, reduce(b, IR_OP_SUM, mid, 2u, 0))); /* rows */
            keep(b, reduce(b, IR_OP_SUM, mid, 1u, 0));                         /* columns */
        } else
            keep(b, bin(b, IR_OP_ADD, transpose(mid), y));
        fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 420 + (uint64_t)variant);
        cr_assert_eq(p.n_groups, variant == 0 ? 1 : 2, "variant %d: %d groups", variant, p.n_groups);
        cr_assert_eq(is_stored(&p, mid.st), variant != 0, "variant %d", variant);
        if (variant == 2)
            cr_assert_eq(p.groups[1].kernel.n_inputs, 1, "the column sum reads the value");
        fus_plan_free(&p);
        free(b);
    }
    BT_LEAK_CHECK();
}

Test(fusion, transposed_read_of_a_member_is_a_cut)
{
    tb *b = tb_new();
    const int64_t sq[2] = {7, 7};
    tt x = input(b, BURNC_DTYPE_F32, 2, sq), y = input(b, BURNC_DTYPE_F32, 2, sq);
    tt e = un(b, IR_OP_SIN, x);
    tt z = bin(b, IR_OP_ADD, transpose(e), y);
    keep(b, z);
    fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 7);
    cr_assert_eq(p.n_groups, 2);
    cr_assert(is_stored(&p, e.st));
    cr_assert(strstr(p.groups[0].why_cut, "view") != NULL, "why: %s", p.groups[0].why_cut);
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

Test(fusion, kept_intermediates_are_outputs_dead_records_dropped)
{
    tb *b = tb_new();
    const int64_t n[1] = {64};
    tt x = input(b, BURNC_DTYPE_F32, 1, n);
    tt a = un(b, IR_OP_NEG, x);           /* #0 */
    tt c = bin_s(b, IR_OP_MUL, a, 3.0);   /* #1, kept */
    tt d = un(b, IR_OP_SIGMOID, c);       /* #2, kept */
    tt dead = un(b, IR_OP_COS, x);        /* #3, nothing needs it */
    tt dead2 = un(b, IR_OP_EXP, dead);    /* #4, nothing needs it */
    (void)dead2;
    keep(b, c);
    keep(b, d);
    fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 8);
    cr_assert_eq(p.n_groups, 1);
    cr_assert_eq(p.groups[0].n_recs, 3);
    cr_assert_eq(group_of(&p, 3), -1);
    cr_assert_eq(group_of(&p, 4), -1);
    cr_assert_eq(p.groups[0].kernel.n_outputs, 2);
    cr_assert(is_stored(&p, c.st) && is_stored(&p, d.st) && !is_stored(&p, a.st));
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

Test(fusion, eager_mode_one_kernel_per_record)
{
    tb *b = tb_new();
    const int64_t shape[2] = {4, 9};
    tt x = input(b, BURNC_DTYPE_F32, 2, shape);
    tt s = softmax(b, x, 1, false);
    tt unused = un(b, IR_OP_EXP, x);
    (void)unused;
    keep(b, s);
    fus_plan p = plan(b, false);
    cr_assert_eq(p.n_groups, 5, "5 live records, %d groups", p.n_groups);
    for (int gi = 0; gi < p.n_groups; gi++) {
        cr_assert_eq(p.groups[gi].n_recs, 1);
        cr_assert_eq(p.groups[gi].kernel.n_outputs, 1);
        cr_assert(strstr(p.groups[gi].why_cut, "eager") != NULL);
    }
    fus_plan_free(&p);
    fus_plan f = check_runs(b, F32_RTOL, F32_ATOL, 9);
    fus_plan_free(&f);
    free(b);
    BT_LEAK_CHECK();
}

/* A training-style step: the same structure with other scalars, storages and extents. */
static void adam_like(tb *b, int64_t n, double lr, double beta_t, uint64_t seed_offset)
{
    const int64_t sh[1] = {n};
    tt p = input(b, BURNC_DTYPE_F32, 1, sh), g = input(b, BURNC_DTYPE_F32, 1, sh);
    tt m = input(b, BURNC_DTYPE_F32, 1, sh);
    tt m2 = bin(b, IR_OP_ADD, bin_s(b, IR_OP_MUL, m, 0.9), bin_s(b, IR_OP_MUL, g, 0.1));
    tt mhat = bin_s(b, IR_OP_DIV, m2, 1.0 - beta_t);
    tt noise = draw(b, IR_OP_RAND, BURNC_DTYPE_F32, 1, sh, 42, seed_offset);
    tt step = bin_s(b, IR_OP_MUL, bin(b, IR_OP_ADD, mhat, noise), lr);
    keep(b, m2);
    keep(b, bin(b, IR_OP_SUB, p, step));
}

Test(fusion, loop_with_changing_scalars_reuses_the_kernel)
{
    uint64_t first = 0;
    int groups = -1;
    for (int step = 1; step <= 4; step++) {
        tb *b = tb_new();
        adam_like(b, 100 + 37 * step, 1e-3 / step, pow(0.999, step), 1000u * (uint64_t)step);
        fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 10 + (uint64_t)step);
        cr_assert_eq(p.n_groups, 1);
        if (groups < 0) {
            groups = p.n_groups;
            first = p.groups[0].key;
        }
        cr_assert_eq(p.groups[0].key, first, "step %d compiles a new kernel", step);
        fus_plan_free(&p);
        free(b);
    }
    BT_LEAK_CHECK();
}

Test(fusion, plan_cache_fills_in_a_new_batch)
{
    fus_cache_clear();
    uint64_t h0, m0, h1, m1;
    fus_cache_stats(&h0, &m0);
    for (int step = 0; step < 3; step++) {
        tb *b = tb_new();
        const int64_t one[1] = {1};
        for (int i = 0; i < step; i++)
            input(b, BURNC_DTYPE_F32, 1, one); /* moves every storage of the step */
        adam_like(b, 256, 1e-3 * (step + 1), pow(0.999, step + 1), 77u * (uint64_t)step);
        fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 200 + (uint64_t)step);
        fus_plan_free(&p);
        free(b);
    }
    fus_cache_stats(&h1, &m1);
    cr_assert_eq(m1 - m0, 2, "the first step misses (fused and eager): %llu misses", (unsigned long long)(m1 - m0));
    cr_assert_eq(h1 - h0, 4, "the next steps hit: %llu hits", (unsigned long long)(h1 - h0));
    fus_cache_clear();
    BT_LEAK_CHECK();
}

/* Batches that differ in which storages alias, or in what the user holds, are other plans. */
Test(fusion, plan_cache_tells_structures_apart)
{
    fus_cache_clear();
    const int64_t n[1] = {33};
    for (int variant = 0; variant < 3; variant++) {
        tb *b = tb_new();
        tt x = input(b, BURNC_DTYPE_F32, 1, n), y = input(b, BURNC_DTYPE_F32, 1, n);
        tt s = bin(b, IR_OP_ADD, x, variant == 1 ? x : y);
        tt t = un(b, IR_OP_EXP, s);
        keep(b, t);
        if (variant == 2)
            keep(b, s);
        fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 300);
        cr_assert_eq(p.groups[0].kernel.n_inputs, variant == 1 ? 1 : 2);
        cr_assert_eq(p.groups[0].kernel.n_outputs, variant == 2 ? 2 : 1);
        fus_plan_free(&p);
        free(b);
    }
    uint64_t hits, misses;
    fus_cache_stats(&hits, &misses);
    cr_assert_eq(hits, 0);
    fus_cache_clear();
    BT_LEAK_CHECK();
}

Test(fusion, scalars_are_never_constants)
{
    /* two batches that differ only in a scalar give identical kernels, arguments aside */
    fus_plan p[2];
    tb *b[2];
    for (int i = 0; i < 2; i++) {
        b[i] = tb_new();
        const int64_t sh[2] = {3, 5};
        tt x = input(b[i], BURNC_DTYPE_F64, 2, sh);
        keep(b[i], clamp(b[i], bin_s(b[i], IR_OP_POW, x, i ? 2.0 : 3.0), -0.5 - i, 0.5 + i));
        p[i] = plan(b[i], true);
    }
    cr_assert_eq(p[0].groups[0].key, p[1].groups[0].key);
    cr_assert_eq(p[0].groups[0].kernel.n_insts, p[1].groups[0].kernel.n_insts);
    cr_assert_eq(memcmp(p[0].groups[0].kernel.insts, p[1].groups[0].kernel.insts,
                        (size_t)p[0].groups[0].kernel.n_insts * sizeof(kir_inst)),
                 0);
    cr_assert_neq(p[0].groups[0].scalars[0].f, p[1].groups[0].scalars[0].f);
    for (int i = 0; i < 2; i++) {
        fus_plan_free(&p[i]);
        free(b[i]);
    }
    BT_LEAK_CHECK();
}

Test(fusion, reductions_every_kind)
{
    static const ir_op ops[] = {IR_OP_SUM, IR_OP_MEAN, IR_OP_PROD, IR_OP_MAX, IR_OP_MIN,
                                IR_OP_VAR, IR_OP_STD, IR_OP_ARGMAX, IR_OP_ARGMIN};
    static const uint32_t masks[] = {1u, 2u, 4u, 5u, 7u, 6u};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        for (size_t mi = 0; mi < sizeof masks / sizeof masks[0]; mi++) {
            uint32_t mask = masks[mi];
            if ((ops[o] == IR_OP_ARGMAX || ops[o] == IR_OP_ARGMIN) && (mask & (mask - 1)))
                continue; /* one axis */
            tb *b = tb_new();
            const int64_t shape[3] = {3, 4, 5};
            tt x = input(b, BURNC_DTYPE_F32, 3, shape);
            tt h = bin_s(b, IR_OP_MUL, x, 0.5); /* a prologue */
            tt r = reduce(b, ops[o], h, mask, 1.0);
            keep(b, r);
            fus_plan p = check_runs(b, 1e-5, 1e-5, 20 + o);
            cr_assert_eq(p.n_groups, 1, "%s mask %u: %d groups", ir_op_name(ops[o]), mask, p.n_groups);
            fus_plan_free(&p);
            free(b);
        }
    }
    BT_LEAK_CHECK();
}

/* A reduced extent of 0: sums are 0, means NaN, as the reference says. */
Test(fusion, empty_reductions)
{
    tb *b = tb_new();
    const int64_t shape[2] = {3, 0};
    tt x = input(b, BURNC_DTYPE_F32, 2, shape);
    keep(b, reduce(b, IR_OP_SUM, x, 2u, 0));
    keep(b, reduce(b, IR_OP_MEAN, x, 2u, 0));
    keep(b, bin_s(b, IR_OP_ADD, reduce(b, IR_OP_PROD, x, 2u, 0), 1.0));
    fus_plan p = check_runs(b, EXACT, 0, 31);
    cr_assert_eq(p.n_groups, 1);
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

Test(fusion, reduction_consumers_row_and_full)
{
    tb *b = tb_new();
    const int64_t shape[2] = {5, 12};
    tt x = input(b, BURNC_DTYPE_F32, 2, shape);
    tt s = reduce(b, IR_OP_SUM, x, 2u, 0);
    /* keepdim=false: the row result read through a [5] view, then used on the full domain */
    tt flat = s;
    flat.v.rank = 1;
    tt r2 = bin_s(b, IR_OP_MUL, flat, 2.0);
    tt centered = bin(b, IR_OP_SUB, x, s);
    keep(b, r2);
    keep(b, centered);
    fus_plan p = check_runs(b, 1e-5, 1e-5, 30);
    cr_assert_eq(p.n_groups, 1);
    cr_assert_eq(p.groups[0].kernel.n_outputs, 2);
    bool row = false, elem = false;
    for (int i = 0; i < p.groups[0].kernel.n_stores; i++) {
        row |= p.groups[0].kernel.stores[i].row;
        elem |= !p.groups[0].kernel.stores[i].row;
    }
    cr_assert(row && elem);
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

Test(fusion, narrow_floats_round_every_op)
{
    static const burnc_dtype_t dts[] = {BURNC_DTYPE_F16, BURNC_DTYPE_BF16};
    for (int i = 0; i < 2; i++) {
        tb *b = tb_new();
        const int64_t shape[2] = {4, 33}, row[1] = {33};
        tt x = input(b, dts[i], 2, shape), w = input(b, dts[i], 1, row);
        tt t = bin(b, IR_OP_MUL, x, w);
        t = bin_s(b, IR_OP_ADD, t, 1.0 / 3.0);
        t = bin(b, IR_OP_MUL, t, t);
        t = un(b, IR_OP_EXP, t);
        t = bin(b, IR_OP_DIV, t, x);
        keep(b, t);
        keep(b, softmax(b, x, 1, false));
        keep(b, reduce(b, IR_OP_MEAN, bin(b, IR_OP_MUL, x, x), 2u, 0));
        /* the reference rounds once from double, fused rounds each op from f32 */
        fus_plan p = check_runs(b, dts[i] == BURNC_DTYPE_F16 ? 4e-3 : 3e-2, 1e-3, 40);
        cr_assert_leq(n_kernels(&p), 2);
        fus_plan_free(&p);
        free(b);
    }
    BT_LEAK_CHECK();
}

Test(fusion, integers_wrap_per_op)
{
    static const burnc_dtype_t dts[] = {BURNC_DTYPE_U8, BURNC_DTYPE_I32, BURNC_DTYPE_I64};
    for (int i = 0; i < 3; i++) {
        tb *b = tb_new();
        const int64_t shape[1] = {200};
        tt x = input(b, dts[i], 1, shape), y = input(b, dts[i], 1, shape);
        tt t = bin(b, IR_OP_MUL, x, y);
        t = bin_s(b, IR_OP_ADD, t, 77);
        t = bin(b, IR_OP_MUL, t, t);
        t = bin(b, IR_OP_REMAINDER, t, y);
        t = bin(b, IR_OP_SUB, t, bin(b, IR_OP_DIV, x, y));
        tt c = bin(b, IR_OP_GT, t, x);
        keep(b, where(b, c, t, un(b, IR_OP_NEG, x)));
        keep(b, reduce(b, IR_OP_MAX, t, 1u, 0));
        fus_plan p = check_runs(b, EXACT, 0, 50);
        cr_assert_eq(p.n_groups, 1);
        fus_plan_free(&p);
        free(b);
    }
    BT_LEAK_CHECK();
}

/* Large i64 values cast to bf16 and f32: a conversion through f64 rounds twice beyond 2^53. */
Test(fusion, cast_of_large_integers_rounds_once)
{
    static const burnc_dtype_t to[] = {BURNC_DTYPE_BF16, BURNC_DTYPE_F16, BURNC_DTYPE_F32, BURNC_DTYPE_F64};
    for (size_t i = 0; i < sizeof to / sizeof to[0]; i++) {
        tb *b = tb_new();
        const int64_t shape[1] = {64};
        tt x = input(b, BURNC_DTYPE_I64, 1, shape);
        tt c = cast(b, x, to[i]);
        keep(b, c);
        tt c0 = bin_s(b, IR_OP_ADD, c, 0.0); /* reads the cast from a register */
        keep(b, c0);
        fus_plan p = plan(b, true), e = plan(b, false);
        mem ref, mf, me;
        mem_init(b, &ref, 61);
        int64_t *v = ref.buf[x.st];
        uint64_t rs = 99;
        for (int j = 0; j < 64; j++) {
            /* ties of bf16 at 2^62 with a low bit set, near 2^63, and random magnitudes */
            int64_t base = j < 8 ? ((int64_t)1 << 62) + ((int64_t)1 << 54) + (j & 3) : (int64_t)(rng_next(&rs) >> (j % 40));
            v[j] = j == 8 ? INT64_MAX : j == 9 ? INT64_MIN : (j & 1 ? -base : base);
        }
        mem_init(b, &mf, 61);
        mem_init(b, &me, 61);
        memcpy(mf.buf[x.st], v, 64 * sizeof *v);
        memcpy(me.buf[x.st], v, 64 * sizeof *v);
        run_ref(b, &ref);
        run_plan(b, &p, &mf);
        run_plan(b, &e, &me);
        for (int s = 0; s < 2; s++) {
            compare(b, s ? c0.st : c.st, &mf, &ref, EXACT, 0, "cast vs reference");
            compare(b, s ? c0.st : c.st, &mf, &me, BITWISE, 0, "cast fused vs eager");
        }
        mem_free(&ref);
        mem_free(&mf);
        mem_free(&me);
        fus_plan_free(&p);
        fus_plan_free(&e);
        free(b);
    }
    BT_LEAK_CHECK();
}

/* f64 values just around the halfway points of f16/bf16: rounding through f32 first would
 * break ties the wrong way; the cast must round once. */
Test(fusion, cast_rounds_once)
{
    static const burnc_dtype_t to[] = {BURNC_DTYPE_F16, BURNC_DTYPE_BF16, BURNC_DTYPE_F32, BURNC_DTYPE_I32,
                                       BURNC_DTYPE_U8, BURNC_DTYPE_BOOL};
    for (size_t i = 0; i < sizeof to / sizeof to[0]; i++) {
        tb *b = tb_new();
        const int64_t shape[1] = {96};
        tt x = input(b, BURNC_DTYPE_F64, 1, shape);
        tt c = cast(b, x, to[i]);
        keep(b, c);
        if (ir_dtype_is_float(to[i]))
            keep(b, bin_s(b, IR_OP_MUL, c, 1.0)); /* reads the cast from a register */
        fus_plan p = plan(b, true);
        mem ref, mf, me;
        mem_init(b, &ref, 60);
        /* halfway points plus or minus a tiny part, and ordinary values */
        double *v = ref.buf[x.st];
        for (int j = 0; j < 96; j++) {
            double base = 1.0 + (j % 16) * 0x1p-4, half = to[i] == BURNC_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
            double tiny = (j / 16 % 3 - 1) * 0x1p-40;
            v[j] = (j & 1 ? -1 : 1) * (base + half + tiny) * (j / 48 ? 1e3 : 1);
        }
        mem_init(b, &mf, 60);
        mem_init(b, &me, 60);
        memcpy(mf.buf[x.st], v, 96 * sizeof *v);
        memcpy(me.buf[x.st], v, 96 * sizeof *v);
        fus_plan e = plan(b, false);
        run_ref(b, &ref);
        run_plan(b, &p, &mf);
        run_plan(b, &e, &me);
        for (int r = 0; r < b->n; r++) {
            if (!b->needed[r])
                continue;
            compare(b, st_id(b->ptrs[r]->out), &mf, &ref, EXACT, 0, "cast vs reference");
            compare(b, st_id(b->ptrs[r]->out), &mf, &me, BITWISE, 0, "cast fused vs eager");
        }
        mem_free(&ref);
        mem_free(&mf);
        mem_free(&me);
        fus_plan_free(&p);
        fus_plan_free(&e);
        free(b);
    }
    BT_LEAK_CHECK();
}

Test(fusion, sources_and_random_draws)
{
    static const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16};
    for (int i = 0; i < 4; i++) {
        tb *b = tb_new();
        const int64_t shape[2] = {6, 10};
        tt u = draw(b, IR_OP_RAND, dts[i], 2, shape, 7, 1000 + (uint64_t)i);
        tt z = draw(b, IR_OP_RANDN, dts[i], 2, shape, 7, 5000);
        tt e = source(b, IR_OP_EYE, dts[i], 2, shape);
        const int64_t n[1] = {10};
        ir_record *ar = begin(b, IR_OP_ARANGE, 0);
        ar->dtype = ar->compute = dts[i];
        ar->out_rank = 1;
        ar->out_shape[0] = 10;
        ar->scalar[0] = -1.25;
        ar->scalar[1] = 0.375;
        tt a = commit(b, ar);
        (void)n;
        tt f = full(b, dts[i], 2, shape, 0.1);
        keep(b, u);
        keep(b, bin(b, IR_OP_ADD, bin(b, IR_OP_MUL, z, e), bin(b, IR_OP_ADD, a, f)));
        double tol = dts[i] == BURNC_DTYPE_F64 ? 1e-13 : dts[i] == BURNC_DTYPE_F32 ? 1e-5 : 2e-2;
        fus_plan p = check_runs(b, tol, tol, 70);
        /* the 1-D arange iterates another shape: its sum with full is a kernel of its own */
        cr_assert_leq(n_kernels(&p), 3);
        fus_plan_free(&p);
        free(b);
    }
    BT_LEAK_CHECK();
}

Test(fusion, opaque_records_split_the_plan)
{
    tb *b = tb_new();
    const int64_t sh[2] = {5, 5};
    tt x = input(b, BURNC_DTYPE_F32, 2, sh), y = input(b, BURNC_DTYPE_F32, 2, sh);
    tt a = un(b, IR_OP_TANH, x);
    tt m = matmul(b, a, bin_s(b, IR_OP_MUL, y, 2.0));
    keep(b, un(b, IR_OP_RELU, m));
    fus_plan p = check_runs(b, 1e-5, 1e-5, 80);
    int opaque = 0;
    for (int gi = 0; gi < p.n_groups; gi++)
        opaque += p.groups[gi].opaque;
    cr_assert_eq(opaque, 1);
    cr_assert_eq(p.n_groups, 3, "tanh and mul fuse as siblings, matmul, relu: %d groups", p.n_groups);
    cr_assert(p.groups[1].opaque);
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

Test(fusion, copies_fuse_and_reshape)
{
    tb *b = tb_new();
    const int64_t sh[2] = {5, 8}, flat[1] = {40}, sh3[3] = {2, 4, 5};
    tt x = input(b, BURNC_DTYPE_F32, 2, sh);
    tt c = copy(b, transpose(x));              /* a strided read, fused */
    tt y = bin_s(b, IR_OP_ADD, c, 1.0);
    tt r = copy_to(b, transpose(y), 1, flat);  /* reshape copy of a member's transpose: a cut */
    keep(b, y);
    keep(b, un(b, IR_OP_NEG, reshape(r, 3, sh3)));
    fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 90);
    cr_assert_leq(p.n_groups, 3);
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

Test(fusion, output_limit_splits_kernels)
{
    tb *b = tb_new();
    const int64_t n[1] = {50};
    tt t = input(b, BURNC_DTYPE_F32, 1, n);
    for (int i = 0; i < 20; i++) {
        t = bin_s(b, IR_OP_ADD, t, i);
        keep(b, t);
    }
    fus_plan p = check_runs(b, F32_RTOL, F32_ATOL, 100);
    cr_assert_eq(p.n_groups, 3, "20 stored values need 3 kernels of at most 8, got %d", p.n_groups);
    for (int gi = 0; gi < p.n_groups; gi++)
        cr_assert_leq(p.groups[gi].kernel.n_outputs, KIR_MAX_OUTPUTS);
    cr_assert(strstr(p.groups[0].why_cut, "outputs") != NULL, "why: %s", p.groups[0].why_cut);
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

Test(fusion, input_and_instruction_limits)
{
    tb *b = tb_new();
    const int64_t n[1] = {40};
    tt t = input(b, BURNC_DTYPE_F32, 1, n);
    for (int i = 0; i < 6; i++)
        t = bin(b, IR_OP_ADD, t, input(b, BURNC_DTYPE_F32, 1, n));
    keep(b, t);
    fus_plan p;
    fus_options o = {.fuse = true, .max_inputs = 3};
    cr_assert_eq(fus_partition((ir_record *const *)b->ptrs, b->n, b->needed, &o, &p), BURNC_OK);
    check_structure(b, &p);
    cr_assert_eq(p.n_groups, 3, "7 inputs, at most 3 per kernel: %d groups", p.n_groups);
    for (int gi = 0; gi < p.n_groups; gi++)
        cr_assert_leq(p.groups[gi].kernel.n_inputs, 3);
    cr_assert(strstr(p.groups[0].why_cut, "inputs") != NULL, "why: %s", p.groups[0].why_cut);
    fus_plan_free(&p);
    o = (fus_options){.fuse = true, .max_insts = 12};
    cr_assert_eq(fus_partition((ir_record *const *)b->ptrs, b->n, b->needed, &o, &p), BURNC_OK);
    check_structure(b, &p);
    cr_assert_gt(p.n_groups, 1);
    cr_assert(strstr(p.groups[0].why_cut, "instructions") != NULL, "why: %s", p.groups[0].why_cut);
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

Test(fusion, plan_as_dot)
{
    tb *b = tb_new();
    const int64_t sh[2] = {4, 4};
    tt x = input(b, BURNC_DTYPE_F32, 2, sh);
    tt s = softmax(b, x, 1, false);
    keep(b, matmul(b, s, x));
    fus_plan p = plan(b, true);
    char *dot = fus_plan_dot(&p, (ir_record *const *)b->ptrs, b->n);
    cr_assert_not_null(dot);
    cr_assert(strncmp(dot, "digraph", 7) == 0);
    cr_assert(strstr(dot, "subgraph cluster_0") != NULL);
    cr_assert(strstr(dot, "shape=box") != NULL, "%s", dot);
    cr_assert(strstr(dot, "r4 -> r5") != NULL, "%s", dot);
    cr_assert(strstr(dot, "input 0") != NULL);
    free(dot);
    fus_plan_free(&p);
    free(b);

    /* a value recomputed where it is read has no group: drawn dashed */
    b = tb_new();
    const int64_t m[1] = {6}, nm[2] = {3, 6};
    tt c = input(b, BURNC_DTYPE_F32, 1, m), y = input(b, BURNC_DTYPE_F32, 2, nm);
    keep(b, bin(b, IR_OP_ADD, y, bin_s(b, IR_OP_MUL, c, 2.0)));
    p = plan(b, true);
    dot = fus_plan_dot(&p, (ir_record *const *)b->ptrs, b->n);
    cr_assert_not_null(dot);
    cr_assert(strstr(dot, "r0 [shape=ellipse, style=dashed") != NULL, "%s", dot);
    cr_assert(strstr(dot, "r0 -> r1 [style=dashed]") != NULL, "%s", dot);
    free(dot);
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

Test(fusion, malformed_batch_is_refused)
{
    tb *b = tb_new();
    const int64_t n[1] = {4};
    tt x = input(b, BURNC_DTYPE_F32, 1, n);
    keep(b, un(b, IR_OP_EXP, x));
    b->recs[0].out_rank = 99;
    fus_plan p;
    fus_options o = {.fuse = true};
    cr_assert_eq(fus_partition((ir_record *const *)b->ptrs, b->n, b->needed, &o, &p), BURNC_ERR_INTERNAL);
    cr_assert_eq(p.n_groups, 0);
    cr_assert(p.error[0] != '\0');
    fus_plan_free(&p);
    cr_assert_eq(fus_partition((ir_record *const *)b->ptrs, 0, b->needed, &o, &p), BURNC_OK);
    cr_assert_eq(p.n_groups, 0);
    fus_plan_free(&p);
    free(b);
    BT_LEAK_CHECK();
}

/* ---- Random graphs ----------------------------------------------------------------------- */

/* numpy broadcasting of two shapes is possible. */
static bool broadcastable(const tt *a, const tt *b)
{
    for (int i = 1; i <= a->v.rank && i <= b->v.rank; i++) {
        int64_t x = a->v.shape[a->v.rank - i], y = b->v.shape[b->v.rank - i];
        if (x != y && x != 1 && y != 1)
            return false;
    }
    return true;
}

/* A random view of t: itself, a permutation, a slice of one index (a broadcast of extent 1),
 * a strided slice, a reshape to rank 1, or a flip. */
static tt random_view(uint64_t *rs, tt t)
{
    switch (rng_next(rs) % 9) {
    case 0:
    case 1:
        if (t.v.rank >= 2) {
            int perm[BURNC_MAX_RANK];
            for (int d = 0; d < t.v.rank; d++)
                perm[d] = t.v.rank - 1 - d;
            return permute(t, perm);
        }
        return t;
    case 2:
        for (int d = 0; d < t.v.rank; d++)
            if (t.v.shape[d] > 1)
                return slice(t, d, (int64_t)(rng_next(rs) % (uint64_t)t.v.shape[d]), 1, 1);
        return t;
    case 3:
        for (int d = t.v.rank - 1; d >= 0; d--)
            if (t.v.shape[d] >= 3)
                return slice(t, d, 1, (t.v.shape[d] - 1) / 2, 2);
        return t;
    case 4:
        if (ir_view_is_dense(&t.v) && t.v.rank > 1) {
            int64_t n = ir_numel(t.v.rank, t.v.shape);
            return reshape(t, 1, &n);
        }
        return t;
    case 5:
        for (int d = 0; d < t.v.rank; d++)
            if (t.v.shape[d] > 1) /* a flip: negative strides */
                return slice(t, d, t.v.shape[d] - 1, t.v.shape[d], -1);
        return t;
    default: return t;
    }
}

/* One of the pool's tensors as an operand next to a (a view of it when that still broadcasts). */
static tt random_partner(uint64_t *rs, const tt *pool, int n_pool, const tt *a)
{
    for (int tries = 0; tries < 6; tries++) {
        tt c = pool[rng_next(rs) % (uint64_t)n_pool];
        tt v = random_view(rs, c);
        if (broadcastable(a, &v))
            return v;
        if (broadcastable(a, &c))
            return c;
    }
    return *a;
}

static const ir_op FLOAT_UNARY[] = {IR_OP_NEG,  IR_OP_ABS, IR_OP_TANH,  IR_OP_SIGMOID, IR_OP_SIN,
                                    IR_OP_RELU, IR_OP_EXP, IR_OP_FLOOR, IR_OP_SQRT};
static const ir_op INT_UNARY[] = {IR_OP_NEG, IR_OP_ABS, IR_OP_RELU};
static const ir_op ANY_BINARY[] = {IR_OP_ADD, IR_OP_SUB, IR_OP_MUL, IR_OP_MAXIMUM, IR_OP_MINIMUM};

#define PICK(rs, table) (table)[rng_next(rs) % (sizeof(table) / sizeof((table)[0]))]

static tt random_unary(tb *b, uint64_t *rs, tt a)
{
    if (!ir_dtype_is_float(a.dt))
        return un(b, PICK(rs, INT_UNARY), random_view(rs, a));
    ir_op op = PICK(rs, FLOAT_UNARY);
    if (op == IR_OP_SQRT || op == IR_OP_EXP)
        a = un(b, IR_OP_TANH, a); /* keeps values in range */
    if (op == IR_OP_SQRT)
        a = un(b, IR_OP_ABS, a);
    return un(b, op, random_view(rs, a));
}

static tt random_reduce(tb *b, uint64_t *rs, tt a)
{
    static const ir_op fl[] = {IR_OP_SUM, IR_OP_MEAN, IR_OP_MAX, IR_OP_MIN, IR_OP_VAR};
    static const ir_op in[] = {IR_OP_SUM, IR_OP_MAX, IR_OP_MIN};
    if (a.v.rank == 0)
        return a;
    uint32_t mask = (uint32_t)(rng_next(rs) % ((1u << a.v.rank) - 1)) + 1;
    ir_op op = ir_dtype_is_float(a.dt) ? PICK(rs, fl) : PICK(rs, in);
    tt r = reduce(b, op, a, mask, 0);
    if (rng_next(rs) % 2) { /* keepdim=false: the kept axes as a view */
        tt sq = r;
        sq.v.rank = 0;
        for (int d = 0; d < r.v.rank; d++)
            if (!(mask >> d & 1)) {
                sq.v.shape[sq.v.rank] = r.v.shape[d];
                sq.v.strides[sq.v.rank++] = r.v.strides[d];
            }
        return sq;
    }
    return r;
}

/* A chain of 4 to 17 random ops of one dtype over a few inputs, with random views, kept
 * values and casts; f16 graphs go through f32 and back now and then. */
static void random_graph(tb *b, uint64_t *rs, burnc_dtype_t dt)
{
    static const int64_t dims[] = {1, 3, 4, 5, 7};
    tt pool[96];
    int n_pool = 0, rank = 1 + (int)(rng_next(rs) % 3);
    int64_t shape[BURNC_MAX_RANK];
    for (int d = 0; d < rank; d++)
        shape[d] = dims[rng_next(rs) % 5];
    pool[n_pool++] = input(b, dt, rank, shape);
    int64_t sub[BURNC_MAX_RANK];
    memcpy(sub, shape, sizeof sub);
    sub[rng_next(rs) % (uint64_t)rank] = 1;
    pool[n_pool++] = input(b, dt, rank, sub);
    int n_ops = 4 + (int)(rng_next(rs) % 14);
    for (int i = 0; i < n_ops && n_pool < 90; i++) {
        tt a = pool[n_pool - 1 - (int)(rng_next(rs) % (uint64_t)(n_pool < 3 ? n_pool : 3))];
        tt r;
        switch (rng_next(rs) % 10) {
        case 0:
        case 1: r = random_unary(b, rs, a); break;
        case 2:
        case 3:
        case 4: r = bin(b, PICK(rs, ANY_BINARY), a, random_partner(rs, pool, n_pool, &a)); break;
        case 5:
            r = bin_s(b, ir_dtype_is_float(dt) ? IR_OP_MUL : IR_OP_ADD, a,
                      ir_dtype_is_float(dt) ? rng_uniform(rs, -1.5, 1.5) : (double)(rng_next(rs) % 9));
            break;
        case 6: r = random_reduce(b, rs, a); break;
        case 7: {
            tt c = random_partner(rs, pool, n_pool, &a);
            r = where(b, bin(b, IR_OP_GT, a, c), a, c);
            break;
        }
        case 8: r = copy(b, random_view(rs, a)); break;
        default:
            if (ir_dtype_is_float(dt)) {
                burnc_dtype_t other = dt == BURNC_DTYPE_F32 ? BURNC_DTYPE_F64 : BURNC_DTYPE_F32;
                r = cast(b, cast(b, a, other), dt);
            } else {
                r = full(b, dt, a.v.rank, a.v.shape, (double)(rng_next(rs) % 5));
            }
            break;
        }
        pool[n_pool++] = r;
        if (rng_next(rs) % 4 == 0 && b->st_producer[r.st] >= 0)
            keep(b, r);
    }
    for (int i = n_pool - 1; i >= 0; i--)
        if (b->st_producer[pool[i].st] >= 0) {
            keep(b, pool[i]);
            break;
        }
}

Test(fusion, random_graphs_agree_with_reference_and_eager)
{
    static const struct {
        burnc_dtype_t dt;
        double rtol, atol;
    } kinds[] = {
        {BURNC_DTYPE_F32, 1e-3, 1e-4}, {BURNC_DTYPE_F32, 1e-3, 1e-4}, {BURNC_DTYPE_F32, 1e-3, 1e-4},
        {BURNC_DTYPE_F64, 1e-9, 1e-10}, {BURNC_DTYPE_F16, 3e-2, 3e-2}, {BURNC_DTYPE_I32, EXACT, 0},
    };
    uint64_t rs = 2024;
    int total_groups = 0, total_recs = 0;
    /* on a device every batch opens it and compiles its kernels through the driver: a tenth of
     * the graphs keeps the suite within its timeout on a CPU Vulkan device */
    const char *spec = getenv("BURNC_TEST_DEVICE");
    int graphs = spec && *spec && strcmp(spec, "ref") != 0 ? 120 : 1200;
    for (int g = 0; g < graphs; g++) {
        tb *b = tb_new();
        int kind = (int)(rng_next(&rs) % (sizeof kinds / sizeof kinds[0]));
        random_graph(b, &rs, kinds[kind].dt);
        fus_plan p = check_runs(b, kinds[kind].rtol, kinds[kind].atol, (uint64_t)g);
        total_groups += n_kernels(&p);
        total_recs += b->n;
        fus_plan_free(&p);
        free(b);
    }
    /* fusion does something: far fewer kernels than records */
    cr_assert_lt(total_groups * 2, total_recs, "%d kernels for %d records", total_groups, total_recs);
    BT_LEAK_CHECK();
}

/* Element-wise work right after a matmul that reads its product is marked as its epilogue; a
 * reduction of the product, or element-wise work that does not read it, is not. */
Test(fusion, matmul_epilogues_are_marked)
{
    const int64_t mk[2] = {8, 5}, kn[2] = {5, 6}, row[1] = {6};
    for (int c = 0; c < 3; c++) {
        tb *b = tb_new();
        tt m = matmul(b, input(b, BURNC_DTYPE_F32, 2, mk), input(b, BURNC_DTYPE_F32, 2, kn));
        tt other = input(b, BURNC_DTYPE_F32, 1, row);
        if (c == 0)
            keep(b, un(b, IR_OP_TANH, bin(b, IR_OP_ADD, m, other)));
        else if (c == 1)
            keep(b, reduce(b, IR_OP_SUM, m, 3, 0));
        else
            keep(b, m), keep(b, un(b, IR_OP_EXP, other));
        fus_plan p = plan(b, true);
        cr_assert_eq(p.n_groups, 2, "case %d: %d groups", c, p.n_groups);
        cr_assert(p.groups[0].opaque && !p.groups[0].epilogue);
        cr_assert_eq(p.groups[1].epilogue, c == 0, "case %d: epilogue %d", c, p.groups[1].epilogue);
        fus_plan_free(&p);
        free(b);
    }
    BT_LEAK_CHECK();
}
