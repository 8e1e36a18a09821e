/* burnc-bench internals shared by its files: results as lists of metrics (some judged by a
 * target), the memory probes, the capture of burnc's log, timing helpers. */
#ifndef BENCH_H
#define BENCH_H

#include <burnc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_MAX_METRICS 24

typedef enum { TARGET_NONE, TARGET_AT_MOST, TARGET_AT_LEAST } bench_target;

typedef struct bench_metric {
    char name[40];
    double value;
    const char *unit;
    bench_target kind;
    double target;
} bench_metric;

/* ---- Memory probes (probe.c) ------------------------------------------------------------- */

/* The read/write mixes a memory-bound workload is compared with (TARGETS.md): write-allocate
 * caches make a 1-in/1-out job peak lower than a 3-in/1-out one, and a read-only job higher. */
/* PROBE_DEVICE_COPY is no host probe: a GPU's own copy of the workload's bytes. */
typedef enum { PROBE_COPY, PROBE_FMA, PROBE_READ, PROBE_N_MIXES, PROBE_DEVICE_COPY = PROBE_N_MIXES } probe_mix;

typedef struct probe_pool probe_pool;

/* Starts `threads` - 1 helper threads (the caller is the last one). NULL when out of memory
 * or threads. */
probe_pool *probe_pool_new(int threads);
void probe_pool_free(probe_pool *p);
int probe_pool_threads(const probe_pool *p);
/* A probe ready to run: buffers of n f32 for the mix, filled with nonzero values (first touch by
 * the threads that use them) and run once to warm up. NULL when out of memory. */
typedef struct probe_run probe_run;
probe_run *probe_begin(probe_pool *p, probe_mix mix, int64_t n);
/* Runs the probe once; its effective bandwidth in GB/s (each buffer read or written once). */
double probe_gbps(probe_run *r);
/* Frees the buffers; false if the probe's last result was wrong. NULL gives false. */
bool probe_end(probe_run *r);
/* "copy", "a*b+c", "sum" and what they move: "1 read + 1 write", ... */
const char *probe_mix_name(probe_mix mix);
const char *probe_mix_what(probe_mix mix);

/* ---- Results ----------------------------------------------------------------------------- */

/* What the summary table and the plot show of a memory-bound workload. */
typedef struct bench_bandwidth {
    bool valid;
    char size[24];        /* "2^25", "4096x4096" */
    double fused_ms, eager_ms;
    double fused_host_ms; /* the fused run's host time, recording and launching included */
    double fused_bytes;   /* fewest bytes: inputs read once, outputs written once */
    double eager_bytes;   /* what the eager ops read and write, from the op list */
    probe_mix probe;
    double probe_gbps;
    double probe_target;  /* fused/probe must reach this (0: no target) */
    double traffic_target; /* speedup / traffic ratio must reach this (0: no target) */
    int fused_kernels, eager_kernels; /* from the fusion log; -1 if the device logs none */
    double untuned_ms, tuned_ms; /* fused with BURNC_AUTOTUNE=off / with decisions tuned just
                                    before (0: not measured) */
} bench_bandwidth;

typedef struct bench_result {
    bench_metric m[BENCH_MAX_METRICS];
    int n;
    char note[512];
    char summary[256]; /* one line for the latency part of the summary ("" if none) */
    bench_bandwidth bw;
} bench_result;

typedef struct bench_probe_entry {
    const char *workload;
    probe_mix mix;
    int64_t n;
    double gbps;
} bench_probe_entry;

enum { BENCH_MAX_PROBES = 16 };

typedef struct bench_ctx {
    burnc_device_t *dev;
    int reps;               /* timed repetitions; workloads report medians */
    bool autotune;          /* also compare fused runs tuned against BURNC_AUTOTUNE=off */
    int threads;            /* the device's thread count (BURNC_NUM_THREADS or all cores) */
    const char *self_exe;   /* this program, for the fresh-process measurements */
    probe_pool *probes;
    /* The device has a copy engine of its own (a GPU): its memory probe is a device copy of the
     * workload's size (burnc_device_copy_time) and the workloads take the GPU sizes. */
    bool device_copy;
    bench_probe_entry measured[BENCH_MAX_PROBES]; /* probes measured in this run, for the report */
    int n_measured;
} bench_ctx;

/* Returns 0, or nonzero after printing why it failed. */
typedef int (*bench_fn)(bench_ctx *ctx, bench_result *out);

/* ---- Helpers (bench.c) ------------------------------------------------------------------- */

double now_ns(void);
/* Sorts v in place. */
double median(double *v, int n);
double min_of(const double *v, int n);
void add_metric(bench_result *r, const char *name, double value, const char *unit, bench_target kind,
                double target);
bool metric_met(const bench_metric *m);
/* Prints burnc's last error after `what`; returns 1. */
int bench_error(const char *what);
/* Prints a message; returns 1. */
int bench_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The thread count the cpu device uses: BURNC_NUM_THREADS, else the cores this process may run
 * on (the same rule as the device). */
int device_thread_count(void);
/* "2^25" for powers of two, else the number. */
void format_count(char *out, size_t cap, int64_t n);

/* ---- burnc's log, captured (bench.c) ------------------------------------------------------ */

/* One fused group of a flush, as the "fusion" log reports it. */
typedef struct log_group {
    char ops[160]; /* the records' op names, space separated */
    int n_inputs;  /* -1 for an opaque record */
} log_group;

enum { LOG_MAX_GROUPS = 64 };

typedef struct log_capture {
    log_group groups[LOG_MAX_GROUPS];
    int n_groups;
    bool overflow;
    int compiled, disk_hits;  /* kernels compiled by LLVM / loaded from the disk cache */
    double compile_ms;        /* sum of the compile times the log reports */
    double llvm_load_ms;      /* the LLVM module's load time, if it was loaded */
} log_capture;

/* Sends burnc's log to `cap` (cleared first) until log_capture_end. Logging costs time: never
 * inside a timed region. */
void log_capture_begin(log_capture *cap);
void log_capture_end(void);

/* ---- Workloads ----------------------------------------------------------------------------- */

int run_record(bench_ctx *ctx, bench_result *out);    /* workloads.c */
int run_gelu(bench_ctx *ctx, bench_result *out);
int run_softmax(bench_ctx *ctx, bench_result *out);
int run_layer_norm(bench_ctx *ctx, bench_result *out);
int run_sum(bench_ctx *ctx, bench_result *out);
int run_colsum(bench_ctx *ctx, bench_result *out);
int run_bcast(bench_ctx *ctx, bench_result *out);
int run_small_ops(bench_ctx *ctx, bench_result *out);
int run_first_call(bench_ctx *ctx, bench_result *out); /* process.c */
int run_matmul_1024(bench_ctx *ctx, bench_result *out); /* matmul.c */
int run_matmul_2048(bench_ctx *ctx, bench_result *out);
int run_matmul_4096(bench_ctx *ctx, bench_result *out);
int run_matmul_gelu(bench_ctx *ctx, bench_result *out); /* gelu(A@B + bias), matmul.c */
int run_matmul_f32(bench_ctx *ctx, bench_result *out);  /* on a GPU: TFLOP/s at 4096^3, 8192^3 */
int run_matmul_tf32(bench_ctx *ctx, bench_result *out);
int run_matmul_bf16(bench_ctx *ctx, bench_result *out);
int run_matmul_f16(bench_ctx *ctx, bench_result *out);
int run_warm_start(bench_ctx *ctx, bench_result *out);

/* The ops a graph records, noted by the bench as it records them: eager mode runs one kernel per
 * op, which reads each of its distinct tensor inputs once and writes its output once. */
enum { TRACE_MAX_OPS = 32 };
typedef struct op_trace {
    char names[256]; /* op names as burnc records them (the fusion log's spelling), space separated */
    int n_ops;
    int n_inputs[TRACE_MAX_OPS]; /* distinct tensor inputs of each op */
    double eager_bytes;
    bool overflow;
} op_trace;

/* The gelu chain, shared by the workload and the fresh processes:
 * y = x * (erf(x / sqrt2) + 1) / 2 * w + b (Burn's custom-GELU example in elementary ops).
 * Notes its ops in tr unless tr is NULL. */
burnc_tensor_t *gelu_chain(op_trace *tr, burnc_tensor_t *x, burnc_tensor_t *w, burnc_tensor_t *b);
/* Checks every stride-th element of the gelu chain's result y against the chain computed in
 * double from x, w, b: returns the largest |y - exact| / (1e-5 + 1e-5 |exact|) (infinity for a
 * NaN); <= 1 passes. */
double gelu_check(const float *x, const float *w, const float *b, const float *y, int64_t n, int64_t stride);
/* A dense f32 copy of t in new host memory (NULL after printing why, on failure). */
float *read_host(burnc_tensor_t *t);

/* Hidden child mode: `burnc-bench --child-chain N [--device SPEC]` (process.c). */
int child_chain_main(const char *spec, int64_t n);

/* ---- Plot (plot.c) -------------------------------------------------------------------------- */

typedef struct plot_bar {
    const char *workload;
    const bench_bandwidth *bw;
} plot_bar;

/* An SVG of effective bandwidth, fused and eager, per workload against its probe. */
int write_plot(const char *path, const char *title, const plot_bar *bars, int n);

#endif
