/* The vulkan device (runtime/vulkan, codegen/glsl.c): device selection, batching, the pipeline
 * and SPIR-V caches across processes, compile errors, transfers, and kernels compared bit for bit
 * with kir_eval. Tests that need a Vulkan device use the CPU one (Mesa's lavapipe, "vulkan:cpu")
 * and are skipped, saying why, where there is none. The op-by-op comparison with ref runs as the
 * ops-vulkan, fusion-vulkan and random-vulkan suites. */
#define _GNU_SOURCE /* mkdtemp */
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "burnc_config.h"
#include "common.h"
#include "rt.h"
#if BURNC_HAVE_VULKAN
#include "autotune.h"
#include "vulkan/vk.h"
#endif

static const char CPU_SPEC[] = "vulkan:cpu";

static burnc_device_t *open_vulkan(const char *spec)
{
#if !BURNC_HAVE_VULKAN
    cr_skip_test("burnc was built without the vulkan backend (glslang, SPIRV-Tools or Vulkan headers missing)");
#endif
    burnc_device_t *dev = burnc_device_open(spec);
    if (!dev && burnc_error_code() == BURNC_ERR_UNAVAILABLE)
        cr_skip_test("device '%s' is not available: %s", spec, burnc_error_message());
    cr_assert_not_null(dev, "cannot open %s: %s", spec, burnc_error_message());
    return dev;
}

/* The device of the bit-for-bit kernel tests: BURNC_TEST_DEVICE where it names a Vulkan device
 * (a GPU run: BURNC_TEST_DEVICE=vulkan:0), else the CPU one. */
__attribute__((unused)) static const char *kernel_spec(void)
{
    const char *s = getenv("BURNC_TEST_DEVICE");
    return s && strncmp(s, "vulkan", 6) == 0 ? s : CPU_SPEC;
}

static burnc_tensor_t *tensor_f32(burnc_device_t *dev, int rank, const int64_t *shape, const float *data)
{
    burnc_tensor_t *t = burnc_tensor_from_data(dev, BURNC_DTYPE_F32, rank, shape, data);
    cr_assert_not_null(t, "from_data: %s", burnc_error_message());
    return t;
}

static void read_f32(burnc_tensor_t *t, float *out, size_t n)
{
    cr_assert_not_null(t, "op failed: %s", burnc_error_message());
    BT_ASSERT_OK(burnc_tensor_read(t, out, n * sizeof *out));
}

/* ---- Selection ---------------------------------------------------------------------------- */

Test(vulkan, open_by_spec_and_enumerate)
{
    burnc_device_t *dev = open_vulkan(CPU_SPEC);
    cr_assert_eq(burnc_device_type(dev), BURNC_DEVICE_VULKAN);
    cr_assert_str_eq(burnc_device_spec(dev), CPU_SPEC);
    cr_assert(strstr(burnc_device_name(dev), "cpu") != NULL, "name %s does not say it is a CPU device",
              burnc_device_name(dev));
    burnc_device_info_t info[16];
    int n = burnc_device_enumerate(BURNC_DEVICE_VULKAN, info, 16);
    bool listed = false;
    for (int i = 0; i < n && i < 16; i++) {
        cr_assert_eq(info[i].type, BURNC_DEVICE_VULKAN);
        listed |= strcmp(info[i].spec, CPU_SPEC) == 0;
    }
    cr_assert(listed, "%s is not among the %d enumerated Vulkan devices", CPU_SPEC, n);
    /* the same device again is the same handle */
    burnc_device_t *again = BT_NOT_NULL(burnc_device_open(CPU_SPEC));
    cr_assert(burnc_device_equal(dev, again));
    burnc_device_release(again);
    BT_ASSERT_FAILS(burnc_device_open("vulkan:cpu:7"), BURNC_ERR_UNAVAILABLE, "no such Vulkan device");
    BT_ASSERT_FAILS(burnc_device_open("vulkan:57"), BURNC_ERR_UNAVAILABLE, "vulkan:57");
    BT_ASSERT_FAILS(burnc_device_open("vulkan:discrete:x"), BURNC_ERR_INVALID_ARGUMENT, "vulkan:discrete:x");
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* What burnc_device_flushes_denormals may say of a Vulkan device: f32 and bf16 together (bf16
 * computes in f32), never f16 (its denormals are normal f32 numbers) nor integers; and, where
 * it says f32 denormals survive, a denormal passes through arithmetic unchanged. */
Test(vulkan, denormal_flush_query)
{
    burnc_device_t *dev = open_vulkan(kernel_spec());
    bool f32 = burnc_device_flushes_denormals(dev, BURNC_DTYPE_F32);
    cr_assert_eq(burnc_device_flushes_denormals(dev, BURNC_DTYPE_BF16), f32);
    cr_assert(!burnc_device_flushes_denormals(dev, BURNC_DTYPE_F16));
    cr_assert(!burnc_device_flushes_denormals(dev, BURNC_DTYPE_I32));
    cr_assert(!burnc_device_flushes_denormals(dev, BURNC_DTYPE_BOOL));
    if (!f32) {
        const int64_t n = 4;
        float x[4] = {1e-40f, -3e-42f, 0x1p-149f, 1.0f}, y[4];
        burnc_tensor_t *t = BT_NOT_NULL(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 1, &n, x));
        burnc_tensor_t *u = BT_NOT_NULL(burnc_mul_scalar(burnc_add_scalar(t, 0.0), 1.0));
        BT_ASSERT_OK(burnc_tensor_read(u, y, sizeof y));
        for (int i = 0; i < 4; i++)
            cr_assert(memcmp(&x[i], &y[i], sizeof x[i]) == 0, "element %d: %g became %g", i, (double)x[i],
                      (double)y[i]);
        burnc_tensor_release(u);
        burnc_tensor_release(t);
    }
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(vulkan, default_device_is_never_a_cpu_vulkan_device)
{
    burnc_device_release(open_vulkan(CPU_SPEC));
    unsetenv("BURNC_DEVICE");
    burnc_device_t *def = BT_NOT_NULL(burnc_device_open(NULL));
    cr_assert(strncmp(burnc_device_spec(def), CPU_SPEC, strlen(CPU_SPEC)) != 0, "the default device is %s",
              burnc_device_spec(def));
    burnc_device_release(def);
    BT_LEAK_CHECK();
}

Test(vulkan, env_overrides_the_choice)
{
    burnc_device_t *cpu = open_vulkan(CPU_SPEC);
    setenv("BURNC_VULKAN_DEVICE", "cpu", 1);
    burnc_device_t *dev = BT_NOT_NULL(burnc_device_open("vulkan"));
    cr_assert_str_eq(burnc_device_name(dev), burnc_device_name(cpu));
    burnc_device_release(dev);
    setenv("BURNC_VULKAN_DEVICE", "vulkan:cpu:3", 1);
    BT_ASSERT_FAILS(burnc_device_open("vulkan"), BURNC_ERR_UNAVAILABLE, "BURNC_VULKAN_DEVICE=vulkan:cpu:3");
    setenv("BURNC_VULKAN_DEVICE", "fast", 1);
    BT_ASSERT_FAILS(burnc_device_open("vulkan"), BURNC_ERR_UNAVAILABLE, "bad Vulkan device selector");
    unsetenv("BURNC_VULKAN_DEVICE");
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* ---- Execution ---------------------------------------------------------------------------- */

/* x -> ((x * 1.5 + 1) * 1.5 + 1) ... n times, each op its own kernel in eager mode. */
static void chain(burnc_device_t *dev, int n, const float *x, float *out, int64_t len)
{
    burnc_scope_begin();
    burnc_tensor_t *t = tensor_f32(dev, 1, &len, x);
    for (int i = 0; i < n; i++)
        t = burnc_add_scalar(burnc_mul_scalar(t, 1.5), 1.0);
    burnc_tensor_keep(t);
    burnc_scope_end();
    read_f32(t, out, (size_t)len);
    burnc_tensor_release(t);
}

Test(vulkan, batching_limit)
{
#if BURNC_HAVE_VULKAN
    setenv("BURNC_VULKAN_MAX_TASKS", "3", 1);
    burnc_device_t *dev = open_vulkan(CPU_SPEC);
    BT_ASSERT_OK(burnc_device_set_fusion(dev, false));
    enum { N = 10, LEN = 1000 };
    float x[LEN], got[LEN];
    for (int i = 0; i < LEN; i++)
        x[i] = (float)i / 7.0f - 50.0f;
    vk_stats before, after;
    rt_vulkan_stats(dev, &before);
    chain(dev, N, x, got, LEN);
    rt_vulkan_stats(dev, &after);
    /* 2N eager kernels, at most 3 per submit */
    long submits = after.submits - before.submits;
    cr_assert_geq(submits, (2 * N + 2) / 3, "%ld submits for %d dispatches at 3 per submit", submits, 2 * N);
    for (int i = 0; i < LEN; i++) {
        float want = x[i];
        for (int j = 0; j < N; j++)
            want = want * 1.5f + 1.0f;
        cr_assert_eq(got[i], want, "element %d: %a, want %a", i, got[i], want);
    }
    burnc_device_release(dev);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

Test(vulkan, timer_times_the_work_between_its_calls)
{
    burnc_device_t *dev = open_vulkan(kernel_spec());
    bt_check_timer(dev, 1 << 18);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* Host transfers larger than the staging chunk (VK_STAGE_CHUNK) go through it piece by piece
 * (on a discrete GPU: lavapipe maps its buffers and copies directly):
 * an upload, a computed result read back, and a slice that starts past the first chunk. */
Test(vulkan, transfers_past_the_staging_chunk)
{
#if BURNC_HAVE_VULKAN
    burnc_device_t *dev = open_vulkan(kernel_spec());
    const int64_t n = (VK_STAGE_CHUNK / 4) * 2 + 12345; /* two chunks and a part */
    float *x = malloc((size_t)n * sizeof *x), *got = malloc((size_t)n * sizeof *got);
    cr_assert(x && got);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(i % 100003) * 0.25f - 7.0f;
    burnc_tensor_t *t = tensor_f32(dev, 1, &n, x);
    read_f32(t, got, (size_t)n);
    cr_assert(memcmp(x, got, (size_t)n * sizeof *x) == 0, "upload and read-back differ");
    burnc_tensor_t *y = burnc_add_scalar(t, 1.0);
    read_f32(y, got, (size_t)n);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(got[i], x[i] + 1.0f, "element %lld: %a, want %a", (long long)i, got[i], x[i] + 1.0f);
    const int64_t from = VK_STAGE_CHUNK / 4 + 77, len = 1000;
    burnc_tensor_t *s = burnc_slice(t, 0, from, from + len, 1);
    read_f32(s, got, (size_t)len);
    cr_assert(memcmp(x + from, got, (size_t)len * sizeof *x) == 0, "a slice past the first chunk differs");
    burnc_tensor_release(s);
    burnc_tensor_release(y);
    burnc_tensor_release(t);
    free(x);
    free(got);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

Test(vulkan, to_device_between_cpu_ref_and_vulkan)
{
    burnc_device_t *vk = open_vulkan(CPU_SPEC);
    burnc_device_t *host = burnc_device_open("cpu");
    if (!host)
        host = BT_NOT_NULL(burnc_device_open("ref"));
    float x[257], back[257], sq[257];
    for (int i = 0; i < 257; i++)
        x[i] = (float)i - 128.5f;
    int64_t n = 257;
    burnc_tensor_t *h = tensor_f32(host, 1, &n, x);
    burnc_tensor_t *v = BT_NOT_NULL(burnc_tensor_to_device(h, vk));
    burnc_tensor_t *v2 = BT_NOT_NULL(burnc_mul(v, v));
    burnc_tensor_t *h2 = BT_NOT_NULL(burnc_tensor_to_device(v2, host));
    read_f32(h2, sq, 257);
    read_f32(v, back, 257);
    for (int i = 0; i < 257; i++) {
        cr_assert_eq(back[i], x[i]);
        cr_assert_eq(sq[i], x[i] * x[i]);
    }
    BT_ASSERT_FAILS(burnc_add(v, h), BURNC_ERR_DEVICE_MISMATCH, "");
    burnc_tensor_release(h);
    burnc_tensor_release(v);
    burnc_tensor_release(v2);
    burnc_tensor_release(h2);
    burnc_device_release(host);
    burnc_device_release(vk);
    BT_LEAK_CHECK();
}

/* x * a - b, or x * a + b with `plus`, releasing the product. */
static burnc_tensor_t *mul_add(burnc_tensor_t *x, burnc_tensor_t *a, burnc_tensor_t *b, bool plus)
{
    burnc_tensor_t *xa = BT_NOT_NULL(burnc_mul(x, a)), *r = BT_NOT_NULL(plus ? burnc_add(xa, b) : burnc_sub(xa, b));
    burnc_tensor_release(xa);
    return r;
}

/* x [5, 7, 3] against a [7, 1] and b [5, 1, 3] (rank 3), and y [5, 7] against c [7] and
 * d [5, 1] (rank 2): every axis broadcast by some operand, so no axes merge and each position is
 * split into indices by odd extents; then x * a - b summed over the inner axes (the lanes'
 * positions) and over the last (the rows'). Each result read before the next is built, so that
 * each is a kernel of its own. Small integers: every result is exact, equal to ref's bit for bit. */
Test(vulkan, broadcasts_of_rank_2_and_3_equal_ref)
{
    burnc_device_t *vk = open_vulkan(kernel_spec()), *ref = bt_ref();
    const int64_t sx[3] = {5, 7, 3}, sa[2] = {7, 1}, sb[3] = {5, 1, 3}, sy[2] = {5, 7}, sc[1] = {7}, sd[2] = {5, 1};
    float x[105], a[7], b[15], y[35], c[7], d[5];
    for (int i = 0; i < 105; i++)
        x[i] = (float)(i % 23 - 11);
    for (int i = 0; i < 35; i++)
        y[i] = (float)(i % 13 - 6);
    for (int i = 0; i < 15; i++)
        b[i] = (float)(3 * i - 20);
    for (int i = 0; i < 7; i++) {
        a[i] = (float)(i + 2);
        c[i] = (float)(5 - 2 * i);
    }
    for (int i = 0; i < 5; i++)
        d[i] = (float)(7 * i - 9);
    enum { N_OUT = 4 };
    const int64_t n_out[N_OUT] = {105, 35, 5, 35};
    const int inner[2] = {1, 2}, last[1] = {2};
    float got[N_OUT][105], want[N_OUT][105];
    burnc_device_t *devs[2] = {vk, ref};
    for (int v = 0; v < 2; v++) {
        burnc_tensor_t *tx = tensor_f32(devs[v], 3, sx, x), *ta = tensor_f32(devs[v], 2, sa, a);
        burnc_tensor_t *tb = tensor_f32(devs[v], 3, sb, b), *ty = tensor_f32(devs[v], 2, sy, y);
        burnc_tensor_t *tc = tensor_f32(devs[v], 1, sc, c), *td = tensor_f32(devs[v], 2, sd, d);
        for (int o = 0; o < N_OUT; o++) {
            burnc_tensor_t *r = o == 1 ? mul_add(ty, tc, td, true) : mul_add(tx, ta, tb, false);
            if (o >= 2) {
                burnc_tensor_t *sum = o == 2 ? burnc_sum(r, 2, inner, false) : burnc_sum(r, 1, last, false);
                burnc_tensor_release(r);
                r = BT_NOT_NULL(sum);
            }
            read_f32(r, v ? want[o] : got[o], (size_t)n_out[o]);
            burnc_tensor_release(r);
        }
        burnc_tensor_t *in[] = {tx, ta, tb, ty, tc, td};
        for (size_t i = 0; i < sizeof in / sizeof *in; i++)
            burnc_tensor_release(in[i]);
    }
    for (int o = 0; o < N_OUT; o++)
        for (int64_t i = 0; i < n_out[o]; i++)
            cr_assert_eq(got[o][i], want[o][i], "output %d element %lld: %g, ref %g", o, (long long)i,
                         (double)got[o][i], (double)want[o][i]);
    burnc_device_release(ref);
    burnc_device_release(vk);
    BT_LEAK_CHECK();
}

/* ---- Caches and compile errors ------------------------------------------------------------- */

#if BURNC_HAVE_VULKAN
/* A child process: runs a small graph on vulkan:cpu and exits with a code that says what it
 * compiled: 77 no device, 1 wrong result, else 10 + 2 * (glslang compiled) + (pipeline cache
 * file found). */
static int child_run(void)
{
    burnc_device_t *dev = burnc_device_open(CPU_SPEC);
    if (!dev)
        return 77;
    int64_t shape[2] = {3, 5000};
    static float x[15000];
    for (int i = 0; i < 15000; i++)
        x[i] = (float)(i % 97) * 0.25f;
    burnc_tensor_t *t = burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, shape, x);
    int axis = 1;
    burnc_tensor_t *r = burnc_sqrt(t);
    burnc_tensor_t *s = burnc_sum(r, 1, &axis, false);
    float got[3];
    bool ok = s && burnc_tensor_read(s, got, sizeof got) == BURNC_OK && got[0] > 0;
    burnc_tensor_release(s);
    burnc_tensor_release(r);
    burnc_tensor_release(t);
    vk_stats st;
    rt_vulkan_stats(dev, &st);
    burnc_device_release(dev); /* writes the pipeline cache */
    if (!ok)
        return 1;
    return 10 + 2 * (st.glslang_compiles > 0) + st.pipeline_cache_loaded;
}

static int run_child(void)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0)
        _exit(child_run());
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "the child process crashed");
    return WEXITSTATUS(status);
}
#endif

Test(vulkan, pipeline_and_spirv_caches_reused_across_processes)
{
#if BURNC_HAVE_VULKAN
    char dir[] = "/tmp/burnc-vk-cache-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    setenv("BURNC_CACHE_DIR", dir, 1);
    int first = run_child();
    if (first == 77)
        cr_skip_test("%s is not available", CPU_SPEC);
    cr_assert_eq(first, 12, "first process: code %d (want 12: compiled, no pipeline cache yet)", first);
    int second = run_child();
    cr_assert_eq(second, 11, "second process: code %d (want 11: nothing compiled, pipeline cache found)", second);
    bt_remove_dir(dir);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

Test(vulkan, compile_error_carries_the_glslang_log)
{
#if BURNC_HAVE_VULKAN
    const char *bad = "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { undeclared_thing = 1; }\n";
    BT_ASSERT_STATUS(rt_vulkan_compile_glsl(bad), BURNC_ERR_COMPILE, "undeclared_thing");
    BT_ASSERT_MSG_HAS("glslang");
    const char *good = "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { }\n";
    BT_ASSERT_OK(rt_vulkan_compile_glsl(good));
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

/* ---- Kernels bit for bit against kir_eval -------------------------------------------------- */

#if BURNC_HAVE_VULKAN
/* Runs k on dev over host arrays (inputs ins[s] of in_n[s] elements, outputs likewise, read
 * back into outs) and checks the bytes against kir_eval on copies. */
/* Set: check_against_eval runs the wide shader (64-bit index arithmetic, cg_glsl_options.wide),
 * which every launch may take, instead of the one the launch would choose. */
static bool force_wide;

static void check_against_eval(burnc_device_t *dev, const kir_kernel *k, const kir_args *a, void **host_in,
                               const size_t *in_bytes, void **host_out, const size_t *out_bytes)
{
    rt_device *d = dev;
    rt_buffer *ib[KIR_MAX_INPUTS], *ob[KIR_MAX_OUTPUTS];
    void *want[KIR_MAX_OUTPUTS];
    for (int s = 0; s < k->n_inputs; s++) {
        BT_ASSERT_OK(d->be->alloc(d, in_bytes[s], &ib[s]));
        BT_ASSERT_OK(d->be->write(d, ib[s], 0, host_in[s], in_bytes[s]));
    }
    for (int o = 0; o < k->n_outputs; o++) {
        BT_ASSERT_OK(d->be->alloc(d, out_bytes[o], &ob[o]));
        memset(host_out[o], 0x5a, out_bytes[o]);
        BT_ASSERT_OK(d->be->write(d, ob[o], 0, host_out[o], out_bytes[o]));
        want[o] = malloc(out_bytes[o]);
        memcpy(want[o], host_out[o], out_bytes[o]);
    }
    rt_kernel *rk;
    BT_ASSERT_OK(d->be->compile_kernel(d, k, kir_hash(k), &rk));
    if (force_wide) {
        cg_glsl_options o = rk->opt;
        o.wide = true;
        BT_ASSERT_OK(vk_kernel_variant(d, rk, o, &rk));
        BT_ASSERT_OK(vk_launch_with(d, rk, a, ib, ob));
    } else
        BT_ASSERT_OK(d->be->launch_kernel(d, rk, a, ib, ob, false));
    BT_ASSERT_OK(d->be->sync(d));
    kir_args ea = *a;
    ea.inputs = host_in;
    ea.outputs = want;
    BT_ASSERT_OK(kir_eval(k, &ea));
    for (int o = 0; o < k->n_outputs; o++) {
        BT_ASSERT_OK(d->be->read(d, ob[o], 0, host_out[o], out_bytes[o]));
        burnc_dtype_t dt = k->outputs[o].dtype;
        size_t es = ir_dtype_size(dt);
        for (size_t i = 0; i < out_bytes[o] / es; i++) {
            const char *g = (const char *)host_out[o] + i * es, *w = (const char *)want[o] + i * es;
            /* NaN signs and payloads are the hardware's: any NaN equals any NaN */
            bool nans = ir_dtype_is_float(dt) && isnan(ir_load_f(g, dt)) && isnan(ir_load_f(w, dt));
            cr_assert(nans || memcmp(g, w, es) == 0, "%s output %d element %zu: %.17g, kir_eval %.17g", k->name, o,
                      i, ir_load_f(g, dt), ir_load_f(w, dt));
        }
        free(want[o]);
        d->be->free(d, ob[o]);
    }
    for (int s = 0; s < k->n_inputs; s++)
        d->be->free(d, ib[s]);
}

/* rows x cols f32 input; per row: sum of x*x, max, argmax (NaNs placed), and x - max stored per
 * element: a multi-stage kernel over several leaves (cols > KIR_LEAF). */
static void rows_kernel(kir_kernel *k, int combiner_b)
{
    kir_init(k, 2, 1);
    snprintf(k->name, sizeof k->name, "test_rows");
    k->n_inputs = 1;
    k->inputs[0] = (kir_slot){.dtype = BURNC_DTYPE_F32, .stride = {KIR_STRIDE_ANY, KIR_STRIDE_UNIT}};
    k->n_outputs = 3;
    k->outputs[0] = (kir_slot){.dtype = BURNC_DTYPE_F32, .stride = {KIR_STRIDE_UNIT, KIR_STRIDE_ZERO}};
    k->outputs[1] = (kir_slot){.dtype = BURNC_DTYPE_I64, .stride = {KIR_STRIDE_UNIT, KIR_STRIDE_ZERO}};
    k->outputs[2] = (kir_slot){.dtype = BURNC_DTYPE_BF16, .stride = {KIR_STRIDE_ANY, KIR_STRIDE_UNIT}};
    int32_t x = kir_emit(k, KIR_LOAD, KIR_F32, 0, 0, 0);
    int32_t sq = kir_emit(k, KIR_MUL, KIR_F32, x, x, 0);
    k->stages[0] = (kir_stage){.combiner = KIR_COMBINE_SUM, .value = sq};
    k->stages[1] = (kir_stage){.combiner = (uint8_t)combiner_b, .value = x};
    k->stages[2] = (kir_stage){.combiner = KIR_COMBINE_MAX, .value = x};
    k->n_stages = 3;
    int32_t s0 = kir_emit(k, KIR_REDUCED, KIR_F32, 0, 0, 0);
    int32_t s1 = kir_emit(k, KIR_REDUCED, KIR_I64, 1, 0, 0);
    int32_t mx = kir_emit(k, KIR_REDUCED, KIR_F32, 2, 0, 0);
    int32_t d = kir_emit(k, KIR_SUB, KIR_F32, x, mx, 0);
    int32_t e = kir_exp(k, d);
    k->stores[0] = (kir_store){.slot = 0, .value = s0, .row = true};
    k->stores[1] = (kir_store){.slot = 1, .value = s1, .row = true};
    k->stores[2] = (kir_store){.slot = 2, .value = e, .row = false};
    k->n_stores = 3;
    char why[256];
    cr_assert(kir_valid(k, why, sizeof why), "test kernel: %s", why);
}
#endif

Test(vulkan, row_reductions_equal_kir_eval_bitwise)
{
#if BURNC_HAVE_VULKAN
    burnc_device_t *dev = open_vulkan(kernel_spec());
    const int64_t rows = 5, cols = 3 * KIR_LEAF + 77;
    float *x = malloc((size_t)(rows * cols) * sizeof *x);
    uint64_t r = 12345;
    for (int64_t i = 0; i < rows * cols; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int64_t)(r >> 40) - (1 << 23)) * 0x1p-20f;
    }
    x[1 * cols + 5000] = NAN; /* row 1: a NaN wins argmax/argmin and max */
    x[2 * cols + 100] = 1e30f; /* row 2: the extreme value, twice: the first wins */
    x[2 * cols + 9000] = 1e30f;
    float sums[5];
    int64_t args[5];
    uint16_t *el = malloc((size_t)(rows * cols) * sizeof *el);
    for (int c = 0; c < 2; c++) {
        kir_kernel k;
        rows_kernel(&k, c == 0 ? KIR_COMBINE_ARGMAX : KIR_COMBINE_ARGMIN);
        int64_t extents[2] = {rows, cols}, in_off = 0, in_str[2] = {cols, 1};
        int64_t out_off[3] = {0, 0, 0}, out_str[6] = {1, 0, 1, 0, cols, 1};
        kir_args a = {.extents = extents, .in_offsets = &in_off, .in_strides = in_str, .out_offsets = out_off,
                      .out_strides = out_str};
        void *ins[1] = {x}, *outs[3] = {sums, args, el};
        size_t in_b[1] = {(size_t)(rows * cols) * 4}, out_b[3] = {sizeof sums, sizeof args, (size_t)(rows * cols) * 2};
        check_against_eval(dev, &k, &a, ins, in_b, outs, out_b);
        kir_free(&k);
        if (c == 0) {
            cr_assert_eq(args[1], 5000, "argmax of row 1 (a NaN at 5000) is %lld", (long long)args[1]);
            cr_assert_eq(args[2], 100, "argmax of row 2 (first maximum at 100) is %lld", (long long)args[2]);
        }
    }
    free(x);
    free(el);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

#if BURNC_HAVE_VULKAN
/* One element-wise kernel of `op` over two or three f32 (or f64) inputs, against kir_eval. */
static void binary_kernel(burnc_device_t *dev, kir_opcode op, kir_type t, int n_in, const void *const *data,
                          int64_t n)
{
    kir_kernel k;
    kir_init(&k, 1, 1);
    snprintf(k.name, sizeof k.name, "test_op_%d", (int)op);
    burnc_dtype_t dt = t == KIR_F64 ? BURNC_DTYPE_F64 : BURNC_DTYPE_F32;
    size_t es = ir_dtype_size(dt);
    k.n_inputs = n_in;
    int32_t v[3];
    for (int s = 0; s < n_in; s++) {
        k.inputs[s] = (kir_slot){.dtype = dt, .stride = {KIR_STRIDE_UNIT}};
        v[s] = kir_emit(&k, KIR_LOAD, t, s, 0, 0);
    }
    k.n_outputs = 1;
    k.outputs[0] = (kir_slot){.dtype = dt, .stride = {KIR_STRIDE_UNIT}};
    int32_t r = kir_emit(&k, op, t, v[0], n_in > 1 ? v[1] : 0, n_in > 2 ? v[2] : 0);
    k.stores[0] = (kir_store){.slot = 0, .value = r};
    k.n_stores = 1;
    int64_t zero[3] = {0, 0, 0}, one[3] = {1, 1, 1};
    kir_args a = {.extents = &n, .in_offsets = zero, .in_strides = one, .out_offsets = zero, .out_strides = one};
    void *ins[3] = {(void *)data[0], n_in > 1 ? (void *)data[1] : NULL, n_in > 2 ? (void *)data[2] : NULL};
    size_t in_b[3] = {(size_t)n * es, (size_t)n * es, (size_t)n * es}, out_b[1] = {(size_t)n * es};
    void *out = malloc(out_b[0]);
    void *outs[1] = {out};
    check_against_eval(dev, &k, &a, ins, in_b, outs, out_b);
    free(out);
    kir_free(&k);
}

/* Values whose fma differs from a rounded product plus the addend. */
static void fma_inputs(float *a, float *b, float *c, int n)
{
    for (int i = 0; i < n; i++) {
        a[i] = 1.0f + (float)(i + 1) * 0x1p-12f;
        b[i] = 1.0f - (float)(i + 1) * 0x1p-13f;
        c[i] = -(a[i] * b[i]);
    }
}
#endif

Test(vulkan, fma_div_sqrt_equal_kir_eval_bitwise)
{
#if BURNC_HAVE_VULKAN
    burnc_device_t *dev = open_vulkan(kernel_spec());
    enum { N = 4096 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
    fma_inputs(a, b, c, N);
    binary_kernel(dev, KIR_FMA, KIR_F32, 3, (const void *const[]){a, b, c}, N);
    uint64_t r = 99;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = ldexpf((float)(r >> 40) + 1.0f, (int)(r % 60) - 30);
        b[i] = ldexpf((float)((r >> 20) & 0xfffff) + 1.0f, (int)((r >> 8) % 40) - 20);
    }
    binary_kernel(dev, KIR_DIV, KIR_F32, 2, (const void *const[]){a, b}, N);
    binary_kernel(dev, KIR_SQRT, KIR_F32, 1, (const void *const[]){a}, N);
    /* f64: products whose fma differs from the rounded product plus c, and random operands */
    double *da = malloc(N * sizeof *da), *db = malloc(N * sizeof *db), *dc = malloc(N * sizeof *dc);
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        if (i < N / 2) {
            da[i] = 1.0 + (double)(i + 1) * 0x1p-30;
            db[i] = 1.0 - (double)(i + 1) * 0x1p-31;
            dc[i] = -(da[i] * db[i]);
        } else {
            da[i] = ldexp((double)(r >> 11) + 1.0, (int)(r % 200) - 100 - 53);
            db[i] = ldexp((double)((r >> 7) & 0xfffffffffffull) - 0x80000000000ll, (int)((r >> 3) % 100) - 50 - 43);
            dc[i] = ldexp((double)(int64_t)(r >> 1), (int)((r >> 5) % 300) - 150 - 63);
        }
    }
    binary_kernel(dev, KIR_FMA, KIR_F64, 3, (const void *const[]){da, db, dc}, N);
    binary_kernel(dev, KIR_DIV, KIR_F64, 2, (const void *const[]){da, db}, N);
    binary_kernel(dev, KIR_SQRT, KIR_F64, 1, (const void *const[]){da}, N);
    free(da);
    free(db);
    free(dc);
    free(a);
    free(b);
    free(c);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

#if BURNC_HAVE_VULKAN
/* out = CONVERT(load(in)) stored as to_dt, against kir_eval. */
static void convert_kernel(burnc_device_t *dev, burnc_dtype_t from_dt, kir_type to, burnc_dtype_t to_dt,
                           const void *data, int64_t n)
{
    kir_kernel k;
    kir_init(&k, 1, 1);
    snprintf(k.name, sizeof k.name, "test_convert_%s_%d", ir_dtype_name(from_dt), (int)to);
    k.n_inputs = 1;
    k.inputs[0] = (kir_slot){.dtype = from_dt, .stride = {KIR_STRIDE_UNIT}};
    int32_t x = kir_emit(&k, KIR_LOAD, kir_type_of(from_dt), 0, 0, 0);
    int32_t c = kir_emit(&k, KIR_CONVERT, to, x, 0, 0);
    k.n_outputs = 1;
    k.outputs[0] = (kir_slot){.dtype = to_dt, .stride = {KIR_STRIDE_UNIT}};
    k.stores[0] = (kir_store){.slot = 0, .value = c};
    k.n_stores = 1;
    int64_t zero = 0, one = 1;
    kir_args a = {.extents = &n, .in_offsets = &zero, .in_strides = &one, .out_offsets = &zero, .out_strides = &one};
    void *ins[1] = {(void *)data};
    size_t in_b[1] = {(size_t)n * ir_dtype_size(from_dt)}, out_b[1] = {(size_t)n * ir_dtype_size(to_dt)};
    void *out = malloc(out_b[0]);
    void *outs[1] = {out};
    check_against_eval(dev, &k, &a, ins, in_b, outs, out_b);
    free(out);
    kir_free(&k);
}
#endif

Test(vulkan, conversions_equal_kir_eval_bitwise)
{
#if BURNC_HAVE_VULKAN
    burnc_device_t *dev = open_vulkan(kernel_spec());
    enum { N = 512 };
    int64_t *i = malloc(N * sizeof *i);
    float *f = malloc(N * sizeof *f);
    uint64_t r = 5;
    for (int j = 0; j < N; j++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int64_t base = j < 8 ? ((int64_t)1 << 62) + ((int64_t)1 << 54) + (j & 3) : (int64_t)(r >> (j % 40));
        i[j] = j == 8 ? INT64_MAX : j == 9 ? INT64_MIN : (j & 1 ? -base : base);
        f[j] = j == 10 ? NAN : j == 11 ? INFINITY : j == 12 ? -3e9f : ldexpf((float)(int64_t)(r >> 33) - (1ll << 30), (int)(r % 70) - 35);
    }
    convert_kernel(dev, BURNC_DTYPE_I64, KIR_F64, BURNC_DTYPE_F64, i, N);
    convert_kernel(dev, BURNC_DTYPE_I64, KIR_F32, BURNC_DTYPE_F32, i, N);
    convert_kernel(dev, BURNC_DTYPE_I64, KIR_I64, BURNC_DTYPE_BF16, i, N);
    convert_kernel(dev, BURNC_DTYPE_F32, KIR_I32, BURNC_DTYPE_I32, f, N);
    convert_kernel(dev, BURNC_DTYPE_F32, KIR_I64, BURNC_DTYPE_I64, f, N);
    convert_kernel(dev, BURNC_DTYPE_F32, KIR_U8, BURNC_DTYPE_U8, f, N);
    convert_kernel(dev, BURNC_DTYPE_F32, KIR_F32, BURNC_DTYPE_F16, f, N);
    convert_kernel(dev, BURNC_DTYPE_F32, KIR_F64, BURNC_DTYPE_F64, f, N);
    double *d = malloc(N * sizeof *d);
    for (int j = 0; j < N; j++)
        d[j] = (double)i[j];
    convert_kernel(dev, BURNC_DTYPE_F64, KIR_I64, BURNC_DTYPE_I64, d, N);
    convert_kernel(dev, BURNC_DTYPE_F64, KIR_F32, BURNC_DTYPE_F32, d, N);
    free(d);
    free(i);
    free(f);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

Test(vulkan, glsl_every_option_compiles_and_validates)
{
#if BURNC_HAVE_VULKAN
    /* no device needed: GLSL -> glslang -> spvValidate for the code paths lavapipe does not take */
    kir_kernel k;
    rows_kernel(&k, KIR_COMBINE_ARGMIN);
    int32_t x = 0; /* the load */
    int32_t d = kir_emit(&k, KIR_DIV, KIR_F32, x, x, 0);
    int32_t q = kir_emit(&k, KIR_SQRT, KIR_F32, d, 0, 0);
    int32_t f = kir_emit(&k, KIR_FMA, KIR_F32, q, x, d);
    k.stores[2].value = f;
    static const cg_glsl_options opts[] = {
        {0}, {.wg_size = 32, .items = 1}, {.wg_size = 1024, .items = 16}, {.no_f64 = true},
        {.denorm32 = true, .denorm64 = true}, {.words8 = true, .words16 = true}, {.subgroups = true},
        {.subgroups = true, .wg_size = 1024},
    };
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        char *src = cg_glsl_emit(&k, &opts[i]);
        cr_assert_not_null(src, "emit with options %zu: %s", i, burnc_error_message());
        uint32_t *words;
        size_t n;
        burnc_status_t s = cg_glsl_compile(k.name, src, &words, &n);
        cr_assert_eq(s, BURNC_OK, "options %zu: %s\n%s", i, burnc_error_message(), src);
        cr_assert_gt(n, 5);
        cr_assert_eq(words[0], 0x07230203u, "not SPIR-V");
        bool has_double = strstr(src, "double") != NULL;
        cr_assert_eq(has_double, !opts[i].no_f64, "options %zu: doubles %s", i, has_double ? "used" : "unused");
        free(words);
        free(src);
    }
    kir_free(&k);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

#if BURNC_HAVE_VULKAN
/* The shaders' udiv (codegen/glsl.c) in C. */
static uint32_t udiv_by_word(uint32_t n, int64_t g)
{
    uint32_t s = (uint32_t)(g >> 32), t = (uint32_t)((uint64_t)n * (uint32_t)g >> 32);
    return (t + ((n - t) >> (s & 1))) >> (s >> 1);
}

static uint32_t xorshift32(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}
#endif

Test(vulkan, divisor_words_divide_exactly)
{
#if BURNC_HAVE_VULKAN
    uint32_t divisors[4096], seed = 12345;
    int nd = 0;
    const uint32_t fixed[] = {1, 2, 3, 5, 6, 7, 10, 641, 4096 + 9, 0x7fffffffu, 0x80000001u, 0xfffffffeu, 0xffffffffu};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        divisors[nd++] = fixed[i];
    for (int l = 1; l < 32; l++) {
        divisors[nd++] = 1u << l;
        divisors[nd++] = (1u << l) - 1;
        divisors[nd++] = (1u << l) + 1;
    }
    for (int w = 0; nd < 4096; w = (w + 1) % 32) { /* of every width */
        uint32_t r = xorshift32(&seed) >> w;
        divisors[nd++] = r ? r : 1;
    }
    for (int i = 0; i < nd; i++) {
        uint32_t d = divisors[i], top = UINT32_MAX / d * d;
        int64_t g = cg_glsl_divisor(d);
        uint32_t ns[40] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, top - 1, top, top - d, top - d - 1,
                           UINT32_MAX, UINT32_MAX - 1, 0x80000000u, 0x7fffffffu};
        for (int j = 15; j < 40; j++)
            ns[j] = j < 25 ? xorshift32(&seed) : xorshift32(&seed) >> (j % 32);
        for (int j = 0; j < 40; j++) {
            uint32_t n = ns[j], q = udiv_by_word(n, g);
            cr_assert_eq(q, n / d, "%u / %u: %u", n, d, q);
            cr_assert_eq(n - q * d, n % d, "%u %% %u: %u", n, d, n - q * d);
        }
    }
    cr_assert_eq(cg_glsl_divisor(0), 0);
    cr_assert_eq(cg_glsl_divisor((int64_t)1 << 32), 0);
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

Test(vulkan, autotune_candidates_give_the_same_bits)
{
#if BURNC_HAVE_VULKAN
    char dir[] = "/tmp/burnc-vk-tune-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    setenv("BURNC_CACHE_DIR", dir, 1);
    setenv("BURNC_AUTOTUNE", "on", 1);
    setenv("BURNC_AUTOTUNE_BUDGET_MS", "3000", 1);
    burnc_device_t *dev = open_vulkan(CPU_SPEC);
    vk_stats before, after;
    rt_vulkan_stats(dev, &before);
    /* element-wise: fma over 3 inputs; tuning times every workgroup size and item count */
    enum { N = 50000 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
    fma_inputs(a, b, c, N);
    binary_kernel(dev, KIR_FMA, KIR_F32, 3, (const void *const[]){a, b, c}, N);
    rt_vulkan_stats(dev, &after);
    cr_assert_gt(after.pipelines - before.pipelines, 4, "tuning built %ld pipelines", after.pipelines - before.pipelines);
    free(a);
    free(b);
    free(c);
    burnc_device_release(dev);
    bt_remove_dir(dir);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

/* A [2, M, K] @ B^T where B is stored [2, N, K] (a strided view): each element must be the fma
 * chain of include/burnc.h, computed here with fmaf. */
Test(vulkan, matmul_is_the_fma_chain)
{
    burnc_device_t *dev = open_vulkan(CPU_SPEC);
    enum { NB = 2, M = 33, K = 70, N = 45 };
    static float a[NB * M * K], bt[NB * N * K], got[NB * M * N];
    uint64_t r = 77;
    for (int i = 0; i < NB * M * K; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (float)((int64_t)(r >> 40) - (1 << 23)) * 0x1p-21f;
    }
    for (int i = 0; i < NB * N * K; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        bt[i] = (float)((int64_t)(r >> 40) - (1 << 23)) * 0x1p-22f;
    }
    int64_t sa[3] = {NB, M, K}, sb[3] = {NB, N, K};
    burnc_tensor_t *ta = tensor_f32(dev, 3, sa, a), *tb = tensor_f32(dev, 3, sb, bt);
    burnc_tensor_t *tbt = BT_NOT_NULL(burnc_transpose(tb, 1, 2));
    burnc_tensor_t *c = BT_NOT_NULL(burnc_matmul(ta, tbt));
    read_f32(c, got, NB * M * N);
    for (int bi = 0; bi < NB; bi++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float acc = 0.0f;
                for (int k = 0; k < K; k++)
                    acc = fmaf(a[(bi * M + i) * K + k], bt[(bi * N + j) * K + k], acc);
                float g = got[(bi * M + i) * N + j];
                cr_assert(memcmp(&g, &acc, sizeof g) == 0, "c[%d][%d][%d] = %a, the fma chain gives %a", bi, i, j,
                          (double)g, (double)acc);
            }
    /* f16 operands: the chain in f32, rounded once */
    burnc_tensor_t *ha = BT_NOT_NULL(burnc_cast(ta, BURNC_DTYPE_F16)), *hb = BT_NOT_NULL(burnc_cast(tbt, BURNC_DTYPE_F16));
    burnc_tensor_t *hc = BT_NOT_NULL(burnc_matmul(ha, hb));
    uint16_t hgot[NB * M * N], ha_h[NB * M * K], hb_h[NB * N * K];
    BT_ASSERT_OK(burnc_tensor_read(hc, hgot, sizeof hgot));
    BT_ASSERT_OK(burnc_tensor_read(ha, ha_h, sizeof ha_h));
    burnc_tensor_t *hbd = BT_NOT_NULL(burnc_cast(tb, BURNC_DTYPE_F16));
    BT_ASSERT_OK(burnc_tensor_read(hbd, hb_h, sizeof hb_h));
    for (int bi = 0; bi < NB; bi++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float acc = 0.0f;
                for (int k = 0; k < K; k++)
                    acc = fmaf(burnc_f16_to_f32(ha_h[(bi * M + i) * K + k]), burnc_f16_to_f32(hb_h[(bi * N + j) * K + k]),
                               acc);
                cr_assert_eq(hgot[(bi * M + i) * N + j], burnc_f32_to_f16(acc), "f16 c[%d][%d][%d]", bi, i, j);
            }
    burnc_tensor_t *ts[] = {ta, tb, tbt, c, ha, hb, hc, hbd};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        burnc_tensor_release(ts[i]);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* ---- Multi-pass reductions ------------------------------------------------------------------ */

#if BURNC_HAVE_VULKAN
/* One stage of `combiner` over the reduced axes of an f32 input of `rank` axes (the first
 * n_outer kept), its result stored once per row: the shape that runs as leaves, tree passes and
 * finish when rows are few and long. */
static void one_stage_kernel(kir_kernel *k, int rank, int n_outer, int combiner)
{
    kir_init(k, rank, n_outer);
    snprintf(k->name, sizeof k->name, "test_passes_%d", combiner);
    bool arg = combiner == KIR_COMBINE_ARGMAX || combiner == KIR_COMBINE_ARGMIN;
    k->n_inputs = 1;
    k->n_outputs = 1;
    k->inputs[0].dtype = BURNC_DTYPE_F32;
    k->outputs[0].dtype = arg ? BURNC_DTYPE_I64 : BURNC_DTYPE_F32;
    for (int d = 0; d < rank; d++) {
        k->inputs[0].stride[d] = d == rank - 1 ? KIR_STRIDE_UNIT : KIR_STRIDE_ANY;
        k->outputs[0].stride[d] = d < n_outer ? KIR_STRIDE_UNIT : KIR_STRIDE_ZERO;
    }
    int32_t x = kir_emit(k, KIR_LOAD, KIR_F32, 0, 0, 0);
    /* a value that makes the order visible: sums of products round differently per order */
    int32_t v = combiner == KIR_COMBINE_SUM ? kir_emit(k, KIR_MUL, KIR_F32, x, x, 0) : x;
    k->stages[0] = (kir_stage){.combiner = (uint8_t)combiner, .value = v};
    k->n_stages = 1;
    int32_t red = kir_emit(k, KIR_REDUCED, arg ? KIR_I64 : KIR_F32, 0, 0, 0);
    int32_t out = arg ? red : kir_emit(k, KIR_MUL, KIR_F32, red, kir_const_f(k, KIR_F32, 0.5), 0);
    k->stores[0] = (kir_store){.slot = 0, .value = out, .row = true};
    k->n_stores = 1;
    char why[256];
    cr_assert(kir_valid(k, why, sizeof why), "test kernel: %s", why);
}

static float *wide_values(int64_t n, uint64_t seed)
{
    float *x = malloc((size_t)n * sizeof *x);
    cr_assert_not_null(x);
    uint64_t r = seed;
    for (int64_t i = 0; i < n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        /* mantissas times exponents over 2^-12..2^12: the sum's bits depend on the order */
        x[i] = ldexpf((float)((int64_t)(r >> 40) - (1 << 23)) * 0x1p-23f, (int)((r >> 20) % 25) - 12);
    }
    return x;
}
#endif

/* Few long rows (3 rows over two reduced axes, 41 leaves each: two tree passes) and a whole
 * tensor (1 row, 1100 leaves: three tree passes) run as leaves, tree and finish passes, equal
 * to kir_eval bit for bit for sum, max (a NaN placed), argmax and argmin (ties placed). */
Test(vulkan, multipass_reductions_equal_kir_eval_bitwise)
{
#if BURNC_HAVE_VULKAN
    burnc_device_t *dev = open_vulkan(kernel_spec());
    vk_stats before, after;
    rt_vulkan_stats(dev, &before);
    const int combiners[] = {KIR_COMBINE_SUM, KIR_COMBINE_MAX, KIR_COMBINE_ARGMAX, KIR_COMBINE_ARGMIN};
    int launches = 0;
    for (int shape = 0; shape < 2; shape++) {
        int64_t rows = shape == 0 ? 3 : 1, len = shape == 0 ? 41 * KIR_LEAF - 123 : 1100 * KIR_LEAF - 5;
        int64_t a1 = shape == 0 ? 7 : len, a2 = len / a1; /* shape 0: the row as 7 x (len / 7) */
        len = a1 * a2;
        float *x = wide_values(rows * len, 99 + (uint64_t)shape);
        x[(rows > 1 ? len : 0) + 70000] = NAN;          /* row 1 (or the tensor): a NaN wins */
        x[rows * len - 1] = x[rows * len - 2] = 1e30f; /* the last row: a tie at its end */
        for (size_t c = 0; c < sizeof combiners / sizeof *combiners; c++) {
            kir_kernel k;
            int rank = shape == 0 ? 3 : 1, n_outer = shape == 0 ? 1 : 0;
            one_stage_kernel(&k, rank, n_outer, combiners[c]);
            int64_t ext3[3] = {rows, a1, a2}, str3[3] = {len, a2, 1}, ext1[1] = {len}, str1[1] = {1};
            int64_t in_off = 0, out_off = 0, ostr3[3] = {1, 0, 0}, ostr1[1] = {0};
            kir_args a = {.extents = shape == 0 ? ext3 : ext1, .in_offsets = &in_off,
                          .in_strides = shape == 0 ? str3 : str1, .out_offsets = &out_off,
                          .out_strides = shape == 0 ? ostr3 : ostr1};
            int64_t out[3];
            void *ins[1] = {x}, *outs[1] = {out};
            size_t in_b[1] = {(size_t)(rows * len) * 4}, out_b[1] = {(size_t)rows * 8};
            if (combiners[c] != KIR_COMBINE_ARGMAX && combiners[c] != KIR_COMBINE_ARGMIN)
                out_b[0] = (size_t)rows * 4;
            check_against_eval(dev, &k, &a, ins, in_b, outs, out_b);
            launches++;
            if (combiners[c] == KIR_COMBINE_ARGMAX)
                cr_assert_eq(out[rows - 1], shape == 0 ? len - 2 : 70000, "argmax of the last row is %lld",
                             (long long)out[rows - 1]);
            kir_free(&k);
        }
        free(x);
    }
    rt_vulkan_stats(dev, &after);
    cr_assert_eq(after.pass_launches - before.pass_launches, launches, "%ld of %d launches ran as passes",
                 after.pass_launches - before.pass_launches, launches);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

/* Positions past 2^32 take a shader of their own that divides in 64 bits; the others divide by
 * the extents' divisor words and have no 64-bit division at all. The wide shader, forced on
 * launches that would not need it, equals kir_eval too: rows over two outer axes, a row over
 * two reduced axes, and a rank-3 element-wise kernel, all with odd extents. */
Test(vulkan, wide_shader_equals_kir_eval)
{
#if BURNC_HAVE_VULKAN
    burnc_device_t *dev = open_vulkan(kernel_spec());
    for (int kind = 0; kind < 3; kind++) {
        kir_kernel k;
        if (kind < 2) {
            one_stage_kernel(&k, 3, 2 - kind, KIR_COMBINE_SUM);
            k.outputs[0].stride[0] = kind == 0 ? KIR_STRIDE_ANY : KIR_STRIDE_UNIT; /* rows 7 apart */
        } else {
            kir_init(&k, 3, 3);
            snprintf(k.name, sizeof k.name, "test_wide_ew");
            k.n_inputs = k.n_outputs = 1;
            k.inputs[0] = (kir_slot){.dtype = BURNC_DTYPE_F32, .stride = {KIR_STRIDE_ANY, KIR_STRIDE_ANY, KIR_STRIDE_UNIT}};
            k.outputs[0] = k.inputs[0];
            int32_t x = kir_emit(&k, KIR_LOAD, KIR_F32, 0, 0, 0);
            k.stores[0] = (kir_store){.slot = 0, .value = kir_emit(&k, KIR_MUL, KIR_F32, x, x, 0)};
            k.n_stores = 1;
        }
        for (int wide = 0; wide < 2; wide++) {
            cg_glsl_options o = {.wide = wide};
            char *src = cg_glsl_emit(&k, &o);
            cr_assert_not_null(src, "%s", burnc_error_message());
            cr_assert_eq(strstr(src, "udiv(") != NULL, !wide, "%s, wide %d: 32-bit divisions", k.name, wide);
            cr_assert_eq(strstr(src, "q % A.w") != NULL, wide, "%s, wide %d: 64-bit divisions", k.name, wide);
            free(src);
        }
        int64_t ext[3] = {5, 7, 33}, str[3] = {7 * 33, 33, 1}, n = 5 * 7 * 33, off = 0, ooff = 0;
        int64_t ostr[3][3] = {{7, 1, 0}, {1, 0, 0}, {7 * 33, 33, 1}};
        kir_args a = {.extents = ext, .in_offsets = &off, .in_strides = str, .out_offsets = &ooff,
                      .out_strides = ostr[kind]};
        float *x = wide_values(n, 7 + (uint64_t)kind), out[5 * 7 * 33];
        size_t out_n = kind == 0 ? 35 : kind == 1 ? 5 : (size_t)n;
        void *ins[1] = {x}, *outs[1] = {out};
        size_t in_b[1] = {(size_t)n * 4}, out_b[1] = {out_n * 4};
        for (int wide = 0; wide < 2; wide++) {
            force_wide = wide;
            check_against_eval(dev, &k, &a, ins, in_b, outs, out_b);
        }
        force_wide = false;
        free(x);
        kir_free(&k);
    }
    burnc_device_release(dev);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

/* burnc_sum and burnc_max over every axis of 2^21 + 13 values (multi-pass launches) give the
 * cpu device's bits (the same fixed order; ref sums in double, in another order). */
Test(vulkan, whole_tensor_sum_equals_cpu_bitwise)
{
#if BURNC_HAVE_VULKAN
    burnc_device_t *dev = open_vulkan(kernel_spec()), *ref = burnc_device_open("cpu");
    if (!ref && burnc_error_code() == BURNC_ERR_UNAVAILABLE) {
        burnc_device_release(dev);
        cr_skip_test("the cpu device is not available: %s", burnc_error_message());
    }
    cr_assert_not_null(ref, "cpu: %s", burnc_error_message());
    const int64_t n = (1 << 21) + 13;
    float *x = wide_values(n, 7);
    vk_stats before, after;
    rt_vulkan_stats(dev, &before);
    float got[2], want[2];
    for (int d = 0; d < 2; d++) {
        burnc_device_t *on = d ? ref : dev;
        burnc_tensor_t *t = tensor_f32(on, 1, &n, x);
        /* read in turn: recorded together, the two would fuse into one two-stage kernel */
        float *dst = d ? want : got;
        burnc_tensor_t *s = BT_NOT_NULL(burnc_sum(t, 0, NULL, false));
        read_f32(s, &dst[0], 1);
        burnc_tensor_t *m = BT_NOT_NULL(burnc_max(t, 0, NULL, false));
        read_f32(m, &dst[1], 1);
        burnc_tensor_release(t);
        burnc_tensor_release(s);
        burnc_tensor_release(m);
    }
    rt_vulkan_stats(dev, &after);
    cr_assert_eq(after.pass_launches - before.pass_launches, 2, "%ld of 2 reductions ran as passes",
                 after.pass_launches - before.pass_launches);
    cr_assert(memcmp(&got[0], &want[0], 4) == 0, "sum: vulkan %a, cpu %a", (double)got[0], (double)want[0]);
    cr_assert(memcmp(&got[1], &want[1], 4) == 0, "max: vulkan %a, cpu %a", (double)got[1], (double)want[1]);
    free(x);
    burnc_device_release(dev);
    burnc_device_release(ref);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

/* ---- 8- and 16-bit storage through 32-bit words -------------------------------------------- */

/* A device without 8/16-bit storage and subgroups (forced on lavapipe) reads f16, bf16, u8 and
 * bool through 32-bit words and writes them with atomic bit operations (outputs with strides of
 * 2 and 3 elements leave their neighbours in the same words untouched), and combines lanes in
 * shared memory; everything equals kir_eval. */
Test(vulkan, fallbacks_words_and_shared_memory_lanes)
{
#if BURNC_HAVE_VULKAN
    rt_vulkan_force_fallbacks(true);
    burnc_device_t *dev = open_vulkan(CPU_SPEC);
    rt_vulkan_force_fallbacks(false);
    vk_device *vd = vk_dev(dev);
    cr_assert(!vd->storage8 && !vd->storage16 && !vd->subgroups, "the fallbacks were not forced");
    enum { N = 1001 };
    kir_kernel k;
    kir_init(&k, 1, 1);
    snprintf(k.name, sizeof k.name, "test_words");
    const burnc_dtype_t in_dt[4] = {BURNC_DTYPE_F16, BURNC_DTYPE_BF16, BURNC_DTYPE_U8, BURNC_DTYPE_BOOL};
    const kir_type in_t[4] = {KIR_F32, KIR_F32, KIR_U8, KIR_BOOL};
    int32_t v[4];
    k.n_inputs = 4;
    for (int s = 0; s < 4; s++) {
        k.inputs[s] = (kir_slot){.dtype = in_dt[s], .stride = {KIR_STRIDE_UNIT}};
        v[s] = kir_emit(&k, KIR_LOAD, in_t[s], s, 0, 0);
    }
    k.n_outputs = 4;
    k.outputs[0] = (kir_slot){.dtype = BURNC_DTYPE_F16, .stride = {KIR_STRIDE_ANY}};
    k.outputs[1] = (kir_slot){.dtype = BURNC_DTYPE_BF16, .stride = {KIR_STRIDE_UNIT}};
    k.outputs[2] = (kir_slot){.dtype = BURNC_DTYPE_U8, .stride = {KIR_STRIDE_ANY}};
    k.outputs[3] = (kir_slot){.dtype = BURNC_DTYPE_BOOL, .stride = {KIR_STRIDE_UNIT}};
    k.stores[0] = (kir_store){.slot = 0, .value = kir_emit(&k, KIR_ADD, KIR_F32, v[0], v[1], 0)};
    k.stores[1] = (kir_store){.slot = 1, .value = kir_emit(&k, KIR_MUL, KIR_F32, v[0], v[1], 0)};
    k.stores[2] = (kir_store){.slot = 2, .value = kir_emit(&k, KIR_ADD, KIR_U8, v[2], kir_const_i(&k, KIR_U8, 200), 0)};
    k.stores[3] = (kir_store){.slot = 3, .value = kir_emit(&k, KIR_NOT, KIR_BOOL, v[3], 0, 0)};
    k.n_stores = 4;
    char why[256];
    cr_assert(kir_valid(&k, why, sizeof why), "test kernel: %s", why);
    /* the shader asks for no 8- or 16-bit types */
    cg_glsl_options opt = {.words8 = true, .words16 = true};
    char *glsl = cg_glsl_emit(&k, &opt);
    cr_assert_not_null(glsl, "%s", burnc_error_message());
    cr_assert(!strstr(glsl, "uint16_t") && !strstr(glsl, "uint8_t") && !strstr(glsl, "16bit_storage") &&
                  !strstr(glsl, "8bit_storage"),
              "the word-storage shader still uses narrow types:\n%s", glsl);
    free(glsl);
    static uint16_t h[N], bf[N], out_h[2 * N], out_bf[N];
    static uint8_t u[N], bo[N], out_u[3 * N], out_bo[N];
    uint64_t r = 5;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        float f = (float)((int64_t)(r >> 40) - (1 << 23)) * 0x1p-16f;
        h[i] = burnc_f32_to_f16(f);
        bf[i] = (uint16_t)(r >> 7);
        u[i] = (uint8_t)(r >> 30);
        bo[i] = (uint8_t)(r >> 50 & 1);
    }
    int64_t n = N, zero[4] = {0}, in_str[4] = {1, 1, 1, 1}, out_str[4] = {2, 1, 3, 1};
    kir_args a = {.extents = &n, .in_offsets = zero, .in_strides = in_str, .out_offsets = zero, .out_strides = out_str};
    void *ins[4] = {h, bf, u, bo}, *outs[4] = {out_h, out_bf, out_u, out_bo};
    size_t in_b[4] = {sizeof h, sizeof bf, sizeof u, sizeof bo},
           out_b[4] = {sizeof out_h, sizeof out_bf, sizeof out_u, sizeof out_bo};
    check_against_eval(dev, &k, &a, ins, in_b, outs, out_b);
    kir_free(&k);
    /* lane trees in shared memory (no subgroups): a row kernel and a multi-pass sum */
    {
        const int64_t rows = 3, cols = 2 * KIR_LEAF + 5, len = 9 * KIR_LEAF + 1;
        float *xr = wide_values(rows * cols > len ? rows * cols : len, 11), sums[3];
        int64_t argm[3];
        uint16_t *el = malloc((size_t)(rows * cols) * sizeof *el);
        kir_kernel kr;
        rows_kernel(&kr, KIR_COMBINE_ARGMIN);
        int64_t ext[2] = {rows, cols}, ioff = 0, istr[2] = {cols, 1}, ooff[3] = {0}, ostr[6] = {1, 0, 1, 0, cols, 1};
        kir_args ar = {.extents = ext, .in_offsets = &ioff, .in_strides = istr, .out_offsets = ooff, .out_strides = ostr};
        void *ri[1] = {xr}, *ro[3] = {sums, argm, el};
        size_t rib[1] = {(size_t)(rows * cols) * 4}, rob[3] = {sizeof sums, sizeof argm, (size_t)(rows * cols) * 2};
        check_against_eval(dev, &kr, &ar, ri, rib, ro, rob);
        kir_free(&kr);
        one_stage_kernel(&kr, 1, 0, KIR_COMBINE_SUM);
        int64_t n1 = len, one = 1, zero1 = 0;
        float total;
        kir_args a1 = {.extents = &n1, .in_offsets = &zero1, .in_strides = &one, .out_offsets = &zero1,
                       .out_strides = &zero1};
        void *si[1] = {xr}, *so[1] = {&total};
        size_t sib[1] = {(size_t)len * 4}, sob[1] = {4};
        check_against_eval(dev, &kr, &a1, si, sib, so, sob);
        kir_free(&kr);
        free(xr);
        free(el);
    }
    /* through the public API: a cast to f16 and back */
    float x[N], back[N];
    for (int i = 0; i < N; i++)
        x[i] = burnc_f16_to_f32(h[i]) * 1.0009765625f;
    int64_t shape[1] = {N};
    burnc_tensor_t *t = tensor_f32(dev, 1, shape, x);
    burnc_tensor_t *t16 = BT_NOT_NULL(burnc_cast(t, BURNC_DTYPE_F16));
    burnc_tensor_t *t32 = BT_NOT_NULL(burnc_cast(t16, BURNC_DTYPE_F32));
    read_f32(t32, back, N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(burnc_f32_to_f16(back[i]), burnc_f32_to_f16(x[i]), "cast %d: %a -> %a", i, (double)x[i],
                     (double)back[i]);
    burnc_tensor_release(t);
    burnc_tensor_release(t16);
    burnc_tensor_release(t32);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}

/* burnc-tune --file's hook: a recorded row kernel (BURNC_AUTOTUNE_RECORD writes a "vulkan:" line)
 * tuned for its layout on private buffers; only workgroups up to a warp per leaf are timed; the
 * launch with the stored decision still equals kir_eval. */
Test(vulkan, tune_kernel_records_and_tunes_row_kernels)
{
#if BURNC_HAVE_VULKAN
    char dir[] = "/tmp/burnc-vk-tunek-XXXXXX", rec[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(rec, sizeof rec, "%s/launches.txt", dir);
    setenv("BURNC_CACHE_DIR", dir, 1);
    setenv("BURNC_AUTOTUNE", "on", 1);
    setenv("BURNC_AUTOTUNE_RECORD", rec, 1);
    setenv("BURNC_AUTOTUNE_BUDGET_MS", "1000", 1);
    burnc_device_t *dev = open_vulkan(CPU_SPEC);
    rt_device *d = dev;
    cr_assert_not_null(d->be->tune_kernel, "vulkan has no tune_kernel hook");
    const int64_t rows = 5, cols = 2 * KIR_LEAF + 9;
    kir_kernel k;
    rows_kernel(&k, KIR_COMBINE_ARGMAX);
    int64_t extents[2] = {rows, cols}, in_off = 0, in_str[2] = {cols, 1};
    int64_t out_off[3] = {0, 0, 0}, out_str[6] = {1, 0, 1, 0, cols, 1};
    kir_args a = {.extents = extents, .in_offsets = &in_off, .in_strides = in_str, .out_offsets = out_off,
                  .out_strides = out_str};
    at_outcome o;
    BT_ASSERT_OK(d->be->tune_kernel(d, &k, &a, &o));
    cr_assert(o.tuned, "the row kernel was not tuned");
    /* 3 leaves: wg 32, 64 and 128, and the heuristic's 256 */
    cr_assert_eq(o.timed, 4, "%d candidates timed, want 4", o.timed);
    float *x = wide_values(rows * cols, 3);
    float sums[5];
    int64_t args[5];
    uint16_t *el = malloc((size_t)(rows * cols) * sizeof *el);
    void *ins[1] = {x}, *outs[3] = {sums, args, el};
    size_t in_b[1] = {(size_t)(rows * cols) * 4}, out_b[3] = {sizeof sums, sizeof args, (size_t)(rows * cols) * 2};
    check_against_eval(dev, &k, &a, ins, in_b, outs, out_b);
    kir_free(&k);
    free(x);
    free(el);
    FILE *f = fopen(rec, "r");
    cr_assert_not_null(f, "no launches recorded in %s", rec);
    char line[64] = "";
    cr_assert_not_null(fgets(line, sizeof line, f));
    fclose(f);
    cr_assert(strncmp(line, "vulkan:", 7) == 0, "recorded line starts '%.20s'", line);
    burnc_device_release(dev);
    bt_remove_dir(dir);
    BT_LEAK_CHECK();
#else
    cr_skip_test("burnc was built without the vulkan backend");
#endif
}
