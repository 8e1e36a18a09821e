/* The cuda device (runtime/cuda/): opening and naming, transfers, the memory pool, errors
 * (out of memory, rejected PTX, a lost device), element-wise results bitwise equal to the cpu
 * device's, reductions identical across runs and tuning choices, moves between devices, the
 * copy yardstick and CUDA graphs.
 *
 * Tests that need a GPU skip with the reason when cuda:0 cannot open (no driver, no device);
 * the error mapping and the unavailable message run everywhere. */
#include <stdint.h>

#include "common.h"
#include <criterion/redirect.h>
#include "cuda/cu.h"

/* cuda:0, or a skip with the reason. */
static burnc_device_t *open_gpu(void)
{
    burnc_device_t *dev = burnc_device_open("cuda:0");
    if (!dev && burnc_error_code() == BURNC_ERR_UNAVAILABLE)
        cr_skip_test("cuda:0 is not available: %s", burnc_error_message());
    cr_assert_not_null(dev, "cuda:0: %s: %s", burnc_status_name(burnc_error_code()), burnc_error_message());
    return dev;
}

/* The cpu device for bitwise comparisons, or a skip (a build without LLVM). */
static burnc_device_t *open_cpu(void)
{
    burnc_device_t *dev = burnc_device_open("cpu");
    if (!dev)
        cr_skip_test("cpu is not available to compare with: %s", burnc_error_message());
    return dev;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Random floats in [-4, 4) with a few specials. */
static void random_f32(float *x, int64_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15u + 7;
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((double)(rng_next(&s) >> 11) * 0x1p-53 * 8 - 4);
    if (n > 8) {
        x[1] = 0.0f, x[2] = -0.0f, x[3] = INFINITY, x[4] = -INFINITY, x[5] = NAN, x[6] = 1e-40f;
    }
}

static void expect_same_bits(const void *a, const void *b, size_t bytes, const char *what)
{
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < bytes; i++)
        cr_assert_eq(x[i], y[i], "%s: byte %zu differs: %02x vs %02x", what, i, x[i], y[i]);
}

/* Bitwise equal elements of dtype dt, except that any NaN equals any NaN: the payload of a NaN
 * made by an operation is the hardware's (x86 and NVIDIA GPUs make different ones). */
static void expect_same_values(const void *a, const void *b, int64_t n, burnc_dtype_t dt, const char *what)
{
    size_t es = burnc_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *x = (const unsigned char *)a + (size_t)i * es, *y = (const unsigned char *)b + (size_t)i * es;
        if (memcmp(x, y, es) == 0 || (isnan(bt_load(a, dt, i)) && isnan(bt_load(b, dt, i))))
            continue;
        cr_assert_fail("%s: element %lld differs: %.9g vs %.9g", what, (long long)i, bt_load(a, dt, i),
                       bt_load(b, dt, i));
    }
}

/* ---- Everywhere ---- */

Test(cuda, unavailable_message_or_name)
{
    burnc_error_clear();
    burnc_device_t *dev = burnc_device_open("cuda:0");
    if (!dev) {
        /* no driver or no device: the message says which, and the library goes on */
        BT_ASSERT_LAST_ERROR(BURNC_ERR_UNAVAILABLE, "cuda:0");
        const char *m = burnc_error_message();
        cr_assert(strstr(m, "libcuda.so.1") || strstr(m, "cuInit") || strstr(m, "CUDA device"),
                  "the reason is missing: %s", m);
        burnc_device_t *ref = bt_ref();
        bt_expect_usable(ref);
        burnc_device_release(ref);
    } else {
        cr_assert_eq(burnc_device_type(dev), BURNC_DEVICE_CUDA);
        cr_assert_str_eq(burnc_device_spec(dev), "cuda:0");
        cr_assert(strstr(burnc_device_name(dev), "sm_") != NULL, "name without compute capability: %s",
                  burnc_device_name(dev));
        burnc_device_release(dev);
    }
    BT_LEAK_CHECK();
}

Test(cuda, error_mapping)
{
    cr_assert_eq(cuda_status_of(CUDA_SUCCESS), BURNC_OK);
    cr_assert_eq(cuda_status_of(CUDA_ERROR_OUT_OF_MEMORY), BURNC_ERR_OUT_OF_MEMORY);
    cr_assert_eq(cuda_status_of(CUDA_ERROR_ILLEGAL_ADDRESS), BURNC_ERR_DEVICE_LOST);
    cr_assert_eq(cuda_status_of(CUDA_ERROR_LAUNCH_FAILED), BURNC_ERR_DEVICE_LOST);
    cr_assert_eq(cuda_status_of(CUDA_ERROR_MISALIGNED_ADDRESS), BURNC_ERR_DEVICE_LOST);
    cr_assert_eq(cuda_status_of(CUDA_ERROR_ILLEGAL_INSTRUCTION), BURNC_ERR_DEVICE_LOST);
    cr_assert_eq(cuda_status_of(CUDA_ERROR_INVALID_PTX), BURNC_ERR_COMPILE);
    cr_assert_eq(cuda_status_of(CUDA_ERROR_NO_BINARY_FOR_GPU), BURNC_ERR_COMPILE);
    cr_assert_eq(cuda_status_of(CUDA_ERROR_UNSUPPORTED_PTX_VERSION), BURNC_ERR_COMPILE);
    cr_assert_eq(cuda_status_of(CUDA_ERROR_NO_DEVICE), BURNC_ERR_UNAVAILABLE);
    cr_assert_eq(cuda_status_of(CUDA_ERROR_INVALID_VALUE), BURNC_ERR_EXECUTION);
    cr_assert_eq(cuda_status_of(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), BURNC_ERR_EXECUTION);
    cr_assert(cuda_error_is_sticky(CUDA_ERROR_ILLEGAL_ADDRESS));
    cr_assert(!cuda_error_is_sticky(CUDA_ERROR_OUT_OF_MEMORY));
    cr_assert(!cuda_error_is_sticky(CUDA_ERROR_INVALID_PTX));
    /* the message carries CUDA's own name when the driver is loaded, the number otherwise */
    char why[400];
    bool driver = cuda_driver_get(why, sizeof why) != NULL;
    cr_assert_eq(cuda_fail(CUDA_ERROR_ILLEGAL_ADDRESS, "cuLaunchKernel of %s", "k"), BURNC_ERR_DEVICE_LOST);
    BT_ASSERT_LAST_ERROR(BURNC_ERR_DEVICE_LOST, "cuLaunchKernel of k: ");
    BT_ASSERT_MSG_HAS(driver ? "CUDA_ERROR_ILLEGAL_ADDRESS" : "CUresult 700");
    cr_assert_eq(cuda_fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc"), BURNC_ERR_OUT_OF_MEMORY);
    BT_ASSERT_MSG_HAS(driver ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUresult 2");
    BT_LEAK_CHECK();
}

Test(cuda, enumerate_matches_open)
{
    burnc_device_info_t info[8];
    int n = burnc_device_enumerate(BURNC_DEVICE_CUDA, info, 8);
    cr_assert(n >= 0);
    if (n == 0) {
        BT_ASSERT_FAILS(burnc_device_open("cuda"), BURNC_ERR_UNAVAILABLE, "cuda:0");
    }
    for (int i = 0; i < n && i < 8; i++) {
        char spec[32];
        snprintf(spec, sizeof spec, "cuda:%d", i);
        cr_assert_str_eq(info[i].spec, spec);
        cr_assert_eq(info[i].type, BURNC_DEVICE_CUDA);
        cr_assert(strstr(info[i].name, "sm_") && strstr(info[i].name, "GiB"), "name: %s", info[i].name);
        burnc_device_t *dev = BT_NOT_NULL(burnc_device_open(spec));
        cr_assert_str_eq(burnc_device_name(dev), info[i].name);
        burnc_device_release(dev);
    }
    char beyond[32];
    snprintf(beyond, sizeof beyond, "cuda:%d", n);
    BT_ASSERT_FAILS(burnc_device_open(beyond), BURNC_ERR_UNAVAILABLE, beyond);
    BT_LEAK_CHECK();
}

/* ---- On a GPU ---- */

Test(cuda, open_twice_same_device)
{
    burnc_device_t *a = open_gpu();
    burnc_device_t *b = BT_NOT_NULL(burnc_device_open("cuda"));
    cr_assert(burnc_device_equal(a, b));
    cr_assert_str_eq(burnc_device_spec(b), "cuda:0");
    cr_assert(burnc_device_supports_dtype(a, BURNC_DTYPE_F64));
    cr_assert(burnc_device_supports_dtype(a, BURNC_DTYPE_BF16));
    burnc_device_release(b);
    burnc_device_release(a);
    BT_LEAK_CHECK();
}

Test(cuda, round_trip_every_dtype_and_size)
{
    burnc_device_t *dev = open_gpu();
    static const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16,
                                        BURNC_DTYPE_I32, BURNC_DTYPE_I64, BURNC_DTYPE_U8,  BURNC_DTYPE_BOOL};
    /* 0, odd sizes, and one past the 8 MiB staging buffer in pieces */
    static const int64_t sizes[] = {0, 1, 3, 17, 1001, 65537, (9 << 20) / 8 + 3};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            size_t esize = burnc_dtype_size(dts[d]), bytes = (size_t)sizes[z] * esize;
            unsigned char *in = malloc(bytes + 1), *out = malloc(bytes + 1);
            uint64_t s = d * 131 + z + 1;
            for (size_t i = 0; i < bytes; i++)
                in[i] = dts[d] == BURNC_DTYPE_BOOL ? (unsigned char)(rng_next(&s) & 1) : (unsigned char)rng_next(&s);
            memset(out, 0xa5, bytes + 1);
            burnc_tensor_t *t = BT_NOT_NULL(burnc_tensor_from_data(dev, dts[d], 1, &sizes[z], in));
            BT_ASSERT_OK(burnc_tensor_read(t, out, bytes));
            expect_same_bits(in, out, bytes, burnc_dtype_name(dts[d]));
            cr_assert_eq(out[bytes], 0xa5, "read past the end");
            burnc_tensor_release(t);
            free(in);
            free(out);
        }
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(cuda, pool_does_not_grow_under_churn)
{
    burnc_device_t *dev = open_gpu();
    const int64_t n = 4099;
    float *x = malloc((size_t)n * sizeof *x);
    random_f32(x, n, 3);
    burnc_memory_report_t first = {0};
    for (int i = 0; i < 10000; i++) {
        const int64_t shape[1] = {n - (i % 3)};
        burnc_tensor_t *t = BT_NOT_NULL(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 1, shape, x));
        burnc_tensor_release(t);
        if (i == 2)
            first = bt_memory(dev);
    }
    burnc_memory_report_t last = bt_memory(dev);
    cr_assert_eq(last.buffers_in_use, 0);
    cr_assert_eq(last.bytes_in_use, 0);
    cr_assert_eq(last.bytes_cached, first.bytes_cached, "the pool grew: %llu -> %llu cached bytes",
                 (unsigned long long)first.bytes_cached, (unsigned long long)last.bytes_cached);
    cr_assert_eq(last.bytes_peak, first.bytes_peak);
    BT_ASSERT_OK(burnc_device_memory_cleanup(dev));
    cr_assert_eq(bt_memory(dev).bytes_cached, 0);
    free(x);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(cuda, out_of_memory_then_usable)
{
    burnc_device_t *dev = open_gpu();
    const int64_t shape[2] = {(int64_t)10 << 20, (int64_t)1 << 18}; /* 10 TiB of f32 */
    /* made from data: the allocation fails before the (small) data would be read */
    float data[4] = {1, 2, 3, 4};
    BT_ASSERT_FAILS(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, shape, data), BURNC_ERR_OUT_OF_MEMORY,
                    "cannot allocate 10995116277760 bytes");
    BT_ASSERT_MSG_HAS("CUDA_ERROR_OUT_OF_MEMORY");
    bt_expect_usable(dev);
    /* recorded: the flush meets the failure and the read of what depends on it reports it */
    burnc_scope_begin();
    burnc_tensor_t *big = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_F32, 2, shape));
    burnc_tensor_t *corner = BT_NOT_NULL(burnc_slice(burnc_slice(big, 0, 0, 1, 1), 1, 0, 2, 1));
    float two[2];
    burnc_status_t s = burnc_tensor_read(corner, two, sizeof two);
    cr_assert_eq(s, BURNC_ERR_OUT_OF_MEMORY, "read gave %s: %s", burnc_status_name(s), burnc_error_message());
    BT_ASSERT_MSG_HAS("cuda:0");
    burnc_scope_end();
    burnc_device_sync(dev); /* reports the failure once more, or nothing */
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(cuda, broken_ptx_gives_compile_error_with_log)
{
    burnc_device_t *dev = open_gpu();
    static const char broken[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
                                 ".visible .entry broken()\n{\n    frobnicate.u32 %r1;\n    ret;\n}\n";
    static const char fine[] = ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry fine()\n{\n    ret;\n}\n";
    for (int link = 0; link < 2; link++) {
        burnc_error_clear();
        BT_ASSERT_STATUS(cuda_test_load_ptx(dev, broken, link), BURNC_ERR_COMPILE, "rejected the PTX");
        BT_ASSERT_MSG_HAS("CUDA_ERROR_");
        /* the driver's log names what it could not parse */
        BT_ASSERT_MSG_HAS("frobnicate");
        BT_ASSERT_OK(cuda_test_load_ptx(dev, fine, link));
    }
    bt_expect_usable(dev);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* The gelu chain of burnc-bench and a few more ops on dtype dt, run on dev from x. */
/* A chain of element-wise ops of t (inside the caller's scope). */
static burnc_tensor_t *chain_of(burnc_tensor_t *t)
{
    burnc_tensor_t *y = burnc_add_scalar(burnc_mul_scalar(burnc_gelu(t), 1.25), -0.5);
    y = burnc_add(y, burnc_mul(burnc_exp(burnc_mul_scalar(t, 0.25)), burnc_sigmoid(t)));
    return burnc_div(y, burnc_add_scalar(burnc_abs(t), 1.0));
}

static burnc_tensor_t *chain(burnc_device_t *dev, burnc_dtype_t dt, const float *x, int64_t n)
{
    burnc_scope_begin();
    burnc_tensor_t *y = chain_of(burnc_cast(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 1, &n, x), dt));
    burnc_tensor_keep(y);
    burnc_scope_end();
    return y;
}

Test(cuda, elementwise_bitwise_equal_to_cpu)
{
    burnc_device_t *gpu = open_gpu();
    burnc_device_t *cpu = open_cpu();
    static const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16};
    const int64_t n = (1 << 20) + 3;
    float *x = malloc((size_t)n * sizeof *x);
    random_f32(x, n, 11);
    for (int fused = 1; fused >= 0; fused--) {
        BT_ASSERT_OK(burnc_device_set_fusion(gpu, fused));
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
            size_t bytes = (size_t)n * burnc_dtype_size(dts[d]);
            void *a = malloc(bytes), *b = malloc(bytes);
            burnc_tensor_t *yg = BT_NOT_NULL(chain(gpu, dts[d], x, n));
            burnc_tensor_t *yc = BT_NOT_NULL(chain(cpu, dts[d], x, n));
            BT_ASSERT_OK(burnc_tensor_read(yg, a, bytes));
            BT_ASSERT_OK(burnc_tensor_read(yc, b, bytes));
            expect_same_values(a, b, n, dts[d], burnc_dtype_name(dts[d]));
            burnc_tensor_release(yg);
            burnc_tensor_release(yc);
            free(a);
            free(b);
        }
    }
    free(x);
    burnc_device_release(cpu);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

/* Every f16 and bf16 number through 16-bit chains that take a table on cuda (codegen/ptx_lut.c):
 * gelu alone, gelu(x + b), and chain_of the 16-bit tensor; bitwise the cpu
 * device's, fused and not. */
Test(cuda, lut16_every_16bit_input_equal_to_cpu)
{
    burnc_device_t *gpu = open_gpu();
    burnc_device_t *cpu = open_cpu();
    static const burnc_dtype_t dts[] = {BURNC_DTYPE_BF16, BURNC_DTYPE_F16};
    int64_t n = 65536, shape[2] = {256, 256}, bshape[1] = {256};
    uint16_t *x = malloc((size_t)n * 2), *a = malloc((size_t)n * 2), *b = malloc((size_t)n * 2);
    uint16_t bias[256];
    for (int64_t i = 0; i < n; i++)
        x[i] = (uint16_t)i;
    for (int f = 1; f >= 0; f--)
        for (size_t d = 0; d < 2; d++) {
            for (int i = 0; i < 256; i++) /* -0 and small values that round the sums */
                bias[i] = (uint16_t)(i == 0 ? 0x8000 : (dts[d] == BURNC_DTYPE_BF16 ? 0x3c00 : 0x1c00) + i);
            for (int form = 0; form < 3; form++) {
                burnc_tensor_t *y[2];
                burnc_device_t *devs[2] = {gpu, cpu};
                for (int v = 0; v < 2; v++) {
                    BT_ASSERT_OK(burnc_device_set_fusion(devs[v], f));
                    burnc_scope_begin();
                    burnc_tensor_t *t = burnc_tensor_from_data(devs[v], dts[d], 2, shape, x);
                    burnc_tensor_t *bt = burnc_tensor_from_data(devs[v], dts[d], 1, bshape, bias);
                    y[v] = form == 0 ? burnc_gelu(t) : form == 1 ? burnc_gelu(burnc_add(t, bt)) : chain_of(t);
                    burnc_tensor_keep(BT_NOT_NULL(y[v]));
                    burnc_scope_end();
                }
                BT_ASSERT_OK(burnc_tensor_read(y[0], a, (size_t)n * 2));
                BT_ASSERT_OK(burnc_tensor_read(y[1], b, (size_t)n * 2));
                char what[96];
                snprintf(what, sizeof what, "%s form %d, fusion %d", burnc_dtype_name(dts[d]), form, f);
                expect_same_values(a, b, n, dts[d], what);
                burnc_tensor_release(y[0]);
                burnc_tensor_release(y[1]);
            }
        }
    free(x), free(a), free(b);
    burnc_device_release(cpu);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

/* Row sums, a whole-tensor sum, softmax, a loss and argmax of x [rows, cols] on dev, then
 * column sums of x * x and column maxima (the column entry), read into out (rows + 2 +
 * 2 * rows * cols + 2 * cols floats) and arg (rows i64). */
static void reductions(burnc_device_t *dev, const float *x, int64_t rows, int64_t cols, float *out, int64_t *arg)
{
    const int64_t shape[2] = {rows, cols};
    burnc_scope_begin();
    burnc_tensor_t *t = BT_NOT_NULL(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, shape, x));
    burnc_tensor_t *rs = BT_NOT_NULL(burnc_sum(t, 1, (int[]){1}, false));
    burnc_tensor_t *all = BT_NOT_NULL(burnc_sum(t, 0, NULL, false));
    burnc_tensor_t *sm = BT_NOT_NULL(burnc_softmax(t, 1));
    burnc_tensor_t *am = BT_NOT_NULL(burnc_argmax(t, 1, false));
    /* a loss: a whole-tensor mean, with the difference it squares kept as an element output
     * (long tensors: the multi-pass entries, the element stores in the leaves entry) */
    burnc_tensor_t *d = BT_NOT_NULL(burnc_sub(t, burnc_mul_scalar(t, 0.25)));
    burnc_tensor_t *loss = BT_NOT_NULL(burnc_mean(burnc_mul(d, d), 0, NULL, false));
    BT_ASSERT_OK(burnc_tensor_read(loss, out + rows + 1 + rows * cols, sizeof *out));
    BT_ASSERT_OK(burnc_tensor_read(d, out + rows + 2 + rows * cols, (size_t)(rows * cols) * sizeof *out));
    BT_ASSERT_OK(burnc_tensor_read(rs, out, (size_t)rows * sizeof *out));
    BT_ASSERT_OK(burnc_tensor_read(all, out + rows, sizeof *out));
    BT_ASSERT_OK(burnc_tensor_read(sm, out + rows + 1, (size_t)(rows * cols) * sizeof *out));
    BT_ASSERT_OK(burnc_tensor_read(am, arg, (size_t)rows * sizeof *arg));
    float *col = out + rows + 2 + 2 * rows * cols;
    BT_ASSERT_OK(burnc_tensor_read(burnc_sum(burnc_mul(t, t), 1, (int[]){0}, false), col, (size_t)cols * sizeof *out));
    BT_ASSERT_OK(burnc_tensor_read(burnc_max(t, 1, (int[]){0}, false), col + cols, (size_t)cols * sizeof *out));
    burnc_scope_end();
}

Test(cuda, reductions_identical_across_runs_tuning_and_cpu)
{
    burnc_device_t *gpu = open_gpu();
    /* short rows (one leaf), long rows (several leaves, a partial last one); long columns
     * (several leaves) */
    static const int64_t shapes[][2] = {{333, 1000}, {7, 3 * 4096 + 1001}, {1, (1 << 20) + 5}, {9001, 40}};
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        int64_t rows = shapes[sh][0], cols = shapes[sh][1], nf = rows + 2 + 2 * rows * cols + 2 * cols;
        float *x = malloc((size_t)(rows * cols) * sizeof *x);
        float *first = malloc((size_t)nf * sizeof *first), *again = malloc((size_t)nf * sizeof *again);
        int64_t *arg0 = malloc((size_t)rows * sizeof *arg0), *arg1 = malloc((size_t)rows * sizeof *arg1);
        random_f32(x, rows * cols, 100 + sh);
        x[1] = 1.0f, x[3] = 2.0f, x[4] = -3.0f, x[5] = 0.5f; /* finite: sums stay comparable */
        reductions(gpu, x, rows, cols, first, arg0);
        for (int c = -1; c < 10; c++) {
            if (!cuda_test_force_candidate(gpu, c))
                continue;
            reductions(gpu, x, rows, cols, again, arg1);
            expect_same_bits(first, again, (size_t)nf * sizeof *first, "reductions across candidates");
            expect_same_bits(arg0, arg1, (size_t)rows * sizeof *arg0, "argmax across candidates");
        }
        cuda_test_force_candidate(gpu, -1);
        burnc_device_t *cpu = burnc_device_open("cpu");
        if (cpu) {
            reductions(cpu, x, rows, cols, again, arg1);
            expect_same_bits(first, again, (size_t)nf * sizeof *first, "reductions against cpu");
            expect_same_bits(arg0, arg1, (size_t)rows * sizeof *arg0, "argmax against cpu");
            burnc_device_release(cpu);
        }
        free(x), free(first), free(again), free(arg0), free(arg1);
    }
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

Test(cuda, to_device_both_ways)
{
    burnc_device_t *gpu = open_gpu();
    burnc_device_t *ref = bt_ref();
    const int64_t shape[2] = {37, 129};
    const int64_t n = shape[0] * shape[1];
    float *x = malloc((size_t)n * sizeof *x), *got = malloc((size_t)n * sizeof *got);
    random_f32(x, n, 5);
    burnc_tensor_t *h = BT_NOT_NULL(burnc_tensor_from_data(ref, BURNC_DTYPE_F32, 2, shape, x));
    burnc_tensor_t *g = BT_NOT_NULL(burnc_tensor_to_device(h, gpu));
    burnc_tensor_t *g2 = BT_NOT_NULL(burnc_mul_scalar(g, 3.0));
    burnc_tensor_t *back = BT_NOT_NULL(burnc_tensor_to_device(g2, ref));
    BT_ASSERT_OK(burnc_tensor_read(back, got, (size_t)n * sizeof *got));
    for (int64_t i = 0; i < n; i++) {
        float want = x[i] * 3.0f;
        cr_assert(memcmp(&want, &got[i], sizeof want) == 0 || (isnan(want) && isnan(got[i])),
                  "element %lld: %g vs %g", (long long)i, (double)got[i], (double)want);
    }
    /* a transposed view crosses as its values */
    burnc_tensor_t *tv = BT_NOT_NULL(burnc_transpose(g, 0, 1));
    burnc_tensor_t *tb = BT_NOT_NULL(burnc_tensor_to_device(tv, ref));
    BT_ASSERT_OK(burnc_tensor_read(tb, got, (size_t)n * sizeof *got));
    for (int64_t i = 0; i < shape[0]; i++)
        for (int64_t j = 0; j < shape[1]; j++) {
            float a = got[j * shape[0] + i], b = x[i * shape[1] + j];
            cr_assert(memcmp(&a, &b, sizeof a) == 0, "transposed [%lld,%lld]", (long long)i, (long long)j);
        }
    burnc_tensor_release(tb), burnc_tensor_release(tv);
    burnc_tensor_release(back), burnc_tensor_release(g2), burnc_tensor_release(g), burnc_tensor_release(h);
    free(x), free(got);
    burnc_device_release(ref);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

Test(cuda, opaque_matmul_runs_on_host_correctly)
{
    burnc_device_t *gpu = open_gpu();
    burnc_device_t *ref = bt_ref();
    const int64_t sa[2] = {5, 7}, sb[2] = {7, 3};
    float a[35], b[21], got[15], want[15];
    random_f32(a, 35, 1), random_f32(b, 21, 2);
    for (int i = 0; i < 35; i++)
        a[i] = isfinite(a[i]) ? a[i] : 1.0f;
    for (int i = 0; i < 21; i++)
        b[i] = isfinite(b[i]) ? b[i] : 2.0f;
    burnc_device_t *devs[2] = {gpu, ref};
    for (int d = 0; d < 2; d++) {
        burnc_scope_begin();
        burnc_tensor_t *y = burnc_add_scalar(burnc_matmul(bt_f32(devs[d], 2, sa, a), bt_f32(devs[d], 2, sb, b)), 1.0);
        cr_assert_not_null(y, "%s", burnc_error_message());
        BT_ASSERT_OK(burnc_tensor_read(y, d ? want : got, sizeof got));
        burnc_scope_end();
    }
    /* the GPU runs the cpu device's f32 fma chain (tests/test_cuda_mm.c checks its bits), ref
     * accumulates in f64: they agree within K * eps * sum |a b| */
    for (int i = 0; i < 15; i++)
        cr_assert(fabsf(got[i] - want[i]) <= 7 * 0x1p-23f * 7 * 16 + 0x1p-20f, "element %d: %.9g vs ref %.9g", i,
                  (double)got[i], (double)want[i]);
    burnc_device_release(ref);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

Test(cuda, copy_time_is_sane)
{
    burnc_device_t *dev = open_gpu();
    double s = 0;
    BT_ASSERT_OK(burnc_device_copy_time(dev, (size_t)256 << 20, 5, &s));
    double gbs = 2.0 * (double)(256 << 20) / s / 1e9; /* read + write */
    cr_assert(gbs > 50 && gbs < 20000, "copy of 256 MiB in %g s: %g GB/s", s, gbs);
    BT_ASSERT_STATUS(burnc_device_copy_time(dev, 0, 5, &s), BURNC_ERR_INVALID_ARGUMENT, "bytes 0");
    const burnc_memory_report_t r = bt_memory(dev);
    cr_assert_eq(r.buffers_in_use, 0, "copy_time kept %llu buffers", (unsigned long long)r.buffers_in_use);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(cuda, timer_times_the_work_between_its_calls)
{
    burnc_device_t *dev = open_gpu();
    bt_check_timer(dev, 1 << 24);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

Test(cuda, graphs_replay_repeated_batches)
{
    setenv("BURNC_CUDA_GRAPHS", "1", 1);
    burnc_device_t *dev = open_gpu();
    BT_ASSERT_OK(burnc_device_set_fusion(dev, false)); /* several launches per batch */
    const int64_t n = 10000;
    float *x = malloc((size_t)n * sizeof *x), *got = malloc((size_t)n * sizeof *got);
    random_f32(x, n, 9);
    burnc_tensor_t *t = BT_NOT_NULL(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 1, &n, x));
    for (int it = 0; it < 10; it++) {
        burnc_scope_begin();
        burnc_tensor_t *y = burnc_mul_scalar(burnc_add_scalar(burnc_mul_scalar(t, 2.0), 1.0), 3.0);
        BT_ASSERT_OK(burnc_tensor_read(y, got, (size_t)n * sizeof *got));
        burnc_scope_end();
        for (int64_t i = 0; i < n; i++) {
            float want = (x[i] * 2.0f + 1.0f) * 3.0f;
            cr_assert(memcmp(&want, &got[i], sizeof want) == 0 || (isnan(want) && isnan(got[i])),
                      "iteration %d, element %lld: %g vs %g", it, (long long)i, (double)got[i], (double)want);
        }
    }
    const cuda_device *cd = cuda_dev(dev);
    cr_assert(cd->graph_captures >= 1 && cd->graph_replays >= 2, "captures %llu, replays %llu",
              (unsigned long long)cd->graph_captures, (unsigned long long)cd->graph_replays);
    burnc_tensor_release(t);
    free(x), free(got);
    burnc_device_release(dev);
    BT_LEAK_CHECK();
}

/* On a GPU of compute capability 9.0 or more, every launch is processed while the one before
 * it drains (programmatic stream serialization); each kernel's griddepcontrol.wait must hold
 * its work until its predecessor has finished. A chain of 330 one-kernel ops over 4 MB,
 * each reading the last one's output, with buffers recycled by the pool (so a kernel writes
 * where the one before it may still be reading) and a row sum broadcast back every tenth
 * step, gives exactly 300 everywhere: with the launches overlapped, without, and replayed from
 * captured CUDA graphs. */
Test(cuda, dependent_launches_see_their_predecessors)
{
    static const char *modes[][2] = {{"BURNC_CUDA_PDL", "1"}, {"BURNC_CUDA_PDL", "0"}, {"BURNC_CUDA_GRAPHS", "1"}};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        setenv(modes[m][0], modes[m][1], 1);
        burnc_device_t *dev = open_gpu();
        unsetenv(modes[m][0]);
        const cuda_device *cd = cuda_dev(dev);
        cr_assert_eq(cd->pdl, cd->cc >= 90 && strcmp(modes[m][1], "0") != 0, "%s=%s: overlap %d on cc %d",
                     modes[m][0], modes[m][1], cd->pdl, cd->cc);
        BT_ASSERT_OK(burnc_device_set_fusion(dev, false)); /* one kernel per op */
        const int64_t shape[2] = {1024, 1024}, n = shape[0] * shape[1];
        burnc_tensor_t *x = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_F32, 2, shape));
        for (int i = 1; i <= 300; i++) {
            burnc_scope_begin();
            burnc_tensor_t *y = burnc_add_scalar(x, 1.0);
            if (i % 10 == 0) {
                burnc_tensor_t *r = burnc_mul_scalar(burnc_sum(y, 1, (int[]){1}, true), 1.0 / 1024);
                y = burnc_add(burnc_mul_scalar(y, 0.0), r);
            }
            burnc_tensor_t *kept = BT_NOT_NULL(burnc_tensor_keep(y));
            burnc_scope_end();
            burnc_tensor_release(x);
            x = kept;
        }
        float *got = malloc((size_t)n * sizeof *got);
        BT_ASSERT_OK(burnc_tensor_read(x, got, (size_t)n * sizeof *got));
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(got[i], 300.0f, "%s=%s: element %lld is %.9g, not 300", modes[m][0], modes[m][1],
                         (long long)i, (double)got[i]);
        free(got);
        burnc_tensor_release(x);
        burnc_device_release(dev);
    }
    BT_LEAK_CHECK();
}

/* BURNC_CUDA_PROFILE=1: at close, a table on stderr with a row per kernel name and shape, the
 * element-wise kernel and the matmul each with their launch count. */
Test(cuda, profile_table_at_close, .init = cr_redirect_stderr)
{
    setenv("BURNC_CUDA_PROFILE", "1", 1);
    burnc_device_t *dev = open_gpu();
    const int64_t n = 4096, sq[2] = {64, 64};
    float *x = calloc((size_t)n, sizeof *x);
    random_f32(x, n, 3);
    for (int64_t i = 0; i < n; i++)
        x[i] = isfinite(x[i]) ? x[i] : 1.0f;
    burnc_tensor_t *t = BT_NOT_NULL(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 1, &n, x));
    burnc_tensor_t *m = BT_NOT_NULL(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, sq, x));
    for (int it = 0; it < 3; it++) {
        burnc_scope_begin();
        BT_ASSERT_OK(burnc_tensor_read(burnc_exp(burnc_mul_scalar(t, 0.5)), x, (size_t)n * sizeof *x));
        BT_ASSERT_OK(burnc_tensor_read(burnc_matmul(m, m), x, (size_t)n * sizeof *x));
        burnc_scope_end();
    }
    burnc_tensor_release(t);
    burnc_tensor_release(m);
    burnc_device_release(dev);
    unsetenv("BURNC_CUDA_PROFILE");
    fflush(stderr);
    FILE *f = cr_get_redirected_stderr();
    char line[512];
    bool head = false, ew = false, mm = false;
    while (fgets(line, sizeof line, f)) {
        head |= strstr(line, "burnc[profile] cuda:0: ") && strstr(line, "launches");
        ew |= strstr(line, "burnc[profile]") && strstr(line, " 3 ") && strstr(line, "[4096]");
        mm |= strstr(line, "burnc[profile]") && strstr(line, " 3 ") && strstr(line, "matmul f32 64x64x64");
    }
    cr_assert(head && ew && mm, "profile table: header %d, element-wise row %d, matmul row %d", head, ew, mm);
    free(x);
    BT_LEAK_CHECK();
}

Test(cuda, sticky_error_loses_the_device_until_reopened)
{
    burnc_device_t *dev = open_gpu();
    const int64_t n = 3;
    burnc_tensor_t *t = BT_NOT_NULL(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 1, &n, (float[]){1, 2, 3}));
    burnc_error_clear();
    BT_ASSERT_STATUS(cuda_test_illegal_address(dev), BURNC_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
    float out[3];
    BT_ASSERT_STATUS(burnc_tensor_read(t, out, sizeof out), BURNC_ERR_DEVICE_LOST, "reopen");
    BT_ASSERT_STATUS(burnc_device_sync(dev), BURNC_ERR_DEVICE_LOST, "reopen");
    burnc_tensor_release(t);
    burnc_device_release(dev);
    /* a fresh context where the driver gives one (a sticky error may end CUDA for the process:
     * then reopening says so), and the other devices go on */
    burnc_error_clear();
    dev = burnc_device_open("cuda:0");
    if (dev) {
        bt_expect_usable(dev);
        burnc_device_release(dev);
    } else {
        BT_ASSERT_LAST_ERROR(BURNC_ERR_DEVICE_LOST, "CUDA_ERROR_ILLEGAL_ADDRESS");
    }
    burnc_device_t *ref = bt_ref();
    bt_expect_usable(ref);
    burnc_device_release(ref);
    BT_LEAK_CHECK();
}
