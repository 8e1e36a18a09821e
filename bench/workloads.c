/* The workloads timed in one process: recording cost, memory-bound chains (fused against
 * eager and against the probe of their read/write mix), and the latency of small ops.
 *
 * Rules kept everywhere: inputs are random and materialized before timing; a timed region
 * ends with a sync; every result is read back after timing and checked against the host (and
 * fused against eager); what misses a target is reported like what meets it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* ---- Noting the ops a graph records ------------------------------------------------------ */

static double tensor_bytes(burnc_tensor_t *t)
{
    return (double)burnc_tensor_numel(t) * (double)burnc_dtype_size(burnc_tensor_dtype(t));
}

/* Notes op `name` that made `out` from a (and b): in eager mode its kernel reads each distinct
 * input once and writes out once. Returns out, so a graph reads as a chain of calls. */
static burnc_tensor_t *note(op_trace *tr, const char *name, burnc_tensor_t *out, burnc_tensor_t *a,
                            burnc_tensor_t *b)
{
    if (!tr || !out)
        return out;
    if (tr->n_ops >= TRACE_MAX_OPS) {
        tr->overflow = true;
        return out;
    }
    int n_in = 0;
    double bytes = tensor_bytes(out);
    if (a) {
        bytes += tensor_bytes(a);
        n_in++;
    }
    if (b && b != a) {
        bytes += tensor_bytes(b);
        n_in++;
    }
    size_t used = strlen(tr->names);
    snprintf(tr->names + used, sizeof tr->names - used, "%s%s", used ? " " : "", name);
    tr->n_inputs[tr->n_ops++] = n_in;
    tr->eager_bytes += bytes;
    return out;
}

/* Each records one op and notes it; functions, so that a nested call records once (the
 * fusion log spells a _scalar op like its tensor form). */
static burnc_tensor_t *op1(op_trace *tr, const char *name, burnc_tensor_t *(*f)(burnc_tensor_t *),
                           burnc_tensor_t *a)
{
    return note(tr, name, f(a), a, NULL);
}

static burnc_tensor_t *op2(op_trace *tr, const char *name,
                           burnc_tensor_t *(*f)(burnc_tensor_t *, burnc_tensor_t *), burnc_tensor_t *a,
                           burnc_tensor_t *b)
{
    return note(tr, name, f(a, b), a, b);
}

static burnc_tensor_t *op_scalar(op_trace *tr, const char *name, burnc_tensor_t *(*f)(burnc_tensor_t *, double),
                                 burnc_tensor_t *a, double s)
{
    return note(tr, name, f(a, s), a, NULL);
}

/* A reduction over the last axis, kept as size 1. */
static burnc_tensor_t *op_row(op_trace *tr, const char *name,
                              burnc_tensor_t *(*f)(burnc_tensor_t *, int, const int *, bool), burnc_tensor_t *a)
{
    static const int last[1] = {-1};
    return note(tr, name, f(a, 1, last, true), a, NULL);
}

#define OP1(tr, op, a) op1(tr, #op, burnc_##op, a)
#define OP2(tr, op, a, b) op2(tr, #op, burnc_##op, a, b)
#define OPS(tr, op, a, s) op_scalar(tr, #op, burnc_##op##_scalar, a, s)
#define ROW(tr, op, a) op_row(tr, #op, burnc_##op, a)

float *read_host(burnc_tensor_t *t)
{
    size_t bytes = (size_t)burnc_tensor_numel(t) * sizeof(float);
    float *h = malloc(bytes ? bytes : 1);
    if (!h) {
        bench_fail("out of host memory");
        return NULL;
    }
    if (burnc_tensor_dtype(t) != BURNC_DTYPE_F32 || burnc_tensor_read(t, h, bytes) != BURNC_OK) {
        bench_error("reading a result");
        free(h);
        return NULL;
    }
    return h;
}

/* Folds one compared element into the worst scaled error; a NaN is the worst there is. */
static double worse(double worst, double got, double exact, double atol, double rtol)
{
    double err = fabs(got - exact) / (atol + rtol * fabs(exact));
    if (isnan(err))
        return INFINITY;
    return err > worst ? err : worst;
}

/* ---- The gelu chain ---------------------------------------------------------------------- */

burnc_tensor_t *gelu_chain(op_trace *tr, burnc_tensor_t *x, burnc_tensor_t *w, burnc_tensor_t *b)
{
    burnc_tensor_t *t = OPS(tr, div, x, M_SQRT2);
    t = OP1(tr, erf, t);
    t = OPS(tr, add, t, 1.0);
    t = OP2(tr, mul, x, t);
    t = OPS(tr, div, t, 2.0);
    t = OP2(tr, mul, t, w);
    return OP2(tr, add, t, b);
}

static double gelu_exact(double x, double w, double b) { return x * (erf(x / M_SQRT2) + 1) / 2 * w + b; }

double gelu_check(const float *x, const float *w, const float *b, const float *y, int64_t n, int64_t stride)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i += stride)
        worst = worse(worst, y[i], gelu_exact(x[i], w[i], b[i]), 1e-5, 1e-5);
    if (n > 0)
        worst = worse(worst, y[n - 1], gelu_exact(x[n - 1], w[n - 1], b[n - 1]), 1e-5, 1e-5);
    return worst;
}

/* ---- Memory-bound chains: the common runner ---------------------------------------------- */

enum { CHAIN_MAX_INPUTS = 5, CHECK_ROWS = 16 };

/* Workload sizes: the cpu sizes fit this project's 2-core machines; a GPU device gets the sizes
 * TARGETS.md measured PyTorch at on the H200 (big enough to fill the chip and leave its L2). */
static int64_t ROWS = 4096, COLS = 4096, GELU_N = 1 << 25, SUM_N = 1 << 25;
static const char *size_1d = "2^25", *size_2d = "4096x4096";

static void choose_sizes(const bench_ctx *ctx)
{
    /* a CPU Vulkan device (lavapipe) has a device copy but the host's memory and size limits */
    if (!ctx->device_copy || strncmp(burnc_device_spec(ctx->dev), "vulkan:cpu", 10) == 0)
        return;
    ROWS = 16384, COLS = 8192, GELU_N = SUM_N = (int64_t)1 << 28;
    size_1d = "2^28", size_2d = "16384x8192";
}

/* The probe's effective GB/s for one repetition: the host probe, or on a GPU a device copy of
 * the workload's n f32 (read + write). Negative after printing why it failed. */
static double probe_once(bench_ctx *ctx, probe_run *pr, int64_t n)
{
    if (!ctx->device_copy)
        return probe_gbps(pr);
    double sec = 0;
    size_t bytes = (size_t)n * sizeof(float);
    if (burnc_device_copy_time(ctx->dev, bytes, 1, &sec) != BURNC_OK) {
        bench_error("device copy probe");
        return -1;
    }
    return 2.0 * (double)bytes / sec * 1e-9;
}

typedef struct chain chain;
struct chain {
    const char *name;
    char size[24];
    int n_in;
    burnc_tensor_t *in[CHAIN_MAX_INPUTS];
    /* The timed graph; notes its ops in tr when it records them itself. */
    burnc_tensor_t *(*build)(op_trace *tr, burnc_tensor_t *const *in);
    /* For a graph made by a composite (burnc_softmax): the same ops written out, recorded only to
     * note them (never run); checked against the eager run's log. NULL: build notes its ops. */
    burnc_tensor_t *(*decomposed)(op_trace *tr, burnc_tensor_t *const *in);
    /* Worst scaled error of y against the host (<= 1 passes). */
    double (*check)(float *const *in, const float *y);
    probe_mix probe;
    int64_t probe_n;
    double probe_target, traffic_target;
};

/* Random inputs, materialized: rank-1 or rank-2 shapes, normal or uniform in [0, 1). */
static burnc_tensor_t *random_input(burnc_device_t *dev, bool normal, int rank, int64_t d0, int64_t d1)
{
    const int64_t shape[2] = {d0, d1};
    return normal ? burnc_randn(dev, BURNC_DTYPE_F32, rank, shape) : burnc_rand(dev, BURNC_DTYPE_F32, rank, shape);
}

static void chain_free(chain *c)
{
    for (int i = 0; i < c->n_in; i++)
        burnc_tensor_release(c->in[i]);
}

/* Notes the ops without running them: records inside a scope that drops every result. */
static int trace_chain(bench_ctx *ctx, const chain *c, op_trace *tr, double *fused_bytes)
{
    memset(tr, 0, sizeof *tr);
    burnc_scope_begin();
    burnc_tensor_t *y = (c->decomposed ? c->decomposed : c->build)(tr, c->in);
    *fused_bytes = y ? tensor_bytes(y) : 0;
    burnc_scope_end();
    if (!y || burnc_device_flush(ctx->dev) != BURNC_OK)
        return bench_error(c->name);
    for (int i = 0; i < c->n_in; i++)
        *fused_bytes += tensor_bytes(c->in[i]);
    if (tr->overflow || tr->n_ops == 0)
        return bench_fail("%s: %s", c->name, tr->n_ops ? "more ops than the bench can note" : "no op noted");
    return 0;
}

/* One run: record, flush, wait. The result is kept in *y for the caller to release. */
/* One run of the chain, its result kept in *y. *ms: on a GPU the device's own time of the work
 * (burnc_device_timer: CUDA events, Vulkan timestamps), as the copy probe and compare_torch.py's
 * PyTorch figures are timed; elsewhere host time from the first op to the end of the sync.
 * host_ms (may be NULL): host time of the same run, recording and launching included. */
static int timed_run(bench_ctx *ctx, const chain *c, bool fused, double *ms, double *host_ms, burnc_tensor_t **y)
{
    if (burnc_device_set_fusion(ctx->dev, fused) != BURNC_OK)
        return bench_error("burnc_device_set_fusion");
    bool clock = ctx->device_copy;
    if (clock && burnc_device_timer_start(ctx->dev) != BURNC_OK)
        return bench_error("burnc_device_timer_start");
    double t0 = now_ns(), sec = 0;
    burnc_scope_begin();
    burnc_tensor_t *r = c->build(NULL, c->in);
    burnc_tensor_keep(r);
    burnc_scope_end();
    burnc_status_t s = !r ? BURNC_ERR_INTERNAL : clock ? burnc_device_timer_stop(ctx->dev, &sec) : burnc_device_sync(ctx->dev);
    double t1 = now_ns();
    if (s != BURNC_OK) {
        burnc_tensor_release(r);
        return bench_error(c->name);
    }
    *ms = clock ? sec * 1e3 : (t1 - t0) * 1e-6;
    if (host_ms)
        *host_ms = (t1 - t0) * 1e-6;
    *y = r;
    return 0;
}

/* One fused and one eager run with burnc's log captured (they also compile what the timed runs
 * use): counts the kernels, and checks that the eager kernels are the ops the trace noted,
 * so the eager byte count is of what really ran. */
static int inspect(bench_ctx *ctx, const chain *c, const op_trace *tr, bench_bandwidth *bw, char *why, size_t why_cap)
{
    static log_capture cap;
    double ms;
    burnc_tensor_t *y = NULL;
    log_capture_begin(&cap);
    int s = timed_run(ctx, c, true, &ms, NULL, &y);
    log_capture_end();
    burnc_tensor_release(y);
    if (s)
        return s;
    bw->fused_kernels = cap.n_groups;

    log_capture_begin(&cap);
    s = timed_run(ctx, c, false, &ms, NULL, &y);
    log_capture_end();
    burnc_tensor_release(y);
    if (s)
        return s;
    bw->eager_kernels = cap.n_groups;
    if (cap.n_groups == 0) {
        /* a device that never fuses (ref) logs no groups: nothing to compare */
        bw->fused_kernels = bw->eager_kernels = -1;
        snprintf(why, why_cap, "op list not checked: %s logs no kernels", burnc_device_spec(ctx->dev));
        return 0;
    }
    char ran[256] = "";
    bool same = !cap.overflow && cap.n_groups == tr->n_ops;
    for (int i = 0; i < cap.n_groups; i++) {
        size_t used = strlen(ran);
        snprintf(ran + used, sizeof ran - used, "%s%s", i ? " " : "", cap.groups[i].ops);
        same = same && i < tr->n_ops && cap.groups[i].n_inputs == tr->n_inputs[i];
    }
    if (!same || strcmp(ran, tr->names) != 0)
        return bench_fail("%s: eager mode ran \"%s\", the bench noted \"%s\" (or other input counts): its byte "
                          "count would be wrong",
                          c->name, ran, tr->names);
    snprintf(why, why_cap, "eager ops checked against burnc's log");
    return 0;
}

/* Reads both results and the inputs back; checks them. */
static int verify(const chain *c, burnc_tensor_t *yf, burnc_tensor_t *ye, bool *bitwise, double *err)
{
    float *in[CHAIN_MAX_INPUTS] = {0};
    float *hf = read_host(yf), *he = hf ? read_host(ye) : NULL;
    int status = he ? 0 : 1;
    for (int i = 0; i < c->n_in && status == 0; i++)
        if (!(in[i] = read_host(c->in[i])))
            status = 1;
    if (status == 0) {
        *bitwise = memcmp(hf, he, (size_t)burnc_tensor_numel(yf) * sizeof(float)) == 0;
        *err = c->check(in, hf);
        if (!(*err <= 1))
            status = bench_fail("%s: wrong result (scaled error %g > 1)", c->name, *err);
        else if (!*bitwise)
            fprintf(stderr, "burnc-bench: %s: fused and eager results differ (the library promises the same bits)\n",
                    c->name);
    }
    for (int i = 0; i < c->n_in; i++)
        free(in[i]);
    free(he);
    free(hf);
    return status;
}

/* tf and te: the times of the fused and eager runs (their medians are in bw). */
static void chain_metrics(const bench_bandwidth *bw, const double *tf, const double *te, int reps, bool bitwise,
                          double err, bench_result *out)
{
    double fused_gbps = bw->fused_bytes / (bw->fused_ms * 1e6), eager_gbps = bw->fused_bytes / (bw->eager_ms * 1e6);
    double traffic = bw->eager_bytes / bw->fused_bytes, speedup = bw->eager_ms / bw->fused_ms;
    add_metric(out, "fused_ms", bw->fused_ms, "ms", TARGET_NONE, 0);
    add_metric(out, "fused_ms_min", min_of(tf, reps), "ms", TARGET_NONE, 0);
    add_metric(out, "fused_host_ms", bw->fused_host_ms, "ms", TARGET_NONE, 0);
    add_metric(out, "eager_ms", bw->eager_ms, "ms", TARGET_NONE, 0);
    add_metric(out, "eager_ms_min", min_of(te, reps), "ms", TARGET_NONE, 0);
    add_metric(out, "fused_gbps", fused_gbps, "GB/s", TARGET_NONE, 0);
    add_metric(out, "eager_gbps", eager_gbps, "GB/s", TARGET_NONE, 0);
    add_metric(out, "eager_gbps_actual", bw->eager_bytes / (bw->eager_ms * 1e6), "GB/s", TARGET_NONE, 0);
    add_metric(out, "probe_gbps", bw->probe_gbps, "GB/s", TARGET_NONE, 0);
    add_metric(out, "fused_over_probe", fused_gbps / bw->probe_gbps, "x", bw->probe_target > 0 ? TARGET_AT_LEAST : TARGET_NONE,
               bw->probe_target);
    add_metric(out, "fused_mb", bw->fused_bytes * 1e-6, "MB", TARGET_NONE, 0);
    add_metric(out, "eager_mb", bw->eager_bytes * 1e-6, "MB", TARGET_NONE, 0);
    add_metric(out, "traffic_ratio", traffic, "x", TARGET_NONE, 0);
    add_metric(out, "speedup", speedup, "x", TARGET_NONE, 0);
    add_metric(out, "speedup_over_traffic", speedup / traffic, "x",
               bw->traffic_target > 0 ? TARGET_AT_LEAST : TARGET_NONE, bw->traffic_target);
    add_metric(out, "fused_kernels", bw->fused_kernels, "", TARGET_NONE, 0);
    add_metric(out, "eager_kernels", bw->eager_kernels, "", TARGET_NONE, 0);
    add_metric(out, "fused_eq_eager", bitwise, "bool", TARGET_NONE, 0);
    add_metric(out, "check_error", err, "", TARGET_NONE, 0);
    if (bw->tuned_ms > 0) {
        /* tuned must never be slower than the heuristics beyond this machine's noise */
        add_metric(out, "autotune_off_ms", bw->untuned_ms, "ms", TARGET_NONE, 0);
        add_metric(out, "autotune_tuned_ms", bw->tuned_ms, "ms", TARGET_NONE, 0);
        add_metric(out, "autotune_gain", bw->untuned_ms / bw->tuned_ms, "x", TARGET_AT_LEAST, 0.95);
    }
}

/* Repetitions of three runs in turn: the probe, the fused chain, the eager chain, so that a
 * slow spell of this shared machine hits all three; rep -1 warms up. The last results stay in
 * *yf and *ye for the caller to check and release. */
static int measure(bench_ctx *ctx, const chain *c, double *tp, double *tf, double *th, double *te,
                   burnc_tensor_t **yf, burnc_tensor_t **ye)
{
    probe_run *pr = ctx->device_copy ? NULL : ctx->probes ? probe_begin(ctx->probes, c->probe, c->probe_n) : NULL;
    if (!pr && !ctx->device_copy)
        return bench_fail("%s: no memory or threads for the %s probe", c->name, probe_mix_name(c->probe));
    int status = 0;
    for (int rep = -1; rep < ctx->reps && status == 0; rep++) {
        double gbps = probe_once(ctx, pr, c->probe_n), ms = 0, host = 0;
        if (gbps < 0)
            status = 1;
        burnc_tensor_release(*yf);
        *yf = NULL;
        status = timed_run(ctx, c, true, &ms, &host, yf);
        if (status == 0 && rep >= 0) {
            tp[rep] = gbps;
            tf[rep] = ms;
            th[rep] = host;
        }
        burnc_tensor_release(*ye);
        *ye = NULL;
        if (status == 0)
            status = timed_run(ctx, c, false, &ms, NULL, ye);
        if (status == 0 && rep >= 0)
            te[rep] = ms;
    }
    burnc_device_set_fusion(ctx->dev, true);
    if (pr && !probe_end(pr) && status == 0)
        status = bench_fail("%s: the %s probe computed a wrong result", c->name, probe_mix_name(c->probe));
    return status;
}

/* Autotune's effect on the fused run: tuned once (mode on), then in turn runs with heuristics
 * only (off) and with the decisions just stored (cached); medians. */
static int measure_autotune(bench_ctx *ctx, const chain *c, bench_bandwidth *bw)
{
    int reps = ctx->reps, status = 0;
    double *off = calloc((size_t)reps, sizeof *off), *tuned = calloc((size_t)reps, sizeof *tuned), ms = 0;
    burnc_tensor_t *y = NULL;
    if (!off || !tuned)
        status = bench_fail("out of host memory");
    static const char *const modes[3] = {"on", "off", "cached"};
    for (int rep = -1; rep < reps && status == 0; rep++)
        for (int m = rep < 0 ? 0 : 1; m < (rep < 0 ? 1 : 3) && status == 0; m++) {
            burnc_autotune_set_mode(modes[m]);
            status = timed_run(ctx, c, true, &ms, NULL, &y);
            burnc_tensor_release(y);
            y = NULL;
            if (status == 0 && rep >= 0)
                (m == 1 ? off : tuned)[rep] = ms;
        }
    burnc_autotune_set_mode(NULL);
    if (status == 0) {
        bw->untuned_ms = median(off, reps);
        bw->tuned_ms = median(tuned, reps);
    }
    free(off);
    free(tuned);
    return status;
}

static void note_probe(bench_ctx *ctx, const chain *c, double gbps)
{
    if (ctx->n_measured < BENCH_MAX_PROBES)
        ctx->measured[ctx->n_measured++] =
            (bench_probe_entry){.workload = c->name, .mix = c->probe, .n = c->probe_n, .gbps = gbps};
}

static int run_chain(bench_ctx *ctx, chain *c, bench_result *out)
{
    bench_bandwidth *bw = &out->bw;
    op_trace tr;
    char checked[128] = "";
    *bw = (bench_bandwidth){.probe = c->probe, .probe_target = c->probe_target, .traffic_target = c->traffic_target};
    snprintf(bw->size, sizeof bw->size, "%s", c->size);
    if (ctx->device_copy) {
        /* a GPU is held to its copy bandwidth, whatever the mix (TARGETS.md) */
        c->probe = PROBE_DEVICE_COPY;
        bw->probe = c->probe;
    }
    for (int i = 0; i < c->n_in; i++)
        if (!c->in[i])
            return bench_error(c->name);
    if (burnc_device_sync(ctx->dev) != BURNC_OK)
        return bench_error(c->name);
    if (trace_chain(ctx, c, &tr, &bw->fused_bytes) || inspect(ctx, c, &tr, bw, checked, sizeof checked))
        return 1;
    bw->eager_bytes = tr.eager_bytes;

    size_t reps = (size_t)ctx->reps;
    double *tp = calloc(reps, sizeof *tp), *tf = calloc(reps, sizeof *tf), *te = calloc(reps, sizeof *te);
    double *th = calloc(reps, sizeof *th);
    burnc_tensor_t *yf = NULL, *ye = NULL;
    int status = tp && tf && th && te ? measure(ctx, c, tp, tf, th, te, &yf, &ye) : bench_fail("out of host memory");
    bool bitwise = false;
    double err = 0;
    if (status == 0)
        status = verify(c, yf, ye, &bitwise, &err);
    if (status == 0 && ctx->autotune)
        status = measure_autotune(ctx, c, bw);
    if (status == 0) {
        bw->probe_gbps = median(tp, ctx->reps);
        bw->fused_ms = median(tf, ctx->reps);
        bw->fused_host_ms = median(th, ctx->reps);
        bw->eager_ms = median(te, ctx->reps);
        bw->valid = true;
        note_probe(ctx, c, bw->probe_gbps);
        chain_metrics(bw, tf, te, ctx->reps, bitwise, err, out);
        char n[24];
        format_count(n, sizeof n, c->probe_n);
        snprintf(out->note, sizeof out->note,
                 "medians of %d, probe, fused and eager in turn, timed %s; probe %s (%s) over %s f32; eager ops: "
                 "%s (%s); fused and eager results %s; checked against the host",
                 ctx->reps, ctx->device_copy ? "by the device's clock" : "on the host around a sync",
                 probe_mix_name(c->probe), probe_mix_what(c->probe), n, tr.names, checked,
                 bitwise ? "bitwise equal" : "DIFFER");
    }
    burnc_tensor_release(yf);
    burnc_tensor_release(ye);
    free(tp);
    free(tf);
    free(th);
    free(te);
    return status;
}

/* ---- gelu -------------------------------------------------------------------------------- */


static burnc_tensor_t *gelu_build(op_trace *tr, burnc_tensor_t *const *in)
{
    return gelu_chain(tr, in[0], in[1], in[2]);
}

static double gelu_verify(float *const *in, const float *y)
{
    /* erf in double costs: every 61st element (so every lane of a vector gets hit), and the last */
    return gelu_check(in[0], in[1], in[2], y, GELU_N, 61);
}

int run_gelu(bench_ctx *ctx, bench_result *out)
{
    burnc_device_seed(ctx->dev, 1);
    choose_sizes(ctx);
    chain c = {.name = "gelu", .n_in = 3, .build = gelu_build, .check = gelu_verify,
               .probe = PROBE_FMA, .probe_n = GELU_N, .probe_target = ctx->device_copy ? 0.9 : 0.85, .traffic_target = 0.8};
    snprintf(c.size, sizeof c.size, "%s", size_1d);
    c.in[0] = random_input(ctx->dev, true, 1, GELU_N, 0);
    c.in[1] = random_input(ctx->dev, true, 1, GELU_N, 0);
    c.in[2] = random_input(ctx->dev, true, 1, GELU_N, 0);
    int s = run_chain(ctx, &c, out);
    chain_free(&c);
    return s;
}

/* ---- softmax and layer_norm over rows ---------------------------------------------------- */

static burnc_tensor_t *softmax_build(op_trace *tr, burnc_tensor_t *const *in)
{
    (void)tr;
    return burnc_softmax(in[0], 1);
}

/* What burnc_softmax records (runtime/composite.c), for the byte count. */
static burnc_tensor_t *softmax_decomposed(op_trace *tr, burnc_tensor_t *const *in)
{
    burnc_tensor_t *x = in[0];
    burnc_tensor_t *m = ROW(tr, max, x);
    burnc_tensor_t *e = OP1(tr, exp, OP2(tr, sub, x, m));
    return OP2(tr, mul, e, OP1(tr, reciprocal, ROW(tr, sum, e)));
}

/* CHECK_ROWS rows spread over the matrix, in double. */
static double softmax_verify(float *const *in, const float *y)
{
    double worst = 0;
    for (int k = 0; k < CHECK_ROWS; k++) {
        int64_t r = (int64_t)k * (ROWS - 1) / (CHECK_ROWS - 1);
        const float *x = in[0] + r * COLS;
        double m = -INFINITY, s = 0;
        for (int j = 0; j < COLS; j++)
            m = x[j] > m ? x[j] : m;
        for (int j = 0; j < COLS; j++)
            s += exp(x[j] - m);
        for (int j = 0; j < COLS; j++)
            worst = worse(worst, y[r * COLS + j], exp(x[j] - m) / s, 1e-12, 1e-5);
    }
    return worst;
}

int run_softmax(bench_ctx *ctx, bench_result *out)
{
    burnc_device_seed(ctx->dev, 2);
    choose_sizes(ctx);
    chain c = {.name = "softmax", .n_in = 1, .build = softmax_build,
               .decomposed = softmax_decomposed, .check = softmax_verify, .probe = PROBE_COPY,
               .probe_n = (int64_t)ROWS * COLS, .probe_target = ctx->device_copy ? 0.85 : 0.8, .traffic_target = 0.8};
    snprintf(c.size, sizeof c.size, "%s", size_2d);
    c.in[0] = random_input(ctx->dev, true, 2, ROWS, COLS);
    int s = run_chain(ctx, &c, out);
    chain_free(&c);
    return s;
}

#define LN_EPS 1e-5

static burnc_tensor_t *layer_norm_build(op_trace *tr, burnc_tensor_t *const *in)
{
    (void)tr;
    return burnc_layer_norm(in[0], 1, LN_EPS);
}

/* What burnc_layer_norm records (runtime/composite.c), for the byte count. */
static burnc_tensor_t *layer_norm_decomposed(op_trace *tr, burnc_tensor_t *const *in)
{
    burnc_tensor_t *x = in[0];
    burnc_tensor_t *c = OP2(tr, sub, x, ROW(tr, mean, x));
    burnc_tensor_t *var = ROW(tr, mean, OP2(tr, mul, c, c));
    return OP2(tr, mul, c, OP1(tr, reciprocal, OP1(tr, sqrt, OPS(tr, add, var, LN_EPS))));
}

static double layer_norm_verify(float *const *in, const float *y)
{
    double worst = 0;
    for (int k = 0; k < CHECK_ROWS; k++) {
        int64_t r = (int64_t)k * (ROWS - 1) / (CHECK_ROWS - 1);
        const float *x = in[0] + r * COLS;
        double mean = 0, var = 0;
        for (int j = 0; j < COLS; j++)
            mean += x[j];
        mean /= COLS;
        for (int j = 0; j < COLS; j++)
            var += (x[j] - mean) * (x[j] - mean);
        var /= COLS;
        for (int j = 0; j < COLS; j++)
            worst = worse(worst, y[r * COLS + j], (x[j] - mean) / sqrt(var + LN_EPS), 1e-5, 1e-5);
    }
    return worst;
}

int run_layer_norm(bench_ctx *ctx, bench_result *out)
{
    burnc_device_seed(ctx->dev, 3);
    choose_sizes(ctx);
    chain c = {.name = "layer_norm", .n_in = 1, .build = layer_norm_build,
               .decomposed = layer_norm_decomposed, .check = layer_norm_verify, .probe = PROBE_COPY,
               .probe_n = (int64_t)ROWS * COLS, .probe_target = ctx->device_copy ? 0.85 : 0.8, .traffic_target = 0.8};
    snprintf(c.size, sizeof c.size, "%s", size_2d);
    c.in[0] = random_input(ctx->dev, true, 2, ROWS, COLS);
    int s = run_chain(ctx, &c, out);
    chain_free(&c);
    return s;
}

/* ---- sum --------------------------------------------------------------------------------- */


static burnc_tensor_t *sum_build(op_trace *tr, burnc_tensor_t *const *in)
{
    return note(tr, "sum", burnc_sum(in[0], 0, NULL, false), in[0], NULL);
}

static double sum_verify(float *const *in, const float *y)
{
    double s = 0, abs_sum = 0;
    for (int64_t i = 0; i < SUM_N; i++) {
        s += in[0][i];
        abs_sum += fabs(in[0][i]);
    }
    /* f32 partial sums: error grows with the sum of magnitudes, not with the (small) result */
    return worse(0, y[0], s, 1e-6 * abs_sum, 0);
}

int run_sum(bench_ctx *ctx, bench_result *out)
{
    burnc_device_seed(ctx->dev, 4);
    choose_sizes(ctx);
    chain c = {.name = "sum", .n_in = 1, .build = sum_build, .check = sum_verify,
               .probe = PROBE_READ, .probe_n = SUM_N};
    snprintf(c.size, sizeof c.size, "%s", size_1d);
    c.in[0] = random_input(ctx->dev, true, 1, SUM_N, 0);
    int s = run_chain(ctx, &c, out);
    chain_free(&c);
    return s;
}

/* ---- A sum over the batch axis ------------------------------------------------------------ */

/* sum(x * w, axis 0) of [ROWS, 1024]: a bias gradient of a training step. The reduced axis has
 * the row length as stride, so the kernel reads across rows (llvm_cpu.c, "Columns"). */
enum { COLSUM_C = 1024 };

static burnc_tensor_t *colsum_build(op_trace *tr, burnc_tensor_t *const *in)
{
    burnc_tensor_t *p = op2(tr, "mul", burnc_mul, in[0], in[1]);
    return note(tr, "sum", burnc_sum(p, 1, (const int[]){0}, false), p, NULL);
}

static double colsum_verify(float *const *in, const float *y)
{
    double w = 0;
    for (int64_t c = 0; c < COLSUM_C; c++) {
        double s = 0, abs_sum = 0;
        for (int64_t r = 0; r < ROWS; r++) {
            double v = (double)in[0][r * COLSUM_C + c] * in[1][r * COLSUM_C + c];
            s += v;
            abs_sum += fabs(v);
        }
        w = worse(w, y[c], s, 1e-6 * abs_sum, 0);
    }
    return w;
}

int run_colsum(bench_ctx *ctx, bench_result *out)
{
    burnc_device_seed(ctx->dev, 5);
    choose_sizes(ctx);
    chain c = {.name = "colsum", .n_in = 2, .build = colsum_build, .check = colsum_verify,
               .probe = PROBE_READ, .probe_n = 2 * ROWS * COLSUM_C};
    snprintf(c.size, sizeof c.size, "%lldx%d", (long long)ROWS, COLSUM_C);
    c.in[0] = random_input(ctx->dev, true, 2, ROWS, COLSUM_C);
    c.in[1] = random_input(ctx->dev, true, 2, ROWS, COLSUM_C);
    int s = run_chain(ctx, &c, out);
    chain_free(&c);
    return s;
}

/* ---- A 10-op broadcasting chain ---------------------------------------------------------- */

/* x [R, C]; a, b [C] (broadcast over rows); c, d [R, 1] (broadcast over columns). */
static burnc_tensor_t *bcast_build(op_trace *tr, burnc_tensor_t *const *in)
{
    burnc_tensor_t *x = in[0], *a = in[1], *b = in[2], *c = in[3], *d = in[4];
    burnc_tensor_t *t = OP2(tr, mul, x, a);
    t = OP2(tr, add, t, c);
    t = OP2(tr, sub, t, b);
    t = OP2(tr, mul, t, d);
    t = OP2(tr, maximum, t, a);
    t = OP2(tr, add, t, x);
    t = OPS(tr, mul, t, 0.5);
    t = OP2(tr, sub, t, c);
    t = OP1(tr, abs, t);
    return OP2(tr, add, t, b);
}

/* The same chain in f32 on the host, op by op: each op is correctly rounded, so the result
 * must match exactly (the tolerance only scales the report). */
static double bcast_verify(float *const *in, const float *y)
{
    const float *x = in[0], *a = in[1], *b = in[2], *c = in[3], *d = in[4];
    double worst = 0;
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t j = 0; j < COLS; j++) {
            float xv = x[r * COLS + j];
            float t = xv * a[j];
            t = t + c[r];
            t = t - b[j];
            t = t * d[r];
            t = t > a[j] ? t : a[j];
            t = t + xv;
            t = t * 0.5f;
            t = t - c[r];
            t = fabsf(t);
            t = t + b[j];
            worst = worse(worst, y[r * COLS + j], t, 1e-30, 1e-7);
        }
    return worst;
}

int run_bcast(bench_ctx *ctx, bench_result *out)
{
    burnc_device_seed(ctx->dev, 5);
    choose_sizes(ctx);
    chain c = {.name = "bcast", .n_in = 5, .build = bcast_build, .check = bcast_verify,
               .probe = PROBE_COPY, .probe_n = (int64_t)ROWS * COLS, .probe_target = ctx->device_copy ? 0.9 : 0.85,
               .traffic_target = 0.8};
    snprintf(c.size, sizeof c.size, "%s", size_2d);
    c.in[0] = random_input(ctx->dev, true, 2, ROWS, COLS);
    c.in[1] = random_input(ctx->dev, false, 1, COLS, 0);
    c.in[2] = random_input(ctx->dev, true, 1, COLS, 0);
    c.in[3] = random_input(ctx->dev, true, 2, ROWS, 1);
    c.in[4] = random_input(ctx->dev, false, 2, ROWS, 1);
    int s = run_chain(ctx, &c, out);
    chain_free(&c);
    return s;
}

/* ---- 20 small ops ------------------------------------------------------------------------ */

enum { SMALL_N = 4096, SMALL_PAIRS = 10, SMALL_WARMUP = 50, SMALL_ITERS_FUSED = 2000, SMALL_ITERS_EAGER = 1000,
       FLOOR_ITERS = 1000 };
/* issue targets: 20 us on the cpu device, 15 us on the H200 (device open, sync included) */
#define SMALL_TARGET_US (ctx->device_copy ? 15.0 : 20.0)

/* One iteration as a program would run it: record 10x (mul, add), then either read the result
 * (which runs it and waits) or sync the device (runs it and waits, as PyTorch's figure with
 * torch.cuda.synchronize(); the result is read after the clock stops, when dst is given).
 * Returns the host time in ns, or -1 after printing why. */
static double small_iteration(burnc_tensor_t *a, burnc_tensor_t *w, burnc_tensor_t *b, bool read, float *dst)
{
    double t0 = now_ns();
    burnc_scope_begin();
    burnc_tensor_t *x = a;
    for (int i = 0; i < SMALL_PAIRS; i++)
        x = burnc_add(burnc_mul(x, w), b);
    burnc_tensor_keep(x);
    burnc_scope_end();
    burnc_status_t s = !x     ? BURNC_ERR_INTERNAL
                       : read ? burnc_tensor_read(x, dst, SMALL_N * sizeof(float))
                              : burnc_device_sync(burnc_tensor_device(x));
    double t1 = now_ns();
    if (s == BURNC_OK && !read && dst)
        s = burnc_tensor_read(x, dst, SMALL_N * sizeof(float));
    burnc_tensor_release(x);
    if (s != BURNC_OK) {
        bench_error("small_ops");
        return -1;
    }
    return t1 - t0;
}

/* Median host time per iteration in us (ending in a read or a sync), and the last result in
 * dst. */
static int small_series(burnc_tensor_t *a, burnc_tensor_t *w, burnc_tensor_t *b, bool read, float *dst, int iters,
                        double *us, double *us_min)
{
    double *t = calloc((size_t)iters, sizeof *t);
    if (!t)
        return bench_fail("out of host memory");
    for (int i = -SMALL_WARMUP; i < iters; i++) {
        double ns = small_iteration(a, w, b, read, read || i == iters - 1 ? dst : NULL);
        if (ns < 0) {
            free(t);
            return 1;
        }
        if (i >= 0)
            t[i] = ns * 1e-3;
    }
    *us_min = min_of(t, iters);
    *us = median(t, iters);
    free(t);
    return 0;
}

/* The floor under one iteration: a sync with nothing pending, and one op read back. */
static int small_floor(burnc_device_t *dev, burnc_tensor_t *a, burnc_tensor_t *b, float *dst, double *sync_us,
                       double *one_us)
{
    double *t = calloc(FLOOR_ITERS, sizeof *t), *u = calloc(FLOOR_ITERS, sizeof *u);
    int status = t && u ? 0 : bench_fail("out of host memory");
    for (int i = -SMALL_WARMUP; i < FLOOR_ITERS && status == 0; i++) {
        double t0 = now_ns();
        burnc_status_t s = burnc_device_sync(dev);
        double t1 = now_ns();
        burnc_tensor_t *y = burnc_add(a, b);
        s = s == BURNC_OK && y ? burnc_tensor_read(y, dst, SMALL_N * sizeof(float)) : BURNC_ERR_INTERNAL;
        double t2 = now_ns();
        burnc_tensor_release(y);
        if (s != BURNC_OK)
            status = bench_error("small_ops floor");
        else if (i >= 0) {
            t[i] = (t1 - t0) * 1e-3;
            u[i] = (t2 - t1) * 1e-3;
        }
    }
    if (status == 0) {
        *sync_us = median(t, FLOOR_ITERS);
        *one_us = median(u, FLOOR_ITERS);
    }
    free(t);
    free(u);
    return status;
}

int run_small_ops(bench_ctx *ctx, bench_result *out)
{
    burnc_device_seed(ctx->dev, 6);
    burnc_tensor_t *a = random_input(ctx->dev, true, 1, SMALL_N, 0);
    burnc_tensor_t *w = random_input(ctx->dev, false, 1, SMALL_N, 0);
    burnc_tensor_t *b = random_input(ctx->dev, true, 1, SMALL_N, 0);
    float *ha = NULL, *hw = NULL, *hb = NULL, *expect = malloc(SMALL_N * sizeof(float));
    float *got_f = malloc(SMALL_N * sizeof(float)), *got_e = malloc(SMALL_N * sizeof(float));
    float *got_fr = malloc(SMALL_N * sizeof(float)), *got_er = malloc(SMALL_N * sizeof(float));
    int status = 0;
    if (!a || !w || !b || burnc_device_sync(ctx->dev) != BURNC_OK)
        status = bench_error("small_ops: inputs");
    else if (!expect || !got_f || !got_e || !got_fr || !got_er || !(ha = read_host(a)) || !(hw = read_host(w)) ||
             !(hb = read_host(b)))
        status = bench_fail("small_ops: reading the inputs");
    double fused_us = 0, fused_min = 0, eager_us = 0, eager_min = 0, sync_us = 0, one_us = 0;
    double fused_read_us = 0, fused_read_min = 0, eager_read_us = 0, eager_read_min = 0;
    if (status == 0)
        status = small_series(a, w, b, false, got_f, SMALL_ITERS_FUSED, &fused_us, &fused_min);
    if (status == 0)
        status = small_series(a, w, b, true, got_fr, SMALL_ITERS_FUSED, &fused_read_us, &fused_read_min);
    if (status == 0 && burnc_device_set_fusion(ctx->dev, false) != BURNC_OK)
        status = bench_error("burnc_device_set_fusion");
    if (status == 0)
        status = small_series(a, w, b, false, got_e, SMALL_ITERS_EAGER, &eager_us, &eager_min);
    if (status == 0)
        status = small_series(a, w, b, true, got_er, SMALL_ITERS_EAGER, &eager_read_us, &eager_read_min);
    burnc_device_set_fusion(ctx->dev, true);
    if (status == 0)
        status = small_floor(ctx->dev, a, b, expect, &sync_us, &one_us);
    if (status == 0) {
        /* the chain in f32 on the host: every op correctly rounded, so the bits must match */
        for (int i = 0; i < SMALL_N; i++) {
            float x = ha[i];
            for (int k = 0; k < SMALL_PAIRS; k++) {
                x = x * hw[i];
                x = x + hb[i];
            }
            expect[i] = x;
        }
        bool ok_f = !memcmp(expect, got_f, SMALL_N * sizeof(float)) && !memcmp(expect, got_fr, SMALL_N * sizeof(float));
        bool ok_e = !memcmp(expect, got_e, SMALL_N * sizeof(float)) && !memcmp(expect, got_er, SMALL_N * sizeof(float));
        if (!ok_f || !ok_e)
            status = bench_fail("small_ops: the %s result differs from the host's f32 chain", ok_f ? "eager" : "fused");
    }
    if (status == 0) {
        add_metric(out, "fused_us_per_iter", fused_us, "us", TARGET_AT_MOST, SMALL_TARGET_US);
        add_metric(out, "fused_us_min", fused_min, "us", TARGET_NONE, 0);
        add_metric(out, "eager_us_per_iter", eager_us, "us", TARGET_NONE, 0);
        add_metric(out, "eager_us_min", eager_min, "us", TARGET_NONE, 0);
        add_metric(out, "fused_read_us_per_iter", fused_read_us, "us", TARGET_NONE, 0);
        add_metric(out, "fused_read_us_min", fused_read_min, "us", TARGET_NONE, 0);
        add_metric(out, "eager_read_us_per_iter", eager_read_us, "us", TARGET_NONE, 0);
        add_metric(out, "eager_read_us_min", eager_read_min, "us", TARGET_NONE, 0);
        add_metric(out, "empty_sync_us", sync_us, "us", TARGET_NONE, 0);
        add_metric(out, "one_op_read_us", one_us, "us", TARGET_NONE, 0);
        snprintf(out->note, sizeof out->note,
                 "per iteration: record 10x (mul, add) on %d f32 in a scope, then burnc_device_sync (flush, run, "
                 "wait: the target, as PyTorch's torch.cuda.synchronize() figure), or in a second series read the "
                 "result (flush, run, wait, copy 16 KB); median of %d fused / %d eager iterations after %d warm-up; "
                 "results equal the host's f32 chain bit for bit",
                 SMALL_N, SMALL_ITERS_FUSED, SMALL_ITERS_EAGER, SMALL_WARMUP);
        snprintf(out->summary, sizeof out->summary,
                 "20 ops on 4096 f32, host time per iteration with sync: fused %.1f us (<= %.0f %s), eager %.1f us; "
                 "with a read: fused %.1f us, eager %.1f us; floor: empty sync %.1f us, one op + read %.1f us",
                 fused_us, SMALL_TARGET_US, fused_us <= SMALL_TARGET_US ? "ok" : "MISSED", eager_us, fused_read_us,
                 eager_read_us, sync_us, one_us);
    }
    free(ha);
    free(hw);
    free(hb);
    free(expect);
    free(got_f);
    free(got_e);
    free(got_fr);
    free(got_er);
    burnc_tensor_release(a);
    burnc_tensor_release(w);
    burnc_tensor_release(b);
    return status;
}

/* ---- Recording cost ---------------------------------------------------------------------- */

/* RECORD_OPS stays below the stream's automatic flush (4096 records today), so the recording
 * time holds no execution. */
enum { RECORD_OPS = 1000, RECORD_ELEMS = 16 };
#define RECORD_TARGET_NS 250.0 /* the target per recorded op */

/* Records a chain of RECORD_OPS element-wise ops (add and mul alternating) on 16-element
 * tensors inside a scope. Timed apart: recording; releasing the scope; running the chain
 * (flush + sync). */
int run_record(bench_ctx *ctx, bench_result *out)
{
    const int64_t shape[1] = {RECORD_ELEMS};
    burnc_tensor_t *a = burnc_zeros(ctx->dev, BURNC_DTYPE_F32, 1, shape);
    burnc_tensor_t *one = burnc_ones(ctx->dev, BURNC_DTYPE_F32, 1, shape);
    if (!a || !one || burnc_device_sync(ctx->dev) != BURNC_OK) {
        burnc_tensor_release(one);
        burnc_tensor_release(a);
        return bench_error("record: inputs");
    }
    double *rec = calloc((size_t)ctx->reps, sizeof *rec);
    double *rel = calloc((size_t)ctx->reps, sizeof *rel);
    double *run = calloc((size_t)ctx->reps, sizeof *run);
    int status = rec && rel && run ? 0 : bench_fail("out of host memory");
    /* Repetition -1 warms up (first-use allocations, code paths; on compiling devices the
     * chain's kernels are compiled then) and is reported apart as the first run. */
    double first_run = 0;
    for (int rep = -1; rep < ctx->reps && status == 0; rep++) {
        double t0 = now_ns();
        burnc_scope_begin();
        burnc_tensor_t *x = a;
        for (int i = 0; i < RECORD_OPS; i++)
            x = (i & 1) ? burnc_mul(x, one) : burnc_add(x, one);
        double t1 = now_ns();
        burnc_tensor_keep(x);
        burnc_scope_end();
        double t2 = now_ns();
        burnc_status_t s = x ? burnc_device_flush(ctx->dev) : BURNC_ERR_INTERNAL;
        if (s == BURNC_OK)
            s = burnc_device_sync(ctx->dev);
        double t3 = now_ns();

        float v[RECORD_ELEMS];
        if (s != BURNC_OK || burnc_tensor_read(x, v, sizeof v) != BURNC_OK) {
            status = bench_error("record: running the chain");
        } else if (v[0] != (float)(RECORD_OPS / 2) || v[RECORD_ELEMS - 1] != (float)(RECORD_OPS / 2)) {
            status = bench_fail("record: wrong result %g, expected %d", (double)v[0], RECORD_OPS / 2);
        } else if (rep < 0) {
            first_run = t3 - t2;
        } else {
            rec[rep] = (t1 - t0) / RECORD_OPS;
            rel[rep] = (t2 - t1) / RECORD_OPS;
            run[rep] = (t3 - t2) / RECORD_OPS;
        }
        burnc_tensor_release(x);
    }
    if (status == 0) {
        double rec_min = min_of(rec, ctx->reps), rec_med = median(rec, ctx->reps);
        double run_med = median(run, ctx->reps);
        add_metric(out, "record_ns_per_op", rec_med, "ns/op", TARGET_AT_MOST, RECORD_TARGET_NS);
        add_metric(out, "record_ns_per_op_min", rec_min, "ns/op", TARGET_NONE, 0);
        add_metric(out, "release_ns_per_op", median(rel, ctx->reps), "ns/op", TARGET_NONE, 0);
        add_metric(out, "run_ns_per_op", run_med, "ns/op", TARGET_NONE, 0);
        add_metric(out, "first_run_ms", first_run * 1e-6, "ms", TARGET_NONE, 0);
        snprintf(out->note, sizeof out->note,
                 "%d ops (add/mul alternating) on %d f32 per repetition; median of %d; run = flush + sync; "
                 "first run = the untimed warm-up's flush + sync",
                 RECORD_OPS, RECORD_ELEMS, ctx->reps);
        snprintf(out->summary, sizeof out->summary,
                 "recording %.0f ns per op (<= %.0f %s); running the %d-op chain %.0f ns per op", rec_med,
                 RECORD_TARGET_NS, rec_med <= RECORD_TARGET_NS ? "ok" : "MISSED", RECORD_OPS, run_med);
    }
    free(run);
    free(rel);
    free(rec);
    burnc_tensor_release(one);
    burnc_tensor_release(a);
    return status;
}
