/* Matmul on the cpu device (runtime/cpu/gemm.c, codegen/llvm_gemm.c).
 *
 * include/burnc.h promises each f32/f64 element as a chain of fma over k in increasing order
 * from +0.0 in the operand dtype (f16/bf16: the chain in f32, rounded once). So results are
 * checked bit for bit against a plain host loop doing that chain with fmaf/fma, for odd and
 * prime sizes (tiny ones run the portable kernel, larger ones the LLVM micro-kernel, K beyond
 * one KC block, M and N beyond one tile and with edges), 1-row and 1-column cases,
 * transposed, strided and batched (also broadcast) operands; against the ref device (which
 * accumulates in double) within K * eps * sum |a b|; identical with 1, 2 and 3 threads and
 * with BURNC_AUTOTUNE=off and after tuning; bad shapes still fail with their messages. */
#define _GNU_SOURCE /* setenv, mkdtemp */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static burnc_device_t *open_cpu(void)
{
    burnc_device_t *dev = burnc_device_open("cpu");
    if (!dev)
        cr_skip_test("the cpu device is not available: %s", burnc_error_message());
    return dev;
}

static uint64_t rng = 0x9e3779b97f4a7c15u;

static double uniform(void) /* [-1, 1) */
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-52 - 1;
}

static void put(void *base, burnc_dtype_t dt, int64_t i, double v)
{
    switch (dt) {
    case BURNC_DTYPE_F32: ((float *)base)[i] = (float)v; break;
    case BURNC_DTYPE_F64: ((double *)base)[i] = v; break;
    case BURNC_DTYPE_F16: ((uint16_t *)base)[i] = burnc_f32_to_f16((float)v); break;
    case BURNC_DTYPE_BF16: ((uint16_t *)base)[i] = burnc_f32_to_bf16((float)v); break;
    default: cr_assert_fail("dtype");
    }
}

/* ---- Operands: a logical [batch.., R, C] matrix over host data, and its device view ---- */

typedef enum { PLAIN, TRANSPOSED, STRIDED } layout;

typedef struct operand {
    burnc_dtype_t dt;
    layout lay;
    int64_t R, C;
    int64_t n; /* base elements */
    void *data;
    burnc_tensor_t *t; /* the view matmul reads */
} operand;

/* The base tensor: [R, C], [C, R] transposed back, or [2R, 2C] sliced with step 2 (rows 0,
 * 2, ..., columns 1, 3, ...). */
static operand operand_new(burnc_device_t *dev, burnc_dtype_t dt, layout lay, int64_t R, int64_t C)
{
    operand o = {.dt = dt, .lay = lay, .R = R, .C = C};
    int64_t shape[2] = {lay == TRANSPOSED ? C : R, lay == TRANSPOSED ? R : C};
    if (lay == STRIDED)
        shape[0] = 2 * R, shape[1] = 2 * C;
    o.n = shape[0] * shape[1];
    o.data = malloc((size_t)(o.n ? o.n : 1) * burnc_dtype_size(dt));
    for (int64_t i = 0; i < o.n; i++)
        put(o.data, dt, i, uniform());
    burnc_tensor_t *base = BT_NOT_NULL(burnc_tensor_from_data(dev, dt, 2, shape, o.data));
    if (lay == PLAIN) {
        o.t = base;
        return o;
    }
    if (lay == TRANSPOSED) {
        o.t = BT_NOT_NULL(burnc_transpose(base, 0, 1));
    } else {
        burnc_tensor_t *rows = BT_NOT_NULL(burnc_slice(base, 0, 0, INT64_MAX, 2));
        o.t = BT_NOT_NULL(burnc_slice(rows, 1, 1, INT64_MAX, 2));
        burnc_tensor_release(rows);
    }
    burnc_tensor_release(base);
    return o;
}

static double elem(const operand *o, int64_t i, int64_t j)
{
    int64_t at = o->lay == PLAIN ? i * o->C + j : o->lay == TRANSPOSED ? j * o->R + i : 2 * i * 2 * o->C + 2 * j + 1;
    return bt_load(o->data, o->dt, at);
}

static void operand_free(operand *o)
{
    burnc_tensor_release(o->t);
    free(o->data);
}

/* The promised chain for element (i, j) of a @ b, as a double holding the dtype's value. */
static double chain(const operand *a, const operand *b, int64_t i, int64_t j, int64_t K)
{
    if (a->dt == BURNC_DTYPE_F64) {
        double s = 0.0;
        for (int64_t k = 0; k < K; k++)
            s = fma(elem(a, i, k), elem(b, k, j), s);
        return s;
    }
    float s = 0.0f;
    for (int64_t k = 0; k < K; k++)
        s = fmaf((float)elem(a, i, k), (float)elem(b, k, j), s);
    if (a->dt == BURNC_DTYPE_F16)
        return burnc_f16_to_f32(burnc_f32_to_f16(s));
    if (a->dt == BURNC_DTYPE_BF16)
        return burnc_bf16_to_f32(burnc_f32_to_bf16(s));
    return s;
}

static void *read_all(burnc_tensor_t *t)
{
    size_t bytes = (size_t)burnc_tensor_numel(t) * burnc_dtype_size(burnc_tensor_dtype(t));
    void *out = malloc(bytes ? bytes : 1);
    BT_ASSERT_OK(burnc_tensor_read(t, out, bytes));
    return out;
}

static const char *lay_name(layout l) { return l == PLAIN ? "plain" : l == TRANSPOSED ? "transposed" : "strided"; }

/* a @ b on cpu equals the host chain bit for bit. */
static void check_bitwise(burnc_device_t *cpu, burnc_dtype_t dt, int64_t M, int64_t K, int64_t N, layout la,
                          layout lb)
{
    operand a = operand_new(cpu, dt, la, M, K), b = operand_new(cpu, dt, lb, K, N);
    burnc_tensor_t *c = BT_NOT_NULL(burnc_matmul(a.t, b.t));
    cr_assert_eq(burnc_tensor_numel(c), M * N);
    void *got = read_all(c);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double want = chain(&a, &b, i, j, K), have = bt_load(got, dt, i * N + j);
            cr_assert(want == have && signbit(want) == signbit(have),
                      "%s %lldx%lldx%lld (%s A, %s B): element (%lld, %lld) is %.17g, the fma chain gives %.17g",
                      burnc_dtype_name(dt), (long long)M, (long long)K, (long long)N, lay_name(la), lay_name(lb),
                      (long long)i, (long long)j, have, want);
        }
    free(got);
    burnc_tensor_release(c);
    operand_free(&a);
    operand_free(&b);
}

static const int64_t SIZES[][3] = {
    {1, 1, 1}, {1, 37, 1}, {7, 13, 5}, {97, 89, 101}, {257, 3, 129}, /* M, K, N */
    {1, 64, 300}, {300, 64, 1}, {1, 1, 1000}, {67, 1000, 75}, {131, 517, 263},
};

Test(gemm, sizes_f32_bitwise)
{
    burnc_device_t *cpu = open_cpu();
    for (int s = 0; s < COUNT(SIZES); s++)
        check_bitwise(cpu, BURNC_DTYPE_F32, SIZES[s][0], SIZES[s][1], SIZES[s][2], PLAIN, PLAIN);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

Test(gemm, sizes_f64_bitwise)
{
    burnc_device_t *cpu = open_cpu();
    for (int s = 0; s < COUNT(SIZES); s++)
        check_bitwise(cpu, BURNC_DTYPE_F64, SIZES[s][0], SIZES[s][1], SIZES[s][2], PLAIN, PLAIN);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

Test(gemm, transposed_and_strided_bitwise)
{
    burnc_device_t *cpu = open_cpu();
    const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64};
    for (int d = 0; d < COUNT(dts); d++)
        for (int la = 0; la < 3; la++)
            for (int lb = 0; lb < 3; lb++) {
                check_bitwise(cpu, dts[d], 97, 89, 101, (layout)la, (layout)lb);
                check_bitwise(cpu, dts[d], 5, 300, 3, (layout)la, (layout)lb);
            }
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

Test(gemm, narrow_dtypes_round_once)
{
    burnc_device_t *cpu = open_cpu();
    check_bitwise(cpu, BURNC_DTYPE_F16, 33, 70, 41, PLAIN, TRANSPOSED);
    check_bitwise(cpu, BURNC_DTYPE_BF16, 33, 70, 41, STRIDED, PLAIN);
    check_bitwise(cpu, BURNC_DTYPE_F16, 3, 5, 2, PLAIN, PLAIN);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* [B, M, K] @ [B, K, N], and [2, 1, M, K] @ [3, K, N] broadcast to [2, 3, M, N]. */
Test(gemm, batched_bitwise)
{
    burnc_device_t *cpu = open_cpu();
    const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64};
    const int64_t sizes[][3] = {{5, 7, 3}, {70, 90, 50}};
    for (int d = 0; d < COUNT(dts); d++)
        for (int s = 0; s < COUNT(sizes); s++) {
            burnc_dtype_t dt = dts[d];
            int64_t M = sizes[s][0], K = sizes[s][1], N = sizes[s][2];
            size_t es = burnc_dtype_size(dt);
            int64_t na = 2 * M * K, nb = 3 * K * N;
            void *ha = malloc((size_t)na * es), *hb = malloc((size_t)nb * es);
            for (int64_t i = 0; i < na; i++)
                put(ha, dt, i, uniform());
            for (int64_t i = 0; i < nb; i++)
                put(hb, dt, i, uniform());
            burnc_tensor_t *a = BT_NOT_NULL(burnc_tensor_from_data(cpu, dt, 4, (const int64_t[]){2, 1, M, K}, ha));
            burnc_tensor_t *b = BT_NOT_NULL(burnc_tensor_from_data(cpu, dt, 3, (const int64_t[]){3, K, N}, hb));
            burnc_tensor_t *c = BT_NOT_NULL(burnc_matmul(a, b));
            cr_assert_eq(burnc_tensor_rank(c), 4);
            void *got = read_all(c);
            for (int64_t x = 0; x < 2; x++)
                for (int64_t y = 0; y < 3; y++) {
                    operand oa = {.dt = dt, .lay = PLAIN, .R = M, .C = K, .data = (char *)ha + x * M * K * es};
                    operand ob = {.dt = dt, .lay = PLAIN, .R = K, .C = N, .data = (char *)hb + y * K * N * es};
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t j = 0; j < N; j++) {
                            double want = chain(&oa, &ob, i, j, K);
                            double have = bt_load(got, dt, ((x * 3 + y) * M + i) * N + j);
                            cr_assert(want == have, "%s batch (%lld, %lld) element (%lld, %lld): %.17g, chain %.17g",
                                      burnc_dtype_name(dt), (long long)x, (long long)y, (long long)i, (long long)j,
                                      have, want);
                        }
                }
            free(got);
            /* rank 3 on both sides, batch B = 3: a's rows 0..2 of the second batch as [3, M', K] */
            burnc_tensor_t *a3 = BT_NOT_NULL(burnc_reshape(a, 3, (const int64_t[]){2, M, K}));
            burnc_tensor_t *b2 = BT_NOT_NULL(burnc_slice(b, 0, 0, 2, 1));
            burnc_tensor_t *c3 = BT_NOT_NULL(burnc_matmul(a3, b2));
            got = read_all(c3);
            for (int64_t x = 0; x < 2; x++) {
                operand oa = {.dt = dt, .lay = PLAIN, .R = M, .C = K, .data = (char *)ha + x * M * K * es};
                operand ob = {.dt = dt, .lay = PLAIN, .R = K, .C = N, .data = (char *)hb + x * K * N * es};
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++)
                        cr_assert(chain(&oa, &ob, i, j, K) == bt_load(got, dt, (x * M + i) * N + j),
                                  "rank-3 batch %lld element (%lld, %lld)", (long long)x, (long long)i, (long long)j);
            }
            free(got);
            burnc_tensor_release(c3);
            burnc_tensor_release(b2);
            burnc_tensor_release(a3);
            burnc_tensor_release(c);
            burnc_tensor_release(b);
            burnc_tensor_release(a);
            free(ha);
            free(hb);
        }
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* Against ref (double accumulation, one rounding): within K eps sum |a_k b_k| + the final
 * rounding of each. */
Test(gemm, close_to_ref)
{
    burnc_device_t *cpu = open_cpu(), *ref = bt_ref();
    const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64};
    const int64_t sizes[][3] = {{7, 13, 5}, {97, 89, 101}, {64, 700, 33}};
    for (int d = 0; d < COUNT(dts); d++)
        for (int s = 0; s < COUNT(sizes); s++) {
            burnc_dtype_t dt = dts[d];
            int64_t M = sizes[s][0], K = sizes[s][1], N = sizes[s][2];
            double eps = dt == BURNC_DTYPE_F32 ? 0x1p-24 : 0x1p-53;
            operand a = operand_new(cpu, dt, TRANSPOSED, M, K), b = operand_new(cpu, dt, PLAIN, K, N);
            burnc_tensor_t *ra = BT_NOT_NULL(burnc_tensor_to_device(a.t, ref)), *rb = BT_NOT_NULL(burnc_tensor_to_device(b.t, ref));
            burnc_tensor_t *c = BT_NOT_NULL(burnc_matmul(a.t, b.t)), *rc = BT_NOT_NULL(burnc_matmul(ra, rb));
            void *got = read_all(c), *want = read_all(rc);
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double mag = 0;
                    for (int64_t k = 0; k < K; k++)
                        mag += fabs(elem(&a, i, k) * elem(&b, k, j));
                    double g = bt_load(got, dt, i * N + j), w = bt_load(want, dt, i * N + j);
                    double tol = (double)(K + 2) * eps * mag;
                    cr_assert(fabs(g - w) <= tol, "%s %lldx%lldx%lld (%lld, %lld): cpu %.17g, ref %.17g, tol %.3g",
                              burnc_dtype_name(dt), (long long)M, (long long)K, (long long)N, (long long)i,
                              (long long)j, g, w, tol);
                }
            free(got);
            free(want);
            burnc_tensor_release(c);
            burnc_tensor_release(rc);
            burnc_tensor_release(ra);
            burnc_tensor_release(rb);
            operand_free(&a);
            operand_free(&b);
        }
    burnc_device_release(ref);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* Bytes of a few products (tiny, one that the pool splits into row blocks, one with few rows
 * split into column chunks, batched) on a fresh device. */
enum { N_CASES = 4 };
static const int64_t CASES[N_CASES][4] = {{1, 5, 7, 3}, {1, 301, 203, 257}, {1, 3, 400, 999}, {6, 40, 50, 30}};

static void products(unsigned char *out[N_CASES], size_t sizes[N_CASES])
{
    burnc_device_t *cpu = open_cpu();
    for (int c = 0; c < N_CASES; c++) {
        rng = 1234 + (uint64_t)c;
        int64_t B = CASES[c][0], M = CASES[c][1], K = CASES[c][2], N = CASES[c][3];
        float *ha = malloc((size_t)(B * M * K) * sizeof *ha), *hb = malloc((size_t)(B * K * N) * sizeof *hb);
        for (int64_t i = 0; i < B * M * K; i++)
            ha[i] = (float)uniform();
        for (int64_t i = 0; i < B * K * N; i++)
            hb[i] = (float)uniform();
        burnc_tensor_t *a = BT_NOT_NULL(burnc_tensor_from_data(cpu, BURNC_DTYPE_F32, 3, (const int64_t[]){B, M, K}, ha));
        burnc_tensor_t *b = BT_NOT_NULL(burnc_tensor_from_data(cpu, BURNC_DTYPE_F32, 3, (const int64_t[]){B, K, N}, hb));
        burnc_tensor_t *t = BT_NOT_NULL(burnc_transpose(b, 1, 2)); /* [B, N, K] viewed back as [B, K, N] below */
        burnc_tensor_t *bt = BT_NOT_NULL(burnc_transpose(t, 1, 2));
        burnc_tensor_t *y = BT_NOT_NULL(burnc_matmul(a, bt));
        sizes[c] = (size_t)(B * M * N) * sizeof(float);
        out[c] = read_all(y);
        burnc_tensor_release(y);
        burnc_tensor_release(bt);
        burnc_tensor_release(t);
        burnc_tensor_release(b);
        burnc_tensor_release(a);
        free(ha);
        free(hb);
    }
    burnc_device_release(cpu);
}

static void products_free(unsigned char *p[N_CASES])
{
    for (int c = 0; c < N_CASES; c++)
        free(p[c]);
}

static atomic_int threads_seen;

static void capture_threads(void *user, const char *topic, const char *msg)
{
    (void)user;
    const char *p = strcmp(topic, "runtime") == 0 ? strstr(msg, " threads") : NULL;
    if (p) {
        while (p > msg && p[-1] >= '0' && p[-1] <= '9')
            p--;
        atomic_store(&threads_seen, atoi(p));
    }
}

Test(gemm, independent_of_thread_count)
{
    const char *counts[] = {"1", "2", "3"};
    unsigned char *first[N_CASES], *now[N_CASES];
    size_t sizes[N_CASES], sizes_now[N_CASES];
    burnc_log_set_callback(capture_threads, NULL);
    for (int i = 0; i < COUNT(counts); i++) {
        setenv("BURNC_NUM_THREADS", counts[i], 1);
        atomic_store(&threads_seen, 0);
        products(i ? now : first, i ? sizes_now : sizes);
        cr_assert_eq(atomic_load(&threads_seen), atoi(counts[i]), "BURNC_NUM_THREADS=%s gave %d threads", counts[i],
                     atomic_load(&threads_seen));
        for (int c = 0; i && c < N_CASES; c++) {
            cr_assert_eq(sizes_now[c], sizes[c]);
            cr_assert(memcmp(now[c], first[c], sizes[c]) == 0, "case %d differs with %s threads", c, counts[i]);
        }
        if (i)
            products_free(now);
    }
    products_free(first);
    burnc_log_set_callback(NULL, NULL);
    unsetenv("BURNC_NUM_THREADS");
    BT_LEAK_CHECK();
}

static atomic_int gemm_tuned;

static void capture_tuning(void *user, const char *topic, const char *msg)
{
    (void)user;
    if (strcmp(topic, "autotune") == 0 && strncmp(msg, "cpu.gemm ", 9) == 0)
        atomic_fetch_add(&gemm_tuned, 1);
}

Test(gemm, same_bits_tuned_or_not)
{
    char dir[] = "/tmp/burnc-gemm-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    setenv("BURNC_CACHE_DIR", dir, 1); /* a fresh store: every key is a miss */
    unsigned char *off[N_CASES], *tuned[N_CASES], *cached[N_CASES];
    size_t sizes[N_CASES], s2[N_CASES];
    BT_ASSERT_OK(burnc_autotune_set_mode("off"));
    products(off, sizes);
    BT_ASSERT_OK(burnc_autotune_set_mode("on"));
    burnc_log_set_callback(capture_tuning, NULL);
    products(tuned, s2);
    burnc_log_set_callback(NULL, NULL);
    cr_assert_geq(atomic_load(&gemm_tuned), 2, "the micro-kernel and a blocking were tuned (%d decisions)",
                  atomic_load(&gemm_tuned));
    BT_ASSERT_OK(burnc_autotune_set_mode("cached"));
    products(cached, s2);
    for (int c = 0; c < N_CASES; c++) {
        cr_assert(memcmp(off[c], tuned[c], sizes[c]) == 0, "case %d: tuned differs from BURNC_AUTOTUNE=off", c);
        cr_assert(memcmp(off[c], cached[c], sizes[c]) == 0, "case %d: cached differs from BURNC_AUTOTUNE=off", c);
    }
    products_free(off);
    products_free(tuned);
    products_free(cached);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    BT_LEAK_CHECK();
}

/* Empty extents: K = 0 gives +0.0 everywhere, M = 0 an empty result. */
Test(gemm, empty_extents)
{
    burnc_device_t *cpu = open_cpu();
    burnc_tensor_t *a = BT_NOT_NULL(burnc_zeros(cpu, BURNC_DTYPE_F32, 2, (const int64_t[]){300, 0}));
    burnc_tensor_t *b = BT_NOT_NULL(burnc_zeros(cpu, BURNC_DTYPE_F32, 2, (const int64_t[]){0, 200}));
    burnc_tensor_t *c = BT_NOT_NULL(burnc_matmul(a, b));
    float *got = read_all(c);
    for (int64_t i = 0; i < 300 * 200; i++)
        cr_assert(got[i] == 0 && !signbit(got[i]), "element %lld is %g", (long long)i, (double)got[i]);
    free(got);
    burnc_tensor_t *e = BT_NOT_NULL(burnc_zeros(cpu, BURNC_DTYPE_F32, 2, (const int64_t[]){0, 7}));
    burnc_tensor_t *f = BT_NOT_NULL(burnc_zeros(cpu, BURNC_DTYPE_F32, 2, (const int64_t[]){7, 5}));
    burnc_tensor_t *g = BT_NOT_NULL(burnc_matmul(e, f));
    cr_assert_eq(burnc_tensor_numel(g), 0);
    BT_ASSERT_OK(burnc_device_sync(cpu));
    burnc_tensor_release(g);
    burnc_tensor_release(f);
    burnc_tensor_release(e);
    burnc_tensor_release(c);
    burnc_tensor_release(b);
    burnc_tensor_release(a);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

Test(gemm, bad_shapes_fail)
{
    burnc_device_t *cpu = open_cpu();
    burnc_tensor_t *a = BT_NOT_NULL(burnc_zeros(cpu, BURNC_DTYPE_F32, 2, (const int64_t[]){3, 4}));
    burnc_tensor_t *b = BT_NOT_NULL(burnc_zeros(cpu, BURNC_DTYPE_F32, 2, (const int64_t[]){5, 6}));
    BT_ASSERT_FAILS(burnc_matmul(a, b), BURNC_ERR_SHAPE, "do not match");
    burnc_tensor_t *p = BT_NOT_NULL(burnc_zeros(cpu, BURNC_DTYPE_F32, 3, (const int64_t[]){2, 3, 4}));
    burnc_tensor_t *q = BT_NOT_NULL(burnc_zeros(cpu, BURNC_DTYPE_F32, 3, (const int64_t[]){3, 4, 5}));
    BT_ASSERT_FAILS(burnc_matmul(p, q), BURNC_ERR_SHAPE, "batch axes");
    burnc_tensor_t *s = BT_NOT_NULL(burnc_zeros(cpu, BURNC_DTYPE_F32, 0, NULL));
    BT_ASSERT_FAILS(burnc_matmul(s, a), BURNC_ERR_SHAPE, "rank >= 1");
    burnc_tensor_release(s);
    burnc_tensor_release(q);
    burnc_tensor_release(p);
    burnc_tensor_release(b);
    burnc_tensor_release(a);
    BT_ASSERT_OK(burnc_device_sync(cpu));
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* ---- Epilogues: element-wise work on a matmul's output runs on its tiles ---------------------- */

static atomic_int epilogues;

static void count_epilogues(void *user, const char *topic, const char *msg)
{
    (void)user, (void)topic;
    if (strstr(msg, "runs as the epilogue of the matmul"))
        atomic_fetch_add(&epilogues, 1);
}

typedef enum epi_case { EPI_GELU_BIAS, EPI_TRANSPOSED, EPI_OVER_A } epi_case;

/* The case's epilogue of a @ b (n x n f32), read back into out. With `apart` the matmul is
 * synced first, so the element-wise work runs as a kernel of its own. a's handle is released
 * once recorded, so an epilogue reading a (EPI_OVER_A) may take a's buffer in place, which the
 * matmul still reads: that one must not run on the tiles. */
static void epi_run(burnc_device_t *dev, epi_case ec, int64_t n, const float *ha, const float *hb,
                    const float *hbias, bool apart, float *out)
{
    burnc_scope_begin();
    burnc_tensor_t *a = burnc_tensor_keep(bt_f32(dev, 2, (const int64_t[]){n, n}, ha));
    burnc_tensor_t *b = bt_f32(dev, 2, (const int64_t[]){n, n}, hb), *bias = bt_f32(dev, 1, &n, hbias);
    BT_ASSERT_OK(burnc_device_sync(dev));
    burnc_tensor_t *prod = burnc_matmul(a, b);
    if (apart)
        BT_ASSERT_OK(burnc_device_sync(dev));
    burnc_tensor_t *y;
    if (ec == EPI_GELU_BIAS)
        y = burnc_gelu(burnc_add(prod, bias));
    else if (ec == EPI_TRANSPOSED)
        y = burnc_add(prod, burnc_transpose(prod, 0, 1));
    else
        y = burnc_add(prod, a);
    burnc_tensor_release(a);
    BT_ASSERT_OK(burnc_tensor_read(BT_NOT_NULL(y), out, (size_t)(n * n) * sizeof *out));
    burnc_scope_end();
}

/* Fused into the matmul's tiles or not, the same bits; the epilogue runs on the tiles only
 * when it reads the product at the positions it writes and writes nothing the matmul reads. */
Test(gemm, epilogues_on_tiles_give_the_same_bits)
{
    enum { N = 192 };
    static float a[N * N], b[N * N], bias[N], tiled[N * N], apart[N * N];
    for (int i = 0; i < N * N; i++)
        a[i] = (float)uniform(), b[i] = (float)uniform();
    for (int i = 0; i < N; i++)
        bias[i] = (float)uniform();
    burnc_device_t *cpu = open_cpu();
    burnc_log_set_callback(count_epilogues, NULL);
    const int want[] = {1, 0, 0}; /* epilogues on tiles per case */
    for (int ec = EPI_GELU_BIAS; ec <= EPI_OVER_A; ec++) {
        atomic_store(&epilogues, 0);
        epi_run(cpu, (epi_case)ec, N, a, b, bias, false, tiled);
        int seen = atomic_load(&epilogues);
        epi_run(cpu, (epi_case)ec, N, a, b, bias, true, apart);
        cr_assert_eq(seen, want[ec], "case %d: %d epilogues ran on tiles, expected %d", ec, seen, want[ec]);
        cr_assert(memcmp(tiled, apart, sizeof tiled) == 0, "case %d: the results differ", ec);
    }
    burnc_log_set_callback(NULL, NULL);
    /* and the product is right: gelu(a @ b + bias) against the host's own fma chain + gelu */
    epi_run(cpu, EPI_GELU_BIAS, N, a, b, bias, false, tiled);
    for (int i = 0; i < N; i += 17)
        for (int j = 0; j < N; j += 13) {
            float acc = 0;
            for (int k = 0; k < N; k++)
                acc = fmaf(a[i * N + k], b[k * N + j], acc);
            double x = (double)(acc + bias[j]), want_v = x / 2 * erfc(-x / sqrt(2.0));
            cr_assert(fabs(tiled[i * N + j] - want_v) <= 1e-5 * (1 + fabs(want_v)), "[%d,%d]: %g, expected %g", i, j,
                      (double)tiled[i * N + j], want_v);
        }
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}
