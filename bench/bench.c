/* burnc-bench: workloads timed on one device against memory probes measured in the same run,
 * printed as a table with the targets, optionally written as JSON and as an SVG plot.
 *
 *   burnc-bench [--device SPEC] [--reps N] [--json FILE] [--plot FILE.svg] [--check]
 *               [--details] [--list] [NAME...]
 *
 * NAME filters workloads by substring. Adding a workload: write a function of type bench_fn
 * (workloads.c, process.c) and add a line to `workloads` below. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* ---- Helpers ----------------------------------------------------------------------------- */

double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double min_of(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

void add_metric(bench_result *r, const char *name, double value, const char *unit, bench_target kind, double target)
{
    if (r->n >= BENCH_MAX_METRICS) {
        fprintf(stderr, "burnc-bench: too many metrics; %s dropped\n", name);
        return;
    }
    bench_metric *m = &r->m[r->n++];
    snprintf(m->name, sizeof m->name, "%s", name);
    m->value = value;
    m->unit = unit;
    m->kind = kind;
    m->target = target;
}

bool metric_met(const bench_metric *m)
{
    switch (m->kind) {
    case TARGET_AT_MOST: return m->value <= m->target;
    case TARGET_AT_LEAST: return m->value >= m->target;
    default: return true;
    }
}

int bench_error(const char *what)
{
    fprintf(stderr, "burnc-bench: %s: %s (%s)\n", what, burnc_error_message(), burnc_status_name(burnc_error_code()));
    return 1;
}

int bench_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("burnc-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int device_thread_count(void)
{
    const char *env = getenv("BURNC_NUM_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (!*end && n > 0)
            return n > 1024 ? 1024 : (int)n;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void format_count(char *out, size_t cap, int64_t n)
{
    if (n > 0 && (n & (n - 1)) == 0 && n >= 1024) {
        int e = 0;
        while ((INT64_C(1) << e) < n)
            e++;
        snprintf(out, cap, "2^%d", e);
    } else {
        snprintf(out, cap, "%lld", (long long)n);
    }
}

/* ---- burnc's log, captured ----------------------------------------------------------------- */

/* "cpu group 2/5: sub, 1 record (sub), 2 inputs, 1 output, cut: ..." or
 * "cpu group 1/1: copy (opaque), cut: ..." (runtime/stream.c) */
static void parse_group(log_capture *c, const char *msg)
{
    const char *g = strstr(msg, " group ");
    const char *colon = g ? strchr(g, ':') : NULL;
    if (!colon)
        return;
    if (c->n_groups >= LOG_MAX_GROUPS) {
        c->overflow = true;
        return;
    }
    log_group *lg = &c->groups[c->n_groups];
    const char *opaque = strstr(colon, " (opaque)");
    const char *rec = strstr(colon, " record");
    const char *open = rec ? strchr(rec, '(') : NULL;
    const char *close = open ? strchr(open, ')') : NULL;
    if (opaque && (!rec || opaque < rec)) {
        int len = (int)(opaque - (colon + 2));
        snprintf(lg->ops, sizeof lg->ops, "%.*s", len > 0 ? len : 0, colon + 2);
        lg->n_inputs = -1;
    } else if (close && close[1] == ',') {
        snprintf(lg->ops, sizeof lg->ops, "%.*s", (int)(close - open - 1), open + 1);
        lg->n_inputs = (int)strtol(close + 2, NULL, 10);
    } else {
        return;
    }
    c->n_groups++;
}

static void parse_codegen(log_capture *c, const char *msg)
{
    static const char miss[] = ": miss, compiled in ";
    const char *p;
    if ((p = strstr(msg, miss))) {
        c->compiled++;
        c->compile_ms += strtod(p + sizeof miss - 1, NULL);
    } else if (strstr(msg, ": disk hit")) {
        c->disk_hits++;
    } else if (!strncmp(msg, "loaded ", 7) && (p = strstr(msg, ") in "))) {
        c->llvm_load_ms = strtod(p + 5, NULL);
    }
}

/* Called under burnc's log lock: calls never overlap. */
static void on_log(void *user, const char *topic, const char *msg)
{
    log_capture *c = user;
    if (!strcmp(topic, "fusion"))
        parse_group(c, msg);
    else if (!strcmp(topic, "codegen"))
        parse_codegen(c, msg);
}

void log_capture_begin(log_capture *cap)
{
    memset(cap, 0, sizeof *cap);
    burnc_log_set_callback(on_log, cap);
}

void log_capture_end(void) { burnc_log_set_callback(NULL, NULL); }

/* ---- The table of workloads -------------------------------------------------------------- */

/* train.c: training steps of nn models over autodiff, and the child that measures peak memory */
int run_train_mlp(bench_ctx *ctx, bench_result *out);
int run_train_deep(bench_ctx *ctx, bench_result *out);
int train_child_main(int argc, char **argv);

static const struct workload {
    const char *name;
    const char *what;
    bench_fn run;
    bool cpu_only; /* compares with a host library (OpenBLAS): not run on devices of their own memory */
} workloads[] = {
    {"record", "recording cost per element-wise op (excluding the flush), and the time to run them", run_record, false},
    {"gelu", "x * (erf(x / sqrt2) + 1) / 2 * w + b over 2^25 f32 (Burn's custom GELU in elementary ops)", run_gelu, false},
    {"softmax", "burnc_softmax over the rows of 4096x4096 f32 (max, sub, exp, sum, div)", run_softmax, false},
    {"layer_norm", "burnc_layer_norm over the rows of 4096x4096 f32 (mean, sub, mul, mean, add, sqrt, div)",
     run_layer_norm, false},
    {"sum", "sum of 2^25 f32", run_sum, false},
    {"colsum", "sum over axis 0 (the batch axis) of x * w, 4096x1024 f32", run_colsum, false},
    {"bcast", "10 element-wise ops on 4096x4096 f32 with [4096] and [4096,1] operands", run_bcast, false},
    {"small_ops", "20 small ops (10x mul+add) on 4096 f32: host time per iteration, sync included", run_small_ops, false},
    {"matmul_1024", "f32 matmul 1024x1024 @ 1024x1024 against OpenBLAS cblas_sgemm, same run, same threads",
     run_matmul_1024, true},
    {"matmul_2048", "f32 matmul 2048^3 against OpenBLAS cblas_sgemm", run_matmul_2048, true},
    {"matmul_4096", "f32 matmul 4096^3 against OpenBLAS cblas_sgemm", run_matmul_4096, true},
    {"matmul_gelu", "gelu(A@B + bias), 2048 f32 (on a GPU 4096, f32 and bf16): fused (where the library puts the "
                    "epilogue) against matmul, then the epilogue as eager kernels", run_matmul_gelu, false},
    {"matmul_f32", "f32 matmul on a GPU, 4096^3 and 8192^3, exact (no TF32): TFLOP/s (small sizes elsewhere)",
     run_matmul_f32, false},
    {"matmul_tf32", "f32 matmul on TF32 tensor cores (burnc_device_set_matmul_tf32), 4096^3 and 8192^3",
     run_matmul_tf32, false},
    {"matmul_bf16", "bf16 matmul, 4096^3 and 8192^3", run_matmul_bf16, false},
    {"matmul_f16", "f16 matmul, 4096^3 and 8192^3", run_matmul_f16, false},
    {"first_call", "first call of a new fused chain (record, fuse, compile, run), cold caches, fresh process",
     run_first_call, false},
    {"warm_start", "a fresh process with a warm disk cache: from exec to its first result; libLLVM mapped?",
     run_warm_start, false},
    {"train_mlp", "training step of an MLP 784-1024-1024-10, batch 256, Adam; the Adam update alone", run_train_mlp,
     false},
    {"train_deep", "training step of 8 LayerNorm+GELU+Linear blocks, width 1024, batch 4096; peak memory with and "
                   "without checkpointing (BURNC_BENCH_TRAIN_DEEP=BLOCKSxWIDTHxBATCH)", run_train_deep, false},
};
enum { N_WORKLOADS = sizeof workloads / sizeof workloads[0] };

/* ---- Output ------------------------------------------------------------------------------ */

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static const char *mark(bool met) { return met ? "ok" : "MISSED"; }

static void print_probes(const bench_ctx *ctx)
{
    if (ctx->n_measured == 0)
        return;
    if (ctx->device_copy)
        printf("probes: the device's own copy of the workload's input bytes, run in turn with its fused and eager "
               "runs (medians of %d):\n", ctx->reps);
    else
        printf("probes: plain C loops on %d thread%s over buffers of the workload's size, run in turn with its "
               "fused and eager runs (medians of %d):\n",
               probe_pool_threads(ctx->probes), probe_pool_threads(ctx->probes) == 1 ? "" : "s", ctx->reps);
    for (int i = 0; i < ctx->n_measured; i++) {
        const bench_probe_entry *e = &ctx->measured[i];
        char n[24];
        format_count(n, sizeof n, e->n);
        printf("  %-10s %-6s %-18s over %-5s f32  %7.1f GB/s\n", e->workload, probe_mix_name(e->mix),
               probe_mix_what(e->mix), n, e->gbps);
    }
    printf("\n");
}

static void print_bandwidth(const bench_result *res, const bool *ran)
{
    bool any = false;
    for (int w = 0; w < N_WORKLOADS; w++)
        any |= ran[w] && res[w].bw.valid;
    if (!any)
        return;
    printf("memory-bound workloads (effective GB/s: inputs read once, outputs written once; traffic = eager "
           "bytes / fused bytes):\n");
    printf("%-10s %-9s %9s %9s %8s %8s  %-13s %-19s %8s %8s %-18s %s\n", "workload", "size", "fused ms", "eager ms",
           "fused", "eager", "probe GB/s", "fused/probe", "traffic", "speedup", "speedup/traffic", "kernels");
    for (int w = 0; w < N_WORKLOADS; w++) {
        const bench_bandwidth *b = &res[w].bw;
        if (!ran[w] || !b->valid)
            continue;
        double fused_gbps = b->fused_bytes / (b->fused_ms * 1e6), eager_gbps = b->fused_bytes / (b->eager_ms * 1e6);
        double of_probe = fused_gbps / b->probe_gbps, traffic = b->eager_bytes / b->fused_bytes;
        double speedup = b->eager_ms / b->fused_ms;
        char probe[32], judged[40], vs_traffic[40], kernels[24];
        snprintf(probe, sizeof probe, "%s %.1f", probe_mix_name(b->probe), b->probe_gbps);
        if (b->probe_target > 0)
            snprintf(judged, sizeof judged, "%.2f >=%.2g %s", of_probe, b->probe_target,
                     mark(of_probe >= b->probe_target));
        else
            snprintf(judged, sizeof judged, "%.2f", of_probe);
        if (b->traffic_target > 0)
            snprintf(vs_traffic, sizeof vs_traffic, "%.2f >=%.2g %s", speedup / traffic, b->traffic_target,
                     mark(speedup / traffic >= b->traffic_target));
        else
            snprintf(vs_traffic, sizeof vs_traffic, "%.2f", speedup / traffic);
        if (b->fused_kernels >= 0)
            snprintf(kernels, sizeof kernels, "%d / %d", b->fused_kernels, b->eager_kernels);
        else
            snprintf(kernels, sizeof kernels, "-");
        printf("%-10s %-9s %9.2f %9.2f %8.1f %8.1f  %-13s %-19s %7.2fx %7.2fx %-18s %s\n", workloads[w].name, b->size,
               b->fused_ms, b->eager_ms, fused_gbps, eager_gbps, probe, judged, traffic, speedup, vs_traffic,
               kernels);
    }
    printf("(kernels: fused / eager, from burnc's fusion log)\n\n");
    bool tuned = false;
    for (int w = 0; w < N_WORKLOADS; w++)
        tuned |= ran[w] && res[w].bw.valid && res[w].bw.tuned_ms > 0;
    if (!tuned)
        return;
    printf("autotune (fused runs; tuned just before, then medians in turn; gain = off / tuned):\n");
    printf("%-10s %12s %12s %8s\n", "workload", "off ms", "tuned ms", "gain");
    for (int w = 0; w < N_WORKLOADS; w++) {
        const bench_bandwidth *b = &res[w].bw;
        if (ran[w] && b->valid && b->tuned_ms > 0)
            printf("%-10s %12.2f %12.2f %7.2fx\n", workloads[w].name, b->untuned_ms, b->tuned_ms,
                   b->untuned_ms / b->tuned_ms);
    }
    printf("\n");
}

static void print_latency(const bench_result *res, const bool *ran)
{
    bool any = false;
    for (int w = 0; w < N_WORKLOADS; w++)
        any |= ran[w] && res[w].summary[0];
    if (!any)
        return;
    printf("latency:\n");
    for (int w = 0; w < N_WORKLOADS; w++)
        if (ran[w] && res[w].summary[0])
            printf("  %-11s %s\n", workloads[w].name, res[w].summary);
    printf("\n");
}

static void print_metrics(const bench_result *res, const bool *ran, bool targets_only)
{
    printf("%-11s %-24s %14s %-6s %-10s %s\n", "workload", targets_only ? "target" : "metric", "value", "unit",
           "target", "status");
    for (int w = 0; w < N_WORKLOADS; w++) {
        if (!ran[w])
            continue;
        for (int i = 0; i < res[w].n; i++) {
            const bench_metric *m = &res[w].m[i];
            if (targets_only && m->kind == TARGET_NONE)
                continue;
            char target[32] = "";
            if (m->kind != TARGET_NONE)
                snprintf(target, sizeof target, "%s %g", m->kind == TARGET_AT_MOST ? "<=" : ">=", m->target);
            printf("%-11s %-24s %14.3f %-6s %-10s %s\n", workloads[w].name, m->name, m->value, m->unit, target,
                   m->kind == TARGET_NONE ? "" : mark(metric_met(m)));
        }
        if (!targets_only && res[w].note[0])
            printf("%-11s (%s)\n", "", res[w].note);
    }
}

static void count_targets(const bench_result *res, const bool *ran, int *met, int *all)
{
    *met = *all = 0;
    for (int w = 0; w < N_WORKLOADS; w++)
        for (int i = 0; ran[w] && i < res[w].n; i++)
            if (res[w].m[i].kind != TARGET_NONE) {
                (*all)++;
                *met += metric_met(&res[w].m[i]);
            }
}

static int write_json(const char *path, const bench_ctx *ctx, const bench_result *res, const bool *ran)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return bench_fail("cannot write %s: %s", path, strerror(errno));
    fprintf(f, "{\n  \"burnc_version\": ");
    json_string(f, burnc_version());
    fprintf(f, ",\n  \"device\": {\"spec\": ");
    json_string(f, burnc_device_spec(ctx->dev));
    fprintf(f, ", \"name\": ");
    json_string(f, burnc_device_name(ctx->dev));
    fprintf(f, "},\n  \"threads\": %d,\n  \"reps\": %d,\n  \"probes\": [", ctx->threads, ctx->reps);
    for (int i = 0; i < ctx->n_measured; i++) {
        const bench_probe_entry *e = &ctx->measured[i];
        fprintf(f, "%s\n    {\"workload\": ", i ? "," : "");
        json_string(f, e->workload);
        fprintf(f, ", \"mix\": ");
        json_string(f, probe_mix_name(e->mix));
        fprintf(f, ", \"moves\": ");
        json_string(f, probe_mix_what(e->mix));
        fprintf(f, ", \"elements\": %lld, \"gbps\": %.6g}", (long long)e->n, e->gbps);
    }
    fprintf(f, "\n  ],\n  \"workloads\": [");
    bool first = true;
    for (int w = 0; w < N_WORKLOADS; w++) {
        if (!ran[w])
            continue;
        fprintf(f, "%s\n    {\"name\": ", first ? "" : ",");
        first = false;
        json_string(f, workloads[w].name);
        fprintf(f, ", \"description\": ");
        json_string(f, workloads[w].what);
        fprintf(f, ", \"note\": ");
        json_string(f, res[w].note);
        if (res[w].bw.valid) {
            fprintf(f, ", \"probe\": ");
            json_string(f, probe_mix_name(res[w].bw.probe));
        }
        fprintf(f, ",\n     \"metrics\": [");
        for (int i = 0; i < res[w].n; i++) {
            const bench_metric *m = &res[w].m[i];
            fprintf(f, "%s\n       {\"name\": ", i ? "," : "");
            json_string(f, m->name);
            fprintf(f, ", \"value\": %.6g, \"unit\": ", m->value);
            json_string(f, m->unit);
            if (m->kind != TARGET_NONE)
                fprintf(f, ", \"target\": {\"op\": \"%s\", \"value\": %.6g}, \"met\": %s",
                        m->kind == TARGET_AT_MOST ? "<=" : ">=", m->target, metric_met(m) ? "true" : "false");
            fputc('}', f);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n  ]\n}\n");
    if (fclose(f) != 0)
        return bench_fail("writing %s failed: %s", path, strerror(errno));
    return 0;
}

static int plot(const char *path, const bench_ctx *ctx, const bench_result *res, const bool *ran)
{
    plot_bar bars[N_WORKLOADS];
    int n = 0;
    for (int w = 0; w < N_WORKLOADS; w++)
        if (ran[w] && res[w].bw.valid)
            bars[n++] = (plot_bar){.workload = workloads[w].name, .bw = &res[w].bw};
    char title[256];
    snprintf(title, sizeof title, "burnc-bench %s on %s (%s, %d threads): effective GB/s", burnc_version(),
             burnc_device_name(ctx->dev), burnc_device_spec(ctx->dev), ctx->threads);
    return write_plot(path, title, bars, n);
}

/* ---- Main -------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: burnc-bench [--device SPEC] [--reps N] [--json FILE] [--plot FILE.svg] [--check]\n"
            "                   [--details] [--no-autotune] [--list] [NAME...]\n"
            "  --device SPEC  device to run on (default: BURNC_DEVICE, else the best available)\n"
            "  --reps N       timed repetitions per workload and probe (default 11; medians are reported)\n"
            "  --json FILE    also write the results as JSON to FILE\n"
            "  --plot FILE    also write an SVG of effective bandwidth against the probes\n"
            "  --check        exit with status 3 if a metric misses its target\n"
            "  --details      print every metric, not only the summary and the targets\n"
            "  --no-autotune  skip tuning the fused kernels and comparing them with BURNC_AUTOTUNE=off\n"
            "  --list         list the workloads and exit\n"
            "  NAME...        run only workloads whose name contains one of these\n"
            "Memory probes use BURNC_NUM_THREADS threads (else all cores), like the cpu device.\n");
}

static bool selected(const char *name, char **filters, int nfilters)
{
    if (nfilters == 0)
        return true;
    for (int i = 0; i < nfilters; i++)
        if (strstr(name, filters[i]))
            return true;
    return false;
}

typedef struct options {
    const char *spec, *json, *plot;
    int reps;
    bool list, check, details, no_autotune;
    long long child_n; /* > 0: the hidden child mode of the fresh-process workloads */
    char **filters;
    int nfilters;
} options;

/* 0 to go on, else the exit status. */
static int parse_args(int argc, char **argv, options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--device") && i + 1 < argc) {
            o->spec = argv[++i];
        } else if (!strcmp(a, "--json") && i + 1 < argc) {
            o->json = argv[++i];
        } else if (!strcmp(a, "--plot") && i + 1 < argc) {
            o->plot = argv[++i];
        } else if (!strcmp(a, "--reps") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 100000) {
                fprintf(stderr, "burnc-bench: --reps wants a count from 1 to 100000\n");
                return 2;
            }
            o->reps = (int)v;
        } else if (!strcmp(a, "--child-chain") && i + 1 < argc) {
            char *end;
            o->child_n = strtoll(argv[++i], &end, 10);
            if (*end || o->child_n < 1)
                return 2;
        } else if (!strcmp(a, "--list")) {
            o->list = true;
        } else if (!strcmp(a, "--check")) {
            o->check = true;
        } else if (!strcmp(a, "--details")) {
            o->details = true;
        } else if (!strcmp(a, "--no-autotune")) {
            o->no_autotune = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return -1;
        } else if (a[0] == '-') {
            usage(stderr);
            return 2;
        } else {
            o->filters[o->nfilters++] = argv[i];
        }
    }
    return 0;
}

static int run_all(const options *o, burnc_device_t *dev, char *self_exe)
{
    bench_ctx ctx = {.dev = dev, .reps = o->reps, .threads = device_thread_count(), .self_exe = self_exe,
                     .autotune = !o->no_autotune};
    ctx.probes = probe_pool_new(ctx.threads);
    double copy_s;
    ctx.device_copy = burnc_device_copy_time(dev, 1 << 20, 1, &copy_s) == BURNC_OK;
    burnc_error_clear();
    printf("burnc-bench %s on %s (%s); %d repetitions; probes on %d threads (BURNC_NUM_THREADS, else all cores: "
           "the cpu device's rule)\n\n",
           burnc_version(), burnc_device_name(dev), burnc_device_spec(dev), o->reps,
           ctx.probes ? probe_pool_threads(ctx.probes) : 0);
    fflush(stdout);

    static bench_result res[N_WORKLOADS];
    bool ran[N_WORKLOADS] = {0};
    int status = 0;
    for (int w = 0; w < N_WORKLOADS; w++) {
        if (!selected(workloads[w].name, o->filters, o->nfilters))
            continue;
        if (workloads[w].cpu_only && ctx.device_copy) {
            fprintf(stderr, "burnc-bench: %s not run on %s: it compares the cpu matmul with OpenBLAS\n",
                    workloads[w].name, burnc_device_spec(dev));
            continue;
        }
        double t0 = now_ns();
        if (workloads[w].run(&ctx, &res[w]) != 0) {
            fprintf(stderr, "burnc-bench: workload %s failed\n", workloads[w].name);
            status = 1;
        } else {
            ran[w] = true;
        }
        burnc_device_memory_cleanup(dev);
        fprintf(stderr, "burnc-bench: %s done in %.1f s\n", workloads[w].name, (now_ns() - t0) * 1e-9);
    }
    print_probes(&ctx);
    print_bandwidth(res, ran);
    print_latency(res, ran);
    if (o->details) {
        print_metrics(res, ran, false);
        printf("\n");
    }
    int met, all;
    count_targets(res, ran, &met, &all);
    if (all) {
        print_metrics(res, ran, true);
        printf("\n%d of %d targets met\n", met, all);
    }
    if (o->json && write_json(o->json, &ctx, res, ran) != 0)
        status = 1;
    if (o->plot && plot(o->plot, &ctx, res, ran) != 0)
        status = 1;
    if (status == 0 && o->check && met < all)
        status = 3;
    probe_pool_free(ctx.probes);
    return status;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--child-train")) /* train_deep's fresh processes */
        return train_child_main(argc, argv);
    options o = {.reps = 11, .filters = calloc((size_t)argc, sizeof(char *))};
    if (!o.filters)
        return 1;
    int status = parse_args(argc, argv, &o);
    if (status != 0) {
        free(o.filters);
        return status < 0 ? 0 : status;
    }
    if (o.child_n > 0) {
        free(o.filters);
        return child_chain_main(o.spec, o.child_n);
    }
    if (o.list) {
        for (int w = 0; w < N_WORKLOADS; w++)
            if (selected(workloads[w].name, o.filters, o.nfilters))
                printf("%-11s %s\n", workloads[w].name, workloads[w].what);
        free(o.filters);
        return 0;
    }
    int nsel = 0;
    for (int w = 0; w < N_WORKLOADS; w++)
        nsel += selected(workloads[w].name, o.filters, o.nfilters);
    if (nsel == 0) {
        fprintf(stderr, "burnc-bench: no workload matches; --list shows them\n");
        free(o.filters);
        return 2;
    }
    char self_exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    self_exe[len > 0 ? len : 0] = '\0';

    burnc_device_t *dev = burnc_device_open(o.spec);
    if (!dev) {
        free(o.filters);
        return bench_error(o.spec ? o.spec : "opening the default device");
    }
    status = run_all(&o, dev, self_exe);
    burnc_device_release(dev);
    free(o.filters);
    return status;
}
