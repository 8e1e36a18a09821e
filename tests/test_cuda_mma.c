/* The CUDA matmul's tensor-core engine (runtime/cuda/mma.c, codegen/ptx_mma.c).
 *
 * Here, without a GPU: every tile variant, operand type and layout is generated for sm_80 and
 * sm_90 and assembled by ptxas (skipped with a reason when there is no CUDA toolkit), and its
 * PTX checked for the instructions the design relies on.
 * On a GPU (skipped with the reason when cuda:0 cannot open): cuda_mma_matmul called directly
 * on device buffers, against a host reference accumulating in double over the operands rounded
 * to their dtype (tf32: to a 10-bit mantissa, as cvt.rna does), within
 *     |c - ref| <= u * |ref| + (K + 2) * 2^-23 * sum_k |a b| + tiny,
 * u the dtype's half ulp (f16 2^-11, bf16 2^-8, f32 2^-24): one rounding of the result, plus
 * f32 accumulation in any order (each of K additions errs by at most 2^-24 of the running sum
 * of magnitudes; the bound doubles it for the hardware's internal alignment). A wrong index or
 * a lost tile errs by about sum |a b|, far outside it. Also: odd sizes, transposed and batched
 * operands, TF32 off and on through burnc_matmul, declined problems and the kernel cache. */
#include <dlfcn.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/cg.h"
#include "autotune.h"
#include "codegen/ptx_mma.h"
#include "common.h"
#include "cuda/cu.h"
#include "cuda/mma.h"

/* ---- Host values ---------------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Rounds to nearest even (finite values only: the tests' data). */
static uint16_t to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static float from_bf16(uint16_t h) { return bits_f32((uint32_t)h << 16); }

static uint16_t to_f16(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

static float from_f16(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}

/* cvt.rna.tf32.f32: 10 mantissa bits, to nearest, ties away from zero. */
static float to_tf32(float f)
{
    uint32_t u = f32_bits(f);
    return bits_f32((u + 0x1000) & 0xffffe000u);
}

/* What Hopper's wgmma does with a tf32 operand: keeps 10 mantissa bits, drops the rest. */
static float to_tf32_truncated(float f) { return bits_f32(f32_bits(f) & 0xffffe000u); }

/* A matrix in host memory as the device holds it (16-bit codes or f32), plus its values. */
typedef struct hmat {
    burnc_dtype_t dt;
    int64_t n;    /* elements */
    void *raw;    /* dtype codes */
    double *val;  /* the value of each code (tf32: after rounding) */
} hmat;

static int esize(burnc_dtype_t dt) { return dt == BURNC_DTYPE_F32 ? 4 : 2; }

static void hmat_random(hmat *h, burnc_dtype_t dt, int64_t n, uint64_t seed, bool tf32)
{
    h->dt = dt, h->n = n;
    h->raw = calloc((size_t)n, (size_t)esize(dt));
    h->val = calloc((size_t)n, sizeof(double));
    cr_assert(h->raw && h->val);
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        float f = (float)((double)(rng_next(&s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        if (dt == BURNC_DTYPE_F16)
            ((uint16_t *)h->raw)[i] = to_f16(f), h->val[i] = from_f16(((uint16_t *)h->raw)[i]);
        else if (dt == BURNC_DTYPE_BF16)
            ((uint16_t *)h->raw)[i] = to_bf16(f), h->val[i] = from_bf16(((uint16_t *)h->raw)[i]);
        else
            ((float *)h->raw)[i] = f, h->val[i] = tf32 ? to_tf32(f) : f;
    }
}

static void hmat_free(hmat *h)
{
    free(h->raw);
    free(h->val);
}

static double code_value(burnc_dtype_t dt, const void *raw, int64_t i)
{
    if (dt == BURNC_DTYPE_F16)
        return from_f16(((const uint16_t *)raw)[i]);
    if (dt == BURNC_DTYPE_BF16)
        return from_bf16(((const uint16_t *)raw)[i]);
    return ((const float *)raw)[i];
}

/* ---- The GPU ------------------------------------------------------------------------------- */

static burnc_device_t *open_gpu(void)
{
    burnc_device_t *dev = burnc_device_open("cuda:0");
    if (!dev && burnc_error_code() == BURNC_ERR_UNAVAILABLE)
        cr_skip_test("cuda:0 is not available: %s", burnc_error_message());
    cr_assert_not_null(dev, "cuda:0: %s: %s", burnc_status_name(burnc_error_code()), burnc_error_message());
    if (cuda_dev(rt_dev(dev))->cc < 80) {
        int cc = cuda_dev(rt_dev(dev))->cc;
        burnc_device_release(dev);
        cr_skip_test("cuda:0 is sm_%d: tensor-core mma.sync needs sm_80", cc);
    }
    return dev;
}

static rt_buffer *dbuf(burnc_device_t *dev, const void *src, size_t bytes)
{
    rt_device *rd = rt_dev(dev);
    rt_buffer *b = NULL;
    BT_ASSERT_OK(rd->be->alloc(rd, bytes ? bytes : 16, &b));
    if (src)
        BT_ASSERT_OK(rd->be->write(rd, b, 0, src, bytes));
    return b;
}

static void dfree(burnc_device_t *dev, rt_buffer *b) { rt_dev(dev)->be->free(rt_dev(dev), b); }

/* One problem: A and B live in buffers of a_n / b_n elements laid out by the strides. */
typedef struct mm_case {
    burnc_dtype_t dt;
    bool tf32;
    int64_t batch, m, n, k;
    int64_t a_bs, a_rs, a_ks, b_bs, b_ks, b_cs;
    int tile; /* -1: the heuristic */
} mm_case;

/* Whether tile (-1: the heuristic's) runs as the warpgroup kernel on dev: on sm_90 only, where
 * the heuristic always takes it. */
static bool runs_wg(rt_device *rd, int tile)
{
    return cuda_dev(rd)->cc == 90 && (tile < 0 || CG_MMA_TILES[tile].wg);
}

static int64_t span(int64_t batch, int64_t bs, int64_t r, int64_t rs, int64_t c, int64_t cs)
{
    return (batch - 1) * bs + (r - 1) * rs + (c - 1) * cs + 1;
}

/* Runs c through cuda_mma_matmul and checks every element against the reference. */
static void run_case(burnc_device_t *dev, const mm_case *c, uint64_t seed)
{
    int64_t a_n = span(c->batch, c->a_bs, c->m, c->a_rs, c->k, c->a_ks);
    int64_t b_n = span(c->batch, c->b_bs, c->k, c->b_ks, c->n, c->b_cs);
    int64_t c_n = c->batch * c->m * c->n;
    hmat a, b;
    hmat_random(&a, c->dt, a_n, seed, c->tf32);
    hmat_random(&b, c->dt, b_n, seed + 7, c->tf32);
    int es = esize(c->dt);
    if (c->tf32 && runs_wg(rt_dev(dev), c->tile)) /* the reference takes the operands as wgmma does */
        for (int i = 0; i < a_n + b_n; i++) {
            hmat *h = i < a_n ? &a : &b;
            int64_t j = i < a_n ? i : i - a_n;
            h->val[j] = to_tf32_truncated(((float *)h->raw)[j]);
        }
    rt_buffer *da = dbuf(dev, a.raw, (size_t)a_n * es), *db = dbuf(dev, b.raw, (size_t)b_n * es);
    void *out = malloc((size_t)c_n * es);
    memset(out, 0xff, (size_t)c_n * es); /* NaN codes: an element never written fails */
    rt_buffer *dc = dbuf(dev, out, (size_t)c_n * es);
    cuda_mm_problem p = {.dt = c->dt, .batch = c->batch, .m = c->m, .n = c->n, .k = c->k,
                         .a = cuda_ptr(da), .b = cuda_ptr(db), .c = cuda_ptr(dc),
                         .a_bs = c->a_bs, .a_rs = c->a_rs, .a_ks = c->a_ks,
                         .b_bs = c->b_bs, .b_ks = c->b_ks, .b_cs = c->b_cs, .c_bs = c->m * c->n};
    rt_device *rd = rt_dev(dev);
    cr_assert(cuda_test_mma_force_tile(rd, c->tile));
    bool taken = false;
    BT_ASSERT_OK(cuda_mma_matmul(rd, &p, c->tf32, &taken));
    cr_assert(taken, "the engine declined %s %lldx%lldx%lld", burnc_dtype_name(c->dt), (long long)c->m,
              (long long)c->n, (long long)c->k);
    BT_ASSERT_OK(rd->be->sync(rd));
    BT_ASSERT_OK(rd->be->read(rd, dc, 0, out, (size_t)c_n * es));
    cuda_test_mma_force_tile(rd, -1);
    double u = c->dt == BURNC_DTYPE_F16 ? 0x1p-11 : c->dt == BURNC_DTYPE_BF16 ? 0x1p-8 : 0x1p-24;
    int64_t bad = 0;
    double worst = 0;
    for (int64_t z = 0; z < c->batch; z++)
        for (int64_t i = 0; i < c->m; i++)
            for (int64_t j = 0; j < c->n; j++) {
                double ref = 0, mag = 0;
                for (int64_t l = 0; l < c->k; l++) {
                    double x = a.val[z * c->a_bs + i * c->a_rs + l * c->a_ks];
                    double y = b.val[z * c->b_bs + l * c->b_ks + j * c->b_cs];
                    ref += x * y, mag += fabs(x * y);
                }
                double got = code_value(c->dt, out, (z * c->m + i) * c->n + j);
                double tol = u * fabs(ref) + (double)(c->k + 2) * 0x1p-23 * mag + 0x1p-24;
                double err = fabs(got - ref);
                if (!(err <= tol)) {
                    if (bad++ < 5)
                        cr_log_error("tile %d %s: C[%lld][%lld][%lld] = %.9g, ref %.9g, tolerance %.3g", c->tile,
                                     burnc_dtype_name(c->dt), (long long)z, (long long)i, (long long)j, got, ref, tol);
                } else if (err / (tol > 0 ? tol : 1) > worst) {
                    worst = err / tol;
                }
            }
    cr_expect_eq(bad, 0, "%lld of %lld elements outside the bound (tile %d, %s, %lldx%lldx%lld x%lld)", (long long)bad,
                 (long long)c_n, c->tile, burnc_dtype_name(c->dt), (long long)c->m, (long long)c->n, (long long)c->k,
                 (long long)c->batch);
    dfree(dev, da), dfree(dev, db), dfree(dev, dc);
    free(out);
    hmat_free(&a), hmat_free(&b);
}

/* A dense row-major problem (A m x k, B k x n), rows padded to `pad` elements. */
static mm_case dense(burnc_dtype_t dt, int64_t m, int64_t n, int64_t k, int64_t pad, int tile)
{
    int64_t lda = (k + pad - 1) / pad * pad, ldb = (n + pad - 1) / pad * pad;
    return (mm_case){.dt = dt, .tf32 = dt == BURNC_DTYPE_F32, .batch = 1, .m = m, .n = n, .k = k, .a_bs = m * lda,
                     .a_rs = lda, .a_ks = 1, .b_bs = k * ldb, .b_ks = ldb, .b_cs = 1, .tile = tile};
}

static const burnc_dtype_t TYPES[] = {BURNC_DTYPE_F16, BURNC_DTYPE_BF16, BURNC_DTYPE_F32};

Test(cuda_mma, square_every_tile_and_type)
{
    burnc_device_t *dev = open_gpu();
    for (int t = 0; t < 3; t++)
        for (int tile = 0; tile < CG_MMA_N_TILES; tile++) {
            if (!cg_mma_tile_ok(cuda_dev(rt_dev(dev))->cc, tile))
                continue; /* a warpgroup tile off sm_90 (the next test says so) */
            mm_case c = dense(TYPES[t], 256, 256, 256, 8, tile);
            run_case(dev, &c, 10 + (uint64_t)tile);
        }
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(cuda_mma, odd_sizes_zero_filled_edges)
{
    burnc_device_t *dev = open_gpu();
    /* (700 rows: 11 block rows with 64 x 64 tiles, so the last group of 8 is partial; K 300 and
     * 520 run K tiles through the loop that skips the k edge, then the edge loop, with m and n
     * edges cutting chunks in both) */
    static const int64_t sizes[][3] = {{77, 45, 37}, {1, 1, 1}, {129, 257, 65}, {3, 200, 300}, {200, 3, 9},
                                       {700, 130, 64}, {200, 136, 520}};
    for (int t = 0; t < 3; t++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
            for (int tile = 0; tile < CG_MMA_N_TILES; tile++) {
                if (!cg_mma_tile_ok(cuda_dev(rt_dev(dev))->cc, tile))
                    continue;
                mm_case c = dense(TYPES[t], sizes[s][0], sizes[s][1], sizes[s][2], 8, tile);
                run_case(dev, &c, 100 + s);
            }
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Every storage order of A and B (ldmatrix and ldmatrix.trans), batched, with B broadcast;
 * K long enough for the loop that skips the k edge; each tile meets each type in some layout
 * (two tiles per type and layout keep the kernels built per device few). */
Test(cuda_mma, transposed_and_batched_operands)
{
    burnc_device_t *dev = open_gpu();
    int64_t m = 70, n = 90, k = 300, pm = 72, pn = 96, pk = 304;
    for (int t = 0; t < 3; t++)
        for (int lay = 0; lay < 4; lay++)
            for (int bcast = 0; bcast < 2; bcast++) {
                mm_case c = {.dt = TYPES[t], .tf32 = TYPES[t] == BURNC_DTYPE_F32, .batch = 3, .m = m, .n = n, .k = k,
                             .tile = (lay * 2 + bcast + t * 3) % CG_MMA_N_TILES};
                if (lay & 1) /* A stored k x m (m contiguous) */
                    c.a_rs = 1, c.a_ks = pm, c.a_bs = k * pm;
                else
                    c.a_rs = pk, c.a_ks = 1, c.a_bs = m * pk;
                if (lay & 2) /* B stored n x k (k contiguous) */
                    c.b_ks = 1, c.b_cs = pk, c.b_bs = n * pk;
                else
                    c.b_ks = pn, c.b_cs = 1, c.b_bs = k * pn;
                if (bcast)
                    c.b_bs = 0;
                run_case(dev, &c, 1000 + (uint64_t)(lay * 2 + bcast));
            }
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* The warpgroup kernel (sm_90 only) in every storage order of A and B, each type and each of
 * its tiles, batched with B broadcast in one and not the other; tf32 operands stored with m or n
 * contiguous go through the transpose first (A's batch included, B's shared once). */
Test(cuda_mma, warpgroup_every_layout)
{
    burnc_device_t *dev = open_gpu();
    int cc = cuda_dev(rt_dev(dev))->cc;
    if (cc != 90) {
        burnc_device_release(dev);
        cr_skip_test("cuda:0 is sm_%d: the warpgroup kernel (wgmma) is sm_90a's", cc);
    }
    int64_t m = 130, n = 200, k = 136, pm = 136, pn = 200, pk = 136;
    for (int t = 0; t < 3; t++)
        for (int lay = 0; lay < 4; lay++)
            for (int tile = 0; tile < CG_MMA_N_TILES; tile++) {
                if (!CG_MMA_TILES[tile].wg)
                    continue;
                int bcast = (tile + lay) & 1;
                mm_case c = {.dt = TYPES[t], .tf32 = TYPES[t] == BURNC_DTYPE_F32, .batch = 2, .m = m, .n = n, .k = k,
                             .tile = tile};
                if (lay & 1)
                    c.a_rs = 1, c.a_ks = pm, c.a_bs = k * pm;
                else
                    c.a_rs = pk, c.a_ks = 1, c.a_bs = m * pk;
                if (lay & 2)
                    c.b_ks = 1, c.b_cs = pk, c.b_bs = bcast ? 0 : n * pk;
                else
                    c.b_ks = pn, c.b_cs = 1, c.b_bs = bcast ? 0 : k * pn;
                run_case(dev, &c, 3000 + (uint64_t)(t * 64 + lay * 16 + tile));
            }
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Autotune (family cuda.mma): a miss in mode on times the tiles of the device's kind and keeps
 * the result within the bound; the same problem again is answered from memory. */
static int tuned_mma, tuned_choice = -1;
static void watch_tuning(void *user, const at_query *q, const at_outcome *o)
{
    (void)user;
    if (strcmp(q->family->name, "cuda.mma") == 0 && o->tuned)
        tuned_mma++, tuned_choice = o->choice;
}

Test(cuda_mma, autotune_times_the_tiles_and_remembers)
{
    char dir[] = "/tmp/burnc-mma-tune-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    setenv("BURNC_CACHE_DIR", dir, 1);
    burnc_device_t *dev = open_gpu();
    int cc = cuda_dev(rt_dev(dev))->cc;
    at_set_mode(AT_MODE_ON);
    at_set_observer(watch_tuning, NULL);
    mm_case c = dense(BURNC_DTYPE_BF16, 300, 520, 200, 8, -1);
    run_case(dev, &c, 77);
    cr_expect_eq(tuned_mma, 1, "%d tuning runs of cuda.mma for one problem", tuned_mma);
    cr_expect(tuned_choice >= 0 && CG_MMA_TILES[tuned_choice].wg == (cc == 90) && cg_mma_tile_ok(cc, tuned_choice),
              "tuning chose tile %d on sm_%d", tuned_choice, cc);
    run_case(dev, &c, 78);
    cr_expect_eq(tuned_mma, 1, "the same problem was tuned again");
    at_set_observer(NULL, NULL);
    bt_expect_usable(dev);
    burnc_device_release(dev);
    bt_remove_dir(dir);
    BT_LEAK_CHECK();
}

/* A problem the engine must leave to SIMT: taken stays false, nothing fails. */
static void expect_declined(rt_device *rd, const cuda_mm_problem *p, bool tf32, const char *why)
{
    bool taken = true;
    BT_ASSERT_OK(cuda_mma_matmul(rd, p, tf32, &taken));
    cr_expect(!taken, "the engine took a problem it must decline: %s", why);
}

Test(cuda_mma, declines_what_it_cannot_run)
{
    burnc_device_t *dev = open_gpu();
    rt_device *rd = rt_dev(dev);
    rt_buffer *buf = dbuf(dev, NULL, 1 << 20);
    CUdeviceptr base = cuda_ptr(buf);
    cuda_mm_problem ok = {.dt = BURNC_DTYPE_F16, .batch = 1, .m = 64, .n = 64, .k = 64, .a = base, .b = base + 65536,
                          .c = base + 131072, .a_rs = 64, .a_ks = 1, .b_ks = 64, .b_cs = 1, .c_bs = 64 * 64};
    cuda_mm_problem p = ok;
    int dummy;
    p.epilogue = (const struct cuda_mm_epilogue *)&dummy;
    expect_declined(rd, &p, false, "an epilogue it cannot fuse");
    p = ok, p.dt = BURNC_DTYPE_F32;
    expect_declined(rd, &p, false, "f32 without TF32");
    p = ok, p.dt = BURNC_DTYPE_F64;
    expect_declined(rd, &p, true, "f64");
    p = ok, p.dt = BURNC_DTYPE_I32;
    expect_declined(rd, &p, true, "i32");
    p = ok, p.a_rs = 60;
    expect_declined(rd, &p, false, "rows of A not 16-byte aligned");
    p = ok, p.b_ks = 66;
    expect_declined(rd, &p, false, "rows of B not 16-byte aligned");
    p = ok, p.a = base + 2;
    expect_declined(rd, &p, false, "A not 16-byte aligned");
    p = ok, p.a_ks = 2, p.a_rs = 128;
    expect_declined(rd, &p, false, "A with no unit-stride axis");
    p = ok, p.b_bs = 4, p.batch = 2;
    expect_declined(rd, &p, false, "a batch stride that breaks alignment");
    /* and it takes the same problem unchanged */
    bool taken = false;
    BT_ASSERT_OK(cuda_mma_matmul(rd, &ok, false, &taken));
    cr_expect(taken, "the aligned f16 problem was declined");
    BT_ASSERT_OK(rd->be->sync(rd));
    dfree(dev, buf);
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(cuda_mma, empty_and_k_zero)
{
    burnc_device_t *dev = open_gpu();
    rt_device *rd = rt_dev(dev);
    uint16_t host[6 * 5];
    memset(host, 0xff, sizeof host);
    rt_buffer *buf = dbuf(dev, NULL, 4096), *c = dbuf(dev, host, sizeof host);
    cuda_mm_problem p = {.dt = BURNC_DTYPE_BF16, .batch = 1, .m = 6, .n = 5, .k = 0, .a = cuda_ptr(buf),
                         .b = cuda_ptr(buf), .c = cuda_ptr(c), .a_rs = 8, .a_ks = 1, .b_ks = 8, .b_cs = 1, .c_bs = 30};
    bool taken = false;
    BT_ASSERT_OK(cuda_mma_matmul(rd, &p, false, &taken));
    cr_assert(taken);
    BT_ASSERT_OK(rd->be->sync(rd));
    BT_ASSERT_OK(rd->be->read(rd, c, 0, host, sizeof host));
    for (int i = 0; i < 30; i++)
        cr_expect_eq(host[i], 0, "K = 0: C[%d] = 0x%04x, not +0", i, host[i]);
    p.m = 0, p.k = 4;
    BT_ASSERT_OK(cuda_mma_matmul(rd, &p, false, &taken));
    cr_expect(taken, "m = 0 is taken (nothing to do)");
    dfree(dev, buf), dfree(dev, c);
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(cuda_mma, kernels_are_built_once)
{
    burnc_device_t *dev = open_gpu();
    rt_device *rd = rt_dev(dev);
    mm_case c = dense(BURNC_DTYPE_F16, 64, 64, 64, 8, 2);
    run_case(dev, &c, 5);
    int after_first = cuda_test_mma_builds(rd);
    cr_expect_eq(after_first, 1, "one kernel built for the first problem, not %d", after_first);
    c.m = 40, c.k = 48; /* another size: the same kernel */
    run_case(dev, &c, 6);
    cr_expect_eq(cuda_test_mma_builds(rd), 1, "a second size of the same kind built another kernel");
    c.dt = BURNC_DTYPE_BF16;
    run_case(dev, &c, 7);
    cr_expect_eq(cuda_test_mma_builds(rd), 2, "bf16 needs a kernel of its own");
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* TF32 made visible: a = 1 + 2^-12 rounds to 1 in tf32, so sum_k a*1 over 64 terms is 64 with
 * TF32 and 64 + 2^-6 exactly in f32. */
Test(cuda_mma, tf32_rounds_inputs_exact_f32_does_not)
{
    burnc_device_t *dev = open_gpu();
    rt_device *rd = rt_dev(dev);
    enum { M = 16, N = 16, K = 64 };
    static float a[M * K], b[K * N], c[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = 1.0f + 0x1p-12f;
    for (int i = 0; i < K * N; i++)
        b[i] = 1.0f;
    rt_buffer *da = dbuf(dev, a, sizeof a), *db = dbuf(dev, b, sizeof b), *dc = dbuf(dev, NULL, sizeof c);
    cuda_mm_problem p = {.dt = BURNC_DTYPE_F32, .batch = 1, .m = M, .n = N, .k = K, .a = cuda_ptr(da),
                         .b = cuda_ptr(db), .c = cuda_ptr(dc), .a_rs = K, .a_ks = 1, .b_ks = N, .b_cs = 1, .c_bs = M * N};
    bool taken = false;
    BT_ASSERT_OK(cuda_mma_matmul(rd, &p, true, &taken));
    cr_assert(taken);
    BT_ASSERT_OK(rd->be->sync(rd));
    BT_ASSERT_OK(rd->be->read(rd, dc, 0, c, sizeof c));
    for (int i = 0; i < M * N; i++)
        cr_expect_eq(c[i], 64.0f, "tf32: C[%d] = %.9g, expected 64 (inputs rounded to tf32)", i, (double)c[i]);
    dfree(dev, da), dfree(dev, db), dfree(dev, dc);

    /* through burnc_matmul: off keeps the exact chain (the cpu device's bits), on rounds */
    burnc_device_t *cpu = burnc_device_open("cpu");
    if (!cpu) {
        bt_expect_usable(dev);
        burnc_device_release(dev);
        cr_skip_test("cpu is not available to compare with: %s", burnc_error_message());
    }
    int64_t sa[2] = {M, K}, sb[2] = {K, N};
    float got[M * N], want[M * N];
    for (int on = 0; on < 2; on++) {
        BT_ASSERT_OK(burnc_device_set_matmul_tf32(dev, on));
        burnc_device_t *devs[2] = {dev, cpu};
        for (int d = 0; d < 2; d++) {
            burnc_tensor_t *x = burnc_tensor_from_data(devs[d], BURNC_DTYPE_F32, 2, sa, a);
            burnc_tensor_t *y = burnc_tensor_from_data(devs[d], BURNC_DTYPE_F32, 2, sb, b);
            burnc_tensor_t *z = burnc_matmul(x, y);
            cr_assert_not_null(z, "%s", burnc_error_message());
            BT_ASSERT_OK(burnc_tensor_read(z, d ? want : got, sizeof got));
            burnc_tensor_release(x), burnc_tensor_release(y), burnc_tensor_release(z);
        }
        for (int i = 0; i < M * N; i++) {
            float expect = on ? 64.0f : want[i];
            cr_expect_eq(f32_bits(got[i]), f32_bits(expect), "tf32 %s: C[%d] = %.9g, expected %.9g", on ? "on" : "off", i,
                         (double)got[i], (double)expect);
        }
    }
    cr_expect_eq(f32_bits(want[0]), f32_bits(64.0f + 0x1p-6f), "the exact chain gives 64 + 2^-6");
    burnc_device_release(cpu);
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* f16/bf16 through burnc_matmul on cuda agree with ref within the stated bound (whichever
 * engine gemm.c picks). */
Test(cuda_mma, burnc_matmul_half_types_against_ref)
{
    burnc_device_t *dev = open_gpu();
    enum { M = 96, N = 136, K = 200 };
    int64_t sa[2] = {M, K}, sb[2] = {K, N};
    for (int t = 0; t < 2; t++) {
        hmat a, b;
        hmat_random(&a, TYPES[t], M * K, 42, false);
        hmat_random(&b, TYPES[t], K * N, 43, false);
        uint16_t got[M * N];
        burnc_tensor_t *x = burnc_tensor_from_data(dev, TYPES[t], 2, sa, a.raw);
        burnc_tensor_t *y = burnc_tensor_from_data(dev, TYPES[t], 2, sb, b.raw);
        burnc_tensor_t *z = burnc_matmul(x, y);
        cr_assert_not_null(z, "%s", burnc_error_message());
        BT_ASSERT_OK(burnc_tensor_read(z, got, sizeof got));
        double u = TYPES[t] == BURNC_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
        int bad = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double r = 0, mag = 0;
                for (int l = 0; l < K; l++)
                    r += a.val[i * K + l] * b.val[l * N + j], mag += fabs(a.val[i * K + l] * b.val[l * N + j]);
                double tol = u * fabs(r) + (K + 2) * 0x1p-23 * mag + 0x1p-24;
                bad += !(fabs(code_value(TYPES[t], got, i * N + j) - r) <= tol);
            }
        cr_expect_eq(bad, 0, "%s: %d elements outside the bound", burnc_dtype_name(TYPES[t]), bad);
        burnc_tensor_release(x), burnc_tensor_release(y), burnc_tensor_release(z);
        hmat_free(&a), hmat_free(&b);
    }
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ---- PTX, without a GPU --------------------------------------------------------------------- */

static const cg_llvm_api *llvm_api(void)
{
    static const cg_llvm_api *api;
    if (api)
        return api;
    const char *path = getenv("BURNC_LLVM_MODULE");
    if (!path || !*path)
        cr_skip_test("BURNC_LLVM_MODULE is not set: this build has no LLVM 19, so no PTX generator");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(h, "cannot open the LLVM module %s: %s", path, dlerror());
    api = dlsym(h, "burnc_llvm_api");
    cr_assert(api && api->abi == CG_LLVM_ABI && api->compile_mma_ptx, "%s has no compile_mma_ptx", path);
    return api;
}

/* ptxas from $CUDA_HOME, PATH or the toolkit's default prefix (as the ptx suite finds it). */
static const char *find_ptxas(void)
{
    static char found[4096];
    const char *home = getenv("CUDA_HOME");
    if (home) {
        snprintf(found, sizeof found, "%s/bin/ptxas", home);
        if (access(found, X_OK) == 0)
            return found;
    }
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        snprintf(found, sizeof found, "%.*s/ptxas", (int)n, path);
        if (n && access(found, X_OK) == 0)
            return found;
        path = end ? end + 1 : NULL;
    }
    snprintf(found, sizeof found, "/usr/local/cuda/bin/ptxas");
    return access(found, X_OK) == 0 ? found : NULL;
}

/* Assembles ptx for arch (sm_80, sm_90a...); false with ptxas' output (with -v: registers,
 * spills) in log. */
static bool ptxas(const char *ptx, const char *arch, char *log, size_t cap)
{
    char dir[] = "/tmp/burnc-mma-XXXXXX";
    cr_assert(mkdtemp(dir));
    char src[64], cmd[4400];
    snprintf(src, sizeof src, "%s/k.ptx", dir);
    FILE *f = fopen(src, "w");
    cr_assert(f);
    fputs(ptx, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' -v -arch=%s -o %s/k.cubin %s 2>&1", find_ptxas(), arch, dir, src);
    FILE *pp = popen(cmd, "r");
    cr_assert(pp);
    size_t n = fread(log, 1, cap - 1, pp);
    log[n] = '\0';
    int rc = pclose(pp);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    return rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

/* The warpgroup kernel's PTX: wgmma of the type and tile width, operands brought by the bulk
 * tensor copy engine on mbarriers, one K tile of wgmma kept in flight, no mma.sync or ldmatrix;
 * tf32 with the transpose. */
static void expect_wg_ptx(const cg_mma_spec *s, const char *ptx, const char *what)
{
    static const char *names[] = {"f16", "bf16", "tf32"};
    char want[128];
    snprintf(want, sizeof want, "wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s", s->bn,
             s->type == CG_MMA_TF32 ? 8 : 16, names[s->type], names[s->type]);
    cr_expect(strstr(ptx, want), "%s: no %s", what, want);
    cr_expect(strstr(ptx, ".target sm_90a"), "%s: not built for sm_90a", what);
    cr_expect(strstr(ptx, "cp.async.bulk.tensor.3d"), "%s: no bulk tensor copy", what);
    cr_expect(strstr(ptx, "mbarrier.try_wait.parity"), "%s: no mbarrier wait", what);
    cr_expect(strstr(ptx, "wgmma.wait_group.sync.aligned 1"), "%s: no wgmma kept in flight", what);
    cr_expect(!strstr(ptx, "mma.sync") && !strstr(ptx, "ldmatrix"), "%s: mma.sync or ldmatrix in it", what);
    cr_expect(!strstr(ptx, ".local"), "%s: a stack frame (accumulators not in registers)", what);
    cr_expect(!strstr(ptx, ".entry " CG_MMA_TRANSPOSE_ENTRY) == (s->type != CG_MMA_TF32),
              "%s: the transpose entry %s", what, s->type == CG_MMA_TF32 ? "missing" : "where no type needs it");
}

static void expect_mma_sync_ptx(int t, int tile, int lay, const char *ptx)
{
    static const char *names[] = {"f16", "bf16", "tf32"};
    const char *what = t == CG_MMA_TF32 ? "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
                       : t == CG_MMA_BF16 ? "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
                                          : "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
    cr_expect(strstr(ptx, what), "%s tile %d: no %s", names[t], tile, what);
    cr_expect(strstr(ptx, "cp.async.cg.shared.global"), "%s tile %d: no cp.async", names[t], tile);
    cr_expect(strstr(ptx, "cp.async.wait_group"), "%s tile %d: no wait_group", names[t], tile);
    cr_expect(strstr(ptx, ".maxntid"), "%s tile %d: no .maxntid", names[t], tile);
    cr_expect(!strstr(ptx, ".local"), "%s tile %d: a stack frame (accumulators not in registers)", names[t], tile);
    if (t == CG_MMA_TF32) {
        cr_expect(strstr(ptx, "cvt.rna.tf32.f32"), "tf32: inputs not rounded with cvt.rna");
        /* ldmatrix moves 32-bit words only untransposed: for an operand whose k is contiguous */
        bool k_contig = !(lay & 1) || (lay & 2);
        cr_expect(!k_contig == !strstr(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), "tf32 layout %d: ldmatrix %s",
                  lay, k_contig ? "missing" : "where no operand has k contiguous");
        cr_expect(!strstr(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans"), "tf32 cannot use ldmatrix.trans");
    } else {
        bool trans = (lay & 1) || !(lay & 2); /* A m-major, or B n-major */
        cr_expect(strstr(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16") || !(!(lay & 1) || (lay & 2)),
                  "%s tile %d layout %d: no plain ldmatrix", names[t], tile, lay);
        cr_expect(!trans == !strstr(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans"), "%s tile %d layout %d: ldmatrix.trans %s",
                  names[t], tile, lay, trans ? "missing" : "where no operand is transposed");
    }
}

Test(cuda_mma, ptx_every_variant_assembles)
{
    const cg_llvm_api *api = llvm_api();
    const char *as = find_ptxas();
    if (!as)
        printf("cuda_mma: no ptxas (CUDA toolkit) found: the PTX is checked but not assembled\n");
    static const int sms[] = {80, 90};
    static const char *names[] = {"f16", "bf16", "tf32"};
    static char log[1 << 16];
    for (int si = 0; si < 2; si++)
        for (int t = 0; t < 3; t++)
            for (int tile = 0; tile < CG_MMA_N_TILES; tile++)
                for (int lay = 0; lay < 4; lay++) {
                    cg_mma_spec s = cg_mma_variant(sms[si], t, tile, lay & 1, lay & 2);
                    char why[200], *ptx = NULL, err[512], what[96], arch[16];
                    size_t n = 0;
                    snprintf(what, sizeof what, "%s tile %d layout %d sm_%d", names[t], tile, lay, sms[si]);
                    if (!cg_mma_tile_ok(sms[si], tile) || (s.wg && t == CG_MMA_TF32 && ((lay & 1) || !(lay & 2)))) {
                        /* a warpgroup tile off sm_90, or tf32 for wgmma with m or n contiguous */
                        cr_expect(!cg_mma_spec_valid(&s, why, sizeof why), "%s: accepted", what);
                        cr_expect(!api->compile_mma_ptx(&s, &ptx, &n, err, sizeof err) && !ptx, "%s: compiled", what);
                        continue;
                    }
                    cr_assert(cg_mma_spec_valid(&s, why, sizeof why), "%s", why);
                    cr_assert(api->compile_mma_ptx(&s, &ptx, &n, err, sizeof err), "%s", err);
                    cr_assert_eq(strlen(ptx), n);
                    cr_assert(bt_grid_dependency_ok(ptx, sms[si], why, sizeof why), "%s: %s", what, why);
                    if (s.wg)
                        expect_wg_ptx(&s, ptx, what);
                    else
                        expect_mma_sync_ptx(t, tile, lay, ptx);
                    if (as) {
                        snprintf(arch, sizeof arch, "sm_%d%s", sms[si], s.wg ? "a" : "");
                        bool ok = ptxas(ptx, arch, log, sizeof log);
                        cr_expect(ok, "ptxas -arch=%s rejects %s:\n%s", arch, what, log);
                        cr_expect(strstr(log, " 0 bytes spill stores"), "%s spills:\n%s", what, log);
                        cr_expect(!strstr(log, "warning"), "%s: ptxas warns (a serialized wgmma?):\n%s", what, log);
                    }
                    free(ptx);
                }
    BT_LEAK_CHECK();
}

Test(cuda_mma, ptx_bad_specs_refused)
{
    const cg_llvm_api *api = llvm_api();
    char *ptx = (char *)"untouched", err[512];
    size_t n = 7;
    cg_mma_spec s = cg_mma_variant(75, CG_MMA_F16, 0, false, false);
    cr_assert(!api->compile_mma_ptx(&s, &ptx, &n, err, sizeof err), "sm_75 accepted (LLVM would abort on the mma)");
    cr_expect(strstr(err, "sm_80"), "message: %s", err);
    cr_expect(ptx == NULL && n == 0);
    s = cg_mma_variant(90, CG_MMA_BF16, 0, false, false);
    s.wm = 3;
    cr_assert(!api->compile_mma_ptx(&s, &ptx, &n, err, sizeof err), "a 3 x 4 warp grid over 128 rows accepted");
    cr_expect(strstr(err, "warp"), "message: %s", err);
    s = cg_mma_variant(90, CG_MMA_TF32, 0, false, false);
    s.stages = 9;
    cr_assert(!api->compile_mma_ptx(&s, &ptx, &n, err, sizeof err));
    cr_expect(strstr(err, "stages"), "message: %s", err);
    s = cg_mma_variant(80, CG_MMA_BF16, 8, false, false); /* a warpgroup tile off sm_90 */
    cr_assert(!api->compile_mma_ptx(&s, &ptx, &n, err, sizeof err));
    cr_expect(strstr(err, "9.0"), "message: %s", err);
    s = cg_mma_variant(90, CG_MMA_TF32, 8, false, false); /* tf32 B with n contiguous */
    cr_assert(!api->compile_mma_ptx(&s, &ptx, &n, err, sizeof err));
    cr_expect(strstr(err, "k contiguous"), "message: %s", err);
    BT_LEAK_CHECK();
}
