/* Autotune for CUDA kernels (autotune/autotune.h): which code options (cg_ptx_options) run a
 * launch. Each option set is its own compiled kernel.
 *
 * Two families, by the kernel's shape:
 *   cuda.elementwise   "default" (the generator's: 256 threads x 4 positions) or other blocks
 *                      of 128..1024 threads x 2, 4 or 8 positions per thread (8: two 16-byte
 *                      vectors of f32 in flight per input, for chains whose only large input
 *                      is one tensor, as a broadcast chain);
 *   cuda.reduce        "default" (8 rows per block, or 256 threads per row), rows (warps) per
 *                      block 2/4/16/32 for rows of one leaf or less, or 128/512/1024 threads for
 *                      longer rows (one block per row: fewer threads leave more blocks per SM
 *                      for rows kept in shared memory, more finish a row's phases sooner).
 * No candidate repeats the default, so a tuning run compares schedules that differ.
 * None changes a result: the combine order is kernel.h's whatever the schedule, and every
 * option computes the same IEEE operations.
 *
 * The key is the kernel's structure hash with its row count and row length in buckets; the
 * fingerprint names the GPU (model, compute capability, SM count), the driver, LLVM and burnc.
 * Tuning (BURNC_AUTOTUNE=on, a miss) runs on private device buffers shaped like the launch's,
 * filled with finite values, never on the user's data, timed with events. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune.h"
#include "burnc_config.h"
#include "cu.h"
#include "kernel_io.h"

enum { N_EW = 10, N_RED = 8, N_MAX = 10, RUNS_PER_SAMPLE = 5 };
static const char *const ew_names[N_EW] = {"default", "b128 i2", "b128 i4", "b128 i8", "b256 i2",
                                          "b256 i8", "b512 i4", "b512 i8", "b1024 i4", "b1024 i8"};
static const char *const red_names[N_RED] = {"default", "r2", "r4", "r16", "r32", "b128", "b512", "b1024"};
static at_family fam_elementwise = {"cuda.elementwise", N_EW, ew_names};
static at_family fam_reduce = {"cuda.reduce", N_RED, red_names};

static bool is_reduce(const kir_kernel *k) { return k->n_stages > 0 || k->n_outer < k->rank; }

static cg_ptx_options options_of(const cuda_device *cd, bool reduce, int c)
{
    /* [c - 1]: the candidates after "default", as the names say */
    static const int ew_block[N_EW - 1] = {128, 128, 128, 256, 256, 512, 512, 1024, 1024},
                     ew_items[N_EW - 1] = {2, 4, 8, 2, 8, 4, 8, 4, 8}, rows[4] = {2, 4, 16, 32},
                     blocks[3] = {128, 512, 1024};
    cg_ptx_options o = {.sm = cd->cc};
    if (c <= 0)
        return o;
    if (!reduce) {
        o.block = ew_block[c - 1];
        o.items = ew_items[c - 1];
    } else if (c <= 4) {
        o.rows_per_block = rows[c - 1];
    } else {
        o.block = blocks[c - 5];
    }
    return o;
}

const char *cuda_tune_fingerprint(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    if (!cd->tune_fingerprint[0])
        snprintf(cd->tune_fingerprint, sizeof cd->tune_fingerprint,
                 "cuda %s | sm_%d | %d SMs | driver %d | llvm %s | burnc %s", cd->gpu_name, cd->cc, cd->sms,
                 cd->driver_version,
#ifdef BURNC_LLVM_VERSION
                 BURNC_LLVM_VERSION,
#else
                 "none",
#endif
                 BURNC_VERSION);
    return cd->tune_fingerprint;
}

static void shape_of(const kir_kernel *k, const int64_t *ext, int64_t *rows, int64_t *len)
{
    *rows = *len = 1;
    for (int d = 0; d < k->rank; d++)
        *(d < k->n_outer ? rows : len) *= ext[d];
}

/* ---- Timing a candidate on private buffers ---- */

typedef struct bench {
    rt_device *dev;
    const kir_kernel *ir;
    uint64_t key;
    kir_args args;
    int64_t in_off[KIR_MAX_INPUTS], out_off[KIR_MAX_OUTPUTS];
    rt_buffer *in_buf[KIR_MAX_INPUTS], *out_buf[KIR_MAX_OUTPUTS];
    CUevent ev[2];
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

/* Finite values in [-2, 2) (integers in [-100, 100)), so no candidate meets NaN slow paths. */
static void fill(void *p, burnc_dtype_t dt, int64_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15u + 1;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double v = (double)(s >> 11) * 0x1p-53 * 4 - 2;
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
        if (b->in_buf[i])
            rt_pool_free(b->dev, b->in_buf[i]);
    for (int o = 0; o < KIR_MAX_OUTPUTS; o++)
        if (b->out_buf[o])
            rt_pool_free(b->dev, b->out_buf[o]);
    for (int i = 0; i < 2; i++)
        if (b->ev[i])
            cuda_dev(b->dev)->cu->EventDestroy(b->ev[i]);
}

static bool bench_init(bench *b, rt_device *dev, const kir_kernel *k, uint64_t key, const kir_args *a)
{
    memset(b, 0, sizeof *b);
    b->dev = dev, b->ir = k, b->key = key, b->args = *a;
    const cuda_driver *cu = cuda_dev(dev)->cu;
    if (cu->EventCreate(&b->ev[0], CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
        cu->EventCreate(&b->ev[1], CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        return false;
    for (int s = 0; s < k->n_inputs + k->n_outputs; s++) {
        bool out = s >= k->n_inputs;
        int i = out ? s - k->n_inputs : s;
        burnc_dtype_t dt = out ? k->outputs[i].dtype : k->inputs[i].dtype;
        int64_t off = out ? a->out_offsets[i] : a->in_offsets[i], lo, hi;
        span(k, a->extents, off, (out ? a->out_strides : a->in_strides) + (size_t)i * (size_t)k->rank, &lo, &hi);
        size_t bytes = (size_t)(hi - lo + 1) * burnc_dtype_size(dt);
        rt_buffer **buf = out ? &b->out_buf[i] : &b->in_buf[i];
        void *host = malloc(bytes);
        bool ok = host && rt_pool_alloc(dev, bytes, buf) == BURNC_OK;
        if (ok) {
            fill(host, dt, hi - lo + 1, (uint64_t)s);
            ok = dev->be->write(dev, *buf, 0, host, bytes) == BURNC_OK;
        }
        free(host);
        if (!ok)
            return false;
        *(out ? &b->out_off[i] : &b->in_off[i]) = off - lo;
    }
    b->args.in_offsets = b->in_off;
    b->args.out_offsets = b->out_off;
    return true;
}

static bool record_event(rt_device *dev, CUevent ev)
{
    cuda_device *cd = cuda_dev(dev);
    mtx_lock(&cd->lock);
    bool ok = cuda_batch_submit_locked(dev) == BURNC_OK && cd->cu->EventRecord(ev, cd->stream) == CUDA_SUCCESS;
    mtx_unlock(&cd->lock);
    return ok;
}

/* ms per run of candidate c: RUNS_PER_SAMPLE launches between two events. */
static double time_candidate(void *user, int c)
{
    bench *b = user;
    cuda_device *cd = cuda_dev(b->dev);
    cg_ptx_options opt = options_of(cd, is_reduce(b->ir), c);
    rt_kernel *k = NULL;
    if (cuda_kernel_get(b->dev, b->ir, b->key, &opt, &k) != BURNC_OK || !record_event(b->dev, b->ev[0]))
        return -1;
    for (int r = 0; r < RUNS_PER_SAMPLE; r++)
        if (cuda_kernel_run(b->dev, k, &b->args, b->in_buf, b->out_buf) != BURNC_OK)
            return -1;
    float ms = 0;
    if (!record_event(b->dev, b->ev[1]) || cd->cu->EventSynchronize(b->ev[1]) != CUDA_SUCCESS ||
        cd->cu->EventElapsedTime(&ms, b->ev[0], b->ev[1]) != CUDA_SUCCESS)
        return -1;
    return (double)ms / RUNS_PER_SAMPLE;
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
        snprintf(line, n, "cuda:%s", text);
        at_record_line(line);
        free(line);
    }
    free(text);
}

burnc_status_t cuda_tune_choose(rt_device *dev, const kir_kernel *k, uint64_t key, const kir_args *a, bool may_tune,
                                cg_ptx_options *out, at_outcome *how)
{
    cuda_device *cd = cuda_dev(dev);
    int64_t rows, len;
    shape_of(k, a->extents, &rows, &len);
    bool reduce = is_reduce(k);
    const at_family *fam = reduce ? &fam_reduce : &fam_elementwise;
    bool valid[N_MAX];
    for (int c = 0; c < fam->n; c++)
        /* rows per block matter for rows of one leaf or less, the block size for longer ones */
        valid[c] = !reduce || c == 0 || (c <= 4) == (len <= KIR_LEAF);
    at_buckets bk = at_get_buckets();
    char akey[160];
    snprintf(akey, sizeof akey, "k%016llx r%lld l%lld", (unsigned long long)key, (long long)at_bucket(rows, bk),
             (long long)at_bucket(len, bk));
    at_query q = {.fingerprint = cuda_tune_fingerprint(dev), .family = fam, .key = akey, .heuristic = 0,
                  .valid = valid};
    record_launch(k, a);
    bench b;
    bool timing = may_tune && at_get_mode() == AT_MODE_ON;
    if (timing && !bench_init(&b, dev, k, key, a)) {
        bench_free(&b);
        timing = false;
    }
    int c = at_decide(&q, timing ? time_candidate : NULL, timing ? &b : NULL, how);
    if (timing)
        bench_free(&b);
    int forced = cd->forced_candidate - 1;
    if (forced >= 0 && forced < fam->n && valid[forced])
        c = forced;
    *out = options_of(cd, reduce, c);
    return BURNC_OK;
}

/* burnc-tune --file: a recorded kernel tuned for its recorded layout. */
burnc_status_t cuda_tune_kernel(rt_device *dev, const kir_kernel *k, const kir_args *args, at_outcome *out)
{
    uint64_t key = kir_hash(k);
    rt_kernel *compiled;
    cg_ptx_options opt = {.sm = cuda_dev(dev)->cc};
    RT_TRY(cuda_kernel_get(dev, k, key, &opt, &compiled));
    at_outcome o;
    RT_TRY(cuda_tune_choose(dev, k, key, args, true, &opt, &o));
    if (out)
        *out = o;
    return BURNC_OK;
}

bool cuda_test_force_candidate(rt_device *dev, int c)
{
    if (c < -1 || c >= N_MAX)
        return false;
    cuda_dev(dev)->forced_candidate = c + 1;
    return true;
}
