/* Every op against golden vectors made by numpy (tests/data/gen_golden.py writes
 * tests/data/ops_*.bin), plus the semantics numpy cannot give.
 *
 * Each golden case names an op, its parameters ("key=value;..."), its inputs (dtype, shape,
 * dense data, and an optional chain of views applied here before the op: permute, transpose,
 * slice, flip, expand, unsqueeze, squeeze) and the expected output. One Criterion test per op
 * runs every case of that op; a mismatch prints the case, the element, got and expected.
 *
 * The device under test is BURNC_TEST_DEVICE (default "ref"); a device that is not available is
 * skipped with its reason. On a device other than ref every result is also compared with the
 * same op run on ref.
 *
 * Tolerance classes (chosen per case by the generator, see gen_golden.py):
 *   exact    bitwise (any NaN equals any NaN; -0.0 differs from +0.0): arithmetic, comparisons,
 *            logical ops, casts, movement, index ops, integer ops, sqrt, reciprocal, rounding,
 *            max/min/argmax, creation, rand. The reference computes one IEEE operation in
 *            double and rounds once, as the generator does, so the bits must agree.
 *   numeric  |got - want| <= ulps * ulp(want) + atol + rtol * |want| (NaN matches NaN, infinities
 *            must be equal), where a device other than ref adds ulps2/rtol2/atol2. Used for:
 *            - transcendental functions, pow, atan2: 1 ulp of f32/f16/bf16 (the reference calls
 *              glibc in double and rounds once, as the generator does through Python's math, so
 *              only rare rounding boundaries differ); f64: 2 ulps for one libm call, 4 for
 *              sigmoid/silu/gelu/randn (several roundings). Other devices: +3 ulps; there sin,
 *              cos and tan are compared only for |x| < 2^17 (f32, f16, bf16) or 2^36 (f64), the
 *              accurate range of include/burnc.h; beyond it they must keep the header's promise
 *              (sin and cos in [-1, 1], tan not NaN, NaN for infinite x).
 *            - reductions and matmul: the generator computes the exact result (Fractions) and
 *              rounds once; the reference accumulates in double and rounds once: 1 ulp plus
 *              k * 2^-52 of sum |terms| (var/std: 8 k 2^-52 relative, and 4 k 2^-52 max|x| for
 *              std, its square for var, where a constant row's exact answer is 0). Other devices
 *              may accumulate in f32: + k * 2^-23 of the same scales.
 *            - softmax / log_softmax are reproduced op by op, each step rounded to the dtype: 3
 *              (softmax) or 2 ulps (log_softmax, plus 2 eps * |log sum| absolute), plus the
 *              double sum's k * 2^-53 relative error (visible in f64 results).
 *            - layer_norm (its decomposition is the library's): 6 eps relative plus
 *              6 eps * (1 + max|x|/std) absolute, scaled by |weight| and |bias| for the affine form.
 *
 * BURNC_TEST_VERBOSE=1 prints, per op, the cases run and the largest error seen (in ulps and as
 * a fraction of its tolerance). `gen_golden.py --seed N --out DIR` makes other random inputs;
 * point BURNC_TEST_DATA at DIR to stress the tolerances.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burnc.h"
#include "common.h"

enum { MAX_IN = 8, MAX_PRINT_ELEMS = 6, MAX_PRINT_CASES = 25 };

/* ---- golden files ------------------------------------------------------------------------ */

typedef struct gt_tensor {
    burnc_dtype_t dtype;
    int rank;
    int64_t shape[BURNC_MAX_RANK];
    int64_t numel;
    const void *data;
    size_t nbytes;
    char *view; /* "" or steps separated by '|' */
} gt_tensor;

typedef struct gt_tol {
    int kind; /* 0 exact, 1 numeric */
    double ulps, rtol, atol;    /* against the golden value and against ref */
    double ulps2, rtol2, atol2; /* added on devices other than ref */
} gt_tol;

typedef struct gt_case {
    int index;
    char *op, *name, *params;
    int nin;
    gt_tensor in[MAX_IN];
    gt_tensor out;
    gt_tol tol;
} gt_case;

typedef struct gt_file {
    char path[512];
    unsigned char *buf;
    size_t size;
    int n;
    gt_case *cases;
} gt_file;

typedef struct reader {
    const gt_file *f;
    size_t pos;
    bool bad;
} reader;

static const void *rd_bytes(reader *r, size_t n)
{
    if (r->bad || n > r->f->size - r->pos) {
        r->bad = true;
        return NULL;
    }
    const void *p = r->f->buf + r->pos;
    r->pos += n;
    return p;
}

static uint64_t rd_uint(reader *r, size_t n)
{
    const unsigned char *p = rd_bytes(r, n);
    uint64_t v = 0;
    for (size_t i = 0; p && i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static double rd_f64(reader *r)
{
    uint64_t u = rd_uint(r, 8);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static char *rd_str(reader *r)
{
    size_t n = (size_t)rd_uint(r, 2);
    const char *p = rd_bytes(r, n);
    char *s = malloc(n + 1);
    cr_assert_not_null(s);
    if (p)
        memcpy(s, p, n);
    s[p ? n : 0] = '\0';
    return s;
}

static void rd_tensor(reader *r, gt_tensor *t)
{
    t->dtype = (burnc_dtype_t)rd_uint(r, 1);
    t->rank = (int)rd_uint(r, 1);
    if (t->rank > BURNC_MAX_RANK) {
        r->bad = true;
        return;
    }
    t->numel = 1;
    for (int d = 0; d < t->rank; d++) {
        t->shape[d] = (int64_t)rd_uint(r, 8);
        t->numel *= t->shape[d];
    }
    t->nbytes = (size_t)rd_uint(r, 4);
    while (!r->bad && r->pos % 8)
        r->pos++;
    t->data = rd_bytes(r, t->nbytes);
    if (!r->bad && t->nbytes != (size_t)t->numel * burnc_dtype_size(t->dtype))
        r->bad = true;
}

static void gt_free(gt_file *f)
{
    for (int i = 0; i < f->n; i++) {
        gt_case *c = &f->cases[i];
        free(c->op);
        free(c->name);
        free(c->params);
        for (int k = 0; k < c->nin; k++)
            free(c->in[k].view);
    }
    free(f->cases);
    free(f->buf);
    memset(f, 0, sizeof *f);
}

/* Loads tests/data/<file> (the directory comes from BURNC_TEST_DATA). */
static void gt_load(const char *file, gt_file *f)
{
    memset(f, 0, sizeof *f);
    const char *dir = getenv("BURNC_TEST_DATA");
    snprintf(f->path, sizeof f->path, "%s/%s", dir && *dir ? dir : "tests/data", file);
    FILE *fp = fopen(f->path, "rb");
    cr_assert_not_null(fp, "cannot open golden file %s (set BURNC_TEST_DATA to tests/data)", f->path);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->size = size > 0 ? (size_t)size : 0;
    f->buf = malloc(f->size + 1);
    cr_assert_not_null(f->buf);
    size_t got = fread(f->buf, 1, f->size, fp);
    fclose(fp);
    cr_assert_eq(got, f->size, "short read of %s", f->path);

    reader r = {.f = f};
    const char *magic = rd_bytes(&r, 4);
    cr_assert(magic && memcmp(magic, "BGLD", 4) == 0, "%s is not a golden file", f->path);
    cr_assert_eq(rd_uint(&r, 4), 1, "%s: unknown version", f->path);
    int n = (int)rd_uint(&r, 4);
    f->cases = calloc((size_t)n + 1, sizeof *f->cases);
    cr_assert_not_null(f->cases);
    for (int i = 0; i < n && !r.bad; i++) {
        gt_case *c = &f->cases[i];
        f->n = i + 1;
        c->index = i;
        c->op = rd_str(&r);
        c->name = rd_str(&r);
        c->params = rd_str(&r);
        c->nin = (int)rd_uint(&r, 1);
        if (c->nin > MAX_IN) {
            c->nin = 0;
            r.bad = true;
            break;
        }
        for (int k = 0; k < c->nin; k++) {
            rd_tensor(&r, &c->in[k]);
            c->in[k].view = rd_str(&r);
        }
        rd_tensor(&r, &c->out);
        c->tol.kind = (int)rd_uint(&r, 1);
        if (c->tol.kind) {
            c->tol.ulps = rd_f64(&r);
            c->tol.rtol = rd_f64(&r);
            c->tol.atol = rd_f64(&r);
            c->tol.ulps2 = rd_f64(&r);
            c->tol.rtol2 = rd_f64(&r);
            c->tol.atol2 = rd_f64(&r);
        }
    }
    bool bad = r.bad || r.pos != f->size;
    if (bad)
        gt_free(f);
    cr_assert(!bad, "%s is damaged (regenerate it with tests/data/gen_golden.py)", file);
}

/* ---- case parameters --------------------------------------------------------------------- */

/* The value of `key` in "k=v;k2=v2" (NULL if absent); its length in *len. */
static const char *param(const gt_case *c, const char *key, size_t *len)
{
    size_t kl = strlen(key);
    for (const char *p = c->params; p && *p;) {
        const char *end = strchr(p, ';');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > kl && strncmp(p, key, kl) == 0 && p[kl] == '=') {
            *len = n - kl - 1;
            return p + kl + 1;
        }
        p = end ? end + 1 : p + n;
    }
    return NULL;
}

static bool p_ok;          /* cleared when a parameter is missing */
static char p_missing[64]; /* which one */

static const char *p_need(const gt_case *c, const char *key, size_t *len)
{
    const char *v = param(c, key, len);
    if (!v) {
        p_ok = false;
        snprintf(p_missing, sizeof p_missing, "%s", key);
    }
    return v;
}

static int64_t p_i64(const gt_case *c, const char *key)
{
    size_t n;
    const char *v = p_need(c, key, &n);
    return v ? strtoll(v, NULL, 10) : 0;
}

static uint64_t p_u64(const gt_case *c, const char *key)
{
    size_t n;
    const char *v = p_need(c, key, &n);
    return v ? strtoull(v, NULL, 10) : 0;
}

static double p_f64(const gt_case *c, const char *key)
{
    size_t n;
    const char *v = p_need(c, key, &n);
    return v ? strtod(v, NULL) : 0.0; /* hex floats, inf, nan */
}

/* A comma separated list; returns its length. */
static int p_list(const gt_case *c, const char *key, int64_t *out, int cap)
{
    size_t n;
    const char *v = p_need(c, key, &n);
    int count = 0;
    if (!v || n == 0)
        return 0;
    const char *end = v + n;
    while (v < end && count < cap) {
        char *next;
        out[count++] = strtoll(v, &next, 10);
        v = next;
        if (v < end && *v == ',')
            v++;
        else
            break;
    }
    return count;
}

static int p_ints(const gt_case *c, const char *key, int *out, int cap)
{
    int64_t tmp[2 * BURNC_MAX_RANK];
    int n = p_list(c, key, tmp, cap < 2 * BURNC_MAX_RANK ? cap : 2 * BURNC_MAX_RANK);
    for (int i = 0; i < n; i++)
        out[i] = (int)tmp[i];
    return n;
}

/* ---- building inputs ------------------------------------------------------------------- */

/* Applies one view step; returns the new tensor (x is released) or NULL. */
static burnc_tensor_t *apply_step(burnc_tensor_t *x, const char *step)
{
    char kind[32];
    size_t kl = strcspn(step, ":|");
    if (kl >= sizeof kind)
        return NULL;
    memcpy(kind, step, kl);
    kind[kl] = '\0';
    int64_t a[BURNC_MAX_RANK + 4];
    int n = 0;
    const char *p = step + kl;
    if (*p == ':') {
        p++;
        while (*p && *p != '|' && n < (int)(sizeof a / sizeof a[0])) {
            char *next;
            a[n++] = strtoll(p, &next, 10);
            p = next;
            if (*p == ',')
                p++;
        }
    }
    int ia[BURNC_MAX_RANK + 4];
    for (int i = 0; i < n; i++)
        ia[i] = (int)a[i];
    burnc_tensor_t *y = NULL;
    if (strcmp(kind, "permute") == 0)
        y = burnc_permute(x, n, ia);
    else if (strcmp(kind, "transpose") == 0 && n == 2)
        y = burnc_transpose(x, ia[0], ia[1]);
    else if (strcmp(kind, "slice") == 0 && n == 4)
        y = burnc_slice(x, ia[0], a[1], a[2], a[3]);
    else if (strcmp(kind, "flip") == 0)
        y = burnc_flip(x, n, ia);
    else if (strcmp(kind, "expand") == 0)
        y = burnc_expand(x, n, a);
    else if (strcmp(kind, "unsqueeze") == 0 && n == 1)
        y = burnc_unsqueeze(x, ia[0]);
    else if (strcmp(kind, "squeeze") == 0)
        y = burnc_squeeze(x, n, ia);
    else
        fprintf(stderr, "test_ops: unknown view step '%s'\n", step);
    burnc_tensor_release(x);
    return y;
}

/* The input tensor on dev: the stored data, then its view chain. NULL on failure (the last
 * error says why). */
static burnc_tensor_t *make_input(burnc_device_t *dev, const gt_tensor *t)
{
    burnc_tensor_t *x = burnc_tensor_from_data(dev, t->dtype, t->rank, t->shape, t->data);
    for (const char *s = t->view; x && s && *s;) {
        x = apply_step(x, s);
        const char *bar = strchr(s, '|');
        s = bar ? bar + 1 : NULL;
    }
    return x;
}

/* ---- ops ------------------------------------------------------------------------------- */

typedef burnc_tensor_t *(*op_fn)(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in);

typedef burnc_tensor_t *(*unary_fn)(burnc_tensor_t *);
typedef burnc_tensor_t *(*binary_fn)(burnc_tensor_t *, burnc_tensor_t *);
typedef burnc_tensor_t *(*scalar_fn)(burnc_tensor_t *, double);

static const struct {
    const char *name;
    unary_fn fn;
} unary_table[] = {
#define UNARY_ENTRY(n) {#n, burnc_##n},
    BURNC_UNARY_OPS(UNARY_ENTRY)
#undef UNARY_ENTRY
};

static const struct {
    const char *name, *sname;
    binary_fn fn;
    scalar_fn sfn;
} binary_table[] = {
#define BINARY_ENTRY(n) {#n, #n "_scalar", burnc_##n, burnc_##n##_scalar},
    BURNC_BINARY_OPS(BINARY_ENTRY)
#undef BINARY_ENTRY
};

static burnc_tensor_t *op_unary(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)dev;
    for (size_t i = 0; i < sizeof unary_table / sizeof unary_table[0]; i++)
        if (strcmp(unary_table[i].name, c->op) == 0)
            return unary_table[i].fn(in[0]);
    return NULL;
}

static burnc_tensor_t *op_binary(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)dev;
    for (size_t i = 0; i < sizeof binary_table / sizeof binary_table[0]; i++) {
        if (strcmp(binary_table[i].name, c->op) == 0)
            return binary_table[i].fn(in[0], in[1]);
        if (strcmp(binary_table[i].sname, c->op) == 0)
            return binary_table[i].sfn(in[0], p_f64(c, "s"));
    }
    return NULL;
}

static burnc_tensor_t *op_where(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)c, (void)dev;
    return burnc_where(in[0], in[1], in[2]);
}

static burnc_tensor_t *op_clamp(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)dev;
    return burnc_clamp(in[0], p_f64(c, "lo"), p_f64(c, "hi"));
}

static burnc_tensor_t *op_cast(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)dev;
    return burnc_cast(in[0], (burnc_dtype_t)p_i64(c, "dtype"));
}

static burnc_tensor_t *op_reduce(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)dev;
    int axes[BURNC_MAX_RANK];
    int n = p_ints(c, "axes", axes, BURNC_MAX_RANK);
    bool keep = p_i64(c, "keepdim") != 0;
    if (strcmp(c->op, "sum") == 0)
        return burnc_sum(in[0], n, axes, keep);
    if (strcmp(c->op, "mean") == 0)
        return burnc_mean(in[0], n, axes, keep);
    if (strcmp(c->op, "prod") == 0)
        return burnc_prod(in[0], n, axes, keep);
    if (strcmp(c->op, "max") == 0)
        return burnc_max(in[0], n, axes, keep);
    if (strcmp(c->op, "min") == 0)
        return burnc_min(in[0], n, axes, keep);
    if (strcmp(c->op, "var") == 0)
        return burnc_var(in[0], n, axes, p_f64(c, "corr"), keep);
    if (strcmp(c->op, "std") == 0)
        return burnc_std(in[0], n, axes, p_f64(c, "corr"), keep);
    return NULL;
}

static burnc_tensor_t *op_arg(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)dev;
    int axis = (int)p_i64(c, "axis");
    bool keep = p_i64(c, "keepdim") != 0;
    return strcmp(c->op, "argmax") == 0 ? burnc_argmax(in[0], axis, keep) : burnc_argmin(in[0], axis, keep);
}

static burnc_tensor_t *op_softmax(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)dev;
    int axis = (int)p_i64(c, "axis");
    return strcmp(c->op, "softmax") == 0 ? burnc_softmax(in[0], axis) : burnc_log_softmax(in[0], axis);
}

static burnc_tensor_t *op_layer_norm(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)dev;
    int nr = (int)p_i64(c, "nr");
    double eps = p_f64(c, "eps");
    if (strcmp(c->op, "layer_norm_affine") == 0)
        return burnc_layer_norm_affine(in[0], nr, in[1], in[2], eps);
    return burnc_layer_norm(in[0], nr, eps);
}

static burnc_tensor_t *op_matmul(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)c, (void)dev;
    return burnc_matmul(in[0], in[1]);
}

static burnc_tensor_t *op_movement(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)dev;
    int64_t v[2 * BURNC_MAX_RANK];
    int iv[2 * BURNC_MAX_RANK];
    if (strcmp(c->op, "reshape") == 0) {
        int n = p_list(c, "shape", v, BURNC_MAX_RANK);
        return burnc_reshape(in[0], n, v);
    }
    if (strcmp(c->op, "permute") == 0) {
        int n = p_ints(c, "perm", iv, BURNC_MAX_RANK);
        return burnc_permute(in[0], n, iv);
    }
    if (strcmp(c->op, "transpose") == 0) {
        p_ints(c, "axes", iv, 2);
        return burnc_transpose(in[0], iv[0], iv[1]);
    }
    if (strcmp(c->op, "expand") == 0) {
        int n = p_list(c, "shape", v, BURNC_MAX_RANK);
        return burnc_expand(in[0], n, v);
    }
    if (strcmp(c->op, "slice") == 0)
        return burnc_slice(in[0], (int)p_i64(c, "axis"), p_i64(c, "start"), p_i64(c, "stop"), p_i64(c, "step"));
    if (strcmp(c->op, "flip") == 0) {
        int n = p_ints(c, "axes", iv, BURNC_MAX_RANK);
        return burnc_flip(in[0], n, iv);
    }
    if (strcmp(c->op, "squeeze") == 0) {
        int n = p_ints(c, "axes", iv, BURNC_MAX_RANK);
        return burnc_squeeze(in[0], n, iv);
    }
    if (strcmp(c->op, "unsqueeze") == 0)
        return burnc_unsqueeze(in[0], (int)p_i64(c, "axis"));
    if (strcmp(c->op, "contiguous") == 0)
        return burnc_contiguous(in[0]);
    if (strcmp(c->op, "cat") == 0)
        return burnc_cat(c->nin, in, (int)p_i64(c, "axis"));
    if (strcmp(c->op, "stack") == 0)
        return burnc_stack(c->nin, in, (int)p_i64(c, "axis"));
    if (strcmp(c->op, "pad") == 0) {
        int n = p_list(c, "pads", v, 2 * BURNC_MAX_RANK);
        (void)n;
        return burnc_pad(in[0], v, p_f64(c, "value"));
    }
    return NULL;
}

static burnc_tensor_t *op_index(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)dev;
    int axis = (int)p_i64(c, "axis");
    if (strcmp(c->op, "index_select") == 0)
        return burnc_index_select(in[0], axis, in[1]);
    if (strcmp(c->op, "gather") == 0)
        return burnc_gather(in[0], axis, in[1]);
    if (strcmp(c->op, "scatter_add") == 0)
        return burnc_scatter_add(in[0], axis, in[1], in[2]);
    if (strcmp(c->op, "index_add") == 0)
        return burnc_index_add(in[0], axis, in[1], in[2]);
    if (strcmp(c->op, "slice_assign") == 0)
        return burnc_slice_assign(in[0], axis, p_i64(c, "start"), p_i64(c, "stop"), p_i64(c, "step"), in[1]);
    return NULL;
}

static burnc_tensor_t *op_creation(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)in;
    burnc_dtype_t dt = (burnc_dtype_t)p_i64(c, "dtype");
    int64_t shape[BURNC_MAX_RANK];
    if (strcmp(c->op, "eye") == 0)
        return burnc_eye(dev, dt, p_i64(c, "n"), p_i64(c, "m"));
    if (strcmp(c->op, "arange") == 0)
        return burnc_arange(dev, dt, p_f64(c, "start"), p_f64(c, "stop"), p_f64(c, "step"));
    int rank = p_list(c, "shape", shape, BURNC_MAX_RANK);
    if (strcmp(c->op, "zeros") == 0)
        return burnc_zeros(dev, dt, rank, shape);
    if (strcmp(c->op, "ones") == 0)
        return burnc_ones(dev, dt, rank, shape);
    if (strcmp(c->op, "full") == 0)
        return burnc_full(dev, dt, rank, shape, p_f64(c, "value"));
    return NULL;
}

/* Seeds the device, draws `pre` elements first (so the case is a second draw when pre > 0),
 * then the case's tensor. */
static burnc_tensor_t *op_random(const gt_case *c, burnc_device_t *dev, burnc_tensor_t **in)
{
    (void)in;
    burnc_dtype_t dt = (burnc_dtype_t)p_i64(c, "dtype");
    int64_t shape[BURNC_MAX_RANK];
    int rank = p_list(c, "shape", shape, BURNC_MAX_RANK);
    int64_t pre = p_i64(c, "pre");
    if (burnc_device_seed(dev, p_u64(c, "seed")) != BURNC_OK)
        return NULL;
    if (pre > 0) {
        burnc_tensor_t *first = burnc_rand(dev, BURNC_DTYPE_F32, 1, &pre);
        if (!first)
            return NULL;
        burnc_tensor_release(first);
    }
    return strcmp(c->op, "randn") == 0 ? burnc_randn(dev, dt, rank, shape) : burnc_rand(dev, dt, rank, shape);
}

static const struct {
    const char *name;
    op_fn fn;
} op_table[] = {
    {"where", op_where},
    {"clamp", op_clamp},
    {"cast", op_cast},
    {"sum", op_reduce},
    {"mean", op_reduce},
    {"prod", op_reduce},
    {"max", op_reduce},
    {"min", op_reduce},
    {"var", op_reduce},
    {"std", op_reduce},
    {"argmax", op_arg},
    {"argmin", op_arg},
    {"softmax", op_softmax},
    {"log_softmax", op_softmax},
    {"layer_norm", op_layer_norm},
    {"layer_norm_affine", op_layer_norm},
    {"matmul", op_matmul},
    {"reshape", op_movement},
    {"permute", op_movement},
    {"transpose", op_movement},
    {"expand", op_movement},
    {"slice", op_movement},
    {"flip", op_movement},
    {"squeeze", op_movement},
    {"unsqueeze", op_movement},
    {"contiguous", op_movement},
    {"cat", op_movement},
    {"stack", op_movement},
    {"pad", op_movement},
    {"index_select", op_index},
    {"gather", op_index},
    {"scatter_add", op_index},
    {"index_add", op_index},
    {"slice_assign", op_index},
    {"zeros", op_creation},
    {"ones", op_creation},
    {"full", op_creation},
    {"arange", op_creation},
    {"eye", op_creation},
    {"rand", op_random},
    {"randn", op_random},
};

static op_fn find_op(const char *name)
{
    for (size_t i = 0; i < sizeof unary_table / sizeof unary_table[0]; i++)
        if (strcmp(unary_table[i].name, name) == 0)
            return op_unary;
    for (size_t i = 0; i < sizeof binary_table / sizeof binary_table[0]; i++)
        if (strcmp(binary_table[i].name, name) == 0 || strcmp(binary_table[i].sname, name) == 0)
            return op_binary;
    for (size_t i = 0; i < sizeof op_table / sizeof op_table[0]; i++)
        if (strcmp(op_table[i].name, name) == 0)
            return op_table[i].fn;
    return NULL;
}

/* ---- values and comparison ------------------------------------------------------------- */

static bool dt_is_float(burnc_dtype_t dt)
{
    return dt == BURNC_DTYPE_F32 || dt == BURNC_DTYPE_F64 || dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16;
}

static double half_to_double(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 0x400, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double bf16_to_double(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Element i as a double (floats) and its raw bits. */
static double elem_f(const void *data, burnc_dtype_t dt, int64_t i)
{
    const unsigned char *p = (const unsigned char *)data + (size_t)i * burnc_dtype_size(dt);
    switch (dt) {
    case BURNC_DTYPE_F64: {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    case BURNC_DTYPE_F32: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case BURNC_DTYPE_F16:
    case BURNC_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return dt == BURNC_DTYPE_F16 ? half_to_double(h) : bf16_to_double(h);
    }
    default:
        return 0;
    }
}

static int64_t elem_i(const void *data, burnc_dtype_t dt, int64_t i)
{
    const unsigned char *p = (const unsigned char *)data + (size_t)i * burnc_dtype_size(dt);
    switch (dt) {
    case BURNC_DTYPE_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case BURNC_DTYPE_I64: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    case BURNC_DTYPE_U8:
    case BURNC_DTYPE_BOOL:
        return *p;
    default:
        return 0;
    }
}

static uint64_t elem_bits(const void *data, burnc_dtype_t dt, int64_t i)
{
    size_t sz = burnc_dtype_size(dt);
    uint64_t u = 0;
    memcpy(&u, (const unsigned char *)data + (size_t)i * sz, sz); /* little endian */
    return u;
}

/* The spacing of dt's values at |x| (subnormal spacing below the normal range). */
static double ulp_of(double x, burnc_dtype_t dt)
{
    int p = 24, emin = -126;
    if (dt == BURNC_DTYPE_F64)
        p = 53, emin = -1022;
    else if (dt == BURNC_DTYPE_F16)
        p = 11, emin = -14;
    else if (dt == BURNC_DTYPE_BF16)
        p = 8;
    int e = emin;
    if (x != 0 && isfinite(x)) {
        frexp(fabs(x), &e);
        e -= 1;
        if (e < emin)
            e = emin;
    }
    return ldexp(1.0, e - (p - 1));
}

static void fmt_elem(char *buf, size_t cap, const void *data, burnc_dtype_t dt, int64_t i)
{
    if (dt_is_float(dt))
        snprintf(buf, cap, "%.17g (0x%0*" PRIx64 ")", elem_f(data, dt, i), (int)(2 * burnc_dtype_size(dt)),
                 elem_bits(data, dt, i));
    else
        snprintf(buf, cap, "%" PRId64, elem_i(data, dt, i));
}

static void fmt_shape(char *buf, size_t cap, int rank, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ",%" PRId64 : "%" PRId64, shape[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

static double worst_ulps; /* the largest |got - want| seen, in ulps of want (BURNC_TEST_VERBOSE) */
static double worst_ratio; /* the largest |got - want| / allowed of a numeric case */
static char worst_case[160]; /* where, for BURNC_TEST_VERBOSE */
static const gt_case *current_case;

static bool elem_matches(const void *got, const void *want, burnc_dtype_t dt, int64_t i, const gt_tol *tol,
                         bool nonref)
{
    if (!dt_is_float(dt))
        return elem_i(got, dt, i) == elem_i(want, dt, i);
    double g = elem_f(got, dt, i), w = elem_f(want, dt, i);
    if (isnan(g) || isnan(w))
        return isnan(g) && isnan(w);
    if (tol->kind == 0)
        return elem_bits(got, dt, i) == elem_bits(want, dt, i);
    if (g == w)
        return true;
    if (!isfinite(g) || !isfinite(w))
        return false;
    double ulps = tol->ulps + (nonref ? tol->ulps2 : 0);
    double rtol = tol->rtol + (nonref ? tol->rtol2 : 0);
    double atol = tol->atol + (nonref ? tol->atol2 : 0);
    double allowed = ulps * ulp_of(w, dt) + atol + rtol * fabs(w);
    if (fabs(g - w) / allowed > worst_ratio) {
        worst_ratio = fabs(g - w) / allowed;
        snprintf(worst_case, sizeof worst_case, "%s element %" PRId64 ": %.17g vs %.17g",
                 current_case ? current_case->name : "?", i, g, w);
    }
    return fabs(g - w) <= allowed;
}

static int cases_printed;

/* sin, cos and tan are accurate for |x| < 2^17 (f32, f16, bf16) and 2^36 (f64) only
 * (include/burnc.h). Beyond, a device other than ref is held to what the header promises
 * there: sin and cos in [-1, 1], tan not NaN, NaN for an infinite x. */
static bool is_trig(const char *op) { return !strcmp(op, "sin") || !strcmp(op, "cos") || !strcmp(op, "tan"); }

static bool trig_beyond(double x, burnc_dtype_t dt)
{
    return !isnan(x) && !(fabs(x) < (dt == BURNC_DTYPE_F64 ? 0x1p36 : 0x1p17));
}

static bool trig_promise(const char *op, double x, double got)
{
    if (isinf(x))
        return isnan(got);
    if (!strcmp(op, "tan"))
        return !isnan(got);
    return got >= -1.0 && got <= 1.0;
}

/* The values of the case's (viewed) input, in the order of the result's elements, made on dev;
 * NULL when that fails (printed). For the trig ops' range rule. */
static double *input_values(const gt_case *c, burnc_device_t *dev, int64_t numel)
{
    burnc_tensor_t *x = make_input(dev, &c->in[0]);
    size_t sz = burnc_dtype_size(c->in[0].dtype);
    void *raw = malloc((size_t)numel * sz + 8);
    double *v = malloc((size_t)numel * sizeof *v + 8);
    cr_assert(raw && v);
    if (!x || burnc_tensor_read(x, raw, (size_t)numel * sz) != BURNC_OK) {
        fprintf(stderr, "FAIL %s #%d: cannot read its input on %s: %s\n", c->name, c->index, burnc_device_spec(dev),
                burnc_error_message());
        free(v);
        v = NULL;
    }
    for (int64_t i = 0; v && i < numel; i++)
        v[i] = dt_is_float(c->in[0].dtype) ? elem_f(raw, c->in[0].dtype, i) : (double)elem_i(raw, c->in[0].dtype, i);
    free(raw);
    burnc_tensor_release(x);
    return v;
}

/* ---- Devices that flush denormals ----
 * Where burnc_device_flushes_denormals says a dtype's denormals may become zero (include/burnc.h),
 * an element also passes when it matches ref's result for the inputs with their denormals
 * flushed, once the denormals of both results are flushed too: what the device promises, and
 * nothing looser. */

/* Denormals of dt in data[0..n) to zeros of their sign, where dev flushes them. */
static void flush_denormals(void *data, burnc_dtype_t dt, int64_t n, burnc_device_t *dev)
{
    if (!dev || !burnc_device_flushes_denormals(dev, dt))
        return;
    for (int64_t i = 0; i < n; i++) {
        if (dt == BURNC_DTYPE_F32) {
            float *x = (float *)data + i;
            if (fpclassify(*x) == FP_SUBNORMAL)
                *x = signbit(*x) ? -0.0f : 0.0f;
        } else if (dt == BURNC_DTYPE_F64) {
            double *x = (double *)data + i;
            if (fpclassify(*x) == FP_SUBNORMAL)
                *x = signbit(*x) ? -0.0 : 0.0;
        } else if (dt == BURNC_DTYPE_BF16) {
            uint16_t *x = (uint16_t *)data + i;
            if ((*x & 0x7f80) == 0 && (*x & 0x7f))
                *x &= 0x8000;
        }
    }
}

/* Both values zero or denormal: where the device may flush a result's denormals, so that an
 * operation on them (remainder's exact steps, then a flushed compare) may end at either. */
static bool both_below_normal(const void *got, const void *want, burnc_dtype_t dt, int64_t i)
{
    double least = dt == BURNC_DTYPE_F64 ? DBL_MIN : FLT_MIN; /* bf16 has f32's exponent range */
    return dt_is_float(dt) && fabs(elem_f(got, dt, i)) < least && fabs(elem_f(want, dt, i)) < least;
}

static bool case_flushes(const gt_case *c, burnc_device_t *dev)
{
    for (int k = 0; k < c->nin; k++)
        if (burnc_device_flushes_denormals(dev, c->in[k].dtype))
            return true;
    return burnc_device_flushes_denormals(dev, c->out.dtype);
}

/* Reads `t` and compares it with `want` (dtype, shape, elements). Returns true when equal. `xs`
 * (or NULL): the inputs of a trig op on a device other than ref, for the range rule above.
 * `flushed` (or NULL): ref's result for flushed inputs, an element's other chance on `fdev`, a
 * device that flushes denormals (above). */
static bool check_result(const gt_case *c, burnc_tensor_t *t, const gt_tensor *want, bool nonref, const char *against,
                         const double *xs, const void *flushed, burnc_device_t *fdev)
{
    char gs[160], ws[160];
    bool print = cases_printed < MAX_PRINT_CASES;
    const int64_t *shape = burnc_tensor_shape(t);
    int rank = burnc_tensor_rank(t);
    bool same_shape = rank == want->rank;
    for (int d = 0; same_shape && d < rank; d++)
        same_shape = shape[d] == want->shape[d];
    if (burnc_tensor_dtype(t) != want->dtype || !same_shape) {
        fmt_shape(gs, sizeof gs, rank, shape);
        fmt_shape(ws, sizeof ws, want->rank, want->shape);
        if (print)
            fprintf(stderr, "FAIL %s #%d (%s; params '%s'): result %s %s, %s has %s %s\n", c->name, c->index, c->op,
                    c->params, burnc_dtype_name(burnc_tensor_dtype(t)), gs, against, burnc_dtype_name(want->dtype),
                    ws);
        cases_printed++;
        return false;
    }
    void *got = malloc(want->nbytes + 8);
    cr_assert_not_null(got);
    burnc_status_t st = burnc_tensor_read(t, got, want->nbytes);
    if (st != BURNC_OK) {
        if (print)
            fprintf(stderr, "FAIL %s #%d (%s; params '%s'): read failed: %s: %s\n", c->name, c->index, c->op,
                    c->params, burnc_status_name(st), burnc_error_message());
        cases_printed++;
        free(got);
        return false;
    }
    void *got_f = NULL;
    if (flushed) {
        got_f = malloc(want->nbytes + 8);
        cr_assert_not_null(got_f);
        memcpy(got_f, got, want->nbytes);
        flush_denormals(got_f, want->dtype, want->numel, fdev);
    }
    int64_t bad = 0;
    current_case = c;
    for (int64_t i = 0; i < want->numel; i++) {
        if (xs && trig_beyond(xs[i], want->dtype)) {
            double g = elem_f(got, want->dtype, i);
            if (trig_promise(c->op, xs[i], g))
                continue;
            if (bad < MAX_PRINT_ELEMS && print)
                fprintf(stderr, "FAIL %s #%d (%s): element %" PRId64 ": %s(%.17g) = %.17g beyond the accurate range: "
                        "not %s\n", c->name, c->index, c->op, i, c->op, xs[i], g,
                        isinf(xs[i]) ? "NaN" : strcmp(c->op, "tan") ? "in [-1, 1]" : "a number");
            bad++;
            continue;
        }
        if (dt_is_float(want->dtype)) {
            double g = elem_f(got, want->dtype, i), w = elem_f(want->data, want->dtype, i);
            if (isfinite(g) && isfinite(w) && w != 0 && fabs(g - w) / ulp_of(w, want->dtype) > worst_ulps)
                worst_ulps = fabs(g - w) / ulp_of(w, want->dtype);
        }
        if (elem_matches(got, want->data, want->dtype, i, &c->tol, nonref))
            continue;
        if (got_f && (elem_matches(got_f, flushed, want->dtype, i, &c->tol, true) ||
                      both_below_normal(got, want->data, want->dtype, i)))
            continue;
        if (bad < MAX_PRINT_ELEMS && print) {
            fmt_elem(gs, sizeof gs, got, want->dtype, i);
            fmt_elem(ws, sizeof ws, want->data, want->dtype, i);
            fprintf(stderr, "FAIL %s #%d (%s; params '%s'): element %" PRId64 " of %" PRId64 ": got %s, %s %s\n",
                    c->name, c->index, c->op, c->params, i, want->numel, gs, against, ws);
        }
        bad++;
    }
    if (bad > MAX_PRINT_ELEMS && print)
        fprintf(stderr, "     ... %" PRId64 " of %" PRId64 " elements differ\n", bad, want->numel);
    if (bad)
        cases_printed++;
    free(got);
    free(got_f);
    return bad == 0;
}

/* Runs the case's op on dev: makes the inputs, applies their views, calls the op. Returns the
 * result or NULL; on failure prints why. */
static burnc_tensor_t *run_on(const gt_case *c, burnc_device_t *dev, const char *devname)
{
    op_fn fn = find_op(c->op);
    burnc_tensor_t *in[MAX_IN] = {0};
    burnc_tensor_t *out = NULL;
    const char *stage = "input";
    burnc_error_clear();
    p_ok = true;
    for (int k = 0; k < c->nin; k++) {
        in[k] = make_input(dev, &c->in[k]);
        if (!in[k])
            goto fail;
    }
    stage = "op";
    if (fn)
        out = fn(c, dev, in);
    if (!p_ok) {
        fprintf(stderr, "FAIL %s #%d: parameter '%s' missing in '%s'\n", c->name, c->index, p_missing, c->params);
        burnc_tensor_release(out);
        out = NULL;
    } else if (!out || burnc_error_code() != BURNC_OK) {
        goto fail;
    }
    for (int k = 0; k < c->nin; k++)
        burnc_tensor_release(in[k]);
    return out;
fail:
    if (cases_printed < MAX_PRINT_CASES)
        fprintf(stderr, "FAIL %s #%d (%s; params '%s') on %s: %s failed%s: %s: %s\n", c->name, c->index, c->op,
                c->params, devname, stage, fn ? "" : " (no such op in test_ops.c)", burnc_status_name(burnc_error_code()),
                burnc_error_message());
    cases_printed++;
    burnc_tensor_release(out);
    for (int k = 0; k < c->nin; k++)
        burnc_tensor_release(in[k]);
    return NULL;
}

static bool case_supported(const gt_case *c, burnc_device_t *dev)
{
    for (int k = 0; k < c->nin; k++)
        if (!burnc_device_supports_dtype(dev, c->in[k].dtype))
            return false;
    return burnc_device_supports_dtype(dev, c->out.dtype);
}

/* ref's result for c's inputs with the denormals dev flushes flushed, and its own denormals
 * flushed the same way (the elements, malloc'ed); NULL when it cannot be made (printed). */
static void *flushed_result(const gt_case *c, burnc_device_t *dev, burnc_device_t *ref)
{
    gt_case f = *c;
    void *bufs[MAX_IN] = {0};
    for (int k = 0; k < c->nin; k++) {
        bufs[k] = malloc(c->in[k].nbytes + 8);
        cr_assert_not_null(bufs[k]);
        memcpy(bufs[k], c->in[k].data, c->in[k].nbytes);
        flush_denormals(bufs[k], c->in[k].dtype, c->in[k].numel, dev);
        f.in[k].data = bufs[k];
    }
    void *out = NULL;
    burnc_tensor_t *t = run_on(&f, ref, "ref (inputs flushed)");
    if (t) {
        out = malloc(c->out.nbytes + 8);
        cr_assert_not_null(out);
        if (burnc_tensor_read(t, out, c->out.nbytes) == BURNC_OK) {
            flush_denormals(out, c->out.dtype, c->out.numel, dev);
        } else {
            free(out);
            out = NULL;
        }
        burnc_tensor_release(t);
    }
    for (int k = 0; k < c->nin; k++)
        free(bufs[k]);
    return out;
}

/* Runs one case: against its golden output, and against ref when dev is not ref. */
static bool run_case(const gt_case *c, burnc_device_t *dev, burnc_device_t *ref)
{
    burnc_tensor_t *got = run_on(c, dev, burnc_device_spec(dev));
    if (!got)
        return false;
    double *xs = NULL;
    if (ref && is_trig(c->op) && dt_is_float(c->out.dtype)) {
        xs = input_values(c, ref, c->out.numel);
        if (!xs) {
            burnc_tensor_release(got);
            return false;
        }
    }
    void *flushed = ref && case_flushes(c, dev) ? flushed_result(c, dev, ref) : NULL;
    bool ok = check_result(c, got, &c->out, ref != NULL, "golden", xs, flushed, dev);
    if (ref) {
        burnc_tensor_t *want = run_on(c, ref, "ref");
        if (!want) {
            ok = false;
        } else {
            gt_tensor w = c->out;
            w.data = malloc(w.nbytes + 8);
            cr_assert_not_null(w.data);
            if (burnc_tensor_read(want, (void *)w.data, w.nbytes) == BURNC_OK)
                ok = check_result(c, got, &w, true, "ref", xs, flushed, dev) && ok;
            else
                ok = false;
            free((void *)w.data);
            burnc_tensor_release(want);
        }
    }
    free(xs);
    free(flushed);
    burnc_tensor_release(got);
    return ok;
}

static const char *test_device_spec(void)
{
    const char *spec = getenv("BURNC_TEST_DEVICE");
    return spec && *spec ? spec : "ref";
}

/* The device under test; skips the test (with the reason) when it is not available. */
static burnc_device_t *open_test_device(void)
{
    const char *spec = test_device_spec();
    burnc_device_t *dev = burnc_device_open(spec);
    if (!dev && burnc_error_code() == BURNC_ERR_UNAVAILABLE)
        cr_skip_test("device '%s' is not available: %s", spec, burnc_error_message());
    cr_assert_not_null(dev, "cannot open device '%s': %s: %s", spec, burnc_status_name(burnc_error_code()),
                       burnc_error_message());
    return dev;
}

/* Runs every golden case of `op` in `file`. */
static void run_op(const char *file, const char *op)
{
    gt_file f;
    gt_load(file, &f);
    burnc_device_t *dev = open_test_device();
    burnc_device_t *ref = NULL;
    if (strcmp(test_device_spec(), "ref") != 0)
        ref = BT_NOT_NULL(burnc_device_open("ref"));
    int ran = 0, failed = 0, skipped = 0;
    for (int i = 0; i < f.n; i++) {
        const gt_case *c = &f.cases[i];
        if (strcmp(c->op, op) != 0)
            continue;
        if (!case_supported(c, dev)) {
            skipped++;
            continue;
        }
        ran++;
        if (!run_case(c, dev, ref))
            failed++;
    }
    if (skipped)
        fprintf(stderr, "%s: %d cases skipped: dtypes not supported by device '%s'\n", op, skipped,
                burnc_device_spec(dev));
    if (getenv("BURNC_TEST_VERBOSE"))
        fprintf(stderr, "%s: %d cases, %d failed, %d skipped, worst error %.3g ulps (%.2g of the tolerance)\n", op,
                ran, failed, skipped, worst_ulps, worst_ratio);
    if (getenv("BURNC_TEST_VERBOSE") && worst_ratio > 0)
        fprintf(stderr, "    worst: %s\n", worst_case);
    gt_free(&f);
    burnc_device_release(ref);
    burnc_device_release(dev);
    cr_assert(ran + skipped > 0, "no golden cases for op '%s' in %s", op, file);
    cr_assert(ran > 0 || skipped == 0, "every case of '%s' was skipped", op);
    cr_assert_eq(failed, 0, "%s: %d of %d golden cases failed (details above)", op, failed, ran);
    BT_LEAK_CHECK();
}

/* ---- one test per op ------------------------------------------------------------------- */

#define UNARY_TEST(n) \
    Test(unary, n) { run_op("ops_unary.bin", #n); }
BURNC_UNARY_OPS(UNARY_TEST)

#define BINARY_TEST(n)                                           \
    Test(binary, n) { run_op("ops_binary.bin", #n); }            \
    Test(binary_scalar, n) { run_op("ops_scalar.bin", #n "_scalar"); }
BURNC_BINARY_OPS(BINARY_TEST)

#define GOLDEN_TEST(suite, n, file) \
    Test(suite, n) { run_op(file, #n); }

GOLDEN_TEST(select, where, "ops_select.bin")
GOLDEN_TEST(select, clamp, "ops_select.bin")
GOLDEN_TEST(cast, cast, "ops_cast.bin")
GOLDEN_TEST(reduce, sum, "ops_reduce.bin")
GOLDEN_TEST(reduce, mean, "ops_reduce.bin")
GOLDEN_TEST(reduce, prod, "ops_reduce.bin")
GOLDEN_TEST(reduce, max, "ops_reduce.bin")
GOLDEN_TEST(reduce, min, "ops_reduce.bin")
GOLDEN_TEST(reduce, var, "ops_reduce.bin")
GOLDEN_TEST(reduce, std, "ops_reduce.bin")
GOLDEN_TEST(reduce, argmax, "ops_reduce.bin")
GOLDEN_TEST(reduce, argmin, "ops_reduce.bin")
GOLDEN_TEST(nn, softmax, "ops_nn.bin")
GOLDEN_TEST(nn, log_softmax, "ops_nn.bin")
GOLDEN_TEST(nn, layer_norm, "ops_nn.bin")
GOLDEN_TEST(nn, layer_norm_affine, "ops_nn.bin")
GOLDEN_TEST(linalg, matmul, "ops_matmul.bin")
GOLDEN_TEST(movement, reshape, "ops_movement.bin")
GOLDEN_TEST(movement, permute, "ops_movement.bin")
GOLDEN_TEST(movement, transpose, "ops_movement.bin")
GOLDEN_TEST(movement, expand, "ops_movement.bin")
GOLDEN_TEST(movement, slice, "ops_movement.bin")
GOLDEN_TEST(movement, flip, "ops_movement.bin")
GOLDEN_TEST(movement, squeeze, "ops_movement.bin")
GOLDEN_TEST(movement, unsqueeze, "ops_movement.bin")
GOLDEN_TEST(movement, contiguous, "ops_movement.bin")
GOLDEN_TEST(movement, cat, "ops_movement.bin")
GOLDEN_TEST(movement, stack, "ops_movement.bin")
GOLDEN_TEST(movement, pad, "ops_movement.bin")
GOLDEN_TEST(index, index_select, "ops_index.bin")
GOLDEN_TEST(index, gather, "ops_index.bin")
GOLDEN_TEST(index, scatter_add, "ops_index.bin")
GOLDEN_TEST(index, index_add, "ops_index.bin")
GOLDEN_TEST(index, slice_assign, "ops_index.bin")
GOLDEN_TEST(creation, zeros, "ops_creation.bin")
GOLDEN_TEST(creation, ones, "ops_creation.bin")
GOLDEN_TEST(creation, full, "ops_creation.bin")
GOLDEN_TEST(creation, arange, "ops_creation.bin")
GOLDEN_TEST(creation, eye, "ops_creation.bin")
GOLDEN_TEST(random, rand, "ops_creation.bin")
GOLDEN_TEST(random, randn, "ops_creation.bin")

/* ---- semantics numpy cannot give ------------------------------------------------------- */

/* Runs expr with the last error cleared, checks its result is non-NULL with no error, and
 * returns it. */
#define OP_OK(expr) (burnc_error_clear(), op_ok_((expr), #expr, __LINE__))
static burnc_tensor_t *op_ok_(burnc_tensor_t *t, const char *what, int line)
{
    cr_assert(t != NULL && burnc_error_code() == BURNC_OK, "line %d: %s failed: %s: %s", line, what,
              burnc_status_name(burnc_error_code()), burnc_error_message());
    return t;
}

static void expect_i64s(burnc_tensor_t *t, burnc_dtype_t dt, int64_t n, const int64_t *want, const char *what)
{
    cr_assert_eq(burnc_tensor_dtype(t), dt, "%s: dtype %s", what, burnc_dtype_name(burnc_tensor_dtype(t)));
    cr_assert_eq(burnc_tensor_numel(t), n, "%s: numel", what);
    unsigned char buf[256];
    cr_assert((size_t)n * burnc_dtype_size(dt) <= sizeof buf);
    BT_ASSERT_OK(burnc_tensor_read(t, buf, (size_t)n * burnc_dtype_size(dt)));
    for (int64_t i = 0; i < n; i++)
        cr_expect_eq(elem_i(buf, dt, i), want[i], "%s: element %" PRId64 ": got %" PRId64 ", expected %" PRId64, what,
                     i, elem_i(buf, dt, i), want[i]);
}

/* Float -> integer casts truncate, saturate at the bounds and map NaN to 0; -> bool is != 0. */
Test(semantics, float_to_int_saturates)
{
    burnc_device_t *dev = open_test_device();
    const float xs[] = {NAN, INFINITY, -INFINITY, 3e9f, -3e9f, 2.9f, -2.9f, 300.5f, -1.5f, 1e20f, -0.0f, 0.4f};
    const int64_t n = 12;
    burnc_tensor_t *x = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 1, &n, xs));
    const int64_t w32[] = {0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 2, -2, 300, -1, INT32_MAX, 0, 0};
    const int64_t w64[] = {0, INT64_MAX, INT64_MIN, 3000000000, -3000000000, 2, -2, 300, -1, INT64_MAX, 0, 0};
    const int64_t wu8[] = {0, 255, 0, 255, 0, 2, 0, 255, 0, 255, 0, 0};
    const int64_t wb[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1};
    const burnc_dtype_t dts[] = {BURNC_DTYPE_I32, BURNC_DTYPE_I64, BURNC_DTYPE_U8, BURNC_DTYPE_BOOL};
    const int64_t *wants[] = {w32, w64, wu8, wb};
    for (int k = 0; k < 4; k++) {
        burnc_tensor_t *y = OP_OK(burnc_cast(x, dts[k]));
        expect_i64s(y, dts[k], n, wants[k], burnc_dtype_name(dts[k]));
        burnc_tensor_release(y);
    }
    /* f64 at the i64 edges: 2^63 saturates, -2^63 is exact */
    const double ds[] = {9223372036854775808.0, -9223372036854775808.0, 9.3e18, -9.3e18, NAN, 4503599627370497.0};
    const int64_t nd = 6;
    burnc_tensor_t *xd = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_F64, 1, &nd, ds));
    burnc_tensor_t *yd = OP_OK(burnc_cast(xd, BURNC_DTYPE_I64));
    expect_i64s(yd, BURNC_DTYPE_I64, nd, (const int64_t[]){INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, 0, 4503599627370497},
                "f64->i64");
    /* a float math op keeps these rules when its result is cast: f16 inf -> i32 max */
    const uint16_t hs[] = {0x7c00, 0xfc00, 0x7e00, 0x5bf8 /* 255.0 */, 0x5c04 /* 257 */};
    const int64_t nh = 5;
    burnc_tensor_t *xh = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_F16, 1, &nh, hs));
    burnc_tensor_t *yh = OP_OK(burnc_cast(xh, BURNC_DTYPE_U8));
    expect_i64s(yh, BURNC_DTYPE_U8, nh, (const int64_t[]){255, 0, 0, 255, 255}, "f16->u8");
    burnc_tensor_release(yh);
    burnc_tensor_release(xh);
    burnc_tensor_release(yd);
    burnc_tensor_release(xd);
    burnc_tensor_release(x);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Integer pow with a negative exponent gives 0, except 1 for base 1 and +-1 for base -1;
 * a negative scalar exponent saturates to 0 for u8. */
Test(semantics, int_pow_negative_exponent)
{
    burnc_device_t *dev = open_test_device();
    const int32_t base[] = {2, 1, -1, -1, 0, -3, 5, 7, -2};
    const int32_t ex[] = {-1, -5, -3, -2, -1, -2, 0, 2, 3};
    const int64_t n = 9;
    burnc_tensor_t *b = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_I32, 1, &n, base));
    burnc_tensor_t *e = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_I32, 1, &n, ex));
    burnc_tensor_t *p = OP_OK(burnc_pow(b, e));
    expect_i64s(p, BURNC_DTYPE_I32, n, (const int64_t[]){0, 1, -1, 1, 0, 0, 1, 49, -8}, "pow i32");
    burnc_tensor_t *ps = OP_OK(burnc_pow_scalar(b, -1.0));
    expect_i64s(ps, BURNC_DTYPE_I32, n, (const int64_t[]){0, 1, -1, -1, 0, 0, 0, 0, 0}, "pow_scalar i32 -1");
    const int64_t b64[] = {-1, 1, 3, INT64_MIN};
    const int64_t n4 = 4;
    burnc_tensor_t *bl = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_I64, 1, &n4, b64));
    burnc_tensor_t *pl = OP_OK(burnc_pow_scalar(bl, -4.0));
    expect_i64s(pl, BURNC_DTYPE_I64, n4, (const int64_t[]){1, 1, 0, 0}, "pow_scalar i64 -4");
    const uint8_t bu[] = {0, 3, 255};
    const int64_t n3 = 3;
    burnc_tensor_t *u = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_U8, 1, &n3, bu));
    burnc_tensor_t *pu = OP_OK(burnc_pow_scalar(u, -1.0));
    expect_i64s(pu, BURNC_DTYPE_U8, n3, (const int64_t[]){1, 1, 1}, "pow_scalar u8 -1 (exponent saturates to 0)");
    burnc_tensor_t *pu2 = OP_OK(burnc_pow_scalar(u, 2.0));
    expect_i64s(pu2, BURNC_DTYPE_U8, n3, (const int64_t[]){0, 9, 1}, "pow_scalar u8 2 (wraps)");
    burnc_tensor_release(pu2);
    burnc_tensor_release(pu);
    burnc_tensor_release(u);
    burnc_tensor_release(pl);
    burnc_tensor_release(bl);
    burnc_tensor_release(ps);
    burnc_tensor_release(p);
    burnc_tensor_release(e);
    burnc_tensor_release(b);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Integer division floors, remainder takes the divisor's sign, division by zero gives 0, and
 * INT_MIN / -1 wraps. */
Test(semantics, int_division)
{
    burnc_device_t *dev = open_test_device();
    const int32_t a[] = {7, -7, 7, -7, 0, INT32_MIN, 5, INT32_MIN};
    const int32_t b[] = {2, 2, -2, -2, 0, -1, 0, 0};
    const int64_t n = 8;
    burnc_tensor_t *ta = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_I32, 1, &n, a));
    burnc_tensor_t *tb = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_I32, 1, &n, b));
    burnc_tensor_t *q = OP_OK(burnc_div(ta, tb));
    expect_i64s(q, BURNC_DTYPE_I32, n, (const int64_t[]){3, -4, -4, 3, 0, INT32_MIN, 0, 0}, "div i32");
    burnc_tensor_t *r = OP_OK(burnc_remainder(ta, tb));
    expect_i64s(r, BURNC_DTYPE_I32, n, (const int64_t[]){1, 1, -1, -1, 0, 0, 0, 0}, "remainder i32");
    burnc_tensor_t *qs = OP_OK(burnc_div_scalar(ta, 0.0));
    expect_i64s(qs, BURNC_DTYPE_I32, n, (const int64_t[]){0, 0, 0, 0, 0, 0, 0, 0}, "div_scalar i32 by 0");
    burnc_tensor_release(qs);
    burnc_tensor_release(r);
    burnc_tensor_release(q);
    burnc_tensor_release(tb);
    burnc_tensor_release(ta);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

static void expect_view(burnc_tensor_t *t, int rank, const int64_t *shape, const int64_t *strides, const char *what)
{
    cr_assert_eq(burnc_tensor_rank(t), rank, "%s: rank %d", what, burnc_tensor_rank(t));
    const int64_t *s = burnc_tensor_shape(t), *st = burnc_tensor_strides(t);
    for (int d = 0; d < rank; d++) {
        cr_expect_eq(s[d], shape[d], "%s: shape[%d] = %" PRId64 ", expected %" PRId64, what, d, s[d], shape[d]);
        if (strides[d] != INT64_MIN)
            cr_expect_eq(st[d], strides[d], "%s: strides[%d] = %" PRId64 ", expected %" PRId64, what, d, st[d],
                         strides[d]);
    }
}

/* Views share their input's storage: their strides express the view (0 for a broadcast,
 * negative for a flip) and making them allocates nothing. */
Test(semantics, views_share_storage)
{
    burnc_device_t *dev = open_test_device();
    float data[24];
    for (int i = 0; i < 24; i++)
        data[i] = (float)i;
    const int64_t shape[3] = {2, 3, 4};
    burnc_tensor_t *x = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 3, shape, data));
    float back[24];
    BT_ASSERT_OK(burnc_tensor_read(x, back, sizeof back)); /* materialized */
    expect_view(x, 3, shape, (const int64_t[]){12, 4, 1}, "dense");
    burnc_memory_report_t before = bt_memory(dev);

    burnc_tensor_t *p = OP_OK(burnc_permute(x, 3, (const int[]){2, 0, 1}));
    burnc_tensor_t *t = OP_OK(burnc_transpose(x, 0, 2));
    burnc_tensor_t *s = OP_OK(burnc_slice(x, 1, 2, INT64_MIN, -2));
    burnc_tensor_t *f = OP_OK(burnc_flip(x, 1, (const int[]){2}));
    burnc_tensor_t *u = OP_OK(burnc_unsqueeze(x, 1));
    burnc_tensor_t *r = OP_OK(burnc_reshape(x, 2, (const int64_t[]){6, -1}));
    burnc_tensor_t *col = OP_OK(burnc_slice(x, 2, 1, 2, 1)); /* [2,3,1] */
    burnc_tensor_t *e = OP_OK(burnc_expand(col, 4, (const int64_t[]){5, 2, 3, 7}));
    burnc_tensor_t *ps = OP_OK(burnc_slice(p, 0, 1, INT64_MAX, 2)); /* view of a view */
    burnc_memory_report_t after = bt_memory(dev);

    expect_view(p, 3, (const int64_t[]){4, 2, 3}, (const int64_t[]){1, 12, 4}, "permute");
    expect_view(t, 3, (const int64_t[]){4, 3, 2}, (const int64_t[]){1, 4, 12}, "transpose");
    expect_view(s, 3, (const int64_t[]){2, 2, 4}, (const int64_t[]){12, -8, 1}, "slice with step -2");
    expect_view(f, 3, shape, (const int64_t[]){12, 4, -1}, "flip");
    expect_view(u, 4, (const int64_t[]){2, 1, 3, 4}, (const int64_t[]){12, INT64_MIN, 4, 1}, "unsqueeze");
    expect_view(r, 2, (const int64_t[]){6, 4}, (const int64_t[]){4, 1}, "reshape of a dense tensor");
    expect_view(e, 4, (const int64_t[]){5, 2, 3, 7}, (const int64_t[]){0, 12, 4, 0}, "expand");
    expect_view(ps, 3, (const int64_t[]){2, 2, 3}, (const int64_t[]){2, 12, 4}, "slice of a permute");
    cr_expect_eq(after.buffers_in_use, before.buffers_in_use, "views allocated buffers: %" PRIu64 " -> %" PRIu64,
                 before.buffers_in_use, after.buffers_in_use);
    cr_expect_eq(after.bytes_in_use, before.bytes_in_use, "views allocated memory: %" PRIu64 " -> %" PRIu64,
                 before.bytes_in_use, after.bytes_in_use);

    /* the views read the shared elements */
    float v[24];
    BT_ASSERT_OK(burnc_tensor_read(f, v, sizeof v));
    for (int i = 0; i < 24; i++)
        cr_expect_eq(v[i], data[(i / 4) * 4 + 3 - i % 4], "flip element %d", i);
    BT_ASSERT_OK(burnc_tensor_read(s, v, 16 * sizeof(float)));
    for (int i = 0; i < 16; i++)
        cr_expect_eq(v[i], data[(i / 8) * 12 + (2 - 2 * ((i / 4) % 2)) * 4 + i % 4], "slice element %d", i);

    /* a reshape the strides cannot express copies into a dense tensor */
    burnc_tensor_t *rc = OP_OK(burnc_reshape(p, 1, (const int64_t[]){24}));
    expect_view(rc, 1, (const int64_t[]){24}, (const int64_t[]){1}, "reshape of a permute");
    BT_ASSERT_OK(burnc_tensor_read(rc, v, sizeof v));
    for (int i = 0; i < 24; i++)
        cr_expect_eq(v[i], data[(i % 6 / 3) * 12 + (i % 3) * 4 + i / 6], "reshape copy element %d", i);
    BT_ASSERT_OK(burnc_tensor_read(x, back, sizeof back));
    cr_expect_eq(memcmp(back, data, sizeof data), 0, "the input changed");

    burnc_tensor_t *ts[] = {rc, ps, e, col, r, u, f, s, t, p, x};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        burnc_tensor_release(ts[i]);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Reseeding restarts the stream; without it the next draw continues. */
Test(semantics, rand_reseed)
{
    burnc_device_t *dev = open_test_device();
    const int64_t n = 16;
    float a[16], b[16], c[16];
    BT_ASSERT_OK(burnc_device_seed(dev, 1234));
    burnc_tensor_t *t1 = OP_OK(burnc_rand(dev, BURNC_DTYPE_F32, 1, &n));
    burnc_tensor_t *t2 = OP_OK(burnc_rand(dev, BURNC_DTYPE_F32, 1, &n));
    BT_ASSERT_OK(burnc_device_seed(dev, 1234));
    burnc_tensor_t *t3 = OP_OK(burnc_rand(dev, BURNC_DTYPE_F32, 1, &n));
    BT_ASSERT_OK(burnc_tensor_read(t1, a, sizeof a));
    BT_ASSERT_OK(burnc_tensor_read(t2, b, sizeof b));
    BT_ASSERT_OK(burnc_tensor_read(t3, c, sizeof c));
    cr_expect_eq(memcmp(a, c, sizeof a), 0, "the same seed gave different values");
    cr_expect_neq(memcmp(a, b, sizeof a), 0, "a second draw repeated the first");
    for (int i = 0; i < 16; i++)
        cr_expect(a[i] >= 0.0f && a[i] < 1.0f, "rand element %d = %g outside [0, 1)", i, (double)a[i]);
    burnc_tensor_release(t3);
    burnc_tensor_release(t2);
    burnc_tensor_release(t1);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* What the header refuses: arithmetic on bool, an empty max, mean/var of integers, rand of an
 * integer dtype, an index out of range (at run time). */
Test(semantics, refusals)
{
    burnc_device_t *dev = open_test_device();
    const int64_t n = 3;
    const uint8_t bools[3] = {1, 0, 1};
    burnc_tensor_t *b = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_BOOL, 1, &n, bools));
    BT_ASSERT_FAILS(burnc_add(b, b), BURNC_ERR_UNSUPPORTED_DTYPE, "add");
    BT_ASSERT_FAILS(burnc_neg(b), BURNC_ERR_UNSUPPORTED_DTYPE, "neg");
    burnc_error_clear();
    const int64_t es[2] = {0, 3};
    burnc_tensor_t *empty = OP_OK(burnc_zeros(dev, BURNC_DTYPE_F32, 2, es));
    BT_ASSERT_FAILS(burnc_max(empty, 1, (const int[]){0}, false), BURNC_ERR_SHAPE, "max");
    BT_ASSERT_FAILS(burnc_min(empty, 0, NULL, false), BURNC_ERR_SHAPE, "min");
    const int32_t ints[3] = {1, 2, 3};
    burnc_tensor_t *it = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_I32, 1, &n, ints));
    BT_ASSERT_FAILS(burnc_mean(it, 0, NULL, false), BURNC_ERR_UNSUPPORTED_DTYPE, "mean");
    BT_ASSERT_FAILS(burnc_var(it, 0, NULL, 1.0, false), BURNC_ERR_UNSUPPORTED_DTYPE, "var");
    BT_ASSERT_FAILS(burnc_rand(dev, BURNC_DTYPE_I32, 1, &n), BURNC_ERR_UNSUPPORTED_DTYPE, "rand");
    burnc_tensor_release(it);
    burnc_error_clear();
    const float xs[3] = {1, 2, 3};
    const int64_t idx[2] = {0, 3};
    const int64_t ni = 2;
    burnc_tensor_t *x = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 1, &n, xs));
    burnc_tensor_t *i = OP_OK(burnc_tensor_from_data(dev, BURNC_DTYPE_I64, 1, &ni, idx));
    burnc_tensor_t *sel = burnc_index_select(x, 0, i);
    if (sel) { /* the range is checked when the work runs */
        float out[2];
        BT_ASSERT_STATUS(burnc_tensor_read(sel, out, sizeof out), BURNC_ERR_INDEX, "index");
        burnc_tensor_release(sel);
    } else {
        BT_ASSERT_LAST_ERROR(BURNC_ERR_INDEX, "index");
    }
    burnc_error_clear();
    burnc_tensor_release(i);
    burnc_tensor_release(x);
    burnc_tensor_release(empty);
    burnc_tensor_release(b);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}
