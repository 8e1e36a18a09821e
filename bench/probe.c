/* Memory probes: what plain C loops reach on this machine for each read/write mix, with the
 * device's thread count, measured in the same run as the workloads they judge (TARGETS.md).
 * Built with -O3 and without the loop-to-memcpy rewrite (bench/meson.build): a library memcpy
 * uses non-temporal stores for large copies, which no fused kernel does, so it would measure
 * another thing than the write-allocate traffic a kernel's plain stores cause. Each kernel is
 * cloned per ISA level so it runs with the widest vectors the host has, as JIT code does. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

/* ---- A fixed pool of threads that each take one contiguous chunk ---- */

typedef struct probe_job {
    probe_mix mix;
    int64_t n;
    float *a, *b, *c, *d;
    bool fill; /* fill the buffers (first touch by the thread that will use the chunk) */
    double partial[256]; /* per-thread sums of the read probe */
} probe_job;

typedef struct helper_arg helper_arg;

struct probe_pool {
    int n; /* threads, the caller included */
    pthread_t *helpers;
    helper_arg *args;
    pthread_mutex_t lock;
    pthread_cond_t ready_cv;
    bool ready;
    pthread_barrier_t start, done;
    probe_job *job; /* NULL asks the helpers to leave */
};

enum { PROBE_MAX_THREADS = 256, CHUNK_ALIGN = 64 };

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PROBE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PROBE_CLONES
#endif

PROBE_CLONES static void copy_range(float *restrict dst, const float *restrict src, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++)
        dst[i] = src[i];
}

PROBE_CLONES static void fma_range(float *restrict d, const float *restrict a, const float *restrict b,
                                   const float *restrict c, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++)
        d[i] = a[i] * b[i] + c[i];
}

/* Many independent accumulators: a float sum vectorizes only when written as lanes, and
 * several vectors of them hide the add latency. */
PROBE_CLONES static double sum_range(const float *restrict a, int64_t lo, int64_t hi)
{
    enum { LANES = 64 };
    float acc[LANES] = {0};
    int64_t i = lo;
    for (; i + LANES <= hi; i += LANES)
        for (int j = 0; j < LANES; j++)
            acc[j] += a[i + j];
    double s = 0;
    for (; i < hi; i++)
        s += a[i];
    for (int j = 0; j < LANES; j++)
        s += acc[j];
    return s;
}

/* Nonzero values in [0.5, 1.5) from the index: no zero pages, nothing constant. */
static void fill_range(float *p, int64_t lo, int64_t hi, uint32_t salt)
{
    for (int64_t i = lo; i < hi; i++) {
        uint32_t h = (uint32_t)i * 2654435761u ^ salt;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = 0.5f + (float)(h >> 8) * (1.0f / 16777216.0f);
    }
}

static void run_chunk(probe_job *j, int t, int nthreads)
{
    int64_t per = (j->n + nthreads - 1) / nthreads;
    per = (per + CHUNK_ALIGN - 1) / CHUNK_ALIGN * CHUNK_ALIGN;
    int64_t lo = per * t < j->n ? per * t : j->n;
    int64_t hi = lo + per < j->n ? lo + per : j->n;
    if (j->fill) {
        float *bufs[4] = {j->a, j->b, j->c, j->d};
        for (int k = 0; k < 4; k++)
            if (bufs[k])
                fill_range(bufs[k], lo, hi, 0x9e3779b9u * (uint32_t)(k + 1));
        return;
    }
    switch (j->mix) {
    case PROBE_COPY: copy_range(j->b, j->a, lo, hi); break;
    case PROBE_FMA: fma_range(j->d, j->a, j->b, j->c, lo, hi); break;
    case PROBE_READ: j->partial[t] = sum_range(j->a, lo, hi); break;
    default: break;
    }
}

struct helper_arg {
    probe_pool *pool;
    int index;
};

static void *helper_main(void *arg)
{
    helper_arg *h = arg;
    probe_pool *p = h->pool;
    /* wait until the pool knows how many threads it got and has sized its barriers */
    pthread_mutex_lock(&p->lock);
    while (!p->ready)
        pthread_cond_wait(&p->ready_cv, &p->lock);
    pthread_mutex_unlock(&p->lock);
    for (;;) {
        pthread_barrier_wait(&p->start);
        probe_job *j = p->job;
        if (!j)
            return NULL;
        run_chunk(j, h->index, p->n);
        pthread_barrier_wait(&p->done);
    }
}

probe_pool *probe_pool_new(int threads)
{
    if (threads < 1)
        threads = 1;
    if (threads > PROBE_MAX_THREADS)
        threads = PROBE_MAX_THREADS;
    probe_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->helpers = calloc((size_t)threads, sizeof *p->helpers);
    p->args = calloc((size_t)threads, sizeof *p->args);
    if (!p->helpers || !p->args) {
        free(p->args);
        free(p->helpers);
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->ready_cv, NULL);
    /* A helper that fails to start leaves a smaller pool (probe_pool_threads says so): the
     * barriers are sized once every helper that could start has. */
    int started = 0;
    for (int i = 0; i < threads - 1; i++) {
        p->args[started] = (helper_arg){.pool = p, .index = started + 1};
        if (pthread_create(&p->helpers[started], NULL, helper_main, &p->args[started]) != 0)
            break;
        started++;
    }
    p->n = started + 1;
    pthread_barrier_init(&p->start, NULL, (unsigned)p->n);
    pthread_barrier_init(&p->done, NULL, (unsigned)p->n);
    pthread_mutex_lock(&p->lock);
    p->ready = true;
    pthread_cond_broadcast(&p->ready_cv);
    pthread_mutex_unlock(&p->lock);
    return p;
}

void probe_pool_free(probe_pool *p)
{
    if (!p)
        return;
    p->job = NULL;
    pthread_barrier_wait(&p->start);
    for (int i = 0; i < p->n - 1; i++)
        pthread_join(p->helpers[i], NULL);
    pthread_barrier_destroy(&p->start);
    pthread_barrier_destroy(&p->done);
    pthread_cond_destroy(&p->ready_cv);
    pthread_mutex_destroy(&p->lock);
    free(p->args);
    free(p->helpers);
    free(p);
}

int probe_pool_threads(const probe_pool *p) { return p->n; }

/* Runs one job on every thread, the caller included; returns the wall time in ns. */
static double pool_run(probe_pool *p, probe_job *j)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    p->job = j;
    if (p->n > 1)
        pthread_barrier_wait(&p->start);
    run_chunk(j, 0, p->n);
    if (p->n > 1)
        pthread_barrier_wait(&p->done);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
}

static int mix_buffers(probe_mix mix)
{
    switch (mix) {
    case PROBE_COPY: return 2;
    case PROBE_FMA: return 4;
    default: return 1;
    }
}

/* Recomputes element i the way the probe did; the result must match bit for bit. */
static bool check_job(const probe_job *j, int nthreads)
{
    int64_t i = j->n - 1;
    switch (j->mix) {
    case PROBE_COPY: return j->b[0] == j->a[0] && j->b[i] == j->a[i];
    case PROBE_FMA: return j->d[i] == j->a[i] * j->b[i] + j->c[i];
    case PROBE_READ: {
        double s = 0;
        for (int t = 0; t < nthreads; t++)
            s += j->partial[t];
        /* values lie in [0.5, 1.5): the sum must too, scaled */
        return s >= 0.5 * (double)j->n && s <= 1.5 * (double)j->n;
    }
    default: return false;
    }
}

struct probe_run {
    probe_pool *pool;
    probe_job job;
    double bytes; /* moved by one run: each buffer read or written once */
};

probe_run *probe_begin(probe_pool *p, probe_mix mix, int64_t n)
{
    if (n < 1 || (unsigned)mix >= PROBE_N_MIXES)
        return NULL;
    probe_run *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    int nbuf = mix_buffers(mix);
    float *bufs[4] = {NULL, NULL, NULL, NULL};
    size_t bytes = ((size_t)n * sizeof(float) + 4095) / 4096 * 4096;
    for (int k = 0; k < nbuf; k++)
        if (!(bufs[k] = aligned_alloc(4096, bytes))) {
            for (int i = 0; i < k; i++)
                free(bufs[i]);
            free(r);
            return NULL;
        }
    r->pool = p;
    r->bytes = (double)n * sizeof(float) * (double)nbuf;
    r->job = (probe_job){.mix = mix, .n = n, .a = bufs[0], .b = bufs[1], .c = bufs[2], .d = bufs[3], .fill = true};
    pool_run(p, &r->job); /* first touch, in parallel, by the thread that later uses each chunk */
    r->job.fill = false;
    pool_run(p, &r->job); /* warm-up */
    return r;
}

/* GB/s: bytes per ns */
double probe_gbps(probe_run *r) { return r->bytes / pool_run(r->pool, &r->job); }

bool probe_end(probe_run *r)
{
    if (!r)
        return false;
    bool ok = check_job(&r->job, r->pool->n);
    free(r->job.a);
    free(r->job.b);
    free(r->job.c);
    free(r->job.d);
    free(r);
    return ok;
}

const char *probe_mix_name(probe_mix mix)
{
    static const char *names[] = {"copy", "a*b+c", "sum", "device copy"};
    return (unsigned)mix <= PROBE_DEVICE_COPY ? names[mix] : "?";
}

const char *probe_mix_what(probe_mix mix)
{
    static const char *what[] = {"1 read + 1 write", "3 reads + 1 write", "1 read",
                                 "the device's copy engine, 1 read + 1 write"};
    return (unsigned)mix <= PROBE_DEVICE_COPY ? what[mix] : "?";
}
