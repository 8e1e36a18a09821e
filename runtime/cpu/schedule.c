/* How a compiled kernel's work is split across the thread pool. Rows are independent, so any
 * split of rows gives the same bits. A reduction over few long rows would leave threads idle,
 * so there the threads compute leaf results (KIR_LEAF positions each) and the worker combines
 * them in the fixed pairwise order of ir/kernel.h. Which scheme runs depends on the shape
 * alone, never on the thread count, so results do not change with BURNC_NUM_THREADS. */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"

enum {
    TASK_WORK = 1 << 16,  /* positions per task, without autotune's choice */
    LEAF_ROWS_MAX = 16,   /* "few rows": at most this many ... */
    LEAF_MIN_LEAVES = 2,  /* ... of at least this many leaves each */
    ROW_GROUP_MIN_ROWS = 2 * KIR_LANES, /* rows from which tasks hold whole groups of rows */
};

static void shape_of(const kir_kernel *ir, const kir_args *a, int64_t *n_rows, int64_t *row_len)
{
    int64_t rows = 1, len = 1;
    for (int d = 0; d < ir->rank; d++) {
        if (d < ir->n_outer)
            rows *= a->extents[d];
        else
            len *= a->extents[d];
    }
    *n_rows = rows;
    *row_len = len;
}

/* Whether an input is contiguous across rows (the last outer axis) and strided along the
 * reduced one: the shape of kernel that the code generator may run a group of rows at a time. */
static bool reads_across_rows(const kir_kernel *ir)
{
    if (ir->n_stages == 0 || ir->n_outer == 0 || ir->n_outer == ir->rank)
        return false;
    for (int s = 0; s < ir->n_inputs; s++) {
        const uint8_t *st = ir->inputs[s].stride;
        if (st[ir->n_outer - 1] == KIR_STRIDE_UNIT && st[ir->rank - 1] == KIR_STRIDE_ANY)
            return true;
    }
    return false;
}

static void run_tasks(cpu_threads *t, bool inline_run, int64_t n, cpu_task_fn task, void *ctx)
{
    if (inline_run) {
        for (int64_t i = 0; i < n; i++)
            task(ctx, i);
        return;
    }
    cpu_threads_run(t, n, task, ctx);
}

/* ---- Rows: each task runs whole rows (positions, for element-wise kernels) ---- */
typedef struct rows_job {
    const cg_cpu_kernel *fn;
    const kir_args *args;
    int64_t n_rows, per_task;
} rows_job;

static void rows_task(void *ctx, int64_t i)
{
    const rows_job *j = ctx;
    int64_t begin = i * j->per_task;
    int64_t end = begin + j->per_task < j->n_rows ? begin + j->per_task : j->n_rows;
    j->fn->rows(j->args, begin, end);
}

static void run_rows(cpu_threads *t, const rt_kernel *k, const kir_args *a, int64_t n_rows, int64_t row_len,
                     int64_t task)
{
    int64_t per = row_len >= task ? 1 : task / (row_len > 0 ? row_len : 1);
    /* Reductions over a strided axis run KIR_LANES adjacent rows at a time (llvm_cpu.c,
     * "Columns"): tasks of whole groups keep every row on that path. */
    if (row_len > 1 && n_rows >= ROW_GROUP_MIN_ROWS && reads_across_rows(&k->ir))
        per = (per + KIR_LANES - 1) / KIR_LANES * KIR_LANES;
    if (cpu_threads_count(t) == 1 || n_rows * row_len < task / 2 || n_rows <= per) {
        k->fn.rows(a, 0, n_rows);
        return;
    }
    rows_job j = {.fn = &k->fn, .args = a, .n_rows = n_rows, .per_task = per};
    cpu_threads_run(t, (n_rows + per - 1) / per, rows_task, &j);
}

/* ---- Leaves: tasks compute leaf results of few long rows ---- */

/* Integer values wrapped to their type, as the kernel's own arithmetic would leave them. */
static int64_t wrap_int(kir_type t, uint64_t v)
{
    switch (t) {
    case KIR_BOOL:
        return v != 0;
    case KIR_U8:
        return (int64_t)(v & 0xff);
    case KIR_I32:
        return (int64_t)(int32_t)(uint32_t)v;
    case KIR_U32:
        return (int64_t)(v & 0xffffffffu);
    default:
        return (int64_t)v;
    }
}

/* b > a in type t (NaN compares false). */
static bool greater(kir_type t, kir_scalar b, kir_scalar a)
{
    if (kir_type_is_float(t))
        return b.f > a.f;
    if (kir_type_is_signed(t))
        return b.i > a.i;
    return b.u > a.u;
}

static bool is_nan(kir_type t, kir_scalar v) { return kir_type_is_float(t) && isnan(v.f); }

/* a combined with b, a being the earlier leaves: kernel.h's combiners. */
static kir_scalar combine(kir_combiner c, kir_type t, kir_scalar a, kir_scalar b)
{
    kir_scalar r;
    switch (c) {
    case KIR_COMBINE_SUM:
    case KIR_COMBINE_PROD:
        if (t == KIR_F32)
            r.f = c == KIR_COMBINE_SUM ? (double)((float)a.f + (float)b.f) : (double)((float)a.f * (float)b.f);
        else if (t == KIR_F64)
            r.f = c == KIR_COMBINE_SUM ? a.f + b.f : a.f * b.f;
        else if (t == KIR_BOOL)
            r.i = c == KIR_COMBINE_SUM ? (a.i || b.i) : (a.i && b.i);
        else
            r.i = wrap_int(t, c == KIR_COMBINE_SUM ? a.u + b.u : a.u * b.u);
        return r;
    case KIR_COMBINE_MAX: /* numpy's maximum(a, b) = (a > b || isnan(a)) ? a : b, as kir_eval */
        return greater(t, a, b) || is_nan(t, a) ? a : b;
    case KIR_COMBINE_MIN:
        return greater(t, b, a) || is_nan(t, a) ? a : b;
    default:
        return a; /* ARG combiners carry positions: combine_arg */
    }
}

/* The earlier extreme wins ties; the first NaN is the extreme. */
static bool arg_takes_later(kir_combiner c, kir_type t, kir_scalar a, kir_scalar b)
{
    if (is_nan(t, a))
        return false;
    if (is_nan(t, b))
        return true;
    return c == KIR_COMBINE_ARGMAX ? greater(t, b, a) : greater(t, a, b);
}

/* Combines n leaf results in place by kernel.h's pairwise tree: pairs (0,1), (2,3), ..., an
 * odd last one carried up unchanged, until one is left. */
static void combine_leaves(kir_combiner c, kir_type t, kir_scalar *v, int64_t *pos, int64_t n)
{
    bool arg = c == KIR_COMBINE_ARGMAX || c == KIR_COMBINE_ARGMIN;
    while (n > 1) {
        int64_t half = n / 2;
        for (int64_t i = 0; i < half; i++) {
            if (arg) {
                bool later = arg_takes_later(c, t, v[2 * i], v[2 * i + 1]);
                v[i] = v[2 * i + later];
                pos[i] = pos[2 * i + later];
            } else {
                v[i] = combine(c, t, v[2 * i], v[2 * i + 1]);
            }
        }
        if (n % 2) {
            v[half] = v[n - 1];
            if (arg)
                pos[half] = pos[n - 1];
        }
        n = half + n % 2;
    }
}

typedef struct leaves_job {
    const cg_cpu_kernel *fn;
    const kir_args *args;
    int64_t n_leaves, tasks_per_row, per_task;
    kir_scalar *vals; /* [rows][n_leaves] */
    int64_t *pos;     /* same, ARG combiners only */
} leaves_job;

static void leaves_task(void *ctx, int64_t i)
{
    const leaves_job *j = ctx;
    int64_t row = i / j->tasks_per_row;
    int64_t first = i % j->tasks_per_row * j->per_task;
    int64_t end = first + j->per_task < j->n_leaves ? first + j->per_task : j->n_leaves;
    int64_t at = row * j->n_leaves + first;
    j->fn->leaves(j->args, row, first, end, j->vals + at, j->pos ? j->pos + at : NULL);
}

static bool use_leaves(const rt_kernel *k, int64_t n_rows, int64_t row_len)
{
    const kir_kernel *ir = &k->ir;
    if (ir->n_stages != 1 || !k->fn.leaves || !k->fn.finish)
        return false;
    for (int s = 0; s < ir->n_stores; s++)
        if (!ir->stores[s].row)
            return false;
    return n_rows <= LEAF_ROWS_MAX && row_len >= (int64_t)LEAF_MIN_LEAVES * KIR_LEAF;
}

static burnc_status_t run_leaves(cpu_threads *t, const rt_kernel *k, const kir_args *a, int64_t n_rows,
                                 int64_t row_len, int64_t task)
{
    int64_t per_task = task / KIR_LEAF > 0 ? task / KIR_LEAF : 1;
    const kir_kernel *ir = &k->ir;
    kir_combiner c = ir->stages[0].combiner;
    kir_type type = ir->insts[ir->stages[0].value].type;
    bool arg = c == KIR_COMBINE_ARGMAX || c == KIR_COMBINE_ARGMIN;
    int64_t n_leaves = (row_len + KIR_LEAF - 1) / KIR_LEAF;
    size_t n = (size_t)(n_rows * n_leaves);
    leaves_job j = {.fn = &k->fn, .args = a, .n_leaves = n_leaves, .per_task = per_task,
                    .tasks_per_row = (n_leaves + per_task - 1) / per_task,
                    .vals = malloc(n * sizeof *j.vals), .pos = arg ? malloc(n * sizeof *j.pos) : NULL};
    if (!j.vals || (arg && !j.pos)) {
        free(j.vals);
        free(j.pos);
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "cpu: %s: out of memory for %zu leaf results", ir->name, n);
    }
    bool inline_run = cpu_threads_count(t) == 1 || n_rows * row_len < task / 2;
    run_tasks(t, inline_run, n_rows * j.tasks_per_row, leaves_task, &j);
    for (int64_t row = 0; row < n_rows; row++) {
        kir_scalar *v = j.vals + row * n_leaves;
        int64_t *p = arg ? j.pos + row * n_leaves : NULL;
        combine_leaves(c, type, v, p, n_leaves);
        kir_scalar result = arg ? (kir_scalar){.i = p[0]} : v[0];
        k->fn.finish(a, row, &result);
    }
    free(j.vals);
    free(j.pos);
    return BURNC_OK;
}

burnc_status_t cpu_run_kernel(cpu_threads *t, const rt_kernel *k, const kir_args *args, const cpu_params *p)
{
    int64_t n_rows, row_len, task = p && p->task_work > 0 ? p->task_work : TASK_WORK;
    shape_of(&k->ir, args, &n_rows, &row_len);
    if (n_rows == 0)
        return BURNC_OK;
    if (use_leaves(k, n_rows, row_len))
        return run_leaves(t, k, args, n_rows, row_len, task);
    if (!k->fn.rows)
        return rt_fail(BURNC_ERR_INTERNAL, "cpu: %s: compiled without a rows function", k->ir.name);
    run_rows(t, k, args, n_rows, row_len, task);
    return BURNC_OK;
}
