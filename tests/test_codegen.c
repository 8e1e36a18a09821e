/* The CPU code generator (codegen/llvm_cpu.c, the burnc-llvm module), the object loader
 * (codegen/objload.c) and the disk kernel cache (codegen/kcache.c).
 *
 * Every kernel here runs three or four ways on the same inputs: kir_eval (ir/kernel_eval.c, the
 * oracle), the JIT's functions, the same code loaded from the emitted object by cg_object_load,
 * and, for single-stage kernels, leaves() + finish() with the leaves combined here by
 * kernel.h's tree. Outputs must agree bitwise, except that two NaNs count as equal: LLVM does
 * not promise NaN payloads (it may commute the operands of an addition), and kernel.h says
 * nothing about them.
 *
 * The module is found through BURNC_LLVM_MODULE (set by tests/meson.build). It is built in every
 * configuration that has llvm-19-dev, which .ci/run guarantees, so a missing module fails the
 * suite rather than skipping it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codegen/cg.h"
#include "codegen/kcache.h"
#include "kernel.h"
#include "rt.h"
#include "tests/common.h"
#include "tests/kir_build.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- Random values ----------------------------------------------------------------------- */

static uint64_t rng = 0x853c49e6748fea9bu;

static uint64_t rnd(void)
{
    uint64_t z = (rng += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static double rnd_unit(void) { return (double)(rnd() >> 11) * 0x1p-53; }
static double rnd_normal(void) { return (rnd_unit() + rnd_unit() + rnd_unit() - 1.5) * 2.0; }

/* Values worth meeting: signed zeros, infinities, NaNs, subnormals, ties for rint, f16 and int
 * conversion edges. */
static const double SPECIAL_F[] = {
    0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, 1e-40, -1e-45, 1e-310, 65504.0, 65520.0, 65519.99,
    -65520.0, 3e9, -3e9, 2147483520.0, -2147483648.0, 4294967296.0, 9.3e18, -9.3e18, 1.9e19, 255.5, 256.0,
    -0.99, 1e300, 3.4028234663852886e38, __builtin_inf(), -__builtin_inf(), __builtin_nan(""), -__builtin_nan("")};
static const int64_t SPECIAL_I[] = {INT64_MIN, INT64_MIN + 1, INT32_MIN, INT32_MIN + 1, -7, -2, -1, 0, 1, 2, 3, 7, 31,
                                    32, 63, 64, 255, 256, INT32_MAX, (int64_t)UINT32_MAX, INT64_MAX,
                                    /* just above a bf16 tie, the difference in the lowest bit */
                                    INT64_C(0x1010000000000001), -INT64_C(0x1010000000000001),
                                    (int64_t)UINT64_C(0x8080000000000001), INT64_C(0x0000801000000001)};

static double wild_f(void)
{
    uint64_t r = rnd() % 100;
    if (r < 55)
        return rnd_normal() * pow(10.0, (double)(rnd() % 7) - 3.0);
    if (r < 85)
        return SPECIAL_F[rnd() % COUNT(SPECIAL_F)];
    uint64_t u = rnd();
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static int64_t wild_i(void)
{
    uint64_t r = rnd() % 100;
    if (r < 50)
        return (int64_t)(rnd() % 201) - 100;
    if (r < 80)
        return SPECIAL_I[rnd() % COUNT(SPECIAL_I)];
    return (int64_t)rnd();
}

/* Tame values keep sums finite (the reduction sweep); a few specials still come through. */
static double tame_f(void)
{
    if (rnd() % 20 == 0)
        return SPECIAL_F[rnd() % 12];
    return rnd_normal() * 100.0;
}

static void fill_value(void *p, burnc_dtype_t dt, bool tame)
{
    switch (dt) {
    case BURNC_DTYPE_F32: {
        float f;
        if (!tame && rnd() % 10 == 0) {
            uint32_t u = (uint32_t)rnd();
            memcpy(&f, &u, sizeof f);
        } else {
            f = (float)(tame ? tame_f() : wild_f());
        }
        memcpy(p, &f, sizeof f);
        break;
    }
    case BURNC_DTYPE_F64: {
        double d = tame ? tame_f() : wild_f();
        memcpy(p, &d, sizeof d);
        break;
    }
    case BURNC_DTYPE_F16:
    case BURNC_DTYPE_BF16: {
        uint16_t h = (uint16_t)rnd();
        if (tame) {
            float f = (float)tame_f();
            h = dt == BURNC_DTYPE_F16 ? burnc_f32_to_f16(f / 100.0f) : burnc_f32_to_bf16(f);
        }
        memcpy(p, &h, sizeof h);
        break;
    }
    case BURNC_DTYPE_I32: {
        int32_t v = (int32_t)(uint32_t)(uint64_t)(tame ? (int64_t)(rnd() % 2001) - 1000 : wild_i());
        memcpy(p, &v, sizeof v);
        break;
    }
    case BURNC_DTYPE_I64: {
        int64_t v = tame ? (int64_t)(rnd() % 2001) - 1000 : wild_i();
        memcpy(p, &v, sizeof v);
        break;
    }
    case BURNC_DTYPE_U8: *(uint8_t *)p = (uint8_t)rnd(); break;
    default: *(uint8_t *)p = (uint8_t)(rnd() & 1); break;
    }
}

/* ---- Launches ---------------------------------------------------------------------------- */

enum { EVAL, JIT, OBJ, LEAVES, N_COPIES };
static const char *const COPY_NAMES[] = {"kir_eval", "JIT", "object", "leaves+finish"};

typedef struct launch {
    kir_kernel *k;
    int64_t ext[BURNC_MAX_RANK];
    int64_t in_off[KIR_MAX_INPUTS], in_str[KIR_MAX_INPUTS * BURNC_MAX_RANK];
    int64_t out_off[KIR_MAX_OUTPUTS], out_str[KIR_MAX_OUTPUTS * BURNC_MAX_RANK];
    kir_scalar scalars[16];
    void *in[KIR_MAX_INPUTS];
    size_t out_size[KIR_MAX_OUTPUTS];
    void *out[N_COPIES][KIR_MAX_OUTPUTS];
    bool tame;
} launch;

static void launch_init(launch *L, kir_kernel *k, const int64_t *ext)
{
    memset(L, 0, sizeof *L);
    L->k = k;
    for (int d = 0; d < k->rank; d++)
        L->ext[d] = ext[d];
}

/* Strides of a slot: explicit, or dense row-major over its non-ZERO axes scaled by `step`;
 * then the offset that keeps every element inside a buffer of the returned size. */
static size_t layout(launch *L, bool out, int slot, const int64_t *strides, int64_t step, int64_t extra_off)
{
    const kir_kernel *k = L->k;
    const kir_slot *s = out ? &k->outputs[slot] : &k->inputs[slot];
    int64_t *st = (out ? L->out_str : L->in_str) + slot * k->rank;
    int64_t run = step;
    for (int d = k->rank - 1; d >= 0; d--) {
        if (strides) {
            st[d] = strides[d];
        } else if (s->stride[d] == KIR_STRIDE_ZERO) {
            st[d] = 0;
        } else {
            cr_assert(s->stride[d] != KIR_STRIDE_UNIT || run == 1, "slot %d: UNIT on axis %d is not innermost", slot,
                      d);
            st[d] = run;
            run = st[d] * (L->ext[d] > 0 ? L->ext[d] : 1);
        }
        if (s->stride[d] == KIR_STRIDE_ZERO)
            cr_assert_eq(st[d], 0, "slot %d axis %d: class ZERO with stride %lld", slot, d, (long long)st[d]);
        if (s->stride[d] == KIR_STRIDE_UNIT)
            cr_assert_eq(st[d], 1, "slot %d axis %d: class UNIT with stride %lld", slot, d, (long long)st[d]);
    }
    int64_t lo = 0, hi = 0;
    bool empty = false;
    for (int d = 0; d < k->rank; d++) {
        if (L->ext[d] == 0)
            empty = true;
        int64_t span = (L->ext[d] > 0 ? L->ext[d] - 1 : 0) * st[d];
        lo += span < 0 ? span : 0;
        hi += span > 0 ? span : 0;
    }
    int64_t off = extra_off - lo;
    (out ? L->out_off : L->in_off)[slot] = off;
    (void)empty;
    return (size_t)(off + hi + 1);
}

/* Lays out every slot not laid out yet (dense) and allocates and fills the buffers. */
static void launch_buffers(launch *L, const bool *custom_in, const bool *custom_out, const size_t *sizes_in,
                           const size_t *sizes_out)
{
    const kir_kernel *k = L->k;
    for (int s = 0; s < k->n_inputs; s++) {
        size_t n = custom_in && custom_in[s] ? sizes_in[s] : layout(L, false, s, NULL, 1, 0);
        size_t es = burnc_dtype_size(k->inputs[s].dtype);
        L->in[s] = malloc(n * es);
        cr_assert(L->in[s]);
        for (size_t i = 0; i < n; i++)
            fill_value((char *)L->in[s] + i * es, k->inputs[s].dtype, L->tame);
    }
    for (int s = 0; s < k->n_outputs; s++) {
        size_t n = custom_out && custom_out[s] ? sizes_out[s] : layout(L, true, s, NULL, 1, 0);
        L->out_size[s] = n * burnc_dtype_size(k->outputs[s].dtype);
        for (int c = 0; c < N_COPIES; c++) {
            L->out[c][s] = malloc(L->out_size[s]);
            cr_assert(L->out[c][s]);
            memset(L->out[c][s], 0xa5, L->out_size[s]); /* gaps must stay untouched in every copy */
        }
    }
}

static void launch_free(launch *L)
{
    for (int s = 0; s < KIR_MAX_INPUTS; s++)
        free(L->in[s]);
    for (int c = 0; c < N_COPIES; c++)
        for (int s = 0; s < KIR_MAX_OUTPUTS; s++)
            free(L->out[c][s]);
    kir_free(L->k);
}

static kir_args args_of(launch *L, int copy)
{
    return (kir_args){.inputs = L->in,
                      .outputs = L->out[copy],
                      .extents = L->ext,
                      .in_offsets = L->in_off,
                      .in_strides = L->in_str,
                      .out_offsets = L->out_off,
                      .out_strides = L->out_str,
                      .scalars = L->scalars};
}

static int64_t n_rows(const launch *L)
{
    int64_t n = 1;
    for (int d = 0; d < L->k->n_outer; d++)
        n *= L->ext[d];
    return n;
}

static int64_t row_len(const launch *L)
{
    int64_t n = 1;
    for (int d = L->k->n_outer; d < L->k->rank; d++)
        n *= L->ext[d];
    return n;
}

/* ---- Comparing --------------------------------------------------------------------------- */

static bool is_nan_elem(const unsigned char *p, burnc_dtype_t dt)
{
    switch (dt) {
    case BURNC_DTYPE_F32: {
        uint32_t u;
        memcpy(&u, p, 4);
        return (u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu);
    }
    case BURNC_DTYPE_F64: {
        uint64_t u;
        memcpy(&u, p, 8);
        return (u & UINT64_C(0x7ff0000000000000)) == UINT64_C(0x7ff0000000000000) && (u & ((UINT64_C(1) << 52) - 1));
    }
    case BURNC_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    }
    case BURNC_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    }
    default: return false;
    }
}

static void expect_same(launch *L, int copy, const char *what)
{
    const kir_kernel *k = L->k;
    for (int s = 0; s < k->n_outputs; s++) {
        burnc_dtype_t dt = k->outputs[s].dtype;
        size_t es = burnc_dtype_size(dt);
        const unsigned char *a = L->out[EVAL][s], *b = L->out[copy][s];
        for (size_t i = 0; i < L->out_size[s]; i += es) {
            if (memcmp(a + i, b + i, es) == 0 || (is_nan_elem(a + i, dt) && is_nan_elem(b + i, dt)))
                continue;
            uint64_t x = 0, y = 0;
            memcpy(&x, a + i, es);
            memcpy(&y, b + i, es);
            cr_assert_fail("%s: kernel %s (%s), output %d (%s), element %zu: kir_eval 0x%llx, %s 0x%llx", what, k->name,
                           COPY_NAMES[copy], s, burnc_dtype_name(dt), i / es, (unsigned long long)x, COPY_NAMES[copy],
                           (unsigned long long)y);
        }
    }
}

/* ---- Running ----------------------------------------------------------------------------- */

/* rows() over all rows, cut into a few pieces at random places. */
static void run_rows(const cg_cpu_kernel *f, launch *L, int copy)
{
    kir_args a = args_of(L, copy);
    int64_t n = n_rows(L), at = 0;
    while (at < n) {
        int64_t len = rnd() % 3 == 0 ? n - at : 1 + (int64_t)(rnd() % (uint64_t)(n - at));
        f->rows(&a, at, at + len);
        at += len;
    }
}

typedef struct part {
    kir_scalar v;
    int64_t p;
} part;

static bool t_signed(int t) { return t == KIR_I32 || t == KIR_I64; }

static uint64_t canon(int t, uint64_t u)
{
    switch (t) {
    case KIR_BOOL: return u != 0;
    case KIR_U8: return u & 0xffu;
    case KIR_U32: return u & 0xffffffffu;
    case KIR_I32: return (uint64_t)(int64_t)(int32_t)(uint32_t)u;
    default: return u;
    }
}

/* -1, 0, 1 for l < r, l == r, l > r (no NaNs). */
static int cmp_vals(int t, kir_scalar l, kir_scalar r)
{
    if (t == KIR_F32 || t == KIR_F64)
        return (l.f > r.f) - (l.f < r.f);
    if (t_signed(t))
        return (l.i > r.i) - (l.i < r.i);
    return (l.u > r.u) - (l.u < r.u);
}

/* kernel.h's combine of two partial results (kir_eval's choices), written independently. */
static part combine_parts(int comb, int t, part l, part r)
{
    bool fp = t == KIR_F32 || t == KIR_F64;
    switch (comb) {
    case KIR_COMBINE_SUM:
    case KIR_COMBINE_PROD:
        if (t == KIR_F32) {
            float a = (float)l.v.f, b = (float)r.v.f;
            l.v.f = comb == KIR_COMBINE_SUM ? a + b : a * b;
        } else if (t == KIR_F64) {
            l.v.f = comb == KIR_COMBINE_SUM ? l.v.f + r.v.f : l.v.f * r.v.f;
        } else {
            l.v.u = canon(t, comb == KIR_COMBINE_SUM ? l.v.u + r.v.u : l.v.u * r.v.u);
        }
        return l;
    case KIR_COMBINE_MAX:
    case KIR_COMBINE_MIN: {
        if (fp && isnan(l.v.f))
            return l;
        if (fp && isnan(r.v.f))
            return r;
        int c = cmp_vals(t, l.v, r.v);
        return (comb == KIR_COMBINE_MAX ? c > 0 : c < 0) ? l : r;
    }
    default: {
        bool ln = fp && isnan(l.v.f), rn = fp && isnan(r.v.f);
        bool r_better;
        if (ln || rn) {
            r_better = rn && (!ln || r.p < l.p);
        } else {
            int c = cmp_vals(t, r.v, l.v);
            r_better = c == 0 ? r.p < l.p : comb == KIR_COMBINE_ARGMAX ? c > 0 : c < 0;
        }
        return r_better ? r : l;
    }
    }
}

static part identity_part(int comb, int t)
{
    part r = {.p = INT64_MAX};
    bool fp = t == KIR_F32 || t == KIR_F64;
    bool hi = comb == KIR_COMBINE_MIN || comb == KIR_COMBINE_ARGMIN;
    if (comb == KIR_COMBINE_SUM || comb == KIR_COMBINE_PROD) {
        if (fp)
            r.v.f = comb == KIR_COMBINE_PROD;
        else
            r.v.u = comb == KIR_COMBINE_PROD;
    } else if (fp) {
        r.v.f = hi ? INFINITY : -INFINITY;
    } else if (t_signed(t)) {
        r.v.i = t == KIR_I32 ? (hi ? INT32_MAX : INT32_MIN) : (hi ? INT64_MAX : INT64_MIN);
    } else {
        r.v.u = hi ? canon(t, UINT64_MAX) : 0;
    }
    return r;
}

/* Each row through leaves() (in two calls) and finish(), combining the leaves level by level
 * here, with an odd last leaf carried up. */
static void run_leaves(const cg_cpu_kernel *f, launch *L)
{
    const kir_kernel *k = L->k;
    int comb = k->stages[0].combiner, t = k->insts[k->stages[0].value].type;
    bool arg = comb == KIR_COMBINE_ARGMAX || comb == KIR_COMBINE_ARGMIN;
    int64_t n = row_len(L), nl = (n + KIR_LEAF - 1) / KIR_LEAF;
    kir_scalar *vals = calloc((size_t)nl + 1, sizeof *vals);
    int64_t *pos = calloc((size_t)nl + 1, sizeof *pos);
    part *parts = calloc((size_t)nl + 1, sizeof *parts);
    cr_assert(vals && pos && parts);
    kir_args a = args_of(L, LEAVES);
    for (int64_t row = 0; row < n_rows(L); row++) {
        int64_t cut = nl ? (int64_t)(rnd() % (uint64_t)(nl + 1)) : 0;
        f->leaves(&a, row, 0, cut, vals, arg ? pos : NULL);
        f->leaves(&a, row, cut, nl, vals + cut, arg ? pos + cut : NULL);
        for (int64_t i = 0; i < nl; i++)
            parts[i] = (part){vals[i], arg ? pos[i] : 0};
        int64_t m = nl;
        while (m > 1) {
            int64_t w = 0;
            for (int64_t i = 0; i + 1 < m; i += 2)
                parts[w++] = combine_parts(comb, t, parts[i], parts[i + 1]);
            if (m & 1)
                parts[w++] = parts[m - 1];
            m = w;
        }
        part r = nl ? parts[0] : identity_part(comb, t);
        kir_scalar res[KIR_MAX_STAGES] = {r.v};
        if (arg)
            res[0].i = r.p == INT64_MAX ? 0 : r.p;
        f->finish(&a, row, res);
    }
    free(vals);
    free(pos);
    free(parts);
}

/* Compiles the kernel, runs it every way and compares; returns the object for more checks
 * when keep_obj is given. */
static void check_launch(launch *L, void **keep_obj, size_t *keep_size)
{
    const cg_llvm_api *api = kb_llvm_api(NULL);
    kir_kernel *k = L->k;
    char why[512];
    cr_assert(kir_valid(k, why, sizeof why), "kernel %s is not valid: %s", k->name, why);
    kir_args ea = args_of(L, EVAL);
    cr_assert_eq(kir_eval(k, &ea), BURNC_OK, "kir_eval %s: %s", k->name, burnc_error_message());

    cg_cpu_kernel jit, obj_k;
    void *obj = NULL;
    size_t obj_size = 0;
    cr_assert(api->compile_cpu(k, &jit, &obj, &obj_size, why, sizeof why), "compile %s: %s", k->name, why);
    cr_assert(jit.rows && obj && obj_size > 0);
    bool elementwise = k->n_stages == 0 && k->n_outer == k->rank;
    cr_assert_eq(jit.finish == NULL, elementwise, "%s: finish is %p", k->name, (void *)jit.finish);
    run_rows(&jit, L, JIT);
    expect_same(L, JIT, "rows");

    cr_assert(cg_object_load(obj, obj_size, &obj_k, why, sizeof why), "loading %s's object: %s", k->name, why);
    cr_assert_eq(obj_k.leaves == NULL, jit.leaves == NULL);
    cr_assert_eq(obj_k.finish == NULL, jit.finish == NULL);
    run_rows(&obj_k, L, OBJ);
    expect_same(L, OBJ, "object rows");

    if (jit.leaves) {
        run_leaves(&jit, L);
        expect_same(L, LEAVES, "leaves");
        for (int s = 0; s < k->n_outputs; s++)
            memset(L->out[LEAVES][s], 0xa5, L->out_size[s]);
        run_leaves(&obj_k, L);
        expect_same(L, LEAVES, "object leaves");
    }
    cg_object_release(&obj_k);
    api->release_cpu(&jit);
    if (keep_obj) {
        *keep_obj = obj;
        *keep_size = obj_size;
    } else {
        free(obj);
    }
}

/* The common case: dense slots, then check. */
static void check(kir_kernel *k, const int64_t *ext, bool tame)
{
    launch L;
    launch_init(&L, k, ext);
    L.tame = tame;
    for (int i = 0; i < 16; i++)
        L.scalars[i].f = wild_f();
    launch_buffers(&L, NULL, NULL, NULL, NULL);
    check_launch(&L, NULL, NULL);
    launch_free(&L);
}

/* ---- Element-wise kernels ---------------------------------------------------------------- */

Test(codegen, f32_chain_broadcast_strided)
{
    kir_kernel k;
    kir_init(&k, 2, 2);
    snprintf(k.name, sizeof k.name, "f32_chain");
    k.n_scalars = 2;
    int x = in_slot(&k, BURNC_DTYPE_F32, "s1"), row = in_slot(&k, BURNC_DTYPE_F32, "01");
    int col = in_slot(&k, BURNC_DTYPE_F32, "s0"), tr = in_slot(&k, BURNC_DTYPE_F32, "ss");
    int o1 = out_slot(&k, BURNC_DTYPE_F32, "s1"), o2 = out_slot(&k, BURNC_DTYPE_F64, "ss");
    int32_t vx = LD(&k, x), vr = LD(&k, row), vc = LD(&k, col), vt = LD(&k, tr);
    int32_t s0 = kir_emit(&k, KIR_ARG, KIR_F32, 0, -1, -1);
    int32_t i1 = OP1(&k, KIR_CONVERT, KIR_F32, kir_emit(&k, KIR_INDEX, KIR_I64, 1, -1, -1));
    int32_t a = OP3(&k, KIR_FMA, KIR_F32, vx, vr, vc);
    int32_t b = OP2(&k, KIR_DIV, KIR_F32, OP2(&k, KIR_SUB, KIR_F32, a, vt), s0);
    int32_t c = OP2(&k, KIR_ADD, KIR_F32, OP1(&k, KIR_SQRT, KIR_F32, OP1(&k, KIR_ABS, KIR_F32, vx)), i1);
    int32_t d = OP2(&k, KIR_MUL, KIR_F32, b, c);
    STORE(&k, o1, d, false);
    STORE(&k, o2, OP1(&k, KIR_CONVERT, KIR_F64, OP2(&k, KIR_REM, KIR_F32, d, vr)), false);
    launch L;
    launch_init(&L, &k, (const int64_t[]){37, 133});
    for (int i = 0; i < 2; i++)
        L.scalars[i].f = 1.0 + rnd_unit();
    size_t sin[4] = {0}, sout[2] = {0};
    bool cin[4] = {false, false, false, true}, cout[2] = {false, true};
    sin[3] = layout(&L, false, tr, (const int64_t[]){1, 37}, 1, 0);   /* transposed */
    sout[1] = layout(&L, true, o2, (const int64_t[]){-140, 1}, 1, 3); /* flipped rows, gaps */
    launch_buffers(&L, cin, cout, sin, sout);
    check_launch(&L, NULL, NULL);
    launch_free(&L);
    BT_LEAK_CHECK();
}

Test(codegen, rank0_to_rank3)
{
    for (int rank = 0; rank <= 3; rank++) {
        kir_kernel k;
        kir_init(&k, rank, rank);
        snprintf(k.name, sizeof k.name, "rank%d", rank);
        char cls[4] = "sss";
        cls[rank] = '\0';
        if (rank)
            cls[rank - 1] = '1';
        int a = in_slot(&k, BURNC_DTYPE_F64, cls), b = in_slot(&k, BURNC_DTYPE_I32, cls);
        int o = out_slot(&k, BURNC_DTYPE_F64, cls), p = out_slot(&k, BURNC_DTYPE_I64, cls);
        int32_t va = LD(&k, a), vb = LD(&k, b);
        int32_t sum = OP2(&k, KIR_ADD, KIR_F64, va, OP1(&k, KIR_CONVERT, KIR_F64, vb));
        STORE(&k, o, OP1(&k, KIR_FLOOR, KIR_F64, sum), false);
        int32_t idx = rank ? kir_emit(&k, KIR_INDEX, KIR_I64, rank - 1, -1, -1) : kir_const_i(&k, KIR_I64, 5);
        STORE(&k, p, OP2(&k, KIR_MUL, KIR_I64, OP1(&k, KIR_CONVERT, KIR_I64, vb), idx), true);
        static const int64_t ext[3] = {3, 5, 67};
        check(&k, ext + (3 - rank), false);
    }
    BT_LEAK_CHECK();
}

/* Stores into an output that is broadcast along the inner axis: every position of a row writes
 * the same element and the last one stays, in vector steps too. */
Test(codegen, store_into_broadcast_output)
{
    for (int64_t cols = 77; cols <= 80; cols += 3) { /* a run ending in the scalar tail, then in a vector step */
        kir_kernel k;
        kir_init(&k, 2, 2);
        snprintf(k.name, sizeof k.name, "store_bcast");
        int a = in_slot(&k, BURNC_DTYPE_F32, "s1");
        int o = out_slot(&k, BURNC_DTYPE_F32, "s0"), p = out_slot(&k, BURNC_DTYPE_BF16, "0s");
        int32_t v = OP2(&k, KIR_ADD, KIR_F32, LD(&k, a),
                        OP1(&k, KIR_CONVERT, KIR_F32, kir_emit(&k, KIR_INDEX, KIR_I64, 1, -1, -1)));
        STORE(&k, o, v, false);
        STORE(&k, p, OP1(&k, KIR_NEG, KIR_F32, v), false);
        check(&k, (const int64_t[]){5, cols}, false);
    }
    BT_LEAK_CHECK();
}

Test(codegen, empty_domain_does_nothing)
{
    kir_kernel k;
    kir_init(&k, 2, 2);
    int a = in_slot(&k, BURNC_DTYPE_F32, "s1"), o = out_slot(&k, BURNC_DTYPE_F32, "s1");
    STORE(&k, o, OP1(&k, KIR_NEG, KIR_F32, LD(&k, a)), false);
    check(&k, (const int64_t[]){0, 9}, false);
    kir_init(&k, 2, 2);
    a = in_slot(&k, BURNC_DTYPE_F32, "s1"), o = out_slot(&k, BURNC_DTYPE_F32, "s1");
    STORE(&k, o, OP1(&k, KIR_NEG, KIR_F32, LD(&k, a)), false);
    check(&k, (const int64_t[]){7, 0}, false);
    BT_LEAK_CHECK();
}

/* f16 and bf16 in memory, f32 in registers, KIR_ROUND after each op as fusion emits it; stores
 * round f32, f64 and integers once. */
Test(codegen, f16_bf16_rounding)
{
    kir_kernel k;
    kir_init(&k, 1, 1);
    snprintf(k.name, sizeof k.name, "narrow");
    int h = in_slot(&k, BURNC_DTYPE_F16, "1"), bh = in_slot(&k, BURNC_DTYPE_BF16, "1");
    int d = in_slot(&k, BURNC_DTYPE_F64, "1"), i = in_slot(&k, BURNC_DTYPE_I64, "1"),
        j = in_slot(&k, BURNC_DTYPE_I32, "1");
    int o_h = out_slot(&k, BURNC_DTYPE_F16, "1"), o_b = out_slot(&k, BURNC_DTYPE_BF16, "1");
    int o_dh = out_slot(&k, BURNC_DTYPE_F16, "1"), o_db = out_slot(&k, BURNC_DTYPE_BF16, "1");
    int o_ih = out_slot(&k, BURNC_DTYPE_F16, "1"), o_ib = out_slot(&k, BURNC_DTYPE_BF16, "1");
    int o_jb = out_slot(&k, BURNC_DTYPE_BF16, "1"), o_r = out_slot(&k, BURNC_DTYPE_F32, "1");
    int32_t vh = LD(&k, h), vb = LD(&k, bh);
    int32_t p = ROUND(&k, OP2(&k, KIR_MUL, KIR_F32, vh, vb), KIR_F16);
    int32_t q = ROUND(&k, OP2(&k, KIR_ADD, KIR_F32, p, vh), KIR_F16);
    STORE(&k, o_h, q, false);
    STORE(&k, o_b, OP2(&k, KIR_SUB, KIR_F32, vb, vh), false);
    STORE(&k, o_dh, LD(&k, d), false);
    STORE(&k, o_db, LD(&k, d), false);
    STORE(&k, o_ih, LD(&k, i), false);
    STORE(&k, o_ib, OP1(&k, KIR_BITCAST, KIR_U64, LD(&k, i)), false);
    STORE(&k, o_jb, LD(&k, j), false);
    STORE(&k, o_r, ROUND(&k, OP2(&k, KIR_MUL, KIR_F32, vh, kir_const_f(&k, KIR_F32, 1e-3)), KIR_BF16), false);
    check(&k, (const int64_t[]){4099}, false);
    BT_LEAK_CHECK();
}

/* Every f16 and bf16 bit pattern through load, ROUND of the other format and store. */
Test(codegen, narrow_all_patterns)
{
    kir_kernel k;
    kir_init(&k, 1, 1);
    snprintf(k.name, sizeof k.name, "narrow_all");
    int h = in_slot(&k, BURNC_DTYPE_F16, "1"), b = in_slot(&k, BURNC_DTYPE_BF16, "1");
    int o1 = out_slot(&k, BURNC_DTYPE_F16, "1"), o2 = out_slot(&k, BURNC_DTYPE_BF16, "1");
    int o3 = out_slot(&k, BURNC_DTYPE_F32, "1"), o4 = out_slot(&k, BURNC_DTYPE_F16, "1");
    STORE(&k, o1, ROUND(&k, LD(&k, b), KIR_F16), false);
    STORE(&k, o2, ROUND(&k, LD(&k, h), KIR_BF16), false);
    STORE(&k, o3, LD(&k, h), false);
    STORE(&k, o4, LD(&k, b), false);
    launch L;
    launch_init(&L, &k, (const int64_t[]){65536});
    launch_buffers(&L, NULL, NULL, NULL, NULL);
    for (uint32_t v = 0; v < 65536; v++) {
        uint16_t u = (uint16_t)v;
        memcpy((char *)L.in[h] + 2 * v, &u, 2);
        memcpy((char *)L.in[b] + 2 * v, &u, 2);
    }
    check_launch(&L, NULL, NULL);
    launch_free(&L);
    BT_LEAK_CHECK();
}

/* Integer division and remainder on every pair of edge values (a broadcast outer product):
 * floor semantics, zero divisors, MIN / -1. */
Test(codegen, int_div_rem_edges)
{
    static const kir_type TYPES[] = {KIR_I32, KIR_I64, KIR_U8, KIR_U32, KIR_U64};
    for (size_t ti = 0; ti < COUNT(TYPES); ti++) {
        kir_type t = TYPES[ti];
        burnc_dtype_t dt = t == KIR_I32 || t == KIR_U32 ? BURNC_DTYPE_I32
                           : t == KIR_U8                ? BURNC_DTYPE_U8
                                                        : BURNC_DTYPE_I64;
        kir_kernel k;
        kir_init(&k, 2, 2);
        snprintf(k.name, sizeof k.name, "divrem_%d", (int)t);
        int a = in_slot(&k, dt, "10"), b = in_slot(&k, dt, "01");
        int q = out_slot(&k, dt, "s1"), r = out_slot(&k, dt, "s1");
        int32_t va = LD(&k, a), vb = LD(&k, b);
        if (t == KIR_U32 || t == KIR_U64) {
            va = OP1(&k, KIR_BITCAST, t, va);
            vb = OP1(&k, KIR_BITCAST, t, vb);
        }
        int32_t vq = OP2(&k, KIR_DIV, t, va, vb), vr = OP2(&k, KIR_REM, t, va, vb);
        kir_type st = kir_type_of(dt);
        if (st != t) {
            vq = OP1(&k, KIR_BITCAST, st, vq);
            vr = OP1(&k, KIR_BITCAST, st, vr);
        }
        STORE(&k, q, vq, false);
        STORE(&k, r, vr, false);
        launch L;
        int64_t n = (int64_t)COUNT(SPECIAL_I) + 6;
        launch_init(&L, &k, (const int64_t[]){n, n});
        launch_buffers(&L, NULL, NULL, NULL, NULL);
        size_t es = burnc_dtype_size(dt);
        for (int64_t i = 0; i < n; i++) {
            int64_t v = i < (int64_t)COUNT(SPECIAL_I) ? SPECIAL_I[i] : (int64_t)(rnd() % 41) - 20;
            memcpy((char *)L.in[a] + i * (int64_t)es, &v, es);
            memcpy((char *)L.in[b] + i * (int64_t)es, &v, es);
        }
        check_launch(&L, NULL, NULL);
        launch_free(&L);
    }
    BT_LEAK_CHECK();
}

/* How a value of each type is read from and written to memory in the sweeps. */
static burnc_dtype_t dtype_for(kir_type t)
{
    switch (t) {
    case KIR_BOOL: return BURNC_DTYPE_BOOL;
    case KIR_U8: return BURNC_DTYPE_U8;
    case KIR_I32:
    case KIR_U32: return BURNC_DTYPE_I32;
    case KIR_I64:
    case KIR_U64: return BURNC_DTYPE_I64;
    case KIR_F64: return BURNC_DTYPE_F64;
    default: return BURNC_DTYPE_F32;
    }
}

static int32_t load_as(kir_kernel *k, int slot, kir_type t)
{
    int32_t v = LD(k, slot);
    return t == KIR_U32 || t == KIR_U64 ? OP1(k, KIR_BITCAST, t, v) : v;
}

static int32_t storable(kir_kernel *k, int32_t v, kir_type t)
{
    return t == KIR_U32 ? OP1(k, KIR_BITCAST, KIR_I32, v) : t == KIR_U64 ? OP1(k, KIR_BITCAST, KIR_I64, v) : v;
}

/* Every conversion between value types, and every store into f16/bf16 that kir_valid allows. */
Test(codegen, converts)
{
    static const kir_type ALL[] = {KIR_BOOL, KIR_U8, KIR_I32, KIR_U32, KIR_I64, KIR_U64, KIR_F32, KIR_F64};
    for (size_t fi = 0; fi < COUNT(ALL); fi++) {
        kir_type from = ALL[fi];
        kir_kernel k;
        kir_init(&k, 1, 1);
        snprintf(k.name, sizeof k.name, "convert_from_%d", (int)from);
        int a = in_slot(&k, dtype_for(from), "1");
        int32_t v = load_as(&k, a, from);
        for (size_t ti = 0; ti < COUNT(ALL); ti++) {
            int o = out_slot(&k, dtype_for(ALL[ti]), "1");
            STORE(&k, o, storable(&k, OP1(&k, KIR_CONVERT, ALL[ti], v), ALL[ti]), false);
        }
        check(&k, (const int64_t[]){1031}, false);
        if (from == KIR_BOOL || from == KIR_F32)
            continue; /* bool cannot be stored into f16/bf16; f32 is the load type, done above */
        kir_init(&k, 1, 1);
        snprintf(k.name, sizeof k.name, "narrow_from_%d", (int)from);
        a = in_slot(&k, dtype_for(from), "1");
        v = load_as(&k, a, from);
        STORE(&k, out_slot(&k, BURNC_DTYPE_F16, "1"), v, false);
        STORE(&k, out_slot(&k, BURNC_DTYPE_BF16, "1"), v, false);
        check(&k, (const int64_t[]){1031}, false);
    }
    BT_LEAK_CHECK();
}

/* f32 -> bf16 (a store and KIR_ROUND): codegen's short form for this pair against the
 * library's conversion, over every 509th f32 pattern and dense windows at the edges (0,
 * subnormals, the overflow threshold, infinity and NaNs, both signs), compiled and through the
 * interpreter. */
Test(codegen, narrows_f32_to_bf16_like_the_library)
{
    static const uint32_t EDGES[] = {0x00000000, 0x00800000, 0x7f7f8000, 0x7f800000, 0x7fc00000, 0x3f800000};
    enum { STEP = 509, WIN = 4096 };
    int64_t n = (int64_t)(UINT64_C(1) << 32) / STEP + 2 * (int64_t)COUNT(EDGES) * 2 * WIN;
    kir_kernel k;
    kir_init(&k, 1, 1);
    snprintf(k.name, sizeof k.name, "narrow_bf16");
    int a = in_slot(&k, BURNC_DTYPE_F32, "1");
    int32_t v = LD(&k, a);
    STORE(&k, out_slot(&k, BURNC_DTYPE_BF16, "1"), v, false);
    STORE(&k, out_slot(&k, BURNC_DTYPE_F32, "1"), ROUND(&k, v, KIR_BF16), false);
    launch L;
    launch_init(&L, &k, (const int64_t[]){n});
    launch_buffers(&L, NULL, NULL, NULL, NULL);
    uint32_t *x = L.in[0];
    int64_t i = 0;
    for (uint64_t u = 0; u < (UINT64_C(1) << 32) && i < n; u += STEP)
        x[i++] = (uint32_t)u;
    for (size_t e = 0; e < COUNT(EDGES); e++)
        for (uint32_t sign = 0; sign < 2; sign++)
            for (int d = -WIN; d < WIN && i < n; d++)
                x[i++] = (EDGES[e] + (uint32_t)d) ^ (sign << 31);
    for (; i < n; i++)
        x[i] = 0x7f800001u;
    check_launch(&L, NULL, NULL);
    const uint16_t *h = L.out[JIT][0];
    const float *r = L.out[JIT][1];
    for (i = 0; i < n; i++) {
        float f;
        memcpy(&f, &x[i], sizeof f);
        uint16_t want = burnc_f32_to_bf16(f);
        cr_assert_eq(h[i], want, "f32 %#010x -> bf16 %#06x, the library gives %#06x", x[i], h[i], want);
        float w = burnc_bf16_to_f32(want), got = r[i];
        cr_assert(memcmp(&got, &w, sizeof w) == 0 || (isnan(got) && isnan(w)), "round %#010x: %a, not %a", x[i],
                  got, w);
    }
    launch_free(&L);
    BT_LEAK_CHECK();
}

/* ---- The opcode sweep -------------------------------------------------------------------- */

static const kir_type SWEEP_TYPES[] = {KIR_BOOL, KIR_U8, KIR_I32, KIR_U32, KIR_I64, KIR_U64, KIR_F32, KIR_F64};
static const kir_opcode SWEEP_OPS[] = {
    KIR_NEG, KIR_ABS, KIR_SQRT, KIR_FLOOR, KIR_CEIL, KIR_TRUNC, KIR_RINT, KIR_NOT, KIR_BITCAST, KIR_ROUND,
    KIR_ADD, KIR_SUB, KIR_MUL,  KIR_DIV,   KIR_REM,  KIR_MULHI, KIR_AND,  KIR_OR,  KIR_XOR,     KIR_SHL,
    KIR_SHR, KIR_EQ,  KIR_NE,   KIR_LT,    KIR_LE,   KIR_GT,    KIR_GE,   KIR_FMA, KIR_SELECT};

/* Appends `op` on operands of type t read from slots a, b, c; returns the result, or -1
 * (with the kernel unchanged) when kir_valid does not accept the combination. */
static int32_t sweep_op(kir_kernel *k, kir_opcode op, kir_type t, int a, int b, int c, kir_type *rt)
{
    int n0 = k->n_insts;
    int32_t va = load_as(k, a, t), vb = load_as(k, b, t), vc = load_as(k, c, t), r;
    kir_type res = t;
    if (op == KIR_BITCAST) {
        res = t == KIR_I32   ? KIR_F32
              : t == KIR_F32 ? KIR_U32
              : t == KIR_U32 ? KIR_I32
              : t == KIR_I64 ? KIR_F64
              : t == KIR_F64 ? KIR_U64
                             : KIR_I64;
        r = OP1(k, op, res, va);
    } else if (op == KIR_ROUND) {
        r = ROUND(k, va, rnd() & 1 ? KIR_F16 : KIR_BF16);
    } else if (op >= KIR_EQ && op <= KIR_GE) {
        res = KIR_BOOL;
        r = OP2(k, op, res, va, vb);
    } else if (op == KIR_SELECT) {
        r = OP3(k, op, t, OP2(k, KIR_LT, KIR_BOOL, va, vc), vb, vc);
    } else if (op == KIR_FMA) {
        r = OP3(k, op, t, va, vb, vc);
    } else if (op <= KIR_ROUND) {
        r = OP1(k, op, t, va);
    } else {
        r = OP2(k, op, t, va, vb);
    }
    char why[256];
    int n_stores = k->n_stores, n_outputs = k->n_outputs, n_stages = k->n_stages;
    int o = out_slot(k, dtype_for(res), "11");
    STORE(k, o, storable(k, r, res), false);
    bool ok = kir_valid(k, why, sizeof why);
    k->n_stores = n_stores;
    k->n_outputs = n_outputs;
    k->n_stages = n_stages;
    if (!ok) {
        k->n_insts = n0;
        return -1;
    }
    *rt = res;
    return r;
}

/* Element-wise: up to 8 ops per kernel, each stored. The inner strides vary: UNIT for a,
 * ANY (step 2) for b, ZERO for c. */
Test(codegen, opcode_sweep_elementwise)
{
    for (size_t ti = 0; ti < COUNT(SWEEP_TYPES); ti++) {
        kir_type t = SWEEP_TYPES[ti];
        size_t oi = 0;
        while (oi < COUNT(SWEEP_OPS)) {
            kir_kernel k;
            kir_init(&k, 2, 2);
            snprintf(k.name, sizeof k.name, "sweep_t%d_op%zu", (int)t, oi);
            burnc_dtype_t dt = dtype_for(t);
            int a = in_slot(&k, dt, "s1"), b = in_slot(&k, dt, "ss"), c = in_slot(&k, dt, "s0");
            int n = 0;
            for (; oi < COUNT(SWEEP_OPS) && n < KIR_MAX_OUTPUTS; oi++) {
                kir_type rt;
                int32_t r = sweep_op(&k, SWEEP_OPS[oi], t, a, b, c, &rt);
                if (r < 0)
                    continue;
                STORE(&k, out_slot(&k, dtype_for(rt), "s1"), storable(&k, r, rt), false);
                n++;
            }
            if (n == 0) {
                kir_free(&k);
                continue;
            }
            launch L;
            launch_init(&L, &k, (const int64_t[]){3, 333});
            bool cin[3] = {false, true, false};
            size_t sin[3] = {0};
            sin[b] = layout(&L, false, b, NULL, 2, 0);
            launch_buffers(&L, cin, NULL, sin, NULL);
            check_launch(&L, NULL, NULL);
            launch_free(&L);
        }
    }
    BT_LEAK_CHECK();
}

/* The same ops inside reductions, where the codegen evaluates 32 positions at a time in its
 * own vector code: each result is mapped to a number (NaN and infinities to constants) and
 * summed, so any lane that differs changes a stage result. */
static int32_t summable(kir_kernel *k, int32_t v, kir_type t, kir_type *st)
{
    if (t == KIR_F32 || t == KIR_F64) {
        int32_t nan = OP2(k, KIR_NE, KIR_BOOL, v, v);
        int32_t big = OP2(k, KIR_GT, KIR_BOOL, OP1(k, KIR_ABS, t, v), kir_const_f(k, t, 1e30));
        v = OP3(k, KIR_SELECT, t, nan, kir_const_f(k, t, 7.0), v);
        v = OP3(k, KIR_SELECT, t, big, kir_const_f(k, t, -3.0), v);
        *st = t;
        return v;
    }
    *st = KIR_I64;
    return OP1(k, KIR_CONVERT, KIR_I64, v);
}

static void reduction_sweep(const char *inner_classes)
{
    for (size_t ti = 0; ti < COUNT(SWEEP_TYPES); ti++) {
        kir_type t = SWEEP_TYPES[ti];
        size_t oi = 0;
        while (oi < COUNT(SWEEP_OPS)) {
            kir_kernel k;
            kir_init(&k, 2, 1);
            snprintf(k.name, sizeof k.name, "rsweep_%s_t%d_op%zu", inner_classes, (int)t, oi);
            burnc_dtype_t dt = dtype_for(t);
            char cls[3][3] = {{'s', inner_classes[0], 0}, {'s', inner_classes[1], 0}, {'s', inner_classes[2], 0}};
            int a = in_slot(&k, dt, cls[0]), b = in_slot(&k, dt, cls[1]), c = in_slot(&k, dt, cls[2]);
            int n = 0;
            for (; oi < COUNT(SWEEP_OPS) && n < KIR_MAX_STAGES; oi++) {
                kir_type rt, st;
                int32_t r = sweep_op(&k, SWEEP_OPS[oi], t, a, b, c, &rt);
                if (r < 0)
                    continue;
                int s = STAGE(&k, KIR_COMBINE_SUM, summable(&k, r, rt, &st));
                int o = out_slot(&k, st == KIR_I64 ? BURNC_DTYPE_I64 : dtype_for(st), "s0");
                STORE(&k, o, REDUCED(&k, s), true);
                n++;
            }
            if (n == 0) {
                kir_free(&k);
                continue;
            }
            launch L;
            launch_init(&L, &k, (const int64_t[]){4, 77});
            L.tame = true;
            bool cin[3] = {false, false, false};
            size_t sin[3] = {0};
            for (int s = 0; s < 3; s++)
                if (inner_classes[s] == 's') {
                    cin[s] = true;
                    sin[s] = layout(&L, false, s, NULL, 3, 0);
                }
            launch_buffers(&L, cin, NULL, sin, NULL);
            check_launch(&L, NULL, NULL);
            launch_free(&L);
        }
    }
}

Test(codegen, opcode_sweep_reduction_contiguous)
{
    reduction_sweep("111");
    BT_LEAK_CHECK();
}
Test(codegen, opcode_sweep_reduction_gather_splat)
{
    reduction_sweep("s01");
    BT_LEAK_CHECK();
}

/* The math functions of ir/math.c are long sequences of everything above (bit casts, integer
 * exponent work, rint, fma, selects): the workload that matters, element-wise and in the
 * reduction's vector code. */
typedef int32_t (*math1_fn)(kir_kernel *k, int32_t x);
typedef int32_t (*math2_fn)(kir_kernel *k, int32_t x, int32_t y);

static const math1_fn MATH1[] = {kir_exp, kir_exp2, kir_expm1, kir_log,  kir_log2, kir_log1p,
                                 kir_sin, kir_cos,  kir_tan,   kir_tanh, kir_erf,  kir_erfc, kir_sigmoid};
static const math2_fn MATH2[] = {kir_atan2, kir_pow};

static int32_t math_value(kir_kernel *k, size_t f, int32_t x, int32_t y)
{
    return f < COUNT(MATH1) ? MATH1[f](k, x) : MATH2[f - COUNT(MATH1)](k, x, y);
}

Test(codegen, math_functions)
{
    static const kir_type TYPES[] = {KIR_F32, KIR_F64};
    size_t n_fn = COUNT(MATH1) + COUNT(MATH2);
    for (size_t ti = 0; ti < COUNT(TYPES); ti++) {
        kir_type t = TYPES[ti];
        burnc_dtype_t dt = dtype_for(t);
        for (size_t f0 = 0; f0 < n_fn; f0 += KIR_MAX_OUTPUTS) {
            kir_kernel k;
            kir_init(&k, 1, 1);
            snprintf(k.name, sizeof k.name, "math_t%d_f%zu", (int)t, f0);
            int a = in_slot(&k, dt, "1"), b = in_slot(&k, dt, "s");
            int32_t x = LD(&k, a), y = LD(&k, b);
            for (size_t f = f0; f < n_fn && f < f0 + KIR_MAX_OUTPUTS; f++)
                STORE(&k, out_slot(&k, dt, "1"), math_value(&k, f, x, y), false);
            check(&k, (const int64_t[]){2053}, false);
        }
        for (size_t f0 = 0; f0 < n_fn; f0 += KIR_MAX_STAGES) {
            kir_kernel k;
            kir_init(&k, 2, 1);
            snprintf(k.name, sizeof k.name, "math_sum_t%d_f%zu", (int)t, f0);
            int a = in_slot(&k, dt, "s1"), b = in_slot(&k, dt, "ss");
            int32_t x = LD(&k, a), y = LD(&k, b);
            for (size_t f = f0; f < n_fn && f < f0 + KIR_MAX_STAGES; f++) {
                kir_type st;
                int s = STAGE(&k, KIR_COMBINE_SUM, summable(&k, math_value(&k, f, x, y), t, &st));
                STORE(&k, out_slot(&k, dt, "s0"), REDUCED(&k, s), true);
            }
            check(&k, (const int64_t[]){3, 333}, true);
        }
    }
    BT_LEAK_CHECK();
}

/* ---- Reductions -------------------------------------------------------------------------- */

/* One stage over long rows, result stored per row: through rows() and leaves()+finish(). */
static void single_stage(kir_combiner comb, burnc_dtype_t dt, int rank, int n_outer, const int64_t *ext,
                         const char *in_cls, const char *out_cls, bool tame)
{
    kir_kernel k;
    kir_init(&k, rank, n_outer);
    snprintf(k.name, sizeof k.name, "stage_c%d_%s_r%d", (int)comb, burnc_dtype_name(dt), rank);
    int a = in_slot(&k, dt, in_cls);
    kir_type t = kir_type_of(dt);
    int32_t v = LD(&k, a);
    if (t == KIR_F32 && comb == KIR_COMBINE_SUM)
        v = OP2(&k, KIR_MUL, KIR_F32, v, v);
    int s = STAGE(&k, comb, v);
    bool arg = comb == KIR_COMBINE_ARGMAX || comb == KIR_COMBINE_ARGMIN;
    int o = out_slot(&k, arg ? BURNC_DTYPE_I64 : dt, out_cls);
    int32_t r = REDUCED(&k, s);
    if (dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16) /* the row store rounds once */
        r = ROUND(&k, r, dt == BURNC_DTYPE_F16 ? KIR_F16 : KIR_BF16);
    STORE(&k, o, r, true);
    check(&k, ext, tame);
}

Test(codegen, reductions_single_stage)
{
    const int64_t long_rows[2] = {3, 3 * KIR_LEAF + 1234};
    single_stage(KIR_COMBINE_SUM, BURNC_DTYPE_F32, 2, 1, long_rows, "s1", "s0", true);
    single_stage(KIR_COMBINE_MAX, BURNC_DTYPE_F32, 2, 1, long_rows, "s1", "s0", false);
    single_stage(KIR_COMBINE_ARGMAX, BURNC_DTYPE_F32, 2, 1, long_rows, "s1", "s0", false);
    single_stage(KIR_COMBINE_ARGMIN, BURNC_DTYPE_F64, 2, 1, long_rows, "s1", "s0", false);
    single_stage(KIR_COMBINE_MIN, BURNC_DTYPE_F64, 2, 1, long_rows, "s1", "s0", false);
    single_stage(KIR_COMBINE_PROD, BURNC_DTYPE_F64, 2, 1, (const int64_t[]){5, 300}, "s1", "s0", true);
    single_stage(KIR_COMBINE_SUM, BURNC_DTYPE_I32, 2, 1, long_rows, "s1", "s0", false);
    single_stage(KIR_COMBINE_PROD, BURNC_DTYPE_I64, 2, 1, long_rows, "s1", "s0", false);
    single_stage(KIR_COMBINE_MAX, BURNC_DTYPE_U8, 2, 1, long_rows, "s1", "s0", false);
    single_stage(KIR_COMBINE_ARGMAX, BURNC_DTYPE_I64, 2, 1, long_rows, "s1", "s0", false);
    single_stage(KIR_COMBINE_ARGMIN, BURNC_DTYPE_BOOL, 2, 1, long_rows, "s1", "s0", false);
    single_stage(KIR_COMBINE_MIN, BURNC_DTYPE_I32, 2, 1, long_rows, "s1", "s0", false);
    single_stage(KIR_COMBINE_SUM, BURNC_DTYPE_BF16, 2, 1, long_rows, "s1", "s0", true);
    BT_LEAK_CHECK();
}

Test(codegen, reductions_shapes)
{
    /* the whole tensor as one row: 257 leaves, an odd count at several tree levels */
    single_stage(KIR_COMBINE_SUM, BURNC_DTYPE_F32, 1, 0, (const int64_t[]){256 * KIR_LEAF + 77}, "1", "0", true);
    /* two reduced axes, an inner extent that is no multiple of 32: runs cross lanes */
    single_stage(KIR_COMBINE_SUM, BURNC_DTYPE_F32, 3, 1, (const int64_t[]){4, 37, 300}, "ss1", "s00", true);
    single_stage(KIR_COMBINE_ARGMAX, BURNC_DTYPE_F32, 3, 1, (const int64_t[]){4, 37, 300}, "sss", "s00", false);
    /* rows shorter than a vector */
    single_stage(KIR_COMBINE_SUM, BURNC_DTYPE_F64, 2, 1, (const int64_t[]){50, 7}, "s1", "s0", true);
    /* strided (gathered) and broadcast inner axes */
    single_stage(KIR_COMBINE_MAX, BURNC_DTYPE_F32, 3, 1, (const int64_t[]){3, 5, 1000}, "ss0", "s00", false);
    single_stage(KIR_COMBINE_SUM, BURNC_DTYPE_I64, 2, 1, (const int64_t[]){3, 5000}, "ss", "s0", false);
    /* two outer axes */
    single_stage(KIR_COMBINE_MIN, BURNC_DTYPE_F32, 3, 2, (const int64_t[]){3, 4, 999}, "ss1", "ss0", false);
    /* empty rows reduce to the identity (ARG: position 0); row stores still run */
    single_stage(KIR_COMBINE_SUM, BURNC_DTYPE_F32, 2, 1, (const int64_t[]){5, 0}, "s1", "s0", false);
    single_stage(KIR_COMBINE_ARGMAX, BURNC_DTYPE_F32, 2, 1, (const int64_t[]){5, 0}, "s1", "s0", false);
    single_stage(KIR_COMBINE_MAX, BURNC_DTYPE_I32, 3, 1, (const int64_t[]){2, 0, 3}, "ss1", "s00", false);
    /* a reduction over no axes: one position per row */
    single_stage(KIR_COMBINE_SUM, BURNC_DTYPE_F32, 2, 2, (const int64_t[]){6, 7}, "s1", "s1", false);
    BT_LEAK_CHECK();
}

/* Ties and NaNs decide ARGMAX/ARGMIN: few distinct values, so every leaf and lane sees ties. */
Test(codegen, argmax_ties_and_nans)
{
    for (int variant = 0; variant < 4; variant++) {
        kir_kernel k;
        kir_init(&k, 2, 1);
        snprintf(k.name, sizeof k.name, "argties%d", variant);
        int a = in_slot(&k, BURNC_DTYPE_F32, "s1");
        int s0 = STAGE(&k, variant & 1 ? KIR_COMBINE_ARGMIN : KIR_COMBINE_ARGMAX, LD(&k, a));
        STORE(&k, out_slot(&k, BURNC_DTYPE_I64, "s0"), REDUCED(&k, s0), true);
        launch L;
        launch_init(&L, &k, (const int64_t[]){8, 2 * KIR_LEAF + 45});
        launch_buffers(&L, NULL, NULL, NULL, NULL);
        static const float VALS[] = {1.0f, 2.0f, -0.0f, 0.0f, 2.0f, -INFINITY, INFINITY};
        float *x = L.in[a];
        for (int64_t i = 0; i < 8 * (2 * KIR_LEAF + 45); i++) {
            x[i] = VALS[rnd() % COUNT(VALS)];
            if (variant >= 2 && rnd() % 3000 == 0)
                x[i] = NAN;
        }
        check_launch(&L, NULL, NULL);
        launch_free(&L);
    }
    BT_LEAK_CHECK();
}

/* MAX and MIN keep the left operand only when it is strictly better (or NaN): with rows
 * whose extreme is a zero of either sign, the sign of the result shows every combine's operand
 * order, in lanes, in the lane tree and in the leaf tree. */
Test(codegen, max_min_signed_zero_ties)
{
    for (int variant = 0; variant < 4; variant++) {
        kir_kernel k;
        kir_init(&k, 2, 1);
        snprintf(k.name, sizeof k.name, "zero_ties%d", variant);
        burnc_dtype_t dt = variant & 2 ? BURNC_DTYPE_F64 : BURNC_DTYPE_F32;
        int a = in_slot(&k, dt, "s1");
        int s0 = STAGE(&k, variant & 1 ? KIR_COMBINE_MIN : KIR_COMBINE_MAX, LD(&k, a));
        STORE(&k, out_slot(&k, dt, "s0"), REDUCED(&k, s0), true);
        launch L;
        int64_t len[2] = {64, 1 + (int64_t)(rnd() % (3 * KIR_LEAF))};
        launch_init(&L, &k, len);
        launch_buffers(&L, NULL, NULL, NULL, NULL);
        for (int64_t i = 0; i < len[0] * len[1]; i++) {
            double v = rnd() % 2 ? -0.0 : 0.0;
            if (rnd() % 4 == 0)
                v = variant & 1 ? 1.0 : -1.0;
            if (dt == BURNC_DTYPE_F32)
                ((float *)L.in[a])[i] = (float)v;
            else
                ((double *)L.in[a])[i] = v;
        }
        check_launch(&L, NULL, NULL);
        launch_free(&L);
    }
    BT_LEAK_CHECK();
}

/* softmax over rows: MAX, then SUM of a function of x - max, then element stores dividing by
 * the sum, plus row stores of both stage results (rows of 4096 + odd lengths). */
static void softmax_like(const int64_t *ext)
{
    kir_kernel k;
    kir_init(&k, 2, 1);
    snprintf(k.name, sizeof k.name, "softmax_like");
    int x = in_slot(&k, BURNC_DTYPE_F32, "s1");
    int out = out_slot(&k, BURNC_DTYPE_F32, "s1"), m_out = out_slot(&k, BURNC_DTYPE_F32, "s0");
    int s_out = out_slot(&k, BURNC_DTYPE_F64, "s0");
    int32_t vx = LD(&k, x);
    int s0 = STAGE(&k, KIR_COMBINE_MAX, vx);
    int32_t d = OP2(&k, KIR_SUB, KIR_F32, vx, REDUCED(&k, s0));
    /* 1 / (1 + d^2): a stand-in for exp that stays positive */
    int32_t e = OP2(&k, KIR_DIV, KIR_F32, kir_const_f(&k, KIR_F32, 1.0),
                    OP3(&k, KIR_FMA, KIR_F32, d, d, kir_const_f(&k, KIR_F32, 1.0)));
    int s1 = STAGE(&k, KIR_COMBINE_SUM, e);
    STORE(&k, out, OP2(&k, KIR_DIV, KIR_F32, e, REDUCED(&k, s1)), false);
    STORE(&k, m_out, REDUCED(&k, s0), true);
    STORE(&k, s_out, OP1(&k, KIR_CONVERT, KIR_F64, REDUCED(&k, s1)), true);
    check(&k, ext, true);
}

/* layer_norm over rows: mean, variance (ROW_LEN as the count), normalized element stores with
 * a broadcast weight and bias. */
static void layer_norm_like(const int64_t *ext)
{
    kir_kernel k;
    kir_init(&k, 2, 1);
    snprintf(k.name, sizeof k.name, "layer_norm_like");
    int x = in_slot(&k, BURNC_DTYPE_F32, "s1"), w = in_slot(&k, BURNC_DTYPE_F32, "01");
    int bias = in_slot(&k, BURNC_DTYPE_BF16, "01");
    int out = out_slot(&k, BURNC_DTYPE_BF16, "s1");
    int32_t vx = LD(&k, x);
    int32_t n = OP1(&k, KIR_CONVERT, KIR_F32, kir_emit(&k, KIR_ROW_LEN, KIR_I64, -1, -1, -1));
    int s0 = STAGE(&k, KIR_COMBINE_SUM, vx);
    int32_t mean = OP2(&k, KIR_DIV, KIR_F32, REDUCED(&k, s0), n);
    int32_t c = OP2(&k, KIR_SUB, KIR_F32, vx, mean);
    int s1 = STAGE(&k, KIR_COMBINE_SUM, OP2(&k, KIR_MUL, KIR_F32, c, c));
    int32_t var = OP2(&k, KIR_DIV, KIR_F32, REDUCED(&k, s1), n);
    int32_t inv = OP2(&k, KIR_DIV, KIR_F32, kir_const_f(&k, KIR_F32, 1.0),
                      OP1(&k, KIR_SQRT, KIR_F32, OP2(&k, KIR_ADD, KIR_F32, var, kir_const_f(&k, KIR_F32, 1e-5))));
    int32_t y = OP3(&k, KIR_FMA, KIR_F32, OP2(&k, KIR_MUL, KIR_F32, c, inv), LD(&k, w), LD(&k, bias));
    STORE(&k, out, y, false);
    check(&k, ext, true);
}

Test(codegen, multi_stage)
{
    softmax_like((const int64_t[]){16, KIR_LEAF});
    softmax_like((const int64_t[]){7, 2 * KIR_LEAF + 100});
    softmax_like((const int64_t[]){33, 45});
    layer_norm_like((const int64_t[]){9, 1000});
    layer_norm_like((const int64_t[]){2, 3 * KIR_LEAF + 3});
    BT_LEAK_CHECK();
}

/* A kernel whose stages feed an element store: no leaves() (cg.h), finish present. */
Test(codegen, entry_points_by_shape)
{
    const cg_llvm_api *api = kb_llvm_api(NULL);
    kir_kernel k;
    kir_init(&k, 2, 1);
    int x = in_slot(&k, BURNC_DTYPE_F32, "s1"), o = out_slot(&k, BURNC_DTYPE_F32, "s1");
    int s0 = STAGE(&k, KIR_COMBINE_SUM, LD(&k, x));
    STORE(&k, o, OP2(&k, KIR_SUB, KIR_F32, LD(&k, x), REDUCED(&k, s0)), false);
    cg_cpu_kernel f;
    char why[256];
    cr_assert(api->compile_cpu(&k, &f, NULL, NULL, why, sizeof why), "%s", why);
    cr_assert(f.rows && f.finish && !f.leaves);
    api->release_cpu(&f);
    cr_assert_null(f.rows);
    kir_free(&k);
    BT_LEAK_CHECK();
}

Test(codegen, invalid_kernel_refused)
{
    const cg_llvm_api *api = kb_llvm_api(NULL);
    kir_kernel k;
    kir_init(&k, 1, 1);
    int x = in_slot(&k, BURNC_DTYPE_F32, "1"), o = out_slot(&k, BURNC_DTYPE_I32, "1");
    int32_t v = LD(&k, x);
    STORE(&k, o, OP2(&k, KIR_ADD, KIR_I32, v, v), false); /* f32 operands, i32 result */
    cg_cpu_kernel f;
    char why[256] = "";
    cr_assert_not(api->compile_cpu(&k, &f, NULL, NULL, why, sizeof why));
    cr_assert(strstr(why, "types"), "reason: %s", why);
    cr_assert_null(f.rows);
    kir_free(&k);
    BT_LEAK_CHECK();
}

Test(codegen, host_and_version)
{
    const cg_llvm_api *api = kb_llvm_api(NULL);
    cr_assert(api->llvm_version && strncmp(api->llvm_version, "19.", 3) == 0, "%s", api->llvm_version);
    const char *cpu = api->host_cpu();
    cr_assert(cpu && strstr(cpu, "cpu=") && strstr(cpu, "features=+"), "%s", cpu);
    BT_LEAK_CHECK();
}

/* Several threads compile and run at once (one LLJIT, a dylib per kernel). */
typedef struct thread_job {
    int id;
    bool ok;
    char why[256];
} thread_job;

static void *compile_thread(void *p)
{
    thread_job *j = p;
    const cg_llvm_api *api = kb_llvm_api(NULL);
    j->ok = true;
    for (int rep = 0; rep < 3 && j->ok; rep++) {
        kir_kernel k;
        kir_init(&k, 1, 1);
        int x = in_slot(&k, BURNC_DTYPE_F32, "1"), o = out_slot(&k, BURNC_DTYPE_F32, "1");
        int32_t v = OP2(&k, KIR_MUL, KIR_F32, LD(&k, x), kir_const_f(&k, KIR_F32, (double)(j->id * 10 + rep)));
        STORE(&k, o, v, false);
        cg_cpu_kernel f;
        if (!api->compile_cpu(&k, &f, NULL, NULL, j->why, sizeof j->why)) {
            j->ok = false;
        } else {
            float in[100], out[100];
            for (int i = 0; i < 100; i++)
                in[i] = (float)i;
            void *ins[1] = {in}, *outs[1] = {out};
            int64_t ext = 100, zero = 0, one = 1;
            kir_args a = {ins, outs, &ext, &zero, &one, &zero, &one, NULL, 0};
            f.rows(&a, 0, 100);
            for (int i = 0; i < 100; i++)
                if (out[i] != (float)i * (float)(j->id * 10 + rep)) {
                    snprintf(j->why, sizeof j->why, "thread %d: out[%d] = %g", j->id, i, (double)out[i]);
                    j->ok = false;
                }
            api->release_cpu(&f);
        }
        kir_free(&k);
    }
    return NULL;
}

Test(codegen, concurrent_compiles)
{
    kb_llvm_api(NULL);
    pthread_t th[4];
    thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){.id = i + 1};
        cr_assert_eq(pthread_create(&th[i], NULL, compile_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++)
        cr_assert(jobs[i].ok, "%s", jobs[i].why);
    BT_LEAK_CHECK();
}

/* ---- The object loader ------------------------------------------------------------------- */

/* An object with external calls (fmodf through frem) and constant pools. */
static void *sample_object(size_t *size)
{
    kir_kernel k;
    kir_init(&k, 2, 1);
    snprintf(k.name, sizeof k.name, "sample");
    int x = in_slot(&k, BURNC_DTYPE_F32, "s1"), o = out_slot(&k, BURNC_DTYPE_F32, "s0");
    int32_t v = OP2(&k, KIR_REM, KIR_F32, LD(&k, x), kir_const_f(&k, KIR_F32, 0.37));
    int s = STAGE(&k, KIR_COMBINE_SUM, v);
    STORE(&k, o, REDUCED(&k, s), true);
    launch L;
    launch_init(&L, &k, (const int64_t[]){3, 100});
    L.tame = true;
    launch_buffers(&L, NULL, NULL, NULL, NULL);
    void *obj;
    check_launch(&L, &obj, size);
    launch_free(&L);
    return obj;
}

static void expect_refused(const void *obj, size_t size, const char *reason)
{
    cg_cpu_kernel f;
    char why[256] = "";
    cr_assert_not(cg_object_load(obj, size, &f, why, sizeof why), "a damaged object loaded (expected: %s)", reason);
    cr_assert(strstr(why, reason), "reason \"%s\" does not mention \"%s\"", why, reason);
    cr_assert_null(f.rows);
}

Test(objload, refuses_damaged_objects)
{
    size_t size;
    unsigned char *obj = sample_object(&size), *bad = malloc(size);
    cr_assert(bad);
    Elf64_Ehdr eh;
    memcpy(&eh, obj, sizeof eh);

    expect_refused(obj, 10, "shorter than an ELF header");
    expect_refused(NULL, 0, "shorter than an ELF header");
    memcpy(bad, obj, size);
    bad[1] = 'X';
    expect_refused(bad, size, "bad magic");
    memcpy(bad, obj, size);
    bad[EI_CLASS] = ELFCLASS32;
    expect_refused(bad, size, "ELF64");
    memcpy(bad, obj, size);
    ((Elf64_Ehdr *)bad)->e_machine = EM_AARCH64;
    expect_refused(bad, size, "not x86-64");
    memcpy(bad, obj, size);
    ((Elf64_Ehdr *)bad)->e_type = ET_DYN;
    expect_refused(bad, size, "not a relocatable object");
    expect_refused(obj, eh.e_shoff + 10, "run past the end");

    /* a section whose contents lie past the end, a bad symbol table, a relocation out of its
     * section, an unknown relocation type */
    Elf64_Shdr *sh = (Elf64_Shdr *)(bad + eh.e_shoff);
    bool did_rela = false, did_type = false;
    for (int i = 1; i < eh.e_shnum; i++) {
        memcpy(bad, obj, size);
        if (sh[i].sh_type == SHT_PROGBITS) {
            sh[i].sh_offset = size - 4;
            sh[i].sh_size = 64;
            expect_refused(bad, size, "runs past the end");
        } else if (sh[i].sh_type == SHT_SYMTAB) {
            sh[i].sh_entsize = 12;
            expect_refused(bad, size, "symbol table entries");
        } else if (sh[i].sh_type == SHT_RELA && sh[i].sh_size >= sizeof(Elf64_Rela) &&
                   (sh[sh[i].sh_info].sh_flags & SHF_ALLOC) && sh[sh[i].sh_info].sh_type == SHT_PROGBITS) {
            Elf64_Rela *r = (Elf64_Rela *)(bad + sh[i].sh_offset);
            r->r_offset = 1u << 30;
            expect_refused(bad, size, "past the end of section");
            memcpy(bad, obj, size);
            r->r_info = ELF64_R_INFO(ELF64_R_SYM(r->r_info), 250);
            expect_refused(bad, size, "relocation type 250");
            did_rela = did_type = true;
        }
    }
    cr_assert(did_rela && did_type, "the sample object has no relocations to damage");
    free(bad);
    free(obj);
    BT_LEAK_CHECK();
}

/* Truncated and bit-flipped copies: each is refused with a reason or loads; none crashes. */
Test(objload, fuzz_truncated_and_flipped)
{
    size_t size;
    unsigned char *obj = sample_object(&size), *bad = malloc(size);
    cr_assert(bad);
    int refused = 0, loaded = 0;
    for (size_t len = 0; len < size; len += len < 256 ? 1 : 1 + size / 400) {
        cg_cpu_kernel f;
        char why[256] = "";
        memcpy(bad, obj, len);
        if (cg_object_load(bad, len, &f, why, sizeof why)) {
            loaded++;
            cg_object_release(&f);
        } else {
            cr_assert(why[0], "a truncation to %zu bytes was refused without a reason", len);
            refused++;
        }
    }
    cr_assert(refused > 0);
    Elf64_Ehdr eh;
    memcpy(&eh, obj, sizeof eh);
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(bad, obj, size);
        int flips = 1 + (int)(rnd() % 4);
        for (int f = 0; f < flips; f++) {
            /* a third anywhere, a third in the ELF header, a third in the section headers */
            uint64_t r = rnd() % 3;
            size_t at = r == 0 ? rnd() % size : r == 1 ? rnd() % sizeof eh : eh.e_shoff + rnd() % (size - eh.e_shoff);
            bad[at] ^= (unsigned char)(1u << (rnd() % 8));
        }
        cg_cpu_kernel f;
        char why[256] = "";
        if (cg_object_load(bad, size, &f, why, sizeof why)) {
            loaded++;
            cg_object_release(&f);
        } else {
            cr_assert(why[0], "a damaged object was refused without a reason");
            refused++;
        }
    }
    cr_log_info("objload fuzz: %d refused, %d loaded (flips in code or padding load fine)", refused, loaded);
    free(bad);
    free(obj);
    BT_LEAK_CHECK();
}

/* A hand-made object with the relocation kinds O3 kernels do not use today (absolute 64-bit
 * data, GOTPCREL, REX_GOTPCRELX, a PLT call to libc): its rows() writes through each of them
 * and the test checks what it wrote. */
typedef struct elf_writer {
    unsigned char buf[4096];
    size_t n;
} elf_writer;

static size_t ew_put(elf_writer *w, const void *p, size_t n, size_t align)
{
    while (w->n % align)
        w->buf[w->n++] = 0;
    size_t at = w->n;
    memcpy(w->buf + at, p, n);
    w->n += n;
    return at;
}

static size_t synthetic_object(elf_writer *w, uint32_t pc32_type)
{
    static const unsigned char text[] = {
        0x48, 0x8b, 0x47, 0x08,                   /* mov rax, [rdi+8]     args->outputs */
        0x48, 0x8b, 0x00,                         /* mov rax, [rax]       outputs[0] */
        0x48, 0x8b, 0x0d, 0,    0,    0,    0,    /* mov rcx, [rip+GOT(data_sym)] (REX_GOTPCRELX @10) */
        0x48, 0x8b, 0x09,                         /* mov rcx, [rcx]       the pointer in .data */
        0x48, 0x8b, 0x09,                         /* mov rcx, [rcx]       the marker it points at */
        0x48, 0x89, 0x08,                         /* mov [rax], rcx */
        0x48, 0x8d, 0x0d, 0,    0,    0,    0,    /* lea rcx, [rip+.rodata] (PC32 @26) */
        0x48, 0x8b, 0x09,                         /* mov rcx, [rcx] */
        0x48, 0x89, 0x48, 0x08,                   /* mov [rax+8], rcx */
        0x48, 0x8b, 0x0d, 0,    0,    0,    0,    /* mov rcx, [rip+GOT(labs)] (GOTPCREL @40) */
        0x48, 0x89, 0x48, 0x10,                   /* mov [rax+16], rcx */
        0x50,                                     /* push rax (also aligns the stack) */
        0x48, 0xc7, 0xc7, 0xfb, 0xff, 0xff, 0xff, /* mov rdi, -5 */
        0xe8, 0,    0,    0,    0,                /* call labs (PLT32 @57) */
        0x59,                                     /* pop rcx */
        0x48, 0x89, 0x41, 0x18,                   /* mov [rcx+24], rax */
        0xc3,                                     /* ret */
    };
    static const uint64_t marker = UINT64_C(0x1122334455667788), zero = 0;
    static const char strtab[] = "\0burnc_k_rows\0labs\0data_sym";
    static const char shstr[] = "\0.text\0.rodata\0.data\0.symtab\0.strtab\0.shstrtab\0.rela.text\0.rela.data";
    Elf64_Sym syms[7] = {{0}};
    for (int i = 1; i <= 3; i++)
        syms[i] = (Elf64_Sym){.st_info = ELF64_ST_INFO(STB_LOCAL, STT_SECTION), .st_shndx = (Elf64_Section)i};
    syms[4] = (Elf64_Sym){.st_name = 20, .st_info = ELF64_ST_INFO(STB_LOCAL, STT_OBJECT), .st_shndx = 3, .st_size = 8};
    syms[5] = (Elf64_Sym){
        .st_name = 1, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC), .st_shndx = 1, .st_size = sizeof text};
    syms[6] = (Elf64_Sym){.st_name = 14, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_NOTYPE)};
    const Elf64_Rela rtext[4] = {
        {10, ELF64_R_INFO(4, R_X86_64_REX_GOTPCRELX), -4},
        {26, ELF64_R_INFO(2, pc32_type), -4},
        {40, ELF64_R_INFO(6, R_X86_64_GOTPCREL), -4},
        {57, ELF64_R_INFO(6, R_X86_64_PLT32), -4},
    };
    const Elf64_Rela rdata[1] = {{0, ELF64_R_INFO(2, R_X86_64_64), 0}};
    memset(w, 0, sizeof *w);
    w->n = sizeof(Elf64_Ehdr);
    Elf64_Shdr sh[9] = {{0}};
    sh[1] = (Elf64_Shdr){.sh_name = 1,
                         .sh_type = SHT_PROGBITS,
                         .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
                         .sh_offset = ew_put(w, text, sizeof text, 16),
                         .sh_size = sizeof text,
                         .sh_addralign = 16};
    sh[2] = (Elf64_Shdr){.sh_name = 7,
                         .sh_type = SHT_PROGBITS,
                         .sh_flags = SHF_ALLOC,
                         .sh_offset = ew_put(w, &marker, 8, 8),
                         .sh_size = 8,
                         .sh_addralign = 8};
    sh[3] = (Elf64_Shdr){.sh_name = 15,
                         .sh_type = SHT_PROGBITS,
                         .sh_flags = SHF_ALLOC | SHF_WRITE,
                         .sh_offset = ew_put(w, &zero, 8, 8),
                         .sh_size = 8,
                         .sh_addralign = 8};
    sh[4] = (Elf64_Shdr){.sh_name = 21,
                         .sh_type = SHT_SYMTAB,
                         .sh_offset = ew_put(w, syms, sizeof syms, 8),
                         .sh_size = sizeof syms,
                         .sh_link = 5,
                         .sh_info = 5,
                         .sh_addralign = 8,
                         .sh_entsize = sizeof(Elf64_Sym)};
    sh[5] = (Elf64_Shdr){.sh_name = 29,
                         .sh_type = SHT_STRTAB,
                         .sh_offset = ew_put(w, strtab, sizeof strtab, 1),
                         .sh_size = sizeof strtab,
                         .sh_addralign = 1};
    sh[6] = (Elf64_Shdr){.sh_name = 37,
                         .sh_type = SHT_STRTAB,
                         .sh_offset = ew_put(w, shstr, sizeof shstr, 1),
                         .sh_size = sizeof shstr,
                         .sh_addralign = 1};
    sh[7] = (Elf64_Shdr){.sh_name = 47,
                         .sh_type = SHT_RELA,
                         .sh_flags = SHF_INFO_LINK,
                         .sh_offset = ew_put(w, rtext, sizeof rtext, 8),
                         .sh_size = sizeof rtext,
                         .sh_link = 4,
                         .sh_info = 1,
                         .sh_addralign = 8,
                         .sh_entsize = sizeof(Elf64_Rela)};
    sh[8] = (Elf64_Shdr){.sh_name = 58,
                         .sh_type = SHT_RELA,
                         .sh_flags = SHF_INFO_LINK,
                         .sh_offset = ew_put(w, rdata, sizeof rdata, 8),
                         .sh_size = sizeof rdata,
                         .sh_link = 4,
                         .sh_info = 3,
                         .sh_addralign = 8,
                         .sh_entsize = sizeof(Elf64_Rela)};
    size_t shoff = ew_put(w, sh, sizeof sh, 8);
    Elf64_Ehdr eh = {.e_type = ET_REL,
                     .e_machine = EM_X86_64,
                     .e_version = EV_CURRENT,
                     .e_shoff = shoff,
                     .e_ehsize = sizeof eh,
                     .e_shentsize = sizeof(Elf64_Shdr),
                     .e_shnum = 9,
                     .e_shstrndx = 6};
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    memcpy(w->buf, &eh, sizeof eh);
    return w->n;
}

Test(objload, synthetic_relocations)
{
    elf_writer w;
    size_t size = synthetic_object(&w, R_X86_64_PC32);
    cg_cpu_kernel f;
    char why[256] = "";
    cr_assert(cg_object_load(w.buf, size, &f, why, sizeof why), "%s", why);
    cr_assert(f.rows && !f.leaves && !f.finish);
    uint64_t out[4] = {0};
    void *outs[1] = {out};
    kir_args a = {.outputs = outs};
    f.rows(&a, 0, 1);
    cr_assert_eq(out[0], UINT64_C(0x1122334455667788), "through GOT and an absolute pointer: %llx",
                 (unsigned long long)out[0]);
    cr_assert_eq(out[1], UINT64_C(0x1122334455667788), "pc-relative: %llx", (unsigned long long)out[1]);
    cr_assert_eq(out[2], (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "labs"), "GOT slot of an external symbol");
    cr_assert_eq(out[3], 5, "labs(-5) through the trampoline gave %llu", (unsigned long long)out[3]);
    cg_object_release(&f);
    /* the absolute 32-bit form cannot reach a mapping above 2 GB: refused, not truncated */
    size = synthetic_object(&w, R_X86_64_32S);
    expect_refused(w.buf, size, "does not reach");
    BT_LEAK_CHECK();
}

/* ---- The disk cache ---------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    chmod(path, 0700);
    return remove(path);
}

static void rm_tree(const char *dir)
{
    chmod(dir, 0700);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static char *temp_dir(void)
{
    char *d = strdup("/tmp/burnc-kc-XXXXXX");
    cr_assert(d && mkdtemp(d), "mkdtemp: %s", strerror(errno));
    return d;
}

static kc_cache *open_at(const char *dir, uint64_t max_bytes)
{
    char why[512];
    kc_options o = {.dir = dir, .max_bytes = max_bytes};
    kc_cache *c = kc_open(&o, why, sizeof why);
    cr_assert(c, "kc_open %s: %s", dir, why);
    return c;
}

static bool entry_exists(kc_cache *c, uint64_t key)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%016llx.kc", kc_dir(c), (unsigned long long)key);
    return access(path, F_OK) == 0;
}

static void expect_hit(kc_cache *c, uint64_t key, const void *want, size_t size)
{
    void *data;
    size_t n;
    cr_assert(kc_get(c, key, &data, &n), "key %016llx missed", (unsigned long long)key);
    cr_assert_eq(n, size);
    cr_assert(memcmp(data, want, size) == 0);
    free(data);
}

static void expect_miss(kc_cache *c, uint64_t key)
{
    void *data = (void *)1;
    size_t n = 1;
    cr_assert_not(kc_get(c, key, &data, &n), "key %016llx hit", (unsigned long long)key);
    cr_assert_null(data);
    cr_assert_eq(n, 0);
}

static void corrupt_file(kc_cache *c, uint64_t key, long at, int mode)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%016llx.kc", kc_dir(c), (unsigned long long)key);
    if (mode == 0) { /* flip a byte */
        FILE *f = fopen(path, "r+b");
        cr_assert(f);
        fseek(f, at, SEEK_SET);
        int ch = fgetc(f);
        fseek(f, at, SEEK_SET);
        fputc(ch ^ 0x10, f);
        fclose(f);
    } else {
        cr_assert_eq(truncate(path, at), 0);
    }
}

Test(kcache, put_get_and_damaged_entries_rebuilt)
{
    char *dir = temp_dir();
    kc_cache *c = open_at(dir, 0);
    cr_assert_not(kc_read_only(c));
    unsigned char payload[5000];
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (unsigned char)rnd();
    uint64_t key = kc_key(0x1234, kc_host_fingerprint(), "llvm-19");
    cr_assert_neq(key, kc_key(0x1235, kc_host_fingerprint(), "llvm-19"));
    cr_assert_neq(key, kc_key(0x1234, kc_host_fingerprint(), "llvm-20"));
    expect_miss(c, key);
    cr_assert(kc_put(c, key, payload, sizeof payload));
    expect_hit(c, key, payload, sizeof payload);

    struct {
        long at;
        int mode;
    } damage[] = {{100, 0}, {4, 0}, {20, 0}, {48 + 4999, 0}, {30, 1}, {48 + 10, 1}, {0, 1}};
    for (size_t i = 0; i < COUNT(damage); i++) {
        corrupt_file(c, key, damage[i].at, damage[i].mode);
        expect_miss(c, key);
        cr_assert_not(entry_exists(c, key), "damaged entry %zu was not removed", i);
        cr_assert(kc_put(c, key, payload, sizeof payload)); /* rebuilt */
        expect_hit(c, key, payload, sizeof payload);
    }

    /* a foreign entry: another key's file under this key's name */
    uint64_t other = key ^ 1;
    cr_assert(kc_put(c, other, payload, 100));
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/%016llx.kc", kc_dir(c), (unsigned long long)other);
    snprintf(b, sizeof b, "%s/%016llx.kc", kc_dir(c), (unsigned long long)key);
    cr_assert_eq(rename(a, b), 0);
    expect_miss(c, key);
    cr_assert_not(entry_exists(c, key));

    /* a second handle (another process) sees what the first wrote */
    cr_assert(kc_put(c, key, payload, sizeof payload));
    kc_cache *c2 = open_at(dir, 0);
    expect_hit(c2, key, payload, sizeof payload);
    kc_close(c2);
    kc_close(c);
    rm_tree(dir);
    free(dir);
    BT_LEAK_CHECK();
}

Test(kcache, lru_eviction)
{
    char *dir = temp_dir();
    kc_cache *c = open_at(dir, 110 * 1024); /* room for 3 entries; eviction goes down to 90% */
    static unsigned char payload[30 * 1024];
    memset(payload, 7, sizeof payload);
    cr_assert(kc_put(c, 1, payload, sizeof payload));
    cr_assert(kc_put(c, 2, payload, sizeof payload));
    cr_assert(kc_put(c, 3, payload, sizeof payload));
    expect_hit(c, 1, payload, sizeof payload); /* 1 is now more recent than 2 */
    cr_assert(kc_put(c, 4, payload, sizeof payload));
    cr_assert(entry_exists(c, 1) && entry_exists(c, 3) && entry_exists(c, 4));
    cr_assert_not(entry_exists(c, 2), "the least recently used entry survived");
    /* too large for the cap: not stored */
    static unsigned char huge[200 * 1024];
    cr_assert_not(kc_put(c, 5, huge, sizeof huge));
    cr_assert_not(entry_exists(c, 5));
    kc_close(c);
    /* a smaller cap trims the cache at the next put (not at open: a warm start stays cheap) */
    c = open_at(dir, 70 * 1024);
    cr_assert(entry_exists(c, 1) && entry_exists(c, 3) && entry_exists(c, 4));
    cr_assert(kc_put(c, 6, payload, 10));
    cr_assert_not(entry_exists(c, 3), "the least recently used entry survived the lower cap");
    cr_assert(entry_exists(c, 1) && entry_exists(c, 4) && entry_exists(c, 6));
    kc_close(c);
    rm_tree(dir);
    free(dir);
    BT_LEAK_CHECK();
}

Test(kcache, refuses_unsafe_directories)
{
    char *dir = temp_dir();
    char why[512];
    kc_options o = {.dir = dir};
    cr_assert_eq(chmod(dir, 0777), 0);
    cr_assert_null(kc_open(&o, why, sizeof why));
    cr_assert(strstr(why, "group or others may write"), "%s", why);
    cr_assert_eq(chmod(dir, 0770), 0);
    cr_assert_null(kc_open(&o, why, sizeof why));
    cr_assert_eq(chmod(dir, 0700), 0);
    kc_cache *c = kc_open(&o, why, sizeof why);
    cr_assert(c, "%s", why);
    kc_close(c);
    /* the kernels folder is checked too */
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/kernels", dir);
    cr_assert_eq(chmod(sub, 0733), 0);
    cr_assert_null(kc_open(&o, why, sizeof why));
    cr_assert_eq(chmod(sub, 0700), 0);
    /* owned by someone else */
    if (geteuid() == 0) {
        cr_assert_eq(chown(dir, 12345, 12345), 0);
        cr_assert_null(kc_open(&o, why, sizeof why));
    } else {
        o.dir = "/";
        cr_assert_null(kc_open(&o, why, sizeof why));
    }
    cr_assert(strstr(why, "not to this user"), "%s", why);
    rm_tree(dir);
    free(dir);
    BT_LEAK_CHECK();
}

Test(kcache, read_only_store)
{
    char *dir = temp_dir();
    kc_cache *c = open_at(dir, 0);
    unsigned char payload[1000];
    memset(payload, 3, sizeof payload);
    cr_assert(kc_put(c, 42, payload, sizeof payload));
    kc_close(c);
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/kernels", dir);
    cr_assert_eq(chmod(sub, 0500), 0);
    c = open_at(dir, 0);
    cr_assert(kc_read_only(c));
    expect_hit(c, 42, payload, sizeof payload);
    cr_assert_not(kc_put(c, 43, payload, sizeof payload));
    cr_assert_not(entry_exists(c, 43));
    kc_close(c);
    rm_tree(dir);
    free(dir);
    BT_LEAK_CHECK();
}

Test(kcache, directory_from_environment)
{
    char *root = temp_dir();
    char want[4096], home[4096], xdg[4096];
    unsetenv("XDG_CACHE_HOME");
    setenv("BURNC_CACHE_DIR", root, 1);
    kc_cache *c = open_at(NULL, 0);
    snprintf(want, sizeof want, "%s/kernels", root);
    cr_assert_str_eq(kc_dir(c), want);
    kc_close(c);
    unsetenv("BURNC_CACHE_DIR");
    snprintf(xdg, sizeof xdg, "%s/xdg", root);
    setenv("XDG_CACHE_HOME", xdg, 1);
    c = open_at(NULL, 0);
    snprintf(want, sizeof want, "%s/xdg/burnc/kernels", root);
    cr_assert_str_eq(kc_dir(c), want);
    kc_close(c);
    unsetenv("XDG_CACHE_HOME");
    snprintf(home, sizeof home, "%s/home", root);
    setenv("HOME", home, 1);
    c = open_at(NULL, 0);
    snprintf(want, sizeof want, "%s/home/.cache/burnc/kernels", root);
    cr_assert_str_eq(kc_dir(c), want);
    struct stat st;
    snprintf(want, sizeof want, "%s/home/.cache/burnc", root);
    cr_assert_eq(stat(want, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700, "created with mode %o", st.st_mode & 0777);
    kc_close(c);
    rm_tree(root);
    free(root);
    BT_LEAK_CHECK();
}

/* A backend's disk cache opened on its first miss: once, and refused once when the directory is
 * unsafe (no second attempt, no second warning). */
Test(kcache, lazy_open_once)
{
    char *root = temp_dir();
    setenv("BURNC_CACHE_DIR", root, 1);
    kc_lazy l = {0};
    kc_cache *c = kc_lazy_open(&l);
    cr_assert(c && l.tried, "kc_lazy_open in %s gave no cache", root);
    cr_assert_eq(kc_lazy_open(&l), c, "a second call opened another cache");
    kc_lazy_close(&l);
    cr_assert(!l.cache && !l.tried);
    cr_assert_eq(chmod(root, 0777), 0); /* others may write: refused */
    cr_assert_null(kc_lazy_open(&l));
    cr_assert(l.tried);
    cr_assert_eq(chmod(root, 0700), 0); /* safe again, but the refusal stands until closed */
    cr_assert_null(kc_lazy_open(&l));
    kc_lazy_close(&l);
    cr_assert(kc_lazy_open(&l));
    kc_lazy_close(&l);
    rm_tree(root);
    free(root);
    BT_LEAK_CHECK();
}

typedef struct test_node {
    rt_ktable_node node; /* first, as in the backends' kernels */
    int id;
} test_node;

static void drop_node(rt_ktable_node *n, void *user)
{
    ++*(int *)user;
    free(n);
}

/* The memory table: every node found through its key's chain across the doublings, equal keys
 * kept apart, and every node dropped once by clear. */
Test(kcache, memory_table_grows_and_clears)
{
    rt_ktable t = {0};
    cr_assert_null(rt_ktable_chain(&t, 42), "an empty table has a chain");
    enum { N = 300 };
    for (int i = 0; i < N; i++) {
        test_node *n = calloc(1, sizeof *n);
        cr_assert(n);
        n->id = i;
        n->node.key = (uint64_t)(i % 150) * UINT64_C(0x9e3779b97f4a7c15); /* each key twice */
        cr_assert(rt_ktable_insert(&t, &n->node));
    }
    cr_assert_eq(t.n, N);
    cr_assert(t.cap >= N && (t.cap & (t.cap - 1)) == 0, "capacity %d", t.cap);
    for (int k = 0; k < 150; k++) {
        uint64_t key = (uint64_t)k * UINT64_C(0x9e3779b97f4a7c15);
        int found = 0, ids = 0;
        for (rt_ktable_node *n = rt_ktable_chain(&t, key); n; n = n->next)
            if (n->key == key) {
                found++;
                ids += ((test_node *)n)->id;
            }
        cr_assert_eq(found, 2, "key %d: %d nodes", k, found);
        cr_assert_eq(ids, 2 * k + 150, "key %d: the wrong nodes", k);
    }
    int dropped = 0;
    rt_ktable_clear(&t, drop_node, &dropped);
    cr_assert_eq(dropped, N);
    cr_assert(t.n == 0 && t.cap == 0 && !t.slots);
    cr_assert_null(rt_ktable_chain(&t, 0));
    BT_LEAK_CHECK();
}

/* The whole path of a warm start: compile, store the object, then (as a later process would)
 * read it back, load it without LLVM and run it. */
Test(kcache, compiled_kernel_round_trip)
{
    const cg_llvm_api *api = kb_llvm_api(NULL);
    char *dir = temp_dir();
    kc_cache *c = open_at(dir, 0);
    kir_kernel k;
    kir_init(&k, 1, 1);
    int x = in_slot(&k, BURNC_DTYPE_F32, "1"), o = out_slot(&k, BURNC_DTYPE_F16, "1");
    STORE(&k, o, OP2(&k, KIR_MUL, KIR_F32, LD(&k, x), LD(&k, x)), false);
    uint64_t key = kc_key(kir_hash(&k), kc_host_fingerprint(), api->llvm_version);
    cg_cpu_kernel f;
    void *obj;
    size_t size;
    char why[256];
    cr_assert(api->compile_cpu(&k, &f, &obj, &size, why, sizeof why), "%s", why);
    api->release_cpu(&f);
    cr_assert(kc_put(c, key, obj, size));
    free(obj);
    kc_close(c);

    c = open_at(dir, 0);
    cr_assert(kc_get(c, key, &obj, &size));
    cr_assert(cg_object_load(obj, size, &f, why, sizeof why), "%s", why);
    float in[5] = {1.5f, -2.0f, 300.0f, 1e-3f, 70000.0f};
    uint16_t out[5];
    void *ins[1] = {in}, *outs[1] = {out};
    int64_t ext = 5, zero = 0, one = 1;
    kir_args a = {ins, outs, &ext, &zero, &one, &zero, &one, NULL, 0};
    f.rows(&a, 0, 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(out[i], burnc_f32_to_f16(in[i] * in[i]), "element %d", i);
    cg_object_release(&f);
    free(obj);
    kc_close(c);
    kir_free(&k);
    rm_tree(dir);
    free(dir);
    BT_LEAK_CHECK();
}

/* kir_args.stream asks for non-temporal element stores: they may only change how lines reach
 * memory, never what is written, at any alignment of the output, element-wise and in row
 * kernels. Elements around the written range stay untouched. */
Test(codegen, streaming_stores_write_the_same_values)
{
    const cg_llvm_api *api = kb_llvm_api(NULL);
    static const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_U8};
    enum { N = 1000, PAD = 64 };
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
        burnc_dtype_t dt = dts[di];
        size_t es = burnc_dtype_size(dt);
        for (int row = 0; row < 2; row++) {
            kir_kernel k;
            kir_init(&k, row ? 2 : 1, 1);
            const char *cls = row ? "11" : "1";
            int x = in_slot(&k, dt, cls), o = out_slot(&k, dt, cls);
            kir_type t = kir_type_of(dt);
            int32_t v = LD(&k, x);
            if (row) {
                int s = STAGE(&k, KIR_COMBINE_MAX, v);
                v = OP2(&k, KIR_SUB, t, v, REDUCED(&k, s));
            } else {
                v = OP2(&k, KIR_ADD, t, v, t == KIR_U8 ? kir_const_i(&k, t, 3) : kir_const_f(&k, t, 0.5));
            }
            if (dt == BURNC_DTYPE_F16)
                v = ROUND(&k, v, KIR_F16);
            STORE(&k, o, v, false);
            cg_cpu_kernel f;
            char why[512];
            cr_assert(api->compile_cpu(&k, &f, NULL, NULL, why, sizeof why), "%s", why);
            unsigned char *in = aligned_alloc(64, (N + PAD) * 8), *plain = aligned_alloc(64, (N + PAD) * 8),
                          *streamed = aligned_alloc(64, (N + PAD) * 8);
            cr_assert(in && plain && streamed);
            for (size_t i = 0; i < (N + PAD) * 8; i++)
                in[i] = (unsigned char)(i * 37 % 251 & (dt == BURNC_DTYPE_F16 ? 0x3f : 0xff));
            for (int64_t off = 0; off < 20; off += off < 4 ? 1 : 7) {
                memset(plain, 0xa5, (N + PAD) * 8);
                memset(streamed, 0xa5, (N + PAD) * 8);
                int64_t ext[2] = {row ? 8 : N, row ? N / 8 : 1}, zero = 0;
                int64_t strides[2] = {row ? N / 8 : 1, 1};
                void *ins[1] = {in};
                for (int s = 0; s < 2; s++) {
                    void *outs[1] = {s ? streamed : plain};
                    kir_args a = {ins, outs, ext, &zero, strides, &off, strides, NULL, s ? ~0u : 0u};
                    f.rows(&a, 0, row ? 8 : N);
                }
                cr_assert(memcmp(plain, streamed, (N + PAD) * es) == 0,
                          "%s %s kernel, output offset %lld: streamed stores wrote other bytes", burnc_dtype_name(dt),
                          row ? "row" : "element-wise", (long long)off);
                for (int64_t i = 0; i < (N + PAD) * (int64_t)es; i++)
                    if (i < off * (int64_t)es || i >= (off + N) * (int64_t)es)
                        cr_assert_eq(streamed[i], 0xa5, "%s: byte %lld outside the output was written",
                                     burnc_dtype_name(dt), (long long)i);
            }
            free(in);
            free(plain);
            free(streamed);
            api->release_cpu(&f);
            kir_free(&k);
        }
    }
    BT_LEAK_CHECK();
}
