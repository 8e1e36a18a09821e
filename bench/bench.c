/* burnc-bench: workloads timed on one device, printed as a table and optionally written as
 * JSON. Each workload fills a list of metrics; a metric may carry the target it is judged by.
 *
 *   burnc-bench [--device SPEC] [--reps N] [--json FILE] [--check] [--list] [NAME...]
 *
 * NAME filters workloads by substring. Adding a workload: write a function of type
 * bench_fn and add a line to `workloads` below. */
#include <burnc.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_MAX_METRICS 16

typedef enum { TARGET_NONE, TARGET_AT_MOST, TARGET_AT_LEAST } target_kind;

typedef struct bench_metric {
    char name[48];
    double value;
    const char *unit;
    target_kind kind;
    double target;
} bench_metric;

typedef struct bench_result {
    bench_metric m[BENCH_MAX_METRICS];
    int n;
    char note[256];
} bench_result;

typedef struct bench_ctx {
    burnc_device_t *dev;
    int reps; /* timed repetitions; a workload reports medians over them */
} bench_ctx;

/* Returns 0, or nonzero after printing why it failed. */
typedef int (*bench_fn)(const bench_ctx *ctx, bench_result *out);

/* ---- Helpers ----------------------------------------------------------------------------- */

static double now_ns(void)
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

/* Sorts v in place. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void add_metric(bench_result *r, const char *name, double value, const char *unit, target_kind kind,
                       double target)
{
    if (r->n >= BENCH_MAX_METRICS)
        return;
    bench_metric *m = &r->m[r->n++];
    snprintf(m->name, sizeof m->name, "%s", name);
    m->value = value;
    m->unit = unit;
    m->kind = kind;
    m->target = target;
}

static int bench_error(const char *what)
{
    fprintf(stderr, "burnc-bench: %s: %s (%s)\n", what, burnc_error_message(), burnc_status_name(burnc_error_code()));
    return 1;
}

static bool metric_met(const bench_metric *m)
{
    switch (m->kind) {
    case TARGET_AT_MOST: return m->value <= m->target;
    case TARGET_AT_LEAST: return m->value >= m->target;
    default: return true;
    }
}

/* ---- Workload: recording cost ------------------------------------------------------------ */

/* RECORD_OPS stays below the stream's automatic flush (4096 records today), so the recording
 * time holds no execution. */
enum { RECORD_OPS = 1000, RECORD_ELEMS = 16 };
#define RECORD_TARGET_NS 250.0 /* the target per recorded op */

/* Records a chain of RECORD_OPS element-wise ops (add and mul alternating) on 16-element
 * tensors inside a scope. Timed apart: recording; releasing the scope; running the chain
 * (flush + sync). */
static int run_record(const bench_ctx *ctx, bench_result *out)
{
    const int64_t shape[1] = {RECORD_ELEMS};
    burnc_tensor_t *a = burnc_zeros(ctx->dev, BURNC_DTYPE_F32, 1, shape);
    burnc_tensor_t *one = burnc_ones(ctx->dev, BURNC_DTYPE_F32, 1, shape);
    if (!a || !one || burnc_device_sync(ctx->dev) != BURNC_OK)
        return bench_error("record: inputs");

    double *rec = calloc((size_t)ctx->reps, sizeof *rec);
    double *rel = calloc((size_t)ctx->reps, sizeof *rel);
    double *run = calloc((size_t)ctx->reps, sizeof *run);
    int status = 0;
    if (!rec || !rel || !run) {
        fprintf(stderr, "burnc-bench: out of host memory\n");
        status = 1;
        goto done;
    }
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
            fprintf(stderr, "burnc-bench: record: wrong result %g, expected %d\n", (double)v[0], RECORD_OPS / 2);
            status = 1;
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
        double rec_min = rec[0];
        for (int i = 1; i < ctx->reps; i++)
            rec_min = rec[i] < rec_min ? rec[i] : rec_min;
        add_metric(out, "record_ns_per_op", median(rec, ctx->reps), "ns/op", TARGET_AT_MOST, RECORD_TARGET_NS);
        add_metric(out, "record_ns_per_op_min", rec_min, "ns/op", TARGET_NONE, 0);
        add_metric(out, "release_ns_per_op", median(rel, ctx->reps), "ns/op", TARGET_NONE, 0);
        add_metric(out, "run_ns_per_op", median(run, ctx->reps), "ns/op", TARGET_NONE, 0);
        add_metric(out, "first_run_ms", first_run * 1e-6, "ms", TARGET_NONE, 0);
        snprintf(out->note, sizeof out->note,
                 "%d ops (add/mul alternating) on %d f32 per repetition; median of %d; run = flush + sync; "
                 "first run = the untimed warm-up's flush + sync",
                 RECORD_OPS, RECORD_ELEMS, ctx->reps);
    }
done:
    free(run);
    free(rel);
    free(rec);
    burnc_tensor_release(one);
    burnc_tensor_release(a);
    return status;
}

/* ---- The table of workloads -------------------------------------------------------------- */

static const struct workload {
    const char *name;
    const char *what;
    bench_fn run;
} workloads[] = {
    {"record", "recording cost per element-wise op (excluding the flush), and the time to run them", run_record},
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

static void print_table(const bench_result *res, const bool *ran)
{
    printf("%-10s %-22s %14s %-7s %-12s %s\n", "workload", "metric", "value", "unit", "target", "status");
    for (int w = 0; w < N_WORKLOADS; w++) {
        if (!ran[w])
            continue;
        for (int i = 0; i < res[w].n; i++) {
            const bench_metric *m = &res[w].m[i];
            char target[32] = "";
            if (m->kind != TARGET_NONE)
                snprintf(target, sizeof target, "%s %g", m->kind == TARGET_AT_MOST ? "<=" : ">=", m->target);
            printf("%-10s %-22s %14.1f %-7s %-12s %s\n", workloads[w].name, m->name, m->value, m->unit, target,
                   m->kind == TARGET_NONE ? "" : metric_met(m) ? "met" : "MISSED");
        }
        if (res[w].note[0])
            printf("%-10s (%s)\n", "", res[w].note);
    }
}

static int write_json(const char *path, burnc_device_t *dev, int reps, const bench_result *res, const bool *ran)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "burnc-bench: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "{\n  \"burnc_version\": ");
    json_string(f, burnc_version());
    fprintf(f, ",\n  \"device\": {\"spec\": ");
    json_string(f, burnc_device_spec(dev));
    fprintf(f, ", \"name\": ");
    json_string(f, burnc_device_name(dev));
    fprintf(f, "},\n  \"reps\": %d,\n  \"workloads\": [", reps);
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
    if (fclose(f) != 0) {
        fprintf(stderr, "burnc-bench: writing %s failed: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* ---- Main -------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: burnc-bench [--device SPEC] [--reps N] [--json FILE] [--check] [--list] [NAME...]\n"
            "  --device SPEC  device to run on (default: BURNC_DEVICE, else the best available)\n"
            "  --reps N       timed repetitions per workload (default 11; medians are reported)\n"
            "  --json FILE    also write the results as JSON to FILE\n"
            "  --check        exit with status 3 if a metric misses its target\n"
            "  --list         list the workloads and exit\n"
            "  NAME...        run only workloads whose name contains one of these\n");
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

int main(int argc, char **argv)
{
    const char *spec = NULL, *json = NULL;
    int reps = 11;
    bool list = false, check = false;
    char **filters = calloc((size_t)argc, sizeof *filters);
    int nfilters = 0;
    if (!filters)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--device") && i + 1 < argc) {
            spec = argv[++i];
        } else if (!strcmp(a, "--json") && i + 1 < argc) {
            json = argv[++i];
        } else if (!strcmp(a, "--reps") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 100000) {
                fprintf(stderr, "burnc-bench: --reps wants a count from 1 to 100000\n");
                return 2;
            }
            reps = (int)v;
        } else if (!strcmp(a, "--list")) {
            list = true;
        } else if (!strcmp(a, "--check")) {
            check = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free(filters);
            return 0;
        } else if (a[0] == '-') {
            usage(stderr);
            free(filters);
            return 2;
        } else {
            filters[nfilters++] = argv[i];
        }
    }

    if (list) {
        for (int w = 0; w < N_WORKLOADS; w++)
            if (selected(workloads[w].name, filters, nfilters))
                printf("%-10s %s\n", workloads[w].name, workloads[w].what);
        free(filters);
        return 0;
    }
    bool ran[N_WORKLOADS] = {0};
    int nsel = 0;
    for (int w = 0; w < N_WORKLOADS; w++)
        nsel += selected(workloads[w].name, filters, nfilters);
    if (nsel == 0) {
        fprintf(stderr, "burnc-bench: no workload matches; --list shows them\n");
        free(filters);
        return 2;
    }

    burnc_device_t *dev = burnc_device_open(spec);
    if (!dev) {
        free(filters);
        return bench_error(spec ? spec : "opening the default device");
    }
    printf("burnc-bench %s on %s (%s), %d repetitions\n\n", burnc_version(), burnc_device_name(dev),
           burnc_device_spec(dev), reps);

    static bench_result res[N_WORKLOADS];
    bench_ctx ctx = {.dev = dev, .reps = reps};
    int status = 0;
    for (int w = 0; w < N_WORKLOADS; w++) {
        if (!selected(workloads[w].name, filters, nfilters))
            continue;
        if (workloads[w].run(&ctx, &res[w]) != 0) {
            fprintf(stderr, "burnc-bench: workload %s failed\n", workloads[w].name);
            status = 1;
            continue;
        }
        ran[w] = true;
    }
    print_table(res, ran);
    if (json && write_json(json, dev, reps, res, ran) != 0)
        status = 1;
    if (status == 0 && check)
        for (int w = 0; w < N_WORKLOADS; w++)
            for (int i = 0; ran[w] && i < res[w].n; i++)
                if (!metric_met(&res[w].m[i]))
                    status = 3;
    burnc_device_release(dev);
    free(filters);
    return status;
}
