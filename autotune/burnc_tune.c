/* burnc-tune: pre-warms the autotune store (autotune/autotune.h) for given workloads, or for
 * the launches a program recorded with BURNC_AUTOTUNE_RECORD, and manages the store.
 *
 *   burnc-tune [--device SPEC] [--file FILE] WORKLOAD...    tune
 *   burnc-tune [--device SPEC] --list | --clear | --export FILE | --import FILE [--force]
 *
 * A workload is NAME:DIMS:DTYPE, e.g. softmax:16384x8192:f32, sum:268435456:f32,
 * matmul:4096x4096x4096:f32 (MxKxN), gelu:33554432:f32. Each one is built with random inputs
 * on the device and run once with autotune on, which tunes every kernel it launches. A line of
 * FILE is a workload or a recorded launch ("cpu:kir1:..."); blank lines and lines starting with
 * '#' are skipped.
 *
 * Exit status: 0 done; 1 the device, the store or a file failed; 2 bad usage or a bad
 * workload (nothing is tuned); 3 some workloads or lines failed to run (the others were tuned). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "autotune.h"
#include "burnc.h"
#include "burnc_config.h"
#include "kernel_io.h"
#include "rt.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_PARTIAL = 3, MAX_DIMS = 4 };

static void usage(FILE *f)
{
    fprintf(f, "usage: burnc-tune [--device SPEC] [--file FILE] WORKLOAD...\n"
               "       burnc-tune [--device SPEC] --list | --clear | --export FILE | --import FILE [--force]\n"
               "       burnc-tune --help | --version\n"
               "WORKLOAD is NAME:DIMS:DTYPE, DIMS like 16384x8192, DTYPE f32 f64 f16 bf16:\n"
               "  element-wise: exp log tanh sigmoid gelu silu erf relu sqrt sin cos (one input),\n"
               "                add sub mul div (two inputs)\n"
               "  rows (last axis): softmax log_softmax layer_norm\n"
               "  reductions (every axis): sum mean max min\n"
               "  matmul:MxKxN:DTYPE\n"
               "FILE holds workloads or lines recorded by BURNC_AUTOTUNE_RECORD, one per line.\n"
               "The store is autotune.sqlite in the cache directory (BURNC_CACHE_DIR, else\n"
               "$XDG_CACHE_HOME/burnc, else ~/.cache/burnc). Exit status: 0 done, 1 failure,\n"
               "2 bad usage or workload, 3 some workloads failed.\n");
}

/* ---- Workloads ---- */

typedef enum kind { K_UNARY, K_BINARY, K_ROWS, K_REDUCE, K_MATMUL } kind;

typedef struct workload {
    char text[256];
    kind k;
    char op[24];
    int rank;
    int64_t dims[MAX_DIMS];
    burnc_dtype_t dt;
} workload;

static const struct {
    const char *name;
    kind k;
} OPS[] = {
    {"exp", K_UNARY},     {"log", K_UNARY},    {"tanh", K_UNARY},        {"sigmoid", K_UNARY},
    {"gelu", K_UNARY},    {"silu", K_UNARY},   {"erf", K_UNARY},         {"relu", K_UNARY},
    {"sqrt", K_UNARY},    {"sin", K_UNARY},    {"cos", K_UNARY},         {"add", K_BINARY},
    {"sub", K_BINARY},    {"mul", K_BINARY},   {"div", K_BINARY},        {"softmax", K_ROWS},
    {"log_softmax", K_ROWS}, {"layer_norm", K_ROWS}, {"sum", K_REDUCE}, {"mean", K_REDUCE},
    {"max", K_REDUCE},    {"min", K_REDUCE},   {"matmul", K_MATMUL},
};

/* Parses NAME:DIMS:DTYPE; false with the reason in why. */
static bool parse_workload(const char *s, workload *w, char *why, size_t cap)
{
    memset(w, 0, sizeof *w);
    snprintf(w->text, sizeof w->text, "%s", s);
    const char *c1 = strchr(s, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c1 || !c2 || strchr(c2 + 1, ':')) {
        snprintf(why, cap, "'%s': a workload is NAME:DIMS:DTYPE, like softmax:16384x8192:f32", s);
        return false;
    }
    size_t n = (size_t)(c1 - s);
    int op = -1;
    for (int i = 0; i < (int)(sizeof OPS / sizeof OPS[0]); i++)
        if (strlen(OPS[i].name) == n && strncmp(OPS[i].name, s, n) == 0)
            op = i;
    if (op < 0) {
        snprintf(why, cap, "'%s': unknown workload '%.*s' (burnc-tune --help lists them)", s, (int)n, s);
        return false;
    }
    snprintf(w->op, sizeof w->op, "%s", OPS[op].name);
    w->k = OPS[op].k;
    const char *p = c1 + 1;
    int64_t total = 1;
    while (p < c2) {
        if (w->rank == MAX_DIMS) {
            snprintf(why, cap, "'%s': more than %d dimensions", s, MAX_DIMS);
            return false;
        }
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v <= 0 || (*end != 'x' && end != c2)) {
            snprintf(why, cap, "'%s': dimension %d is not a positive integer", s, w->rank + 1);
            return false;
        }
        if (total > INT64_MAX / v) {
            snprintf(why, cap, "'%s': the shape has too many elements", s);
            return false;
        }
        total *= v;
        w->dims[w->rank++] = v;
        p = *end == 'x' ? end + 1 : end;
    }
    if (w->rank == 0) {
        snprintf(why, cap, "'%s': no dimensions", s);
        return false;
    }
    if (w->k == K_MATMUL && w->rank != 3) {
        snprintf(why, cap, "'%s': matmul takes MxKxN", s);
        return false;
    }
    static const struct {
        const char *name;
        burnc_dtype_t dt;
    } DTS[] = {{"f32", BURNC_DTYPE_F32}, {"f64", BURNC_DTYPE_F64}, {"f16", BURNC_DTYPE_F16}, {"bf16", BURNC_DTYPE_BF16}};
    for (int i = 0; i < 4; i++)
        if (strcmp(c2 + 1, DTS[i].name) == 0) {
            w->dt = DTS[i].dt;
            return true;
        }
    snprintf(why, cap, "'%s': dtype '%s' is not f32, f64, f16 or bf16", s, c2 + 1);
    return false;
}

static burnc_tensor_t *apply_unary(const char *op, burnc_tensor_t *x)
{
#define UNARY_CASE(name) \
    if (strcmp(op, #name) == 0) return burnc_##name(x);
    BURNC_UNARY_OPS(UNARY_CASE)
#undef UNARY_CASE
    return NULL;
}

static burnc_tensor_t *apply_binary(const char *op, burnc_tensor_t *a, burnc_tensor_t *b)
{
#define BINARY_CASE(name) \
    if (strcmp(op, #name) == 0) return burnc_##name(a, b);
    BURNC_BINARY_OPS(BINARY_CASE)
#undef BINARY_CASE
    return NULL;
}

/* Builds the workload on dev with random inputs made first (their own kernels are not the
 * workload: they run with autotune cached), then runs it with autotune on. */
static burnc_status_t run_workload(burnc_device_t *dev, const workload *w)
{
    burnc_scope_begin();
    at_set_mode(AT_MODE_CACHED);
    burnc_tensor_t *x, *z = NULL;
    if (w->k == K_MATMUL) {
        x = burnc_randn(dev, w->dt, 2, (const int64_t[]){w->dims[0], w->dims[1]});
        z = burnc_randn(dev, w->dt, 2, (const int64_t[]){w->dims[1], w->dims[2]});
    } else {
        x = burnc_randn(dev, w->dt, w->rank, w->dims);
        if (w->k == K_BINARY)
            z = burnc_randn(dev, w->dt, w->rank, w->dims);
    }
    burnc_status_t s = burnc_device_sync(dev);
    at_set_mode(AT_MODE_ON);
    int axes[MAX_DIMS] = {0, 1, 2, 3};
    burnc_tensor_t *y = NULL;
    switch (w->k) {
    case K_MATMUL: y = burnc_matmul(x, z); break;
    case K_UNARY: y = apply_unary(w->op, x); break;
    case K_BINARY: y = apply_binary(w->op, x, z); break;
    case K_ROWS:
        y = strcmp(w->op, "softmax") == 0       ? burnc_softmax(x, w->rank - 1)
            : strcmp(w->op, "log_softmax") == 0 ? burnc_log_softmax(x, w->rank - 1)
                                                : burnc_layer_norm(x, 1, 1e-5);
        break;
    default:
        y = strcmp(w->op, "sum") == 0    ? burnc_sum(x, w->rank, axes, false)
            : strcmp(w->op, "mean") == 0 ? burnc_mean(x, w->rank, axes, false)
            : strcmp(w->op, "max") == 0  ? burnc_max(x, w->rank, axes, false)
                                         : burnc_min(x, w->rank, axes, false);
    }
    if (s == BURNC_OK)
        s = y ? burnc_device_sync(dev) : burnc_error_code();
    burnc_scope_end();
    return s;
}

/* A recorded launch: "cpu:kir1:..." tuned on the device through its backend. */
static burnc_status_t run_line(burnc_device_t *dev, const char *line)
{
    const char *colon = strchr(line, ':');
    if (!colon || (size_t)(colon - line) != strlen(dev->be->kind) || strncmp(line, dev->be->kind, strlen(dev->be->kind)))
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "recorded for another device kind than %s's (%.*s)", dev->spec,
                       colon ? (int)(colon - line) : 8, line);
    if (!dev->be->tune_kernel)
        return rt_fail(BURNC_ERR_UNAVAILABLE, "%s tunes nothing", dev->spec);
    kir_kernel k;
    kir_layout l;
    char why[256];
    if (!kir_decode(colon + 1, &k, &l, why, sizeof why))
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s", why);
    kir_args a = {.extents = l.extents, .in_offsets = l.in_offsets, .in_strides = l.in_strides,
                  .out_offsets = l.out_offsets, .out_strides = l.out_strides, .scalars = l.scalars};
    burnc_status_t s = dev->be->tune_kernel(dev, &k, &a, NULL);
    kir_free(&k);
    return s;
}

/* ---- What was tuned: the observer's list ---- */

typedef struct seen {
    char family[64], key[AT_TEXT_MAX], chosen[64], heuristic[64];
    double best_ms, heuristic_ms;
    bool tuned, stored;
} seen;

static struct {
    seen *v;
    int n, cap;
} met;

static void observe(void *user, const at_query *q, const at_outcome *o)
{
    (void)user;
    if (at_get_mode() != AT_MODE_ON)
        return; /* the inputs' kernels, made with autotune cached */
    if (met.n == met.cap) {
        int cap = met.cap ? 2 * met.cap : 32;
        seen *v = realloc(met.v, (size_t)cap * sizeof *v);
        if (!v)
            return;
        met.v = v, met.cap = cap;
    }
    seen *s = &met.v[met.n++];
    snprintf(s->family, sizeof s->family, "%s", q->family->name);
    snprintf(s->key, sizeof s->key, "%s", q->key);
    snprintf(s->chosen, sizeof s->chosen, "%s", q->family->names[o->choice]);
    snprintf(s->heuristic, sizeof s->heuristic, "%s", q->family->names[q->heuristic]);
    s->best_ms = o->best_ms, s->heuristic_ms = o->heuristic_ms;
    s->tuned = o->tuned, s->stored = o->stored;
}

static void print_summary(void)
{
    if (!met.n) {
        printf("no tunable kernels were launched\n");
        return;
    }
    printf("\n%-16s %-40s %-18s %10s %-18s %10s %6s\n", "family", "key", "chosen", "ms", "heuristic", "ms", "gain");
    for (int i = 0; i < met.n; i++) {
        const seen *s = &met.v[i];
        char ms[16] = "-", hms[16] = "-", gain[16] = "-";
        if (s->tuned) {
            snprintf(ms, sizeof ms, "%.4f", s->best_ms);
            if (s->heuristic_ms > 0) {
                snprintf(hms, sizeof hms, "%.4f", s->heuristic_ms);
                snprintf(gain, sizeof gain, "%.2fx", s->heuristic_ms / s->best_ms);
            }
        }
        printf("%-16s %-40s %-18s %10s %-18s %10s %6s%s\n", s->family, s->key, s->chosen, ms, s->heuristic, hms, gain,
               s->tuned ? (s->stored ? "" : "  (not stored)") : "  (already stored)");
    }
}

/* What a remembered decision costs at launch: at_decide over a key already in memory. */
static void print_lookup_cost(const char *fingerprint)
{
    if (!met.n)
        return;
    static const char *const names[] = {"a", "b"};
    at_family f = {"burnc-tune.lookup", 2, names};
    at_query q = {.fingerprint = fingerprint, .family = &f, .key = met.v[0].key, .heuristic = 0};
    at_decide(&q, NULL, NULL, NULL); /* now remembered */
    enum { N = 200000 };
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++)
        at_decide(&q, NULL, NULL, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-3) / N;
    printf("a remembered decision costs %.3f us at launch (%d lookups)\n", us, N);
}

/* ---- Progress ---- */

static void progress(int done, int total, const char *what)
{
    if (isatty(STDOUT_FILENO)) {
        int w = 30, fill = total ? done * w / total : w;
        printf("\r[%.*s%.*s] %d/%d %-50.50s", fill, "##############################", w - fill,
               "------------------------------", done, total, what);
        if (done == total)
            printf("\n");
        fflush(stdout);
    } else if (done < total) {
        printf("[%d/%d] %s\n", done + 1, total, what);
    }
}

/* ---- Store commands ---- */

static int print_record(void *user, const at_record *r)
{
    (void)user;
    char gain[16] = "-";
    if (r->heuristic_ms > 0 && r->best_ms > 0)
        snprintf(gain, sizeof gain, "%.2fx", r->heuristic_ms / r->best_ms);
    printf("%-16s %-40s %-18s %10.4f %6s\n", r->family, r->key, r->config, r->best_ms, gain);
    return 0;
}

static int store_command(const char *fp, const char *cmd, const char *file, bool force)
{
    at_store *s = at_shared_store();
    if (!s) {
        fprintf(stderr, "burnc-tune: %s\n", burnc_error_message());
        return EXIT_FAIL;
    }
    int n = 0;
    burnc_status_t st;
    if (strcmp(cmd, "list") == 0) {
        printf("%-16s %-40s %-18s %10s %6s\n", "family", "key", "chosen", "ms", "gain");
        st = at_store_foreach(s, fp, print_record, NULL, &n);
        if (st == BURNC_OK)
            printf("%d decisions for %s in %s\n", n, fp, at_store_path(s));
    } else if (strcmp(cmd, "clear") == 0) {
        st = at_store_clear(s, fp, &n);
        if (st == BURNC_OK)
            printf("removed %d decisions for %s\n", n, fp);
    } else if (strcmp(cmd, "export") == 0) {
        st = at_store_export(s, fp, file, &n);
        if (st == BURNC_OK)
            printf("exported %d decisions to %s\n", n, file);
    } else {
        st = at_store_import(s, fp, file, force, &n);
        if (st == BURNC_OK)
            printf("imported %d decisions from %s\n", n, file);
    }
    if (st != BURNC_OK) {
        fprintf(stderr, "burnc-tune: %s\n", burnc_error_message());
        return st == BURNC_ERR_INVALID_ARGUMENT ? EXIT_USAGE : EXIT_FAIL;
    }
    return EXIT_OK;
}

/* ---- Main ---- */

typedef struct item {
    char *text; /* a workload or a recorded line */
    workload w;
    bool recorded;
} item;

static bool add_item(item **items, int *n, const char *text, char *why, size_t cap)
{
    item *v = realloc(*items, (size_t)(*n + 1) * sizeof *v);
    if (!v) {
        snprintf(why, cap, "out of memory");
        return false;
    }
    *items = v;
    item *it = &v[*n];
    memset(it, 0, sizeof *it);
    it->recorded = strstr(text, ":kir1:") != NULL;
    if (!it->recorded && !parse_workload(text, &it->w, why, cap))
        return false;
    it->text = strdup(text);
    if (!it->text) {
        snprintf(why, cap, "out of memory");
        return false;
    }
    (*n)++;
    return true;
}

/* Reads FILE's lines as items; false with a reason naming the line. */
static bool read_file(const char *path, item **items, int *n, char *why, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, cap, "cannot read %s", path);
        return false;
    }
    char *line = NULL;
    size_t len = 0;
    int no = 0;
    bool ok = true;
    while (ok && getline(&line, &len, f) >= 0) {
        no++;
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0] || line[0] == '#')
            continue;
        char inner[320];
        if (!add_item(items, n, line, inner, sizeof inner)) {
            snprintf(why, cap, "%s:%d: %s", path, no, inner);
            ok = false;
        }
    }
    free(line);
    fclose(f);
    return ok;
}

int main(int argc, char **argv)
{
    const char *spec = NULL, *cmd = NULL, *cmd_file = NULL;
    bool force = false;
    item *items = NULL;
    int n_items = 0, rc = EXIT_OK;
    char why[512];
    for (int i = 1; i < argc && rc == EXIT_OK; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return EXIT_OK;
        } else if (strcmp(a, "--version") == 0) {
            printf("burnc-tune %s\n", BURNC_VERSION);
            return EXIT_OK;
        } else if (strcmp(a, "--device") == 0 && i + 1 < argc) {
            spec = argv[++i];
        } else if (strcmp(a, "--file") == 0 && i + 1 < argc) {
            if (!read_file(argv[++i], &items, &n_items, why, sizeof why)) {
                fprintf(stderr, "burnc-tune: %s\n", why);
                rc = EXIT_USAGE;
            }
        } else if (strcmp(a, "--list") == 0 || strcmp(a, "--clear") == 0) {
            cmd = a + 2;
        } else if ((strcmp(a, "--export") == 0 || strcmp(a, "--import") == 0) && i + 1 < argc) {
            cmd = a + 2;
            cmd_file = argv[++i];
        } else if (strcmp(a, "--force") == 0) {
            force = true;
        } else if (a[0] == '-') {
            fprintf(stderr, "burnc-tune: unknown or incomplete option %s\n", a);
            usage(stderr);
            rc = EXIT_USAGE;
        } else if (!add_item(&items, &n_items, a, why, sizeof why)) {
            fprintf(stderr, "burnc-tune: %s\n", why);
            rc = EXIT_USAGE;
        }
    }
    if (rc == EXIT_OK && !cmd && n_items == 0) {
        fprintf(stderr, "burnc-tune: nothing to do: give workloads, --file, or a store command\n");
        usage(stderr);
        rc = EXIT_USAGE;
    }
    if (rc == EXIT_OK && cmd && n_items) {
        fprintf(stderr, "burnc-tune: --%s does not take workloads\n", cmd);
        rc = EXIT_USAGE;
    }
    burnc_device_t *dev = rc == EXIT_OK ? burnc_device_open(spec ? spec : "cpu") : NULL;
    if (rc == EXIT_OK && !dev) {
        fprintf(stderr, "burnc-tune: %s\n", burnc_error_message());
        rc = EXIT_FAIL;
    }
    const char *fp = dev && dev->be->autotune_fingerprint ? dev->be->autotune_fingerprint(dev) : NULL;
    if (rc == EXIT_OK && !fp) {
        fprintf(stderr, "burnc-tune: %s has nothing to tune\n", dev->spec);
        rc = EXIT_FAIL;
    }
    if (rc == EXIT_OK && cmd) {
        rc = store_command(fp, cmd, cmd_file, force);
    } else if (rc == EXIT_OK) {
        printf("tuning %d item%s on %s (%s)\n", n_items, n_items == 1 ? "" : "s", dev->spec, fp);
        at_set_mode(AT_MODE_ON);
        at_set_observer(observe, NULL);
        int failed = 0;
        for (int i = 0; i < n_items; i++) {
            progress(i, n_items, items[i].text);
            burnc_status_t s = items[i].recorded ? run_line(dev, items[i].text) : run_workload(dev, &items[i].w);
            if (s != BURNC_OK) {
                if (isatty(STDOUT_FILENO))
                    printf("\n");
                fprintf(stderr, "burnc-tune: %.60s: %s\n", items[i].text, burnc_error_message());
                failed++;
            }
        }
        progress(n_items, n_items, "done");
        at_set_observer(NULL, NULL);
        print_summary();
        print_lookup_cost(fp);
        at_store *s = at_shared_store();
        if (s)
            printf("store: %s%s\n", at_store_path(s), at_store_read_only(s) ? " (read-only: nothing was stored)" : "");
        rc = failed ? EXIT_PARTIAL : EXIT_OK;
    }
    for (int i = 0; i < n_items; i++)
        free(items[i].text);
    free(items);
    free(met.v);
    at_close_shared_store();
    burnc_device_release(dev);
    return rc;
}
