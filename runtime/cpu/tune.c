/* Autotune for compiled CPU kernels (autotune/autotune.h): which element-store vector width,
 * task size and store kind run a launch.
 *
 * Two families, by the kernel's shape: "cpu.elementwise" (no reduced axes) and "cpu.reduce"
 * (rows with stages: the task size also sets how many leaves one task combines for few long
 * rows). Both choose among the same parameters:
 *   w8 w16 w32      lanes per vector step of the element stores (a code parameter: each width
 *                   is its own compiled kernel);
 *   t16384 t65536 t262144   positions per task of the thread pool (a task size at least the
 *                   whole launch runs it inline, on one thread);
 *   s0 s1           plain or non-temporal stores for the element outputs.
 * None changes a result: the combine order is fixed by kernel.h whatever the split, and every
 * width computes the same IEEE operations.
 *
 * The key is the kernel's structure hash (which covers dtypes and stride classes, i.e. layout)
 * with its row count and row length rounded into buckets. The heuristic is what burnc did before
 * autotune: the host's widest vector (16 lanes with AVX-512), 65536 positions per task, and
 * non-temporal stores for outputs larger than the last-level cache.
 *
 * Tuning (BURNC_AUTOTUNE=on, a miss) runs on private buffers shaped like the launch's, filled
 * with finite values, never on the user's data; the queue is drained first so the pool is free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codegen/kcache.h"
#include "cpu.h"
#include "launch.h"

enum { N_WIDTHS = 3, N_TASKS = 3, N_CANDS = N_WIDTHS * N_TASKS * 2 };
static const int WIDTHS[N_WIDTHS] = {8, 16, 32};
static const int64_t TASKS[N_TASKS] = {1 << 14, 1 << 16, 1 << 18};

static char cand_names[N_CANDS][32];
static const char *cand_ptrs[N_CANDS];
static at_family fam_elementwise = {"cpu.elementwise", N_CANDS, cand_ptrs};
static at_family fam_reduce = {"cpu.reduce", N_CANDS, cand_ptrs};

static once_flag init_once = ONCE_FLAG_INIT;
static size_t llc_bytes; /* outputs beyond it are read back from memory whatever the stores did */
static char fingerprint[512];

static cpu_params params_of(int c)
{
    return (cpu_params){.width = WIDTHS[c / (N_TASKS * 2)], .task_work = TASKS[c / 2 % N_TASKS], .stream = c % 2};
}

static int index_of(int width, int64_t task, bool stream)
{
    int w = 0, t = 0;
    while (w < N_WIDTHS - 1 && WIDTHS[w] != width)
        w++;
    while (t < N_TASKS - 1 && TASKS[t] != task)
        t++;
    return (w * N_TASKS + t) * 2 + stream;
}

static void init(void)
{
    for (int c = 0; c < N_CANDS; c++) {
        cpu_params p = params_of(c);
        snprintf(cand_names[c], sizeof cand_names[c], "w%d t%lld s%d", p.width, (long long)p.task_work, p.stream);
        cand_ptrs[c] = cand_names[c];
    }
    llc_bytes = (size_t)cpu_cache_size(3);
    /* The host (CPUID: model and ISA features), its core count, the pool's size (what the
     * tuned split depends on) and the compiler. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(fingerprint, sizeof fingerprint, "cpu %s | %ld cores | %d threads | " AT_LLVM_BURNC,
             kc_host_fingerprint(), cores > 0 ? cores : 1, cpu_thread_count_default());
}

const char *cpu_tune_fingerprint(void)
{
    call_once(&init_once, init);
    return fingerprint;
}

/* ---- Timing a candidate on private buffers ---- */

typedef struct bench {
    rt_device *dev;
    at_launch l;
    void *in_buf[KIR_MAX_INPUTS], *out_buf[KIR_MAX_OUTPUTS];
} bench;

static bool bench_put(void *user, bool out, int i, void *host, size_t bytes)
{
    (void)bytes;
    bench *b = user;
    (out ? b->out_buf : b->in_buf)[i] = host;
    return true;
}

static bool bench_init(void *user)
{
    bench *b = user;
    cpu_queue_drain(cpu_dev(b->dev)->queue); /* the pool must be free to time on it */
    if (!at_launch_private(&b->l, bench_put, b))
        return false;
    b->l.args.inputs = b->in_buf;
    b->l.args.outputs = b->out_buf;
    return true;
}

static void bench_free(void *user)
{
    bench *b = user;
    for (int i = 0; i < KIR_MAX_INPUTS; i++)
        free(b->in_buf[i]);
    for (int o = 0; o < KIR_MAX_OUTPUTS; o++)
        free(b->out_buf[o]);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

uint32_t cpu_stream_bits(const kir_kernel *k, bool stream)
{
    return stream ? (k->n_outputs >= 32 ? ~0u : (1u << k->n_outputs) - 1) : 0;
}

/* One timed run of candidate c (repeated up to ~1 ms for small kernels), in ms per run. */
static double time_candidate(void *user, int c)
{
    bench *b = user;
    cpu_params p = params_of(c);
    rt_kernel *k = NULL;
    cpu_device *cd = cpu_dev(b->dev);
    if (cpu_kernel_get(&cd->kernels, b->l.ir, b->l.key, p.width, &k) != BURNC_OK)
        return -1;
    b->l.args.stream = cpu_stream_bits(b->l.ir, p.stream);
    int runs = 0;
    double t0 = now_ms(), t;
    do {
        if (cpu_run_kernel(cd->threads, k, &b->l.args, &p) != BURNC_OK)
            return -1;
        runs++;
        t = now_ms() - t0;
    } while (t < 1.0 && runs < 1000);
    return t / runs;
}

static const at_bench cpu_bench = {bench_init, time_candidate, bench_free};

/* ---- Decisions ---- */

/* Whether an output reaches beyond the last-level cache: the heuristic's reason to stream. */
static bool large_output(const kir_kernel *k, const kir_args *a)
{
    for (int o = 0; o < k->n_outputs; o++) {
        int64_t lo, hi;
        at_launch_span(k, a->extents, a->out_offsets[o], a->out_strides + (size_t)o * (size_t)k->rank, &lo, &hi);
        if ((size_t)(hi - lo + 1) * burnc_dtype_size(k->outputs[o].dtype) >= llc_bytes)
            return true;
    }
    return false;
}

burnc_status_t cpu_tune_choose(rt_device *dev, const kir_kernel *k, uint64_t key, const kir_args *a,
                               bool may_tune, cpu_params *out, at_outcome *how)
{
    call_once(&init_once, init);
    int64_t rows, len;
    at_launch_rows(k, a->extents, &rows, &len);
    bool large = large_output(k, a);
    int default_width = cpu_default_width();
    int heuristic = index_of(default_width, 1 << 16, large);
    bool valid[N_CANDS];
    int64_t work = rows * len;
    for (int c = 0; c < N_CANDS; c++) {
        cpu_params p = params_of(c);
        int t = c / 2 % N_TASKS;
        /* a larger task than one that already holds the whole launch runs the same way */
        valid[c] = (t == 0 || TASKS[t - 1] < work) && !(p.stream && !k->n_outputs);
    }
    char akey[160];
    at_launch_key(akey, sizeof akey, key, rows, len);
    at_query q = {.fingerprint = fingerprint, .family = at_launch_is_reduce(k) ? &fam_reduce : &fam_elementwise,
                  .key = akey, .heuristic = heuristic, .valid = valid};
    at_launch_record("cpu", k, a);
    bench b = {.dev = dev, .l = {.ir = k, .key = key, .user = a}};
    int c = at_launch_decide(&q, may_tune, &cpu_bench, &b, how);
    *out = params_of(c);
    return BURNC_OK;
}

/* burnc-tune --file: a recorded kernel tuned for its recorded layout. */
burnc_status_t cpu_tune_kernel(rt_device *dev, const kir_kernel *k, const kir_args *args, at_outcome *out)
{
    uint64_t key = kir_hash(k);
    rt_kernel *compiled;
    RT_TRY(cpu_kernel_get(&cpu_dev(dev)->kernels, k, key, 0, &compiled));
    cpu_params p;
    at_outcome o;
    RT_TRY(cpu_tune_choose(dev, k, key, args, true, &p, &o));
    if (out)
        *out = o;
    return BURNC_OK;
}
