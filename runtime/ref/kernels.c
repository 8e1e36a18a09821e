/* The reference kernels: one plain loop nest per op class, following the ir_record invariants
 * of ir/ir.h. Element values only pass through ir_load_* / ir_store_* and the element-wise
 * semantics through ir_unary_* / ir_binary_* / ir_rand_*, so this file adds no math of its own;
 * what it defines is the meaning of the other ops: reduction order and accumulators, matmul,
 * movement and indexing. Floats compute in double and round once on store; integers compute in
 * int64 and wrap on store. The record's shapes and views are checked against the buffers first,
 * so a runtime bug becomes BURNC_ERR_INTERNAL instead of a stray memory access. */
#include <math.h>
#include <string.h>

#include "ref.h"

/* ---- Strided access ------------------------------------------------------------------------ */

/* A view of one buffer: element i lives at host + (offset + sum(i[d] * strides[d])) * esize. */
typedef struct acc {
    char *host;
    burnc_dtype_t dt;
    int64_t esize;
    int rank;
    int64_t offset;
    int64_t shape[BURNC_MAX_RANK];
    int64_t strides[BURNC_MAX_RANK];
} acc;

static int64_t acc_numel(const acc *a)
{
    return ir_numel(a->rank, a->shape);
}

static void *acc_at(const acc *a, const int64_t *idx)
{
    int64_t e = a->offset;
    for (int d = 0; d < a->rank; d++)
        e += idx[d] * a->strides[d];
    return a->host + e * a->esize;
}

/* Element i of a dense output (offset 0, row-major). */
static void *out_elem(const acc *out, int64_t i)
{
    return out->host + i * out->esize;
}

/* Advances idx to the next position of shape in row-major order (wrapping after the last). */
static void idx_next(int rank, const int64_t *shape, int64_t *idx)
{
    for (int d = rank - 1; d >= 0; d--) {
        if (++idx[d] < shape[d])
            return;
        idx[d] = 0;
    }
}

/* Whether every element of the view lies inside a buffer of `size` bytes. The bounds are
 * computed with overflow checks because a broken view is exactly what this guards against. */
static bool acc_fits(const acc *a, size_t size)
{
    if (acc_numel(a) == 0)
        return true;
    int64_t lo = a->offset, hi = a->offset, span, end;
    for (int d = 0; d < a->rank; d++) {
        if (__builtin_mul_overflow(a->shape[d] - 1, a->strides[d], &span))
            return false;
        if (__builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi))
            return false;
    }
    if (lo < 0 || __builtin_add_overflow(hi, 1, &end) || __builtin_mul_overflow(end, a->esize, &end))
        return false;
    return (uint64_t)end <= size;
}

static burnc_status_t internal(const ir_record *rec, const char *what)
{
    return rt_fail(BURNC_ERR_INTERNAL, "ref: %s: %s", ir_op_name(rec->op), what);
}

static burnc_status_t acc_make(acc *a, const ir_record *rec, const ir_view *v, burnc_dtype_t dt,
                               const rt_buffer *buf)
{
    if (!buf || v->rank < 0 || v->rank > BURNC_MAX_RANK || !ir_dtype_valid(dt))
        return internal(rec, "bad operand");
    *a = (acc){.host = buf->host, .dt = dt, .esize = (int64_t)ir_dtype_size(dt), .rank = v->rank,
               .offset = v->offset};
    memcpy(a->shape, v->shape, sizeof a->shape);
    memcpy(a->strides, v->strides, sizeof a->strides);
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] < 0)
            return internal(rec, "negative extent");
    if (!acc_fits(a, buf->size))
        return internal(rec, "a view reaches outside its buffer");
    return BURNC_OK;
}

static burnc_status_t acc_input(acc *a, const ir_record *rec, rt_buffer *const *bufs, int k)
{
    if (k >= rec->n_in)
        return internal(rec, "missing input");
    return acc_make(a, rec, &rec->in[k].view, rec->in[k].dtype, bufs[k]);
}

static burnc_status_t acc_output(acc *a, const ir_record *rec, rt_buffer *const *bufs)
{
    if (rec->out_rank < 0 || rec->out_rank > BURNC_MAX_RANK || rec->n_in < 0)
        return internal(rec, "bad output rank");
    ir_view v;
    ir_view_dense(&v, rec->out_rank, rec->out_shape);
    return acc_make(a, rec, &v, rec->dtype, bufs[rec->n_in]);
}

/* The positions start, start + step, ... (count of them) along axis. */
static acc acc_slice(acc a, int axis, int64_t start, int64_t step, int64_t count)
{
    a.offset += start * a.strides[axis];
    a.strides[axis] *= step;
    a.shape[axis] = count;
    return a;
}

static bool same_shape(const acc *a, const acc *b)
{
    return a->rank == b->rank && memcmp(a->shape, b->shape, (size_t)a->rank * sizeof a->shape[0]) == 0;
}

/* Same shape except along `axis` (where any extent is allowed). */
static bool same_but(const acc *a, const acc *b, int axis)
{
    if (a->rank != b->rank)
        return false;
    for (int d = 0; d < a->rank; d++)
        if (d != axis && a->shape[d] != b->shape[d])
            return false;
    return true;
}

static burnc_status_t need(bool ok, const ir_record *rec, const char *what)
{
    return ok ? BURNC_OK : internal(rec, what);
}

/* The axis in i[0], checked against the rank. */
static burnc_status_t rec_axis(const ir_record *rec, int rank, int *axis)
{
    RT_TRY(need(rec->i[0] >= 0 && rec->i[0] < rank, rec, "axis out of range"));
    *axis = (int)rec->i[0];
    return BURNC_OK;
}

/* Visits a view's elements in row-major order. */
typedef struct walk {
    const acc *a;
    int64_t idx[BURNC_MAX_RANK];
} walk;

static walk walk_start(const acc *a)
{
    return (walk){.a = a};
}

static void *walk_next(walk *w)
{
    void *p = acc_at(w->a, w->idx);
    idx_next(w->a->rank, w->a->shape, w->idx);
    return p;
}

/* ---- Element helpers ------------------------------------------------------------------------ */

/* Two's complement reading of a wrapped unsigned accumulator, without the implementation-
 * defined conversion. */
static int64_t wrap_i64(uint64_t u)
{
    return u <= INT64_MAX ? (int64_t)u : (int64_t)(u - (uint64_t)INT64_MAX - 1) + INT64_MIN;
}

/* A record scalar (already converted to an integer dtype) as int64; going through the f64
 * load keeps the cast rules, so 2^63 (INT64_MAX rounded to double) saturates instead of being
 * undefined. */
static int64_t scalar_i(double v)
{
    return ir_load_i(&v, BURNC_DTYPE_F64);
}

/* Converts one element: bits unchanged within a dtype, else loaded with the source's dtype
 * (float or integer path) and stored with the destination's. */
static void copy_elem(void *dst, burnc_dtype_t ddt, const void *src, burnc_dtype_t sdt)
{
    if (ddt == sdt)
        memcpy(dst, src, ir_dtype_size(sdt));
    else if (ir_dtype_is_float(sdt))
        ir_store_f(dst, ddt, ir_load_f(src, sdt));
    else
        ir_store_i(dst, ddt, ir_load_i(src, sdt));
}

/* dst += src in dtype `compute`, rounded (or wrapped) once into dst. */
static void add_elem(void *dst, burnc_dtype_t ddt, const void *src, burnc_dtype_t sdt, burnc_dtype_t compute)
{
    if (ir_dtype_is_float(compute))
        ir_store_f(dst, ddt, ir_binary_f(IR_OP_ADD, ir_load_f(dst, ddt), ir_load_f(src, sdt)));
    else
        ir_store_i(dst, ddt, ir_binary_i(IR_OP_ADD, ir_load_i(dst, ddt), ir_load_i(src, sdt), compute));
}

/* Copies src into dst, each visited in its own row-major order (equal element counts). */
static void copy_view(const acc *dst, const acc *src)
{
    walk ws = walk_start(src), wd = walk_start(dst);
    for (int64_t i = 0, n = acc_numel(src); i < n; i++) {
        void *d = walk_next(&wd);
        copy_elem(d, dst->dt, walk_next(&ws), src->dt);
    }
}

/* dst += src element by element (same shape). */
static void add_view(const acc *dst, const acc *src, burnc_dtype_t compute)
{
    walk ws = walk_start(src), wd = walk_start(dst);
    for (int64_t i = 0, n = acc_numel(src); i < n; i++) {
        void *d = walk_next(&wd);
        add_elem(d, dst->dt, walk_next(&ws), src->dt, compute);
    }
}

static void fill(const acc *out, double v)
{
    for (int64_t i = 0, n = acc_numel(out); i < n; i++)
        ir_store_f(out_elem(out, i), out->dt, v);
}

static bool truthy(const void *p, burnc_dtype_t dt)
{
    return ir_dtype_is_float(dt) ? ir_load_f(p, dt) != 0 : ir_load_i(p, dt) != 0;
}

/* ---- SOURCE ------------------------------------------------------------------------------- */

static double source_value(const ir_record *rec, const acc *out, int64_t i)
{
    switch (rec->op) {
    case IR_OP_ARANGE:
        return rec->scalar[0] + (double)i * rec->scalar[1];
    case IR_OP_EYE:
        return i / out->shape[1] == i % out->shape[1];
    case IR_OP_RAND:
        return ir_rand_uniform(rec->rng_key, rec->rng_offset, (uint64_t)i, out->dt);
    case IR_OP_RANDN:
        return ir_rand_normal(rec->rng_key, rec->rng_offset, (uint64_t)i, out->dt);
    default:
        return rec->scalar[0];
    }
}

static burnc_status_t run_source(const ir_record *rec, rt_buffer *const *bufs)
{
    acc out;
    RT_TRY(acc_output(&out, rec, bufs));
    RT_TRY(need(rec->op != IR_OP_EYE || out.rank == 2, rec, "eye is 2-D"));
    for (int64_t i = 0, n = acc_numel(&out); i < n; i++)
        ir_store_f(out_elem(&out, i), out.dt, source_value(rec, &out, i));
    return BURNC_OK;
}

/* ---- Element-wise ------------------------------------------------------------------------- */

/* Input k of an element-wise record: already broadcast to the output's shape. */
static burnc_status_t ew_input(acc *a, const ir_record *rec, rt_buffer *const *bufs, int k, const acc *out)
{
    RT_TRY(acc_input(a, rec, bufs, k));
    return need(same_shape(a, out), rec, "input not broadcast to the output's shape");
}

static void unary_elem(const ir_record *rec, void *dst, burnc_dtype_t ddt, const void *src, burnc_dtype_t sdt)
{
    if (rec->op == IR_OP_CAST)
        copy_elem(dst, ddt, src, sdt);
    else if (ir_dtype_is_float(rec->compute))
        ir_store_f(dst, ddt, ir_unary_f(rec->op, ir_load_f(src, sdt), rec->scalar));
    else
        ir_store_i(dst, ddt, ir_unary_i(rec->op, ir_load_i(src, sdt), rec->compute, rec->scalar));
}

static burnc_status_t run_unary(const ir_record *rec, rt_buffer *const *bufs)
{
    acc out, x;
    RT_TRY(acc_output(&out, rec, bufs));
    RT_TRY(ew_input(&x, rec, bufs, 0, &out));
    walk wx = walk_start(&x);
    for (int64_t i = 0, n = acc_numel(&out); i < n; i++)
        unary_elem(rec, out_elem(&out, i), out.dt, walk_next(&wx), x.dt);
    return BURNC_OK;
}

/* One binary element; b is NULL when the right operand is the record's scalar. */
static void binary_elem(const ir_record *rec, void *dst, burnc_dtype_t ddt, const void *a, const void *b,
                        burnc_dtype_t dt)
{
    if (ir_dtype_is_float(rec->compute)) {
        double y = b ? ir_load_f(b, dt) : rec->scalar[0];
        ir_store_f(dst, ddt, ir_binary_f(rec->op, ir_load_f(a, dt), y));
    } else {
        int64_t y = b ? ir_load_i(b, dt) : scalar_i(rec->scalar[0]);
        ir_store_i(dst, ddt, ir_binary_i(rec->op, ir_load_i(a, dt), y, rec->compute));
    }
}

static burnc_status_t run_binary(const ir_record *rec, rt_buffer *const *bufs)
{
    bool rhs_scalar = rec->flags & IR_REC_SCALAR_RHS;
    acc out, a, b = {0};
    RT_TRY(acc_output(&out, rec, bufs));
    RT_TRY(ew_input(&a, rec, bufs, 0, &out));
    if (!rhs_scalar)
        RT_TRY(ew_input(&b, rec, bufs, 1, &out));
    RT_TRY(need(rhs_scalar || a.dt == b.dt, rec, "operands of two dtypes"));
    walk wa = walk_start(&a), wb = walk_start(&b);
    for (int64_t i = 0, n = acc_numel(&out); i < n; i++) {
        const void *pa = walk_next(&wa);
        const void *pb = rhs_scalar ? NULL : walk_next(&wb);
        binary_elem(rec, out_elem(&out, i), out.dt, pa, pb, a.dt);
    }
    return BURNC_OK;
}

/* WHERE: selection moves the chosen element unchanged (a and b are already in `compute`). */
static burnc_status_t run_ternary(const ir_record *rec, rt_buffer *const *bufs)
{
    acc out, c, a, b;
    RT_TRY(acc_output(&out, rec, bufs));
    RT_TRY(ew_input(&c, rec, bufs, 0, &out));
    RT_TRY(ew_input(&a, rec, bufs, 1, &out));
    RT_TRY(ew_input(&b, rec, bufs, 2, &out));
    walk wc = walk_start(&c), wa = walk_start(&a), wb = walk_start(&b);
    for (int64_t i = 0, n = acc_numel(&out); i < n; i++) {
        bool take_a = truthy(walk_next(&wc), c.dt);
        const void *pa = walk_next(&wa), *pb = walk_next(&wb);
        copy_elem(out_elem(&out, i), out.dt, take_a ? pa : pb, take_a ? a.dt : b.dt);
    }
    return BURNC_OK;
}

/* ---- REDUCE ------------------------------------------------------------------------------- */
/* Each output element folds the input elements of its slice (the reduced axes) in row-major
 * order, sequentially: the oracle has no tree, only the exact double accumulator. */

/* The input elements that reduce into output element `o`. */
static acc red_slice(const acc *in, uint32_t axes, const int64_t *o)
{
    acc s = *in;
    for (int d = 0; d < in->rank; d++) {
        if (axes >> d & 1)
            continue;
        s.offset += o[d] * in->strides[d];
        s.shape[d] = 1;
    }
    return s;
}

static double red_fold_f(ir_op op, const acc *s, int64_t n)
{
    walk w = walk_start(s);
    if (op == IR_OP_SUM || op == IR_OP_PROD) {
        double v = op == IR_OP_PROD;
        for (int64_t j = 0; j < n; j++) {
            double x = ir_load_f(walk_next(&w), s->dt);
            v = op == IR_OP_SUM ? v + x : v * x;
        }
        return v;
    }
    ir_op pick = op == IR_OP_MAX ? IR_OP_MAXIMUM : IR_OP_MINIMUM;
    double v = ir_load_f(walk_next(&w), s->dt);
    for (int64_t j = 1; j < n; j++)
        v = ir_binary_f(pick, v, ir_load_f(walk_next(&w), s->dt));
    return v;
}

/* Integer sums and products wrap: unsigned arithmetic has no overflow to worry about. */
static int64_t red_fold_i(ir_op op, const acc *s, int64_t n, burnc_dtype_t compute)
{
    walk w = walk_start(s);
    if (op == IR_OP_SUM || op == IR_OP_PROD) {
        uint64_t v = op == IR_OP_PROD;
        for (int64_t j = 0; j < n; j++) {
            uint64_t x = (uint64_t)ir_load_i(walk_next(&w), s->dt);
            v = op == IR_OP_SUM ? v + x : v * x;
        }
        return wrap_i64(v);
    }
    ir_op pick = op == IR_OP_MAX ? IR_OP_MAXIMUM : IR_OP_MINIMUM;
    int64_t v = ir_load_i(walk_next(&w), s->dt);
    for (int64_t j = 1; j < n; j++)
        v = ir_binary_i(pick, v, ir_load_i(walk_next(&w), s->dt), compute);
    return v;
}

/* Two passes (mean, then squared deviations) in double. */
static double red_var(const acc *s, int64_t n, double correction)
{
    if (n == 0)
        return NAN;
    double mean = red_fold_f(IR_OP_SUM, s, n) / (double)n, ss = 0;
    walk w = walk_start(s);
    for (int64_t j = 0; j < n; j++) {
        double d = ir_load_f(walk_next(&w), s->dt) - mean;
        ss += d * d;
    }
    double denom = (double)n - correction;
    return denom > 0 ? ss / denom : NAN;
}

/* Position of the first extreme in the slice's row-major order; the first NaN is the
 * extreme of all. */
static int64_t red_arg_f(bool max, const acc *s, int64_t n)
{
    walk w = walk_start(s);
    int64_t best = 0;
    double bv = ir_load_f(walk_next(&w), s->dt);
    for (int64_t j = 1; j < n && !isnan(bv); j++) {
        double x = ir_load_f(walk_next(&w), s->dt);
        if (isnan(x) || (max ? x > bv : x < bv)) {
            best = j;
            bv = x;
        }
    }
    return best;
}

static int64_t red_arg_i(bool max, const acc *s, int64_t n)
{
    walk w = walk_start(s);
    int64_t best = 0, bv = ir_load_i(walk_next(&w), s->dt);
    for (int64_t j = 1; j < n; j++) {
        int64_t x = ir_load_i(walk_next(&w), s->dt);
        if (max ? x > bv : x < bv) {
            best = j;
            bv = x;
        }
    }
    return best;
}

static void reduce_one(const ir_record *rec, const acc *s, int64_t n, void *dst, burnc_dtype_t ddt)
{
    static const double no_scalar[3];
    bool fl = ir_dtype_is_float(rec->compute);
    bool max = rec->op == IR_OP_ARGMAX;
    switch (rec->op) {
    case IR_OP_MEAN:
        ir_store_f(dst, ddt, n ? red_fold_f(IR_OP_SUM, s, n) / (double)n : NAN);
        break;
    case IR_OP_VAR:
        ir_store_f(dst, ddt, red_var(s, n, rec->scalar[0]));
        break;
    case IR_OP_STD:
        ir_store_f(dst, ddt, ir_unary_f(IR_OP_SQRT, red_var(s, n, rec->scalar[0]), no_scalar));
        break;
    case IR_OP_ARGMAX:
    case IR_OP_ARGMIN:
        ir_store_i(dst, ddt, fl ? red_arg_f(max, s, n) : red_arg_i(max, s, n));
        break;
    default: /* SUM PROD MAX MIN */
        if (fl)
            ir_store_f(dst, ddt, red_fold_f(rec->op, s, n));
        else
            ir_store_i(dst, ddt, red_fold_i(rec->op, s, n, rec->compute));
        break;
    }
}

static bool needs_an_element(ir_op op)
{
    return op == IR_OP_MAX || op == IR_OP_MIN || op == IR_OP_ARGMAX || op == IR_OP_ARGMIN;
}

static burnc_status_t run_reduce(const ir_record *rec, rt_buffer *const *bufs)
{
    acc out, in;
    RT_TRY(acc_output(&out, rec, bufs));
    RT_TRY(acc_input(&in, rec, bufs, 0));
    RT_TRY(need(in.rank == out.rank, rec, "input and output ranks differ"));
    int64_t n = 1;
    for (int d = 0; d < in.rank; d++) {
        bool reduced = rec->axes >> d & 1;
        RT_TRY(need(out.shape[d] == (reduced ? 1 : in.shape[d]), rec, "output shape"));
        if (reduced)
            n *= in.shape[d];
    }
    int64_t n_out = acc_numel(&out), o[BURNC_MAX_RANK] = {0};
    if (n == 0 && n_out > 0 && needs_an_element(rec->op))
        return rt_fail(BURNC_ERR_SHAPE, "burnc_%s: empty reduction", ir_op_name(rec->op));
    for (int64_t i = 0; i < n_out; i++) {
        acc s = red_slice(&in, rec->axes, o);
        reduce_one(rec, &s, n, out_elem(&out, i), out.dt);
        idx_next(out.rank, out.shape, o);
    }
    return BURNC_OK;
}

/* ---- MATMUL ------------------------------------------------------------------------------- */

/* Output position o = [..., m, n]: the sum over k of a[..., m, k] * b[..., k, n] in k order, in
 * one double (or wrapping int64) accumulator rounded once to the output dtype. */
static void matmul_one(const acc *a, const acc *b, const int64_t *o, void *dst, burnc_dtype_t ddt,
                       bool fl)
{
    int r = a->rank;
    int64_t ia[BURNC_MAX_RANK], ib[BURNC_MAX_RANK], k_len = a->shape[r - 1];
    memcpy(ia, o, (size_t)r * sizeof *o);
    memcpy(ib, o, (size_t)r * sizeof *o);
    double sf = 0;
    uint64_t si = 0;
    for (int64_t k = 0; k < k_len; k++) {
        ia[r - 1] = k;
        ib[r - 2] = k;
        const void *pa = acc_at(a, ia), *pb = acc_at(b, ib);
        if (fl)
            sf += ir_load_f(pa, a->dt) * ir_load_f(pb, b->dt);
        else
            si += (uint64_t)ir_load_i(pa, a->dt) * (uint64_t)ir_load_i(pb, b->dt);
    }
    if (fl)
        ir_store_f(dst, ddt, sf);
    else
        ir_store_i(dst, ddt, wrap_i64(si));
}

static burnc_status_t matmul_shapes(const ir_record *rec, const acc *a, const acc *b, const acc *out)
{
    int r = out->rank;
    RT_TRY(need(r >= 2 && a->rank == r && b->rank == r, rec, "operand ranks"));
    bool ok = a->shape[r - 2] == out->shape[r - 2] && b->shape[r - 1] == out->shape[r - 1] &&
              a->shape[r - 1] == b->shape[r - 2];
    for (int d = 0; d < r - 2; d++)
        ok = ok && a->shape[d] == out->shape[d] && b->shape[d] == out->shape[d];
    return need(ok, rec, "operand shapes");
}

static burnc_status_t run_matmul(const ir_record *rec, rt_buffer *const *bufs)
{
    acc out, a, b;
    RT_TRY(acc_output(&out, rec, bufs));
    RT_TRY(acc_input(&a, rec, bufs, 0));
    RT_TRY(acc_input(&b, rec, bufs, 1));
    RT_TRY(matmul_shapes(rec, &a, &b, &out));
    bool fl = ir_dtype_is_float(rec->compute);
    int64_t o[BURNC_MAX_RANK] = {0};
    for (int64_t i = 0, n = acc_numel(&out); i < n; i++) {
        matmul_one(&a, &b, o, out_elem(&out, i), out.dt, fl);
        idx_next(out.rank, out.shape, o);
    }
    return BURNC_OK;
}

/* ---- MOVE --------------------------------------------------------------------------------- */

/* A dense copy of a view; a view of another shape with the same count is copied in its own
 * row-major order (a reshape that strides could not express). */
static burnc_status_t move_copy(const ir_record *rec, rt_buffer *const *bufs, const acc *out)
{
    acc x;
    RT_TRY(acc_input(&x, rec, bufs, 0));
    RT_TRY(need(acc_numel(&x) == acc_numel(out), rec, "element counts differ"));
    copy_view(out, &x);
    return BURNC_OK;
}

static burnc_status_t move_cat(const ir_record *rec, rt_buffer *const *bufs, const acc *out)
{
    int axis;
    RT_TRY(rec_axis(rec, out->rank, &axis));
    int64_t pos = 0;
    for (int k = 0; k < rec->n_in; k++) {
        acc x;
        RT_TRY(acc_input(&x, rec, bufs, k));
        RT_TRY(need(same_but(&x, out, axis) && x.shape[axis] <= out->shape[axis] - pos, rec, "input shapes"));
        acc dst = acc_slice(*out, axis, pos, 1, x.shape[axis]);
        copy_view(&dst, &x);
        pos += x.shape[axis];
    }
    return need(pos == out->shape[axis], rec, "inputs do not fill the output");
}

/* Fills with the value, then copies the part of the input that survives the (possibly
 * negative) pads into its place. */
static burnc_status_t move_pad(const ir_record *rec, rt_buffer *const *bufs, const acc *out)
{
    acc x;
    RT_TRY(acc_input(&x, rec, bufs, 0));
    RT_TRY(need(x.rank == out->rank && rec->pads, rec, "pads"));
    acc src = x, dst = *out;
    bool empty = false;
    for (int d = 0; d < x.rank; d++) {
        int64_t before = rec->pads[2 * d], after = rec->pads[2 * d + 1];
        RT_TRY(need(x.shape[d] + before + after == out->shape[d], rec, "pads do not give the output shape"));
        int64_t s0 = before < 0 ? -before : 0, d0 = before > 0 ? before : 0;
        int64_t len = x.shape[d] - s0 < out->shape[d] - d0 ? x.shape[d] - s0 : out->shape[d] - d0;
        empty = empty || len <= 0;
        if (!empty) {
            src = acc_slice(src, d, s0, 1, len);
            dst = acc_slice(dst, d, d0, 1, len);
        }
    }
    fill(out, rec->scalar[0]);
    if (!empty)
        copy_view(&dst, &src);
    return BURNC_OK;
}

static burnc_status_t run_move(const ir_record *rec, rt_buffer *const *bufs)
{
    acc out;
    RT_TRY(acc_output(&out, rec, bufs));
    switch (rec->op) {
    case IR_OP_COPY:
        return move_copy(rec, bufs, &out);
    case IR_OP_CAT:
        return move_cat(rec, bufs, &out);
    case IR_OP_PAD:
        return move_pad(rec, bufs, &out);
    default:
        return internal(rec, "not a move op");
    }
}

/* ---- INDEX -------------------------------------------------------------------------------- */

/* idx's element at p as a position along the record's axis of extent `size`; negative values
 * count from the end once. */
static burnc_status_t read_index(const ir_record *rec, const acc *idx, const int64_t *p, int64_t size,
                                 int64_t *out)
{
    int64_t v = ir_load_i(acc_at(idx, p), idx->dt), t = v < 0 ? v + size : v;
    if (t < 0 || t >= size)
        return rt_fail(BURNC_ERR_INDEX, "burnc_%s: index %lld out of range for axis %d of size %lld",
                       ir_op_name(rec->op), (long long)v, (int)rec->i[0], (long long)size);
    *out = t;
    return BURNC_OK;
}

/* x, the index tensor and the axis, common to every index op. */
static burnc_status_t index_inputs(const ir_record *rec, rt_buffer *const *bufs, acc *x, acc *idx, int *axis)
{
    RT_TRY(acc_input(x, rec, bufs, 0));
    RT_TRY(acc_input(idx, rec, bufs, 1));
    RT_TRY(need(!ir_dtype_is_float(idx->dt), rec, "index tensor of a float dtype"));
    return rec_axis(rec, x->rank, axis);
}

/* Slices are taken one index at a time, so every index is checked even when the slices are
 * empty. */
static burnc_status_t index_select(const ir_record *rec, rt_buffer *const *bufs, const acc *out)
{
    acc x, idx;
    int axis;
    RT_TRY(index_inputs(rec, bufs, &x, &idx, &axis));
    RT_TRY(need(idx.rank == 1 && same_but(&x, out, axis) && out->shape[axis] == idx.shape[0], rec, "shapes"));
    for (int64_t j = 0; j < idx.shape[0]; j++) {
        int64_t t;
        RT_TRY(read_index(rec, &idx, &j, x.shape[axis], &t));
        acc dst = acc_slice(*out, axis, j, 1, 1), src = acc_slice(x, axis, t, 1, 1);
        copy_view(&dst, &src);
    }
    return BURNC_OK;
}

/* idx has limit's rank and no larger extents except along axis (-1: along none). */
static bool fits_off_axis(const acc *idx, const acc *limit, int axis)
{
    if (idx->rank != limit->rank)
        return false;
    for (int d = 0; d < idx->rank; d++)
        if (d != axis && idx->shape[d] > limit->shape[d])
            return false;
    return true;
}

static burnc_status_t gather(const ir_record *rec, rt_buffer *const *bufs, const acc *out)
{
    acc x, idx;
    int axis;
    RT_TRY(index_inputs(rec, bufs, &x, &idx, &axis));
    RT_TRY(need(same_shape(&idx, out) && fits_off_axis(&idx, &x, axis), rec, "shapes"));
    int64_t p[BURNC_MAX_RANK] = {0};
    for (int64_t i = 0, n = acc_numel(out); i < n; i++) {
        int64_t q[BURNC_MAX_RANK];
        memcpy(q, p, sizeof q);
        RT_TRY(read_index(rec, &idx, p, x.shape[axis], &q[axis]));
        copy_elem(out_elem(out, i), out->dt, acc_at(&x, q), x.dt);
        idx_next(idx.rank, idx.shape, p);
    }
    return BURNC_OK;
}

/* Additions happen one at a time in idx's row-major order, each rounded, so duplicates
 * accumulate in a defined order. */
static burnc_status_t scatter_add(const ir_record *rec, rt_buffer *const *bufs, const acc *out)
{
    acc x, idx, src;
    int axis;
    RT_TRY(index_inputs(rec, bufs, &x, &idx, &axis));
    RT_TRY(acc_input(&src, rec, bufs, 2));
    RT_TRY(need(same_shape(&x, out) && fits_off_axis(&idx, &x, axis) && fits_off_axis(&idx, &src, -1), rec,
                "shapes"));
    copy_view(out, &x);
    int64_t p[BURNC_MAX_RANK] = {0};
    for (int64_t i = 0, n = acc_numel(&idx); i < n; i++) {
        int64_t q[BURNC_MAX_RANK];
        memcpy(q, p, sizeof q);
        RT_TRY(read_index(rec, &idx, p, x.shape[axis], &q[axis]));
        add_elem(acc_at(out, q), out->dt, acc_at(&src, p), src.dt, rec->compute);
        idx_next(idx.rank, idx.shape, p);
    }
    return BURNC_OK;
}

static burnc_status_t index_add(const ir_record *rec, rt_buffer *const *bufs, const acc *out)
{
    acc x, idx, src;
    int axis;
    RT_TRY(index_inputs(rec, bufs, &x, &idx, &axis));
    RT_TRY(acc_input(&src, rec, bufs, 2));
    RT_TRY(need(idx.rank == 1 && same_shape(&x, out) && same_but(&src, &x, axis) &&
                    src.shape[axis] == idx.shape[0],
                rec, "shapes"));
    copy_view(out, &x);
    for (int64_t j = 0; j < idx.shape[0]; j++) {
        int64_t t;
        RT_TRY(read_index(rec, &idx, &j, x.shape[axis], &t));
        acc dst = acc_slice(*out, axis, t, 1, 1), s = acc_slice(src, axis, j, 1, 1);
        add_view(&dst, &s, rec->compute);
    }
    return BURNC_OK;
}

static burnc_status_t slice_assign(const ir_record *rec, rt_buffer *const *bufs, const acc *out)
{
    acc x, value;
    int axis;
    RT_TRY(acc_input(&x, rec, bufs, 0));
    RT_TRY(acc_input(&value, rec, bufs, 1));
    RT_TRY(rec_axis(rec, x.rank, &axis));
    int64_t start = rec->i[1], step = rec->i[2], count = rec->i[3], size = x.shape[axis];
    int64_t last;
    bool in_range = count == 0 || (start >= 0 && start < size && !__builtin_mul_overflow(count - 1, step, &last) &&
                                   !__builtin_add_overflow(start, last, &last) && last >= 0 && last < size);
    RT_TRY(need(count >= 0 && in_range && same_shape(&x, out), rec, "slice"));
    RT_TRY(need(same_but(&value, &x, axis) && value.shape[axis] == count, rec, "value shape"));
    copy_view(out, &x);
    acc dst = acc_slice(*out, axis, start, step, count);
    copy_view(&dst, &value);
    return BURNC_OK;
}

static burnc_status_t run_index(const ir_record *rec, rt_buffer *const *bufs)
{
    acc out;
    RT_TRY(acc_output(&out, rec, bufs));
    switch (rec->op) {
    case IR_OP_INDEX_SELECT:
        return index_select(rec, bufs, &out);
    case IR_OP_GATHER:
        return gather(rec, bufs, &out);
    case IR_OP_SCATTER_ADD:
        return scatter_add(rec, bufs, &out);
    case IR_OP_INDEX_ADD:
        return index_add(rec, bufs, &out);
    case IR_OP_SLICE_ASSIGN:
        return slice_assign(rec, bufs, &out);
    default:
        return internal(rec, "not an index op");
    }
}

/* ---- Dispatch ----------------------------------------------------------------------------- */

ref_kernel_fn ref_kernel_for(ir_op op)
{
    if ((unsigned)op >= IR_OP_COUNT)
        return NULL;
    switch (ir_op_class(op)) {
    case IR_CLASS_SOURCE:
        return run_source;
    case IR_CLASS_UNARY:
        return run_unary;
    case IR_CLASS_BINARY:
        return run_binary;
    case IR_CLASS_TERNARY:
        return run_ternary;
    case IR_CLASS_REDUCE:
        return run_reduce;
    case IR_CLASS_MATMUL:
        return run_matmul;
    case IR_CLASS_MOVE:
        return run_move;
    case IR_CLASS_INDEX:
        return run_index;
    }
    return NULL;
}
