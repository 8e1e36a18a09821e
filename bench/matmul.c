/* burnc-bench: f32 matmul (square, N = 1024, 2048, 4096) against OpenBLAS's cblas_sgemm,
 * measured in the same run, on the same thread count (openblas_set_num_threads), in turn
 * (burnc, OpenBLAS, burnc, ...), medians. Each burnc run records, flushes and syncs inside the
 * timed region; inputs are materialized before. The result of the last burnc run is checked
 * against OpenBLAS's within K * 2^-24 * sum |a b| (both are correct to that bound; burnc's chain
 * order is include/burnc.h's, OpenBLAS's is its own). With autotune on (the default), burnc is
 * tuned first (its first run with BURNC_AUTOTUNE=on), then timed with those decisions and
 * with BURNC_AUTOTUNE=off. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* OpenBLAS's own thread control (not in cblas.h of every provider). */
void openblas_set_num_threads(int n);

#define MATMUL_TARGET 0.8

static double gflops(int64_t n, double ms) { return 2.0 * (double)n * (double)n * (double)n / (ms * 1e6); }

/* One burnc run: record, flush, sync. ms, or -1 after printing why. */
static double burnc_run(burnc_tensor_t *a, burnc_tensor_t *b, burnc_tensor_t **keep)
{
    double t0 = now_ns();
    burnc_tensor_t *c = burnc_matmul(a, b);
    burnc_status_t s = c ? burnc_device_sync(burnc_tensor_device(c)) : BURNC_ERR_INTERNAL;
    double t1 = now_ns();
    if (s != BURNC_OK) {
        burnc_tensor_release(c);
        bench_error("matmul");
        return -1;
    }
    if (keep) {
        burnc_tensor_release(*keep);
        *keep = c;
    } else {
        burnc_tensor_release(c);
    }
    return (t1 - t0) * 1e-6;
}

static double blas_run(const float *a, const float *b, float *c, int n)
{
    double t0 = now_ns();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    return (now_ns() - t0) * 1e-6;
}

/* burnc's median over reps (after one warm-up run), ms; -1 on failure. */
static double burnc_median(burnc_tensor_t *a, burnc_tensor_t *b, int reps)
{
    double *t = calloc((size_t)reps, sizeof *t), m = -1;
    if (t && burnc_run(a, b, NULL) >= 0) {
        int i = 0;
        while (i < reps && (t[i] = burnc_run(a, b, NULL)) >= 0)
            i++;
        m = i == reps ? median(t, reps) : -1;
    }
    free(t);
    return m;
}

/* Largest |burnc - OpenBLAS| over its bound, on a sample of elements (<= 1 passes). */
static double check(const float *ha, const float *hb, const float *got, const float *blas, int n)
{
    double worst = 0;
    for (int64_t e = 0; e < (int64_t)n * n; e += 997) {
        int64_t i = e / n, j = e % n;
        double mag = 0;
        for (int k = 0; k < n; k++)
            mag += fabs((double)ha[i * n + k] * (double)hb[(int64_t)k * n + j]);
        double bound = 2.0 * n * 0x1p-24 * mag + 1e-30, err = fabs((double)got[e] - (double)blas[e]) / bound;
        worst = err > worst || isnan(err) ? err : worst;
    }
    return worst;
}

static int run_matmul(bench_ctx *ctx, bench_result *out, int n)
{
    int reps = n >= 4096 ? (ctx->reps < 3 ? ctx->reps : 3) : n >= 2048 ? (ctx->reps < 5 ? ctx->reps : 5) : ctx->reps;
    int64_t nn = (int64_t)n * n;
    float *ha = malloc((size_t)nn * sizeof *ha), *hb = malloc((size_t)nn * sizeof *hb);
    float *hc = malloc((size_t)nn * sizeof *hc), *got = malloc((size_t)nn * sizeof *got);
    double *tb = calloc((size_t)reps, sizeof *tb), *tl = calloc((size_t)reps, sizeof *tl);
    burnc_tensor_t *a = NULL, *b = NULL, *c = NULL;
    int status = ha && hb && hc && got && tb && tl ? 0 : bench_fail("out of host memory");
    if (status == 0) {
        uint64_t s = 12345;
        for (int64_t i = 0; i < 2 * nn; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            (i < nn ? ha : hb)[i % nn] = (float)((double)(s >> 11) * 0x1p-53 * 2 - 1);
        }
        const int64_t shape[2] = {n, n};
        a = burnc_tensor_from_data(ctx->dev, BURNC_DTYPE_F32, 2, shape, ha);
        b = burnc_tensor_from_data(ctx->dev, BURNC_DTYPE_F32, 2, shape, hb);
        if (!a || !b || burnc_device_sync(ctx->dev) != BURNC_OK)
            status = bench_error("matmul inputs");
    }
    openblas_set_num_threads(ctx->threads);
    /* warm-up: compiles burnc's micro-kernel (and with autotune, tunes the launch's keys
     * first: mode on), starts OpenBLAS's threads */
    double tune_ms = 0;
    if (status == 0) {
        if (ctx->autotune)
            burnc_autotune_set_mode("on");
        double t0 = now_ns();
        if (burnc_run(a, b, &c) < 0)
            status = 1;
        tune_ms = (now_ns() - t0) * 1e-6;
        burnc_autotune_set_mode(NULL);
    }
    if (status == 0)
        blas_run(ha, hb, hc, n);
    for (int r = 0; r < reps && status == 0; r++) {
        tb[r] = burnc_run(a, b, &c);
        tl[r] = blas_run(ha, hb, hc, n);
        if (tb[r] < 0)
            status = 1;
    }
    double err = 0;
    if (status == 0 && burnc_tensor_read(c, got, (size_t)nn * sizeof *got) != BURNC_OK)
        status = bench_error("matmul read");
    if (status == 0 && (err = check(ha, hb, got, hc, n)) > 1)
        status = bench_fail("matmul %d: burnc and OpenBLAS differ beyond the bound (%.3g of it)", n, err);
    if (status == 0) {
        double mb = median(tb, reps), ml = median(tl, reps), gb = gflops(n, mb), gl = gflops(n, ml);
        add_metric(out, "burnc ms", mb, "ms", TARGET_NONE, 0);
        add_metric(out, "OpenBLAS ms", ml, "ms", TARGET_NONE, 0);
        add_metric(out, "burnc GFLOP/s", gb, "GF/s", TARGET_NONE, 0);
        add_metric(out, "OpenBLAS GFLOP/s", gl, "GF/s", TARGET_NONE, 0);
        add_metric(out, "burnc/OpenBLAS", gb / gl, "x", TARGET_AT_LEAST, MATMUL_TARGET);
        char extra[160] = "";
        if (ctx->autotune) {
            /* the runs above used the decisions just tuned; now heuristics only */
            burnc_autotune_set_mode("off");
            double off = burnc_median(a, b, reps);
            burnc_autotune_set_mode(NULL);
            if (off > 0) {
                add_metric(out, "off GFLOP/s", gflops(n, off), "GF/s", TARGET_NONE, 0);
                add_metric(out, "first run, tuning", tune_ms, "ms", TARGET_NONE, 0);
                snprintf(extra, sizeof extra, "; BURNC_AUTOTUNE=off %.1f GFLOP/s; first run (tuning) %.0f ms",
                         gflops(n, off), tune_ms);
            }
        }
        snprintf(out->summary, sizeof out->summary,
                 "%dx%d f32: burnc %.1f GFLOP/s, OpenBLAS %.1f GFLOP/s: %.2fx (>= %.1f %s)%s", n, n, gb, gl, gb / gl,
                 MATMUL_TARGET, gb / gl >= MATMUL_TARGET ? "ok" : "MISSED", extra);
        snprintf(out->note, sizeof out->note, "%d threads each, medians of %d, in turn; results within %.2g of the bound",
                 ctx->threads, reps, err);
    }
    burnc_tensor_release(c);
    burnc_tensor_release(a);
    burnc_tensor_release(b);
    free(ha), free(hb), free(hc), free(got), free(tb), free(tl);
    return status;
}

int run_matmul_1024(bench_ctx *ctx, bench_result *out) { return run_matmul(ctx, out, 1024); }
int run_matmul_2048(bench_ctx *ctx, bench_result *out) { return run_matmul(ctx, out, 2048); }
int run_matmul_4096(bench_ctx *ctx, bench_result *out) { return run_matmul(ctx, out, 4096); }

/* ---- gelu(A @ B + bias) at 2048: the epilogue on the matmul's tiles against the same matmul
 * followed by the epilogue as its own eager kernels (synced in between, fusion off) ---- */

enum { EPI_N = 2048 };

/* One run: fused (the epilogue runs on the tiles) or apart. ms, or -1 after printing why. */
static double epilogue_run(bench_ctx *ctx, burnc_tensor_t *a, burnc_tensor_t *b, burnc_tensor_t *bias, bool fused,
                           burnc_tensor_t **keep)
{
    double t0 = now_ns();
    burnc_scope_begin();
    burnc_tensor_t *c = burnc_matmul(a, b);
    burnc_status_t s = BURNC_OK;
    if (!fused) {
        s = burnc_device_sync(ctx->dev);
        burnc_device_set_fusion(ctx->dev, false);
    }
    burnc_tensor_t *y = burnc_tensor_keep(burnc_gelu(burnc_add(c, bias)));
    burnc_scope_end();
    if (s == BURNC_OK)
        s = y ? burnc_device_sync(ctx->dev) : BURNC_ERR_INTERNAL;
    double t1 = now_ns();
    burnc_device_set_fusion(ctx->dev, true);
    if (s != BURNC_OK) {
        burnc_tensor_release(y);
        bench_error("gelu(A@B + bias)");
        return -1;
    }
    burnc_tensor_release(*keep);
    *keep = y;
    return (t1 - t0) * 1e-6;
}

int run_matmul_gelu(bench_ctx *ctx, bench_result *out)
{
    int64_t n = EPI_N, shape[2] = {EPI_N, EPI_N};
    burnc_device_seed(ctx->dev, 11);
    burnc_tensor_t *a = burnc_randn(ctx->dev, BURNC_DTYPE_F32, 2, shape), *b = burnc_randn(ctx->dev, BURNC_DTYPE_F32, 2, shape);
    burnc_tensor_t *bias = burnc_randn(ctx->dev, BURNC_DTYPE_F32, 1, &n), *yf = NULL, *ya = NULL;
    int reps = ctx->reps, status = a && b && bias && burnc_device_sync(ctx->dev) == BURNC_OK ? 0 : bench_error("inputs");
    double *tf = calloc((size_t)reps, sizeof *tf), *ta = calloc((size_t)reps, sizeof *ta);
    if (status == 0 && (!tf || !ta))
        status = bench_fail("out of host memory");
    for (int rep = -1; rep < reps && status == 0; rep++) { /* rep -1 warms up (compiles, tunes) */
        double f = epilogue_run(ctx, a, b, bias, true, &yf), p = f < 0 ? -1 : epilogue_run(ctx, a, b, bias, false, &ya);
        if (f < 0 || p < 0)
            status = 1;
        else if (rep >= 0)
            tf[rep] = f, ta[rep] = p;
    }
    float *hf = status == 0 ? malloc((size_t)(n * n) * sizeof *hf) : NULL, *hp = hf ? malloc((size_t)(n * n) * sizeof *hp) : NULL;
    if (status == 0 && (!hp || burnc_tensor_read(yf, hf, (size_t)(n * n) * sizeof *hf) != BURNC_OK ||
                        burnc_tensor_read(ya, hp, (size_t)(n * n) * sizeof *hp) != BURNC_OK))
        status = bench_error("reading the results");
    if (status == 0) {
        bool same = memcmp(hf, hp, (size_t)(n * n) * sizeof *hf) == 0;
        double mf = median(tf, reps), mp = median(ta, reps);
        add_metric(out, "fused_ms", mf, "ms", TARGET_NONE, 0);
        add_metric(out, "apart_ms", mp, "ms", TARGET_NONE, 0);
        add_metric(out, "fused_gflops", gflops(n, mf), "GF/s", TARGET_NONE, 0);
        add_metric(out, "epilogue_speedup", mp / mf, "x", TARGET_AT_LEAST, 1.1);
        add_metric(out, "fused_eq_apart", same, "bool", TARGET_NONE, 0);
        snprintf(out->summary, sizeof out->summary,
                 "2048^3 f32: epilogue on the tiles %.1f ms, matmul then eager epilogue %.1f ms: %.2fx (>= 1.1 %s); "
                 "results %s",
                 mf, mp, mp / mf, mp / mf >= 1.1 ? "ok" : "MISSED", same ? "bitwise equal" : "DIFFER");
        if (!same)
            status = bench_fail("matmul_gelu: the epilogue on the tiles changed the result");
    }
    free(hf), free(hp), free(tf), free(ta);
    burnc_tensor_release(yf), burnc_tensor_release(ya);
    burnc_tensor_release(a), burnc_tensor_release(b), burnc_tensor_release(bias);
    return status;
}
