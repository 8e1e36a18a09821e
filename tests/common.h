/* Helpers shared by the Criterion suites.
 *
 * Criterion runs every test in a worker process. A leak that LeakSanitizer finds there does not
 * fail the test by itself, so every test ends with BT_LEAK_CHECK(), which asks LSan for a
 * report at that point and fails the test when it finds anything. Without ASan it does
 * nothing. */
#ifndef BURNC_TESTS_COMMON_H
#define BURNC_TESTS_COMMON_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "burnc.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BT_HAVE_LSAN 1
#endif
#endif
#if !defined(BT_HAVE_LSAN) && defined(__SANITIZE_ADDRESS__)
#define BT_HAVE_LSAN 1
#endif

#ifdef BT_HAVE_LSAN
#include <sanitizer/lsan_interface.h>
/* Fails the test if anything allocated so far is no longer reachable. */
#define BT_LEAK_CHECK() \
    cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks (report on stderr)")
#else
#define BT_LEAK_CHECK() ((void)0)
#endif

/* The last error is `code` and its message contains `substr`. */
#define BT_ASSERT_LAST_ERROR(code, substr)                                                        \
    do {                                                                                          \
        burnc_status_t bt_code_ = burnc_error_code();                                             \
        const char *bt_msg_ = burnc_error_message();                                              \
        cr_assert_eq(bt_code_, (code), "last error is %s, expected %s (message: \"%s\")",         \
                     burnc_status_name(bt_code_), burnc_status_name(code), bt_msg_ ? bt_msg_ : "(null)"); \
        cr_assert(bt_msg_ != NULL && strstr(bt_msg_, (substr)) != NULL,                           \
                  "message \"%s\" does not contain \"%s\"", bt_msg_ ? bt_msg_ : "(null)", (substr)); \
    } while (0)

/* The last error's message also contains `substr`. */
#define BT_ASSERT_MSG_HAS(substr)                                                                 \
    do {                                                                                          \
        const char *bt_msg_ = burnc_error_message();                                              \
        cr_assert(bt_msg_ != NULL && strstr(bt_msg_, (substr)) != NULL,                           \
                  "message \"%s\" does not contain \"%s\"", bt_msg_ ? bt_msg_ : "(null)", (substr)); \
    } while (0)

/* A status-returning call gives `code`, and the last error says so with `substr`. */
#define BT_ASSERT_STATUS(expr, code, substr)                                                      \
    do {                                                                                          \
        burnc_status_t bt_s_ = (expr);                                                            \
        cr_assert_eq(bt_s_, (code), "%s returned %s, expected %s (message: \"%s\")", #expr,       \
                     burnc_status_name(bt_s_), burnc_status_name(code), burnc_error_message());   \
        BT_ASSERT_LAST_ERROR(code, substr);                                                       \
    } while (0)

/* A call that returns a handle gives NULL with last error `code` naming `substr`. */
#define BT_ASSERT_FAILS(expr, code, substr)                                                       \
    do {                                                                                          \
        burnc_error_clear();                                                                      \
        const void *bt_h_ = (expr);                                                               \
        cr_assert_null(bt_h_, "%s succeeded, expected %s", #expr, burnc_status_name(code));       \
        BT_ASSERT_LAST_ERROR(code, substr);                                                       \
    } while (0)

/* A status-returning call succeeds. */
#define BT_ASSERT_OK(expr)                                                                        \
    do {                                                                                          \
        burnc_status_t bt_s_ = (expr);                                                            \
        cr_assert_eq(bt_s_, BURNC_OK, "%s returned %s: %s", #expr, burnc_status_name(bt_s_),      \
                     burnc_error_message());                                                      \
    } while (0)

/* A handle-returning call succeeds; evaluates to the handle. */
#define BT_NOT_NULL(expr) bt_not_null_((expr), #expr, __FILE__, __LINE__)

static inline void *bt_not_null_(void *p, const char *what, const char *file, int line)
{
    cr_assert(p != NULL, "%s:%d: %s returned NULL: %s (%s)", file, line, what,
              burnc_status_name(burnc_error_code()), burnc_error_message());
    return p;
}

/* The reference device, which every build has. */
/* Removes a test's temporary directory and everything in it. */
static inline void bt_remove_dir(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
}

static inline burnc_device_t *bt_ref(void) { return BT_NOT_NULL(burnc_device_open("ref")); }

/* A dense f32 tensor from a literal list. */
static inline burnc_tensor_t *bt_f32(burnc_device_t *dev, int rank, const int64_t *shape, const float *data)
{
    return BT_NOT_NULL(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, rank, shape, data));
}

/* Reads n f32 values of t into out, asserting success and the element count. */
static inline void bt_read_f32(burnc_tensor_t *t, float *out, int64_t n)
{
    cr_assert_not_null(t);
    cr_assert_eq(burnc_tensor_dtype(t), BURNC_DTYPE_F32, "dtype is %s", burnc_dtype_name(burnc_tensor_dtype(t)));
    cr_assert_eq(burnc_tensor_numel(t), n, "numel %lld, expected %lld", (long long)burnc_tensor_numel(t),
                 (long long)n);
    BT_ASSERT_OK(burnc_tensor_read(t, out, (size_t)n * sizeof(float)));
}

/* The tensor's f32 elements equal `want` within a relative tolerance. */
static inline void bt_expect_f32(burnc_tensor_t *t, int64_t n, const float *want, float rtol)
{
    float got[256];
    cr_assert(n <= 256);
    bt_read_f32(t, got, n);
    for (int64_t i = 0; i < n; i++) {
        float tol = rtol * fmaxf(1.0f, fabsf(want[i]));
        cr_assert(fabsf(got[i] - want[i]) <= tol, "element %lld: got %.9g, expected %.9g", (long long)i,
                  (double)got[i], (double)want[i]);
    }
}

/* The library still works: a fresh small op on dev gives the right value. */
static inline void bt_expect_usable(burnc_device_t *dev)
{
    const int64_t shape[1] = {3};
    const float a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
    burnc_tensor_t *ta = bt_f32(dev, 1, shape, a);
    burnc_tensor_t *tb = bt_f32(dev, 1, shape, b);
    burnc_tensor_t *y = BT_NOT_NULL(burnc_add(ta, tb));
    bt_expect_f32(y, 3, (const float[]){11, 22, 33}, 0);
    burnc_tensor_release(y);
    burnc_tensor_release(tb);
    burnc_tensor_release(ta);
}

/* Device time (burnc_device_timer) of k eager ops x * 1.5 + 1 on n elements, checked against
 * the host's f32 chain. */
static inline double bt_timed_chain(burnc_device_t *dev, int k, int64_t n)
{
    float *x = malloc((size_t)n * sizeof *x), *got = malloc((size_t)n * sizeof *got);
    cr_assert(x && got, "out of host memory");
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(i % 1000) / 7.0f - 50.0f;
    burnc_tensor_t *t = bt_f32(dev, 1, &n, x);
    BT_ASSERT_OK(burnc_device_timer_start(dev));
    for (int i = 0; i < k; i++) {
        burnc_tensor_t *m = BT_NOT_NULL(burnc_mul_scalar(t, 1.5));
        burnc_tensor_t *y = BT_NOT_NULL(burnc_add_scalar(m, 1.0));
        burnc_tensor_release(m);
        burnc_tensor_release(t);
        t = y;
    }
    double s = -1;
    BT_ASSERT_OK(burnc_device_timer_stop(dev, &s));
    bt_read_f32(t, got, n);
    for (int64_t i = 0; i < n; i++) {
        float want = x[i];
        for (int j = 0; j < k; j++)
            want = want * 1.5f + 1.0f;
        cr_assert_eq(got[i], want, "element %lld after %d steps: %a, want %a", (long long)i, k, got[i], want);
    }
    burnc_tensor_release(t);
    free(x);
    free(got);
    return s;
}

/* burnc_device_timer on a device with a clock of its own (cuda, vulkan): it times the work
 * between its calls (32 times the kernels take several times longer, host time before the
 * work is left out), and refuses a stop without a start or without a place for the result. */
static inline void bt_check_timer(burnc_device_t *dev, int64_t n)
{
    double s = 0;
    BT_ASSERT_STATUS(burnc_device_timer_stop(dev, &s), BURNC_ERR_INVALID_ARGUMENT, "no burnc_device_timer_start");
    BT_ASSERT_STATUS(burnc_device_timer_stop(dev, NULL), BURNC_ERR_INVALID_ARGUMENT, "seconds is NULL");
    BT_ASSERT_OK(burnc_device_set_fusion(dev, false)); /* one kernel per op */
    bt_timed_chain(dev, 1, n); /* compiles what the timed runs use */
    double one = 1e30, many = 1e30;
    for (int r = 0; r < 3; r++) { /* the fastest of three: a busy machine only adds time */
        double a = bt_timed_chain(dev, 1, n), b = bt_timed_chain(dev, 32, n);
        one = a < one ? a : one;
        many = b < many ? b : many;
    }
    cr_assert(one > 0 && many < 60, "timer: 2 kernels %g s, 64 kernels %g s", one, many);
    cr_assert(many > 4 * one, "timer: 64 kernels took %g s, 2 kernels %g s: not what ran between the calls", many, one);
    /* the host sleeping after the start is not device work */
    BT_ASSERT_OK(burnc_device_timer_start(dev));
    struct timespec nap = {.tv_sec = 0, .tv_nsec = 300 * 1000 * 1000};
    nanosleep(&nap, NULL);
    BT_ASSERT_OK(burnc_device_timer_stop(dev, &s));
    cr_assert(s >= 0 && s < 0.25, "timer: an empty interval with the host asleep 0.3 s measured %g s", s);
    BT_ASSERT_STATUS(burnc_device_timer_stop(dev, &s), BURNC_ERR_INVALID_ARGUMENT, "no burnc_device_timer_start");
    BT_ASSERT_OK(burnc_device_set_fusion(dev, true));
    bt_expect_usable(dev);
}

/* Element i of host data of dtype dt, as a double. */
static inline double bt_load(const void *base, burnc_dtype_t dt, int64_t i)
{
    switch (dt) {
    case BURNC_DTYPE_F32: return ((const float *)base)[i];
    case BURNC_DTYPE_F64: return ((const double *)base)[i];
    case BURNC_DTYPE_F16: return burnc_f16_to_f32(((const uint16_t *)base)[i]);
    case BURNC_DTYPE_BF16: return burnc_bf16_to_f32(((const uint16_t *)base)[i]);
    case BURNC_DTYPE_I32: return ((const int32_t *)base)[i];
    case BURNC_DTYPE_I64: return (double)((const int64_t *)base)[i];
    default: return ((const uint8_t *)base)[i];
    }
}

static inline burnc_memory_report_t bt_memory(burnc_device_t *dev)
{
    burnc_memory_report_t r;
    memset(&r, 0xff, sizeof r);
    BT_ASSERT_OK(burnc_device_memory(dev, &r));
    return r;
}

/* Whether every entry of ptx keeps cg_ptx_grid_dependency's promise for sm: from sm_90 on,
 * griddepcontrol.wait comes before the entry's first access to memory other than its
 * parameters, shared and local memory, and no entry triggers its dependents early
 * (launch_dependents); below sm_90 there is no griddepcontrol at all. On failure why holds
 * the entry and the line. */
static inline bool bt_grid_dependency_ok(const char *ptx, int sm, char *why, size_t cap)
{
    if (sm < 90) {
        snprintf(why, cap, "griddepcontrol for sm_%d", sm);
        return !strstr(ptx, "griddepcontrol");
    }
    if (strstr(ptx, "griddepcontrol.launch_dependents")) {
        snprintf(why, cap, "griddepcontrol.launch_dependents");
        return false;
    }
    int entries = 0;
    for (const char *e = strstr(ptx, ".entry "); e; e = strstr(e + 1, ".entry ")) {
        entries++;
        const char *next = strstr(e + 1, ".entry "), *wait = strstr(e, "griddepcontrol.wait;");
        int name = (int)strcspn(e + 7, "(\n");
        if (!wait || (next && wait > next)) {
            snprintf(why, cap, "entry %.*s: no griddepcontrol.wait", name, e + 7);
            return false;
        }
        for (const char *l = strchr(e, '\n'); l && l < wait; l = strchr(l + 1, '\n')) {
            const char *t = l + 1;
            t += strspn(t, " \t");
            if (*t == '@') { /* a predicate */
                t += strcspn(t, " \t");
                t += strspn(t, " \t");
            }
            int n = (int)strcspn(t, " \t\n");
            bool mem = !strncmp(t, "ld.", 3) || !strncmp(t, "st.", 3) || !strncmp(t, "atom.", 5) ||
                       !strncmp(t, "red.", 4) || !strncmp(t, "cp.", 3) || !strncmp(t, "prefetch", 8);
            bool own = false;
            for (const char *sp = t; sp < t + n && !own; sp++)
                own = !strncmp(sp, ".param", 6) || !strncmp(sp, ".shared", 7) || !strncmp(sp, ".local", 6);
            if (mem && !own) {
                snprintf(why, cap, "entry %.*s: %.*s before griddepcontrol.wait", name, e + 7, n, t);
                return false;
            }
        }
    }
    snprintf(why, cap, "no entry");
    return entries > 0;
}

#endif
