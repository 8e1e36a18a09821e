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

#include "autotune.h"
#include "burnc_config.h"
#include "codegen/kcache.h"
#include "cpu.h"
#include "kernel_io.h"

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
    snprintf(fingerprint, sizeof fingerprint, "cpu %s | %ld cores | %d threads | llvm %s | burnc %s",
             kc_host_fingerprint(), cores > 0 ? cores : 1, cpu_thread_count_default(),
#ifdef BURNC_LLVM_VERSION
             BURNC_LLVM_VERSION,
#else
             "none",
#endif
             BURNC_VERSION);
}

const char *cpu_tune_fingerprint(void)
{
    call_once(&init_once, init);
    return fingerprint;
}

/* ---- Keys ---- */

static void shape_of(const kir_kernel *k, const int64_t *ext, int64_t *rows, int64_t *len)
{
    *rows = *len = 1;
    for (int d = 0; d < k->rank; d++)
        *(d < k->n_outer ? rows : len) *= ext[d];
}

static bool is_reduce(const kir_kernel *k) { return k->n_stages > 0 || k->n_outer < k->rank; }

/* ---- Timing a candidate on private buffers ---- */

typedef struct bench {
    rt_device *dev;
    const kir_kernel *ir;
    uint64_t key;
    kir_args args; /* over the private buffers */
    int64_t in_off[KIR_MAX_INPUTS], out_off[KIR_MAX_OUTPUTS];
    void *in_buf[KIR_MAX_INPUTS], *out_buf[KIR_MAX_OUTPUTS];
} bench;

/* The element span a slot's offset and strides reach over the extents: [lo, hi]. */
static void span(const kir_kernel *k, const int64_t *ext, int64_t off, const int64_t *st, int64_t *lo, int64_t *hi)
{
    *lo = *hi = off;
    for (int d = 0; d < k->rank; d++) {
        if (ext[d] == 0) {
            *lo = *hi = off;
            return;
        }
        int64_t reach = (ext[d] - 1) * st[d];
        *(reach < 0 ? lo : hi) += reach;
    }
}

static void fill(void *p, burnc_dtype_t dt, int64_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15u + 1;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double v = (double)(s >> 11) * 0x1p-53 * 4 - 2; /* [-2, 2): finite, normal, no NaN */
        switch (dt) {
        case BURNC_DTYPE_F32: ((float *)p)[i] = (float)v; break;
        case BURNC_DTYPE_F64: ((double *)p)[i] = v; break;
        case BURNC_DTYPE_F16: ((uint16_t *)p)[i] = burnc_f32_to_f16((float)v); break;
        case BURNC_DTYPE_BF16: ((uint16_t *)p)[i] = burnc_f32_to_bf16((float)v); break;
        case BURNC_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)(s % 200) - 100; break;
        case BURNC_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)(s % 200) - 100; break;
        case BURNC_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)s; break;
        default: ((uint8_t *)p)[i] = (uint8_t)(s & 1); break;
        }
    }
}

static void bench_free(bench *b)
{
    for (int i = 0; i < KIR_MAX_INPUTS; i++)
        free(b->in_buf[i]);
    for (int o = 0; o < KIR_MAX_OUTPUTS; o++)
        free(b->out_buf[o]);
}

/* Private buffers covering what the launch's layout reaches, offsets moved to match. */
static bool bench_init(bench *b, rt_device *dev, const kir_kernel *k, uint64_t key, const kir_args *a)
{
    memset(b, 0, sizeof *b);
    b->dev = dev, b->ir = k, b->key = key, b->args = *a;
    for (int s = 0; s < k->n_inputs + k->n_outputs; s++) {
        bool out = s >= k->n_inputs;
        int i = out ? s - k->n_inputs : s;
        burnc_dtype_t dt = out ? k->outputs[i].dtype : k->inputs[i].dtype;
        int64_t off = out ? a->out_offsets[i] : a->in_offsets[i], lo, hi;
        span(k, a->extents, off, (out ? a->out_strides : a->in_strides) + (size_t)i * (size_t)k->rank, &lo, &hi);
        size_t bytes = (size_t)(hi - lo + 1) * burnc_dtype_size(dt);
        void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!p)
            return false;
        fill(p, dt, hi - lo + 1, (uint64_t)s);
        *(out ? &b->out_buf[i] : &b->in_buf[i]) = p;
        *(out ? &b->out_off[i] : &b->in_off[i]) = off - lo;
    }
    b->args.inputs = b->in_buf;
    b->args.outputs = b->out_buf;
    b->args.in_offsets = b->in_off;
    b->args.out_offsets = b->out_off;
    return true;
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
    if (cpu_kernel_get(&cd->kernels, b->ir, b->key, p.width, &k) != BURNC_OK)
        return -1;
    b->args.stream = cpu_stream_bits(b->ir, p.stream);
    int runs = 0;
    double t0 = now_ms(), t;
    do {
        if (cpu_run_kernel(cd->threads, k, &b->args, &p) != BURNC_OK)
            return -1;
        runs++;
        t = now_ms() - t0;
    } while (t < 1.0 && runs < 1000);
    return t / runs;
}

/* ---- Decisions ---- */

static void record_launch(const kir_kernel *k, const kir_args *a)
{
    const char *rec = getenv("BURNC_AUTOTUNE_RECORD");
    if (!rec || !*rec)
        return;
    kir_layout l = {.n_scalars = k->n_scalars};
    memcpy(l.extents, a->extents, (size_t)k->rank * sizeof *l.extents);
    memcpy(l.in_offsets, a->in_offsets, (size_t)k->n_inputs * sizeof *l.in_offsets);
    memcpy(l.in_strides, a->in_strides, (size_t)(k->n_inputs * k->rank) * sizeof *l.in_strides);
    memcpy(l.out_offsets, a->out_offsets, (size_t)k->n_outputs * sizeof *l.out_offsets);
    memcpy(l.out_strides, a->out_strides, (size_t)(k->n_outputs * k->rank) * sizeof *l.out_strides);
    if (k->n_scalars > 0 && k->n_scalars <= 64)
        memcpy(l.scalars, a->scalars, (size_t)k->n_scalars * sizeof *l.scalars);
    char *text = kir_encode(k, &l);
    if (!text)
        return;
    size_t n = strlen(text) + 8;
    char *line = malloc(n);
    if (line) {
        snprintf(line, n, "cpu:%s", text);
        at_record_line(line);
        free(line);
    }
    free(text);
}

/* Whether an output reaches beyond the last-level cache: the heuristic's reason to stream. */
static bool large_output(const kir_kernel *k, const kir_args *a)
{
    for (int o = 0; o < k->n_outputs; o++) {
        int64_t lo, hi;
        span(k, a->extents, a->out_offsets[o], a->out_strides + (size_t)o * (size_t)k->rank, &lo, &hi);
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
    shape_of(k, a->extents, &rows, &len);
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
    at_buckets bk = at_get_buckets();
    char akey[160];
    snprintf(akey, sizeof akey, "k%016llx r%lld l%lld", (unsigned long long)key, (long long)at_bucket(rows, bk),
             (long long)at_bucket(len, bk));
    at_query q = {.fingerprint = fingerprint, .family = is_reduce(k) ? &fam_reduce : &fam_elementwise,
                  .key = akey, .heuristic = heuristic, .valid = valid};
    record_launch(k, a);
    bench b;
    bool timing = may_tune && at_get_mode() == AT_MODE_ON;
    if (timing) {
        cpu_queue_drain(cpu_dev(dev)->queue);
        if (!bench_init(&b, dev, k, key, a)) {
            bench_free(&b);
            timing = false;
        }
    }
    int c = at_decide(&q, timing ? time_candidate : NULL, timing ? &b : NULL, how);
    if (timing)
        bench_free(&b);
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
