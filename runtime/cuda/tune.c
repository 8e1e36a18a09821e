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

#include "cu.h"
#include "launch.h"

enum { N_EW = 10, N_RED = 8, N_MAX = 10, RUNS_PER_SAMPLE = 5 };
static const char *const ew_names[N_EW] = {"default", "b128 i2", "b128 i4", "b128 i8", "b256 i2",
                                          "b256 i8", "b512 i4", "b512 i8", "b1024 i4", "b1024 i8"};
static const char *const red_names[N_RED] = {"default", "r2", "r4", "r16", "r32", "b128", "b512", "b1024"};
static at_family fam_elementwise = {"cuda.elementwise", N_EW, ew_names};
static at_family fam_reduce = {"cuda.reduce", N_RED, red_names};

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
                 "cuda %s | sm_%d | %d SMs | driver %d | " AT_LLVM_BURNC, cd->gpu_name, cd->cc, cd->sms,
                 cd->driver_version);
    return cd->tune_fingerprint;
}

/* ---- Timing a candidate on private buffers ---- */

typedef struct bench {
    rt_device *dev;
    at_launch l;
    rt_buffer *in_buf[KIR_MAX_INPUTS], *out_buf[KIR_MAX_OUTPUTS];
    CUevent ev[2];
} bench;

static void bench_free(void *user)
{
    bench *b = user;
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

/* A private device buffer holding the host copy. */
static bool bench_put(void *user, bool out, int i, void *host, size_t bytes)
{
    bench *b = user;
    rt_buffer **buf = out ? &b->out_buf[i] : &b->in_buf[i];
    bool ok = rt_pool_alloc(b->dev, bytes, buf) == BURNC_OK &&
              b->dev->be->write(b->dev, *buf, 0, host, bytes) == BURNC_OK;
    free(host);
    return ok;
}

static bool bench_init(void *user)
{
    bench *b = user;
    const cuda_driver *cu = cuda_dev(b->dev)->cu;
    return cu->EventCreate(&b->ev[0], CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
           cu->EventCreate(&b->ev[1], CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
           at_launch_private(&b->l, bench_put, b);
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
    cg_ptx_options opt = options_of(cd, at_launch_is_reduce(b->l.ir), c);
    rt_kernel *k = NULL;
    if (cuda_kernel_get(b->dev, b->l.ir, b->l.key, &opt, &k) != BURNC_OK || !record_event(b->dev, b->ev[0]))
        return -1;
    for (int r = 0; r < RUNS_PER_SAMPLE; r++)
        if (cuda_kernel_run(b->dev, k, &b->l.args, b->in_buf, b->out_buf) != BURNC_OK)
            return -1;
    float ms = 0;
    if (!record_event(b->dev, b->ev[1]) || cd->cu->EventSynchronize(b->ev[1]) != CUDA_SUCCESS ||
        cd->cu->EventElapsedTime(&ms, b->ev[0], b->ev[1]) != CUDA_SUCCESS)
        return -1;
    return (double)ms / RUNS_PER_SAMPLE;
}

static const at_bench cuda_bench = {bench_init, time_candidate, bench_free};

/* ---- Decisions ---- */

burnc_status_t cuda_tune_choose(rt_device *dev, const kir_kernel *k, uint64_t key, const kir_args *a, bool may_tune,
                                cg_ptx_options *out, at_outcome *how)
{
    cuda_device *cd = cuda_dev(dev);
    int64_t rows, len;
    at_launch_rows(k, a->extents, &rows, &len);
    bool reduce = at_launch_is_reduce(k);
    const at_family *fam = reduce ? &fam_reduce : &fam_elementwise;
    bool valid[N_MAX];
    for (int c = 0; c < fam->n; c++)
        /* rows per block matter for rows of one leaf or less, the block size for longer ones */
        valid[c] = !reduce || c == 0 || (c <= 4) == (len <= KIR_LEAF);
    char akey[160];
    at_launch_key(akey, sizeof akey, key, rows, len);
    at_query q = {.fingerprint = cuda_tune_fingerprint(dev), .family = fam, .key = akey, .heuristic = 0,
                  .valid = valid};
    at_launch_record("cuda", k, a);
    bench b = {.dev = dev, .l = {.ir = k, .key = key, .user = a}};
    int c = at_launch_decide(&q, may_tune, &cuda_bench, &b, how);
    int forced = cd->forced_candidate - 1;
    if (forced >= 0 && forced < fam->n && valid[forced])
        c = forced;
    *out = options_of(cd, reduce, c);
    return BURNC_OK;
}

/* burnc-tune --file: a recorded kernel tuned for its recorded layout. */
burnc_status_t cuda_tune_kernel(rt_device *dev, const kir_kernel *k, const kir_args *args, at_outcome *out)
{
    RT_TRY(cuda_enter(dev, k->name));
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
