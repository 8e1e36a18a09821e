/* burnc-bench: training steps (nn over autodiff), fused against eager.
 *
 * train_mlp: an MLP 784-1024-1024-10 (ReLU), batch 256, cross-entropy, Adam: the whole step
 *   (forward, backward, update) fused vs eager; then the Adam update alone on fixed gradients,
 *   fused vs eager, against its traffic ratio (eager kernels each read their inputs and write
 *   their output: 30 floats per parameter element over the 13 ops of the update; the fused kernel
 *   reads parameter, gradient and both moments and writes parameter and moments: 7).
 * train_deep: 8 blocks of LayerNorm, GELU and Linear at width 1024, batch 4096, MSE loss, Adam:
 *   the step fused vs eager, and the peak bytes in use of one forward+backward with and without
 *   balanced gradient checkpointing, each in a fresh process (the pool's peak never goes down),
 *   with a hash of every gradient's bytes that must match. Sizes: BURNC_BENCH_TRAIN_DEEP =
 *   BLOCKSxWIDTHxBATCH (e.g. 4x256x512 for a quick run on a small machine).
 * Timed runs record, flush and sync inside the timed region; inputs are materialized first;
 * warm-up steps compile before timing.
 * The sizes are the same on a GPU: TARGETS.md measured PyTorch at them on the H200 and
 * bench/compare_torch.py mirrors them; train_deep's 27 matmuls of 4096x1024x1024 per step keep
 * a GPU busy, and train_mlp's small step is bound by launches, which is what fusing a step saves. */
#define _GNU_SOURCE
#include <burnc_nn.h>
#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

extern char **environ;

/* the first steps compile, and Adam's first step is a chain of its own */
enum { TRAIN_WARMUP = 4, ADAM_EAGER_OPS = 13 };
#define ADAM_EAGER_FLOATS 30.0 /* per element: what the 13 eager kernels read and write */
#define ADAM_FUSED_FLOATS 7.0

typedef struct model {
    burnc_params_t *params;
    int n;
    burnc_layer_norm_t ln[64];
    burnc_linear_t lin[64];
    bool deep; /* LayerNorm + GELU + Linear blocks, MSE; else Linear + ReLU, cross-entropy */
} model;

typedef struct deep_sizes {
    int blocks;
    int64_t width, batch;
} deep_sizes;

static deep_sizes deep_sizes_get(void)
{
    deep_sizes s = {8, 1024, 4096};
    const char *e = getenv("BURNC_BENCH_TRAIN_DEEP");
    int b;
    long long w, n;
    if (e && sscanf(e, "%dx%lldx%lld", &b, &w, &n) == 3 && b >= 1 && b <= 64 && w >= 1 && n >= 1)
        s = (deep_sizes){b, w, n};
    return s;
}

static void model_free(model *m) { burnc_params_release(m->params); }

static int mlp_build(burnc_device_t *dev, model *m)
{
    static const int64_t widths[] = {784, 1024, 1024, 10};
    *m = (model){.params = burnc_params_new(), .n = 3};
    for (int i = 0; i < 3 && m->params; i++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", i + 1);
        if (burnc_linear_init(&m->lin[i], m->params, dev, name, widths[i], widths[i + 1], NULL) != BURNC_OK)
            return bench_error("train_mlp: init");
    }
    return m->params ? 0 : bench_error("train_mlp: params");
}

static int deep_build(burnc_device_t *dev, deep_sizes s, model *m)
{
    *m = (model){.params = burnc_params_new(), .n = s.blocks, .deep = true};
    for (int i = 0; i < s.blocks && m->params; i++) {
        char name[32];
        snprintf(name, sizeof name, "blocks.%d.ln", i);
        if (burnc_layer_norm_init(&m->ln[i], m->params, dev, name, s.width, 0, BURNC_DTYPE_F32) != BURNC_OK)
            return bench_error("train_deep: init");
        snprintf(name, sizeof name, "blocks.%d.fc", i);
        if (burnc_linear_init(&m->lin[i], m->params, dev, name, s.width, s.width,
                              &(burnc_linear_config_t){.init = BURNC_INIT_XAVIER_UNIFORM}) != BURNC_OK)
            return bench_error("train_deep: init");
    }
    return m->params ? 0 : bench_error("train_deep: params");
}

/* The loss of a batch (inside the caller's scope). */
static burnc_tensor_t *model_loss(const model *m, burnc_tensor_t *x, burnc_tensor_t *y)
{
    burnc_tensor_t *h = x;
    for (int i = 0; i < m->n; i++) {
        if (m->deep)
            h = burnc_linear_forward(&m->lin[i], burnc_gelu(burnc_layer_norm_forward(&m->ln[i], h)));
        else
            h = i + 1 < m->n ? burnc_relu(burnc_linear_forward(&m->lin[i], h)) : burnc_linear_forward(&m->lin[i], h);
    }
    return m->deep ? burnc_mse_loss(h, y) : burnc_cross_entropy(h, y);
}

/* One training step, synced; ms or -1. */
static double train_step(const model *m, burnc_optim_t *opt, burnc_tensor_t *x, burnc_tensor_t *y,
                         burnc_device_t *dev)
{
    double t0 = now_ns();
    /* only the loss outlives the forward pass's scope: the tape holds what backward needs */
    burnc_scope_begin();
    burnc_tensor_t *loss = burnc_tensor_keep(model_loss(m, x, y));
    burnc_scope_end();
    burnc_grads_t *g = loss ? burnc_backward(loss) : NULL;
    burnc_status_t s = g ? burnc_optim_step(opt, m->params, g) : burnc_error_code();
    burnc_grads_release(g);
    burnc_tensor_release(loss);
    if (s == BURNC_OK)
        s = burnc_device_sync(dev);
    double ms = (now_ns() - t0) * 1e-6;
    return s == BURNC_OK ? ms : (bench_error("training step"), -1);
}

/* The median step time over reps after warm-up, fused or eager; -1 on failure. */
static double median_steps(const model *m, burnc_optim_t *opt, burnc_tensor_t *x, burnc_tensor_t *y,
                           burnc_device_t *dev, bool fused, int warmup, int reps)
{
    double t[64], r = -1;
    reps = reps > 64 ? 64 : reps;
    if (burnc_device_set_fusion(dev, fused) != BURNC_OK)
        return bench_error("set_fusion"), -1;
    int i = 0;
    for (int w = 0; w < warmup && i == 0; w++)
        if (train_step(m, opt, x, y, dev) < 0)
            i = -1;
    while (i >= 0 && i < reps && (t[i] = train_step(m, opt, x, y, dev)) >= 0)
        i++;
    if (i == reps)
        r = median(t, reps);
    burnc_device_set_fusion(dev, true);
    return r;
}

/* Counts the kernels of the flushes the fusion log reports. */
static void on_log(void *user, const char *topic, const char *msg)
{
    if (!strcmp(topic, "fusion") && strstr(msg, " group "))
        ++*(int *)user;
}

/* Random inputs for a model, materialized. */
static int make_batch(burnc_device_t *dev, const model *m, int64_t batch, int64_t in, burnc_tensor_t **x,
                      burnc_tensor_t **y)
{
    *x = burnc_randn(dev, BURNC_DTYPE_F32, 2, (int64_t[]){batch, in});
    if (m->deep) {
        *y = burnc_randn(dev, BURNC_DTYPE_F32, 2, (int64_t[]){batch, in});
    } else {
        burnc_tensor_t *r = burnc_mul_scalar(burnc_rand(dev, BURNC_DTYPE_F32, 1, (int64_t[]){batch}), 10);
        *y = burnc_cast(r, BURNC_DTYPE_I64);
        burnc_tensor_release(r);
    }
    return *x && *y && burnc_device_sync(dev) == BURNC_OK ? 0 : bench_error("inputs");
}

static bool on_cpu(const bench_ctx *ctx) { return burnc_device_type(ctx->dev) == BURNC_DEVICE_CPU; }

/* Step time fused and eager into out; 0 or 1. */
static int time_steps(bench_ctx *ctx, bench_result *out, burnc_device_t *ad, const model *m, int64_t batch,
                      int64_t in, int warmup, int reps)
{
    burnc_tensor_t *x = NULL, *y = NULL;
    burnc_optim_t *opt = burnc_optim_adam(1e-4, 0.9, 0.999, 1e-8, 0);
    int rc = !opt || make_batch(ad, m, batch, in, &x, &y);
    double fused = rc ? -1 : median_steps(m, opt, x, y, ctx->dev, true, warmup, reps);
    double eager = fused < 0 ? -1 : median_steps(m, opt, x, y, ctx->dev, false, warmup, reps);
    int kernels[2] = {0, 0}; /* of one more step each way, from the fusion log */
    for (int f = 0; f < 2 && eager >= 0; f++) {
        burnc_device_set_fusion(ctx->dev, f == 0);
        burnc_log_set_callback(on_log, &kernels[f]);
        if (train_step(m, opt, x, y, ctx->dev) < 0)
            eager = -1;
        burnc_log_set_callback(NULL, NULL);
    }
    burnc_device_set_fusion(ctx->dev, true);
    if (eager < 0) {
        rc = 1;
    } else {
        add_metric(out, "step kernels fused", kernels[0], "", TARGET_NONE, 0);
        add_metric(out, "step kernels eager", kernels[1], "", TARGET_NONE, 0);
        add_metric(out, "step fused", fused, "ms", TARGET_NONE, 0);
        add_metric(out, "step eager", eager, "ms", TARGET_NONE, 0);
        add_metric(out, "step fused/eager speedup", eager / fused, "x", on_cpu(ctx) ? TARGET_AT_LEAST : TARGET_NONE,
                   1.3);
    }
    burnc_tensor_release(x);
    burnc_tensor_release(y);
    burnc_optim_release(opt);
    return rc;
}

/* The Adam update alone on fixed gradients: fused vs eager against the traffic ratio. */
static int time_update(bench_ctx *ctx, bench_result *out, const model *m)
{
    int n = burnc_params_count(m->params), rc = 1;
    burnc_tensor_t **g = calloc((size_t)n, sizeof *g);
    burnc_optim_t *opt = burnc_optim_adam(1e-4, 0.9, 0.999, 1e-8, 0);
    double ms[2] = {-1, -1}, t[64];
    int kernels[2] = {0, 0}, reps = ctx->reps > 64 ? 64 : ctx->reps;
    if (!g || !opt)
        goto out;
    burnc_device_t *plain = burnc_device_without_autodiff(ctx->dev);
    for (int i = 0; i < n; i++) {
        burnc_tensor_t *p = burnc_params_get(m->params, i);
        g[i] = burnc_randn(plain, BURNC_DTYPE_F32, burnc_tensor_rank(p), burnc_tensor_shape(p));
        burnc_tensor_release(p);
    }
    burnc_device_release(plain);
    if (burnc_device_sync(ctx->dev) != BURNC_OK)
        goto fail;
    for (int mode = 0; mode < 2; mode++) { /* fused, then eager */
        burnc_device_set_fusion(ctx->dev, mode == 0);
        for (int w = 0; w < TRAIN_WARMUP; w++)
            if (burnc_optim_step_tensors(opt, m->params, g) != BURNC_OK || burnc_device_sync(ctx->dev) != BURNC_OK)
                goto fail;
        int groups = 0;
        burnc_log_set_callback(on_log, &groups);
        burnc_status_t s = burnc_optim_step_tensors(opt, m->params, g);
        s = s == BURNC_OK ? burnc_device_sync(ctx->dev) : s;
        burnc_log_set_callback(NULL, NULL);
        if (s != BURNC_OK)
            goto fail;
        kernels[mode] = groups;
        for (int i = 0; i < reps; i++) {
            double t0 = now_ns();
            s = burnc_optim_step_tensors(opt, m->params, g);
            s = s == BURNC_OK ? burnc_device_sync(ctx->dev) : s;
            t[i] = (now_ns() - t0) * 1e-6;
            if (s != BURNC_OK)
                goto fail;
        }
        ms[mode] = median(t, reps);
    }
    double elems = (double)burnc_params_numel(m->params), traffic = ADAM_EAGER_FLOATS / ADAM_FUSED_FLOATS;
    double speedup = ms[1] / ms[0];
    add_metric(out, "update fused", ms[0], "ms", TARGET_NONE, 0);
    add_metric(out, "update eager", ms[1], "ms", TARGET_NONE, 0);
    add_metric(out, "update fused GB/s", ADAM_FUSED_FLOATS * 4 * elems / (ms[0] * 1e6), "GB/s", TARGET_NONE, 0);
    add_metric(out, "update traffic ratio", traffic, "x", TARGET_NONE, 0);
    add_metric(out, "update speedup/traffic", speedup / traffic, "", on_cpu(ctx) ? TARGET_AT_LEAST : TARGET_NONE,
               0.8);
    snprintf(out->note, sizeof out->note,
             "Adam update of %d tensors (%.0f elements): %d fused kernels, %d eager kernels (at most %d, and %d)", n,
             elems, kernels[0], kernels[1], n, n * ADAM_EAGER_OPS);
    /* same-shape parameters (the two biases of width 1024) may share one kernel */
    rc = kernels[0] >= 1 && kernels[0] <= n && kernels[1] == n * ADAM_EAGER_OPS
             ? 0
             : bench_fail("train: the update ran %d fused / %d eager kernels, expected at most %d / %d", kernels[0],
                          kernels[1], n, n * ADAM_EAGER_OPS);
    goto out;
fail:
    bench_error("optimizer update");
out:
    burnc_device_set_fusion(ctx->dev, true);
    for (int i = 0; g && i < n; i++)
        burnc_tensor_release(g[i]);
    free(g);
    burnc_optim_release(opt);
    return rc;
}

int run_train_mlp(bench_ctx *ctx, bench_result *out)
{
    burnc_device_t *ad = burnc_device_autodiff(ctx->dev);
    model m = {0};
    int rc = !ad ? bench_error("autodiff") : 0;
    if (!rc) {
        burnc_device_seed(ad, 3);
        rc = mlp_build(ad, &m);
    }
    if (!rc)
        rc = time_steps(ctx, out, ad, &m, 256, 784, TRAIN_WARMUP, ctx->reps);
    if (!rc)
        rc = time_update(ctx, out, &m);
    model_free(&m);
    burnc_device_release(ad);
    return rc;
}

/* ---- train_deep: the step, and peak memory in fresh processes ---------------------------- */

/* The child: one forward+backward of the deep MLP, then "peak=BYTES hash=HEX" on stdout. */
int train_child_main(int argc, char **argv)
{
    const char *spec = NULL;
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--device"))
            spec = argv[i + 1];
    bool ckpt = argc > 2 && !strcmp(argv[2], "1");
    deep_sizes s = deep_sizes_get();
    burnc_device_t *dev = burnc_device_open(spec), *ad = dev ? burnc_device_autodiff(dev) : NULL;
    model m = {0};
    burnc_tensor_t *x = NULL, *y = NULL;
    if (!ad || (ckpt && burnc_device_gradient_checkpointing(ad) != BURNC_OK))
        return bench_error("child: device");
    burnc_device_seed(ad, 5);
    if (deep_build(ad, s, &m) || make_batch(ad, &m, s.batch, s.width, &x, &y))
        return 1;
    burnc_device_memory_cleanup(ad);
    /* the forward pass in a scope that keeps only the loss, so that its intermediates are
     * released before it runs and fusion keeps in registers what the tape does not hold; it
     * runs first (a training loop reads its loss), then the backward pass */
    burnc_scope_begin();
    burnc_tensor_t *loss = burnc_tensor_keep(model_loss(&m, x, y));
    burnc_scope_end();
    float lv;
    burnc_grads_t *g = loss && burnc_tensor_read(loss, &lv, sizeof lv) == BURNC_OK ? burnc_backward(loss) : NULL;
    burnc_tensor_release(loss);
    burnc_scope_begin();
    uint64_t hash = 1469598103934665603u;
    burnc_status_t st = g ? burnc_device_sync(ad) : burnc_error_code();
    for (int i = 0; st == BURNC_OK && i < burnc_params_count(m.params); i++) {
        burnc_tensor_t *p = burnc_params_get(m.params, i);
        burnc_tensor_t *gi = burnc_grad(g, p);
        float *h = gi ? read_host(gi) : NULL;
        st = h ? BURNC_OK : BURNC_ERR_EXECUTION;
        const unsigned char *b = (const unsigned char *)h;
        for (int64_t k = 0; h && k < burnc_tensor_numel(gi) * 4; k++)
            hash = (hash ^ b[k]) * 1099511628211u;
        free(h);
        burnc_tensor_release(gi);
        burnc_tensor_release(p);
    }
    burnc_memory_report_t r = {0};
    if (st == BURNC_OK)
        st = burnc_device_memory(ad, &r);
    burnc_grads_release(g);
    burnc_scope_end();
    if (st != BURNC_OK)
        return bench_error("child: step");
    printf("peak=%llu hash=%016llx\n", (unsigned long long)r.bytes_peak, (unsigned long long)hash);
    burnc_tensor_release(x);
    burnc_tensor_release(y);
    model_free(&m);
    burnc_device_release(ad);
    burnc_device_release(dev);
    return 0;
}

/* Runs this program's child mode with or without checkpointing; 0 and the report, or 1. */
static int spawn_peak(const bench_ctx *ctx, bool ckpt, unsigned long long *peak, unsigned long long *hash)
{
    if (!ctx->self_exe[0])
        return bench_fail("cannot find this program to start it again");
    char *argv[] = {(char *)ctx->self_exe, "--child-train", ckpt ? "1" : "0", "--device",
                    (char *)burnc_device_spec(ctx->dev), NULL};
    int fds[2];
    if (pipe(fds) != 0)
        return bench_fail("pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    pid_t pid;
    int e = posix_spawn(&pid, ctx->self_exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (e != 0) {
        close(fds[0]);
        return bench_fail("cannot start %s: %s", ctx->self_exe, strerror(e));
    }
    FILE *f = fdopen(fds[0], "r");
    char line[256] = "";
    bool got = f && fgets(line, sizeof line, f) && sscanf(line, "peak=%llu hash=%llx", peak, hash) == 2;
    if (f)
        fclose(f);
    else
        close(fds[0]);
    int ws;
    if (waitpid(pid, &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0 || !got)
        return bench_fail("the child (--child-train %d) failed: \"%s\"", (int)ckpt, line);
    return 0;
}

/* The fused step on ad with balanced checkpointing turned on (for the nodes recorded from now). */
static int time_balanced(bench_ctx *ctx, bench_result *out, burnc_device_t *ad, const model *m, deep_sizes s,
                         int warmup, int reps)
{
    burnc_tensor_t *x = NULL, *y = NULL;
    burnc_optim_t *opt = burnc_optim_adam(1e-4, 0.9, 0.999, 1e-8, 0);
    int rc = !opt || burnc_device_gradient_checkpointing(ad) != BURNC_OK || make_batch(ad, m, s.batch, s.width, &x, &y);
    double ms = rc ? -1 : median_steps(m, opt, x, y, ctx->dev, true, warmup, reps);
    if (ms < 0)
        rc = bench_error("train_deep: the step with balanced checkpointing");
    else
        add_metric(out, "step fused, balanced ckpt", ms, "ms", TARGET_NONE, 0);
    burnc_tensor_release(x);
    burnc_tensor_release(y);
    burnc_optim_release(opt);
    return rc;
}

int run_train_deep(bench_ctx *ctx, bench_result *out)
{
    deep_sizes s = deep_sizes_get();
    burnc_device_t *ad = burnc_device_autodiff(ctx->dev);
    model m = {0};
    int rc = !ad ? bench_error("autodiff") : 0;
    if (!rc) {
        burnc_device_seed(ad, 5);
        rc = deep_build(ad, s, &m);
    }
    /* a full-size step takes seconds on a cpu: fewer warm-up steps and repetitions there; a GPU
     * takes milliseconds, and the warm-up and repetitions compare_torch.py gives PyTorch */
    int reps = on_cpu(ctx) && ctx->reps > 3 ? 3 : ctx->reps, warmup = on_cpu(ctx) ? 2 : 4;
    if (!rc)
        rc = time_steps(ctx, out, ad, &m, s.batch, s.width, warmup, reps);
    if (!rc) /* the same steps with balanced checkpointing: what recomputing costs */
        rc = time_balanced(ctx, out, ad, &m, s, warmup, reps);
    model_free(&m);
    burnc_device_release(ad);
    unsigned long long peak[2], hash[2];
    if (!rc)
        rc = spawn_peak(ctx, false, &peak[0], &hash[0]) || spawn_peak(ctx, true, &peak[1], &hash[1]);
    if (!rc) {
        add_metric(out, "peak MB, no checkpointing", peak[0] / 1e6, "MB", TARGET_NONE, 0);
        add_metric(out, "peak MB, balanced", peak[1] / 1e6, "MB", TARGET_NONE, 0);
        add_metric(out, "peak cut by checkpointing", 1 - (double)peak[1] / (double)peak[0], "",
                   TARGET_AT_LEAST, 0.30);
        add_metric(out, "gradients identical", hash[0] == hash[1], "", TARGET_AT_LEAST, 1);
        snprintf(out->note, sizeof out->note, "%d blocks of width %lld, batch %lld; gradient hashes %016llx %016llx",
                 s.blocks, (long long)s.width, (long long)s.batch, hash[0], hash[1]);
    }
    return rc;
}
