/*
 * burnc — tensor programs compiled at run time.
 *
 * Every op call records work into a lazy stream on the tensor's device and returns at once;
 * reading a tensor (or flush/sync) runs what is pending. A complete program:
 *
 *     #include <burnc.h>
 *     #include <stdio.h>
 *
 *     int main(void) {
 *         burnc_device_t *dev = burnc_device_open(NULL);          // the default device
 *         if (!dev) { fprintf(stderr, "%s\n", burnc_error_message()); return 1; }
 *         const int64_t shape[2] = {2, 3};
 *         const float data[6] = {1, 2, 3, 4, 5, 6};
 *         burnc_tensor_t *x = burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, shape, data);
 *
 *         burnc_scope_begin();                    // handles made inside are released at its end
 *         burnc_tensor_t *y = burnc_sum(burnc_mul_scalar(burnc_exp(x), 2.0), 1, (int[]){1}, false);
 *         burnc_tensor_keep(y);                   // ... except this one
 *         burnc_scope_end();
 *
 *         float out[2];
 *         if (burnc_tensor_read(y, out, sizeof out) != BURNC_OK) {   // runs the pending work
 *             fprintf(stderr, "%s\n", burnc_error_message());
 *             return 1;
 *         }
 *         printf("%g %g\n", out[0], out[1]);
 *         burnc_tensor_release(y);
 *         burnc_tensor_release(x);
 *         burnc_device_release(dev);
 *         return 0;
 *     }
 *
 * Ownership: every function that returns a handle (device or tensor) returns a reference the
 * caller owns and must release (or leave to a scope); arguments are borrowed.
 *
 * Errors: functions that can fail return burnc_status_t (BURNC_OK is 0); functions that return
 * a handle return NULL on failure. Either way the calling thread's last error holds the code and
 * a message naming the op and the values (burnc_error_code, burnc_error_message); it stays until
 * the next failure or burnc_error_clear(). An op given a NULL tensor returns NULL without
 * touching the last error, so a chain of calls is checked once, at its end, and reports its first
 * failure. A failure while running recorded work (out of memory, an index out of range) is
 * reported by the next burnc_device_sync or burnc_tensor_read of an affected tensor.
 *
 * Threads: any thread may record ops and read tensors; each device's stream is locked while an
 * op is recorded; reference counts are atomic. Scopes and the last error are per thread.
 *
 * Dtypes and promotion. Binary ops between two tensors compute in the promoted dtype:
 *   bool < u8 < i32 < i64 < (f16, bf16) < f32 < f64, where f16 with bf16 gives f32.
 * A plain C scalar (the _scalar forms, clamp bounds, full values) never widens a tensor's dtype:
 * the scalar is converted to the dtype the op computes in: the tensor's dtype, or the default
 * float dtype for float-only ops on integer tensors (for integer dtypes: truncated toward zero,
 * saturated to the dtype's range). f16 and bf16 are stored as such (host data: IEEE binary16 and
 * bfloat16 bit patterns in uint16_t); every op computes in at least f32 and rounds its result
 * back to the dtype, rounding to nearest, ties to even.
 * Integer arithmetic wraps (two's complement, u8 modulo 256). Integer division floors (like
 * Python's //) and remainder takes the sign of the divisor; dividing by zero gives 0 for both.
 * Integer pow with a negative exponent gives 0 (1 for base 1, +-1 for base -1).
 * Float-to-integer casts truncate toward zero, saturate at the dtype's bounds, and map NaN to 0;
 * casts to bool test != 0 (NaN is true); integer-to-integer casts wrap. Arithmetic ops refuse
 * bool operands when the promoted dtype is bool (BURNC_ERR_UNSUPPORTED_DTYPE: cast first; bool
 * with an integer promotes like numpy). Float math functions (exp exp2 expm1 log log2 log1p sqrt
 * rsqrt reciprocal sin cos tan tanh sigmoid gelu silu erf atan2) given integer or bool operands
 * compute in the device's default float dtype.
 */
#ifndef BURNC_H
#define BURNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(BURNC_BUILDING)
#define BURNC_API __attribute__((visibility("default")))
#else
#define BURNC_API
#endif

/* The largest tensor rank. */
#define BURNC_MAX_RANK 8

/* Status codes. Stable integers: new codes are only ever appended. */
typedef enum burnc_status {
    BURNC_OK = 0,
    BURNC_ERR_INVALID_ARGUMENT = 1,  /* a bad value: NULL handle, bad axis list, bad spec syntax */
    BURNC_ERR_SHAPE = 2,             /* shapes that do not broadcast or do not fit the op */
    BURNC_ERR_AXIS = 3,              /* an axis out of range */
    BURNC_ERR_OVERFLOW = 4,          /* negative dimension, or element/byte count past 2^63 */
    BURNC_ERR_UNSUPPORTED_DTYPE = 5, /* the op or device does not take this dtype */
    BURNC_ERR_DEVICE_MISMATCH = 6,   /* tensors of two devices in one op */
    BURNC_ERR_UNKNOWN_DEVICE = 7,    /* a device spec that names no device kind */
    BURNC_ERR_UNAVAILABLE = 8,       /* the device's hardware, driver or backend is missing */
    BURNC_ERR_ALREADY_INITIALIZED = 9, /* configure after the device's first tensor */
    BURNC_ERR_OUT_OF_MEMORY = 10,
    BURNC_ERR_BUFFER_TOO_SMALL = 11, /* a read into a host buffer smaller than the tensor */
    BURNC_ERR_INDEX = 12,            /* an index tensor holds a value out of range (at run time) */
    BURNC_ERR_COMPILE = 13,          /* a kernel failed to compile (the compiler's log attached) */
    BURNC_ERR_EXECUTION = 14,        /* a kernel failed while running */
    BURNC_ERR_DEVICE_LOST = 15,      /* a sticky device error: reopen the device */
    BURNC_ERR_INTERNAL = 16,         /* a bug in burnc: please report it */
} burnc_status_t;

typedef enum burnc_dtype {
    BURNC_DTYPE_DEFAULT = 0, /* where accepted: the device's default float (or int) dtype */
    BURNC_DTYPE_F32 = 1,
    BURNC_DTYPE_F64 = 2,
    BURNC_DTYPE_F16 = 3,
    BURNC_DTYPE_BF16 = 4,
    BURNC_DTYPE_I32 = 5,
    BURNC_DTYPE_I64 = 6,
    BURNC_DTYPE_U8 = 7,
    BURNC_DTYPE_BOOL = 8, /* one byte, 0 or 1 */
} burnc_dtype_t;

/* Device kinds, also used as bit flags to filter burnc_device_enumerate. */
typedef enum burnc_device_type {
    BURNC_DEVICE_REF = 1 << 0,    /* plain C loops, one op at a time: the oracle */
    BURNC_DEVICE_CPU = 1 << 1,    /* LLVM JIT on the host */
    BURNC_DEVICE_CUDA = 1 << 2,   /* NVIDIA GPUs through the CUDA driver */
    BURNC_DEVICE_VULKAN = 1 << 3, /* Vulkan compute devices */
    BURNC_DEVICE_ALL = 0xf,
} burnc_device_type_t;

typedef struct burnc_device burnc_device_t;
typedef struct burnc_tensor burnc_tensor_t;

/* ---- Library, errors, logging ------------------------------------------------------------ */

/* The library version, "MAJOR.MINOR.PATCH". */
BURNC_API const char *burnc_version(void);
/* The code of the calling thread's last error (BURNC_OK if none since the last clear). */
BURNC_API burnc_status_t burnc_error_code(void);
/* The last error's message ("" if none). Valid until this thread's next failing call. */
BURNC_API const char *burnc_error_message(void);
/* Forgets the calling thread's last error. */
BURNC_API void burnc_error_clear(void);
/* A constant name for a status code ("BURNC_ERR_SHAPE"). */
BURNC_API const char *burnc_status_name(burnc_status_t status);

/* Log lines go to this callback (topic is "fusion", "codegen", "autotune" or "runtime").
 * NULL restores the default: stderr, only for topics listed in BURNC_LOG (comma separated,
 * or "all"). The callback receives every topic; it may be called from any thread. */
typedef void (*burnc_log_fn)(void *user, const char *topic, const char *message);
BURNC_API void burnc_log_set_callback(burnc_log_fn fn, void *user);

/* ---- Devices ----------------------------------------------------------------------------- */

/* Opens a device by spec: "ref", "cpu", "cuda", "cuda:N", "vulkan", "vulkan:N",
 * "vulkan:discrete:N", "vulkan:cpu". "ref:N" (N = 1..1000) opens further reference devices,
 * independent of "ref" (= "ref:0"), for programs and tests that move data between devices. NULL or "" opens the default: BURNC_DEVICE if set, else
 * the first available of cuda, a Vulkan GPU, cpu, ref. Opening the same device twice gives
 * handles to the same device (they compare equal and share configuration and stream).
 * Errors: BURNC_ERR_UNKNOWN_DEVICE (no such kind), BURNC_ERR_INVALID_ARGUMENT (bad index
 * syntax), BURNC_ERR_UNAVAILABLE (hardware, driver or backend missing; the message says which). */
BURNC_API burnc_device_t *burnc_device_open(const char *spec);
BURNC_API burnc_device_t *burnc_device_retain(burnc_device_t *dev);
/* Releases a handle; NULL is ignored. The device closes once no handle and no tensor uses it. */
BURNC_API void burnc_device_release(burnc_device_t *dev);

typedef struct burnc_device_info {
    burnc_device_type_t type;
    char spec[32];  /* opens this device: "ref", "cuda:0", ... */
    char name[128]; /* human readable: "NVIDIA H200", "reference (C loops)" */
} burnc_device_info_t;

/* Lists the available devices whose type is in `types` (a mask of burnc_device_type_t) into
 * out[0..capacity). Returns how many exist (may exceed capacity; out may be NULL then). */
BURNC_API int burnc_device_enumerate(unsigned types, burnc_device_info_t *out, int capacity);
/* The device's human-readable name; owned by the device. */
BURNC_API const char *burnc_device_name(const burnc_device_t *dev);
/* The spec that reopens this device ("ref", "cuda:0"); owned by the device. */
BURNC_API const char *burnc_device_spec(const burnc_device_t *dev);
BURNC_API burnc_device_type_t burnc_device_type(const burnc_device_t *dev);
/* True when both handles name the same compute resource. */
BURNC_API bool burnc_device_equal(const burnc_device_t *a, const burnc_device_t *b);

/* Zero means "keep the default" (f32 and i64). */
typedef struct burnc_device_config {
    burnc_dtype_t float_dtype; /* used by BURNC_DTYPE_DEFAULT for float results: f32 f64 f16 bf16 */
    burnc_dtype_t int_dtype;   /* used by BURNC_DTYPE_DEFAULT for integer results: i32 i64 */
} burnc_device_config_t;

/* Sets the device's default dtypes. Allowed once, before the device's first tensor; after that
 * BURNC_ERR_ALREADY_INITIALIZED. A dtype that is not of its kind or that the device does not
 * support: BURNC_ERR_UNSUPPORTED_DTYPE. */
BURNC_API burnc_status_t burnc_device_configure(burnc_device_t *dev, const burnc_device_config_t *cfg);
/* The default float and int dtypes in effect. */
BURNC_API burnc_dtype_t burnc_device_float_dtype(const burnc_device_t *dev);
BURNC_API burnc_dtype_t burnc_device_int_dtype(const burnc_device_t *dev);
/* True when the device can store, convert and compute the dtype (computing in f32 counts). */
BURNC_API bool burnc_device_supports_dtype(const burnc_device_t *dev, burnc_dtype_t dtype);
/* True when the device may flush denormals of this float dtype to zero, in inputs and results
 * alike (a Vulkan device without shaderDenormPreserveFloat32, such as NVIDIA's driver and
 * lavapipe, for f32 and bf16; without shaderDenormPreserveFloat64 for f64). False for cpu, ref
 * and cuda, which always preserve them, and for integer dtypes. */
BURNC_API bool burnc_device_flushes_denormals(const burnc_device_t *dev, burnc_dtype_t dtype);
/* Seeds the device's random stream: later rand/randn draws restart from counter 0 with this
 * key. The same seed and the same sequence of draws give the same values on every device. */
BURNC_API burnc_status_t burnc_device_seed(burnc_device_t *dev, uint64_t seed);
/* Starts the pending work; returns once it is submitted (on ref: done). */
BURNC_API burnc_status_t burnc_device_flush(burnc_device_t *dev);
/* Runs all pending work and waits for it; returns the first execution error since the last
 * sync, if any (the failed tensors stay poisoned; the device stays usable). */
BURNC_API burnc_status_t burnc_device_sync(burnc_device_t *dev);
/* Turns kernel fusion on or off for the device's later work. Off is eager mode: one kernel per
 * op through the same code generator (the baseline burnc-bench measures fusion against); it
 * starts off when the environment has BURNC_FUSION=0. Work recorded before the call is flushed
 * first, so it runs the way it was recorded. Results are the same either way (element-wise
 * results bitwise). Devices that never fuse (ref) accept and ignore it. Errors:
 * BURNC_ERR_INVALID_ARGUMENT (NULL device). Thread safe. */
BURNC_API burnc_status_t burnc_device_set_fusion(burnc_device_t *dev, bool enabled);
/* Lets float32 matmuls on the device run on TF32 tensor cores (inputs cut to a 10-bit
 * mantissa, burnc_matmul says how; products accumulated in f32, summation order the hardware's) where the device has
 * them (cuda, compute capability 8.0 and up). Off by default, and at open unless the environment
 * has BURNC_MATMUL_TF32=1: f32 matmuls keep the exact f32 fma chain of burnc_matmul. Devices
 * without TF32 accept and ignore it. Work recorded before the call is flushed first. Errors:
 * BURNC_ERR_INVALID_ARGUMENT (NULL device). Thread safe. */
BURNC_API burnc_status_t burnc_device_set_matmul_tf32(burnc_device_t *dev, bool allow);
/* Sets the process's autotune mode, overriding BURNC_AUTOTUNE: "off" (heuristics only),
 * "cached" (stored decisions, the heuristic where there is none; the default) or "on" (a
 * launch without a stored decision times its candidates on private buffers first and stores
 * the best). NULL returns to the environment's mode. Decisions never change results, only
 * speed. Errors: BURNC_ERR_INVALID_ARGUMENT for another string. Thread safe. */
BURNC_API burnc_status_t burnc_autotune_set_mode(const char *mode);
/* Writes, as Graphviz DOT, how the device's pending work would run if flushed now: each kernel
 * as a cluster of the ops it fuses, opaque ops (matmul, cat, pad, index ops) as boxes, edges for
 * data flow. Runs nothing and changes nothing. Errors: BURNC_ERR_INVALID_ARGUMENT (NULL device
 * or path), BURNC_ERR_EXECUTION (the file cannot be written; the message says why). */
BURNC_API burnc_status_t burnc_device_write_graph(burnc_device_t *dev, const char *path);
/* Returns cached (free) device memory to the system. */
BURNC_API burnc_status_t burnc_device_memory_cleanup(burnc_device_t *dev);

typedef struct burnc_memory_report {
    uint64_t bytes_in_use; /* held by live buffers */
    uint64_t bytes_cached; /* freed buffers kept by the pool for reuse */
    uint64_t bytes_peak;   /* the highest bytes_in_use + bytes_cached so far */
    uint64_t buffers_in_use;
} burnc_memory_report_t;

BURNC_API burnc_status_t burnc_device_memory(burnc_device_t *dev, burnc_memory_report_t *out);
/* The median time in seconds of `reps` copies of `bytes` bytes between two private buffers of
 * the device by its own copy engine or copy command, timed on the device: the bandwidth yardstick
 * of burnc-bench on GPUs. BURNC_ERR_UNAVAILABLE on devices whose memory is the host's (ref,
 * cpu), BURNC_ERR_OUT_OF_MEMORY when the buffers do not fit. */
BURNC_API burnc_status_t burnc_device_copy_time(burnc_device_t *dev, size_t bytes, int reps, double *seconds);
/* The device's own time of the work recorded between the two calls (CUDA events, Vulkan
 * timestamps): start runs what was recorded before it and marks the device's stream after it;
 * stop runs what was recorded since, marks the stream, waits for the mark and gives the seconds
 * between the marks. Recording, fusion and launching on the host are not in it; a stop also
 * reports an execution error as burnc_device_sync does. BURNC_ERR_UNAVAILABLE on devices that
 * run on the host (ref, cpu: time those on the host around burnc_device_sync);
 * BURNC_ERR_INVALID_ARGUMENT for a stop without a start, or seconds NULL. */
BURNC_API burnc_status_t burnc_device_timer_start(burnc_device_t *dev);
BURNC_API burnc_status_t burnc_device_timer_stop(burnc_device_t *dev, double *seconds);

/* ---- Tensor creation --------------------------------------------------------------------- */
/* shape: `rank` dimensions (rank 0 is a scalar; shape may be NULL then); dimensions >= 0.
 * dtype BURNC_DTYPE_DEFAULT means the device's default float dtype. Errors:
 * BURNC_ERR_OVERFLOW (negative dimension, count past 2^63), BURNC_ERR_INVALID_ARGUMENT
 * (rank outside 0..BURNC_MAX_RANK), BURNC_ERR_UNSUPPORTED_DTYPE. */

/* Copies `data` (dense, row-major, numel * dtype size bytes). */
BURNC_API burnc_tensor_t *burnc_tensor_from_data(burnc_device_t *dev, burnc_dtype_t dtype, int rank,
                                                 const int64_t *shape, const void *data);
/* Uses caller-owned host memory without copying where the device can read host memory (ref,
 * cpu); `release(user)` is called (if not NULL) once burnc no longer uses it. The memory must
 * stay valid and unchanged until then. Devices that cannot use host memory copy it and call
 * release before returning. */
BURNC_API burnc_tensor_t *burnc_tensor_wrap(burnc_device_t *dev, burnc_dtype_t dtype, int rank,
                                            const int64_t *shape, void *data,
                                            void (*release)(void *user), void *user);
BURNC_API burnc_tensor_t *burnc_zeros(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape);
BURNC_API burnc_tensor_t *burnc_ones(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape);
/* Every element is `value` converted to dtype. */
BURNC_API burnc_tensor_t *burnc_full(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape,
                                     double value);
/* 1-D: start, start+step, ... while < stop (> stop for a negative step), like numpy.arange;
 * element i is start + i*step computed in double, then converted. step 0: INVALID_ARGUMENT.
 * dtype DEFAULT: the default int dtype when start, stop and step are integral, else float. */
BURNC_API burnc_tensor_t *burnc_arange(burnc_device_t *dev, burnc_dtype_t dtype, double start, double stop,
                                       double step);
/* n x m with ones on the diagonal. */
BURNC_API burnc_tensor_t *burnc_eye(burnc_device_t *dev, burnc_dtype_t dtype, int64_t n, int64_t m);
/* Uniform in [0, 1) and standard normal, from Philox 4x32-10 keyed by the device seed. Element i
 * of a draw uses the counter (offset + i), where the offset is fixed when the op is recorded,
 * so values do not depend on the device, on fusion or on when the work runs.
 * Float dtypes only. */
BURNC_API burnc_tensor_t *burnc_rand(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape);
BURNC_API burnc_tensor_t *burnc_randn(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape);

/* ---- Tensor access ----------------------------------------------------------------------- */

/* Runs the work the tensor depends on and copies its elements, dense and row-major, into dst.
 * Errors: BURNC_ERR_BUFFER_TOO_SMALL (dst_bytes < numel * dtype size), any execution error of
 * the work it depends on. */
BURNC_API burnc_status_t burnc_tensor_read(burnc_tensor_t *t, void *dst, size_t dst_bytes);
BURNC_API int burnc_tensor_rank(const burnc_tensor_t *t);
/* shape and strides (in elements) have rank entries, owned by the tensor. */
BURNC_API const int64_t *burnc_tensor_shape(const burnc_tensor_t *t);
BURNC_API const int64_t *burnc_tensor_strides(const burnc_tensor_t *t);
BURNC_API int64_t burnc_tensor_numel(const burnc_tensor_t *t);
BURNC_API burnc_dtype_t burnc_tensor_dtype(const burnc_tensor_t *t);
/* The tensor's device: a new reference the caller releases. */
BURNC_API burnc_device_t *burnc_tensor_device(const burnc_tensor_t *t);
BURNC_API burnc_tensor_t *burnc_tensor_retain(burnc_tensor_t *t);
/* NULL is ignored. Inside a scope, releasing a handle the scope owns leaves it to the scope. */
BURNC_API void burnc_tensor_release(burnc_tensor_t *t);
/* A copy of t on dev (runs t's pending work). Same device: a new handle to the same tensor. */
BURNC_API burnc_tensor_t *burnc_tensor_to_device(burnc_tensor_t *t, burnc_device_t *dev);
/* Bytes of one element. */
BURNC_API size_t burnc_dtype_size(burnc_dtype_t dtype);
BURNC_API const char *burnc_dtype_name(burnc_dtype_t dtype);

/* Scopes (per thread, nestable): every tensor handle created between begin and end is released
 * at end unless burnc_tensor_keep was called on it; kept handles belong to the caller. */
BURNC_API void burnc_scope_begin(void);
BURNC_API void burnc_scope_end(void);
/* Takes `t` out of every scope: the caller owns it. Returns t. */
BURNC_API burnc_tensor_t *burnc_tensor_keep(burnc_tensor_t *t);

/* Host conversions for f16 and bf16 data (round to nearest, ties to even). */
BURNC_API uint16_t burnc_f32_to_f16(float x);
BURNC_API float burnc_f16_to_f32(uint16_t h);
BURNC_API uint16_t burnc_f32_to_bf16(float x);
BURNC_API float burnc_bf16_to_f32(uint16_t h);

/* ---- Element-wise ops -------------------------------------------------------------------- */
/* Unary ops keep the input's shape. Results: same dtype, except float math functions on integer
 * or bool input (the default float dtype) and logical_not (bool). Unless said otherwise an op
 * refuses bool input.
 *   neg abs sign: integers too (wrapping); sign of NaN is NaN.
 *   floor ceil round: round is half to even; identity on integers.
 *   relu: max(x, 0), integers too. gelu: x/2 * erfc(-x/sqrt 2), which is x/2 * (1 + erf(x/sqrt 2))
 *   without its cancellation for x << 0 (gelu(-10) = -7.6e-23). gelu_grad: gelu's derivative
 *   Phi(x) + x phi(x) (Phi, phi: the standard normal's distribution and density), the factor
 *   gelu's backward rule uses; it is 0 at x = -0.75179 and 1/2 at 0. silu: x * sigmoid(x).
 *   logical_not: any dtype, x == 0, result bool.
 *
 * Accuracy of the float math functions on compiled devices (cpu, cuda; vulkan where its
 * division is correctly rounded; ref computes in double and rounds once). They are written once
 * as sequences of basic IEEE operations (ir/math.c), so every such device computes the same
 * bits. Maximum error in ulps of the result against the exact value, as asserted by
 * tests/test_math.c (f32: against double libm over every 1021st f32 bit pattern plus dense
 * windows around critical points; f64: against x87 long double libm over 10^6 inputs per
 * function), with the largest error measured:
 *
 *   function  bound   measured f32  measured f64
 *   exp       1 ulp   0.772         0.794
 *   exp2      1 ulp   0.752         0.749
 *   expm1     1 ulp   0.861         0.762
 *   log       1 ulp   0.650         0.644
 *   log2      1 ulp   0.759         0.704
 *   log1p     1 ulp   0.668         0.661
 *   sin       1 ulp   0.697         0.694   for |x| < 2^17 (f32), |x| < 2^36 (f64)
 *   cos       1 ulp   0.702         0.686   for |x| < 2^17 (f32), |x| < 2^36 (f64)
 *   tan       1 ulp   0.807         0.744   for |x| < 2^17 (f32), |x| < 2^36 (f64)
 *   tanh      1 ulp   0.784         0.769
 *   erf       1 ulp   0.970         0.915
 *   erfc      1 ulp   0.923         0.749   internal (gelu's); f32: all 0.001 <= |x| <= 10.1
 *   gelu      3 ulp   1.946         2.181   f32: all -13 <= x <= 8, |x| >= 0.001; see below
 *   gelu_grad 4 ulp   3.862         4.236   5 ulp for f64; for x < 0 in ulps of max(Phi(x), |x| phi(x))
 *   sigmoid   1 ulp   0.740         0.753
 *   atan2     1 ulp   0.833         0.721
 *   pow       1 ulp   0.749         0.743
 *
 * Every result of a 1-ulp function is faithfully rounded. Beyond the ranges given for sin, cos and tan the argument
 * reduction loses accuracy: sin and cos still return a value in [-1, 1] and tan a non-NaN value
 * for every finite input; inf gives NaN. Special values follow C99 Annex F. erfc keeps its
 * bound through the subnormal range (one rounding) and gives 0 from where it rounds to 0. f32
 * gelu is computed as x Phi(x) with Phi(-|x|) = e^(-x^2/2) t F(t), t = 2 / (2 + |x|) and F one
 * polynomial (one exp, no erfc, no division); f64 gelu carries -x/sqrt 2 to twice the
 * precision into erfc (whose relative condition number 2 t^2 would turn its rounding into up to
 * 11 bits of error). Only where gelu is subnormal or nearly so (x < -13.003 for f32, x < -37.538
 * for f64, |gelu| below 8e-38 and 5e-307) is it off by up to 0.6 |x| + 1 units of the smallest
 * subnormal (measured 1.8 and 18.3). gelu(inf) = inf, gelu(-inf) = NaN. f32 gelu_grad is E R for x < 0 and 1 - E R for
 * x >= 0, E = e^(-x^2/2) and R = Phi(-|x|) / E - |x| / sqrt(2 pi) (one polynomial in
 * 2 / (2 + |x|)): one exp and one division, no erf. For x < 0 its two terms cancel near the zero
 * at -0.75179, so there the error is measured against the larger term (absolute, about 2^-24);
 * elsewhere it is relative. In the subnormal range (x < -13.2 f32, -37.5 f64) it is within 4
 * (f32) and 16 (f64) units of the smallest subnormal; gelu_grad(inf) = 1, gelu_grad(-inf) = -0.
 * silu and rsqrt add their own roundings on top of sigmoid and sqrt. f16 and bf16 results are the
 * f32 result rounded once more, except gelu's: its f32 math there is accurate to about 2^-20 only
 * (half the work), which every one of the 65536 inputs of either format shows to be enough:
 * measured 0.5000 ulp, bf16 results all correctly rounded, f16 all but one (a near tie).
 *
 * Vulkan. GLSL promises correct rounding for add, sub, mul and conversions only (division
 * 2.5 ulps, sqrt worse, fma possibly a product and a sum). On a device with f64 (every device
 * burnc targets, lavapipe included), f32 division and sqrt are computed in f64 and rounded once
 * (correctly rounded: an f32 quotient or root never lies within 2^-49 of an f32 rounding
 * boundary unless on it) and fma is made exact in software, so f32 results are the cpu device's
 * bits and the table above holds unchanged; measured on lavapipe: 0 ulps from kir_eval for
 * division, sqrt and fma (tests/test_vulkan.c), and every op within the bounds of
 * tests/test_ops.c (ops-vulkan). f64: fma is exact in software for operands with exponents in
 * [-423, 477] (else the device's), division and sqrt are the device's, correctly rounded on
 * lavapipe (0 ulps measured) and not promised elsewhere. Where the device cannot preserve f32
 * denormals (lavapipe: shaderDenormPreserveFloat32 false; the device's log line says which),
 * inputs and results below 2^-126 may become zero; NaN signs and payloads are the device's.
 * Without f64, division, sqrt and fma are the device's own and the table does not apply.
 * burnc_matmul of float dtypes runs the cpu device's fma chain (below) as a tiled shader, so it
 * equals the cpu device's bits; integer matmul and the index, cat and pad ops run on the host
 * with ref's kernels. */
#define BURNC_UNARY_OPS(X) \
    X(neg) X(abs) X(sign) X(exp) X(exp2) X(expm1) X(log) X(log2) X(log1p) X(sqrt) X(rsqrt) \
    X(reciprocal) X(sin) X(cos) X(tan) X(tanh) X(sigmoid) X(relu) X(gelu) X(gelu_grad) X(silu) X(erf) \
    X(floor) X(ceil) X(round) X(logical_not)
#define BURNC_DECLARE_UNARY(name) BURNC_API burnc_tensor_t *burnc_##name(burnc_tensor_t *x);
BURNC_UNARY_OPS(BURNC_DECLARE_UNARY)

/* Binary ops broadcast like numpy (shapes aligned at the right; a dimension of 1 stretches).
 *   add sub mul div pow maximum minimum remainder atan2: the promoted dtype (atan2 and
 *     float-only pow/div follow the promotion; integer semantics in the file comment above).
 *     maximum/minimum propagate NaN. remainder: sign of the divisor (numpy remainder).
 *   eq ne lt le gt ge: compare in the promoted dtype, result bool; any dtype.
 *   logical_and logical_or logical_xor: operands tested != 0, result bool; any dtype.
 * The _scalar forms compute op(x, s) with s converted to x's dtype (comparisons against s
 * compare in x's dtype). */
#define BURNC_BINARY_OPS(X) \
    X(add) X(sub) X(mul) X(div) X(pow) X(maximum) X(minimum) X(remainder) X(atan2) \
    X(eq) X(ne) X(lt) X(le) X(gt) X(ge) X(logical_and) X(logical_or) X(logical_xor)
#define BURNC_DECLARE_BINARY(name)                                                  \
    BURNC_API burnc_tensor_t *burnc_##name(burnc_tensor_t *a, burnc_tensor_t *b); \
    BURNC_API burnc_tensor_t *burnc_##name##_scalar(burnc_tensor_t *a, double s);
BURNC_BINARY_OPS(BURNC_DECLARE_BINARY)

/* cond ? a : b, broadcasting all three; cond of any dtype (tested != 0); result is the
 * promotion of a and b. */
BURNC_API burnc_tensor_t *burnc_where(burnc_tensor_t *cond, burnc_tensor_t *a, burnc_tensor_t *b);
/* min(max(x, lo), hi) with lo and hi converted to x's dtype; NaN x stays NaN. lo > hi gives hi
 * (like numpy.clip). Use -INFINITY / INFINITY for a one-sided clamp. */
BURNC_API burnc_tensor_t *burnc_clamp(burnc_tensor_t *x, double lo, double hi);
/* Converts to dtype (rules in the file comment). DEFAULT is refused. */
BURNC_API burnc_tensor_t *burnc_cast(burnc_tensor_t *x, burnc_dtype_t dtype);

/* ---- Reductions -------------------------------------------------------------------------- */
/* axes: naxes distinct axes in -rank..rank-1 (negative counts from the end); naxes 0 reduces
 * every axis. keepdim keeps reduced axes with size 1. Results:
 *   sum, prod: integer and bool inputs give i64; floats keep their dtype (f16/bf16 accumulate
 *     in f32 or better). Empty axes give 0 and 1.
 *   mean, var, std: float dtypes only (integers: cast first); var and std divide by
 *     (n - correction) and give NaN when that is <= 0. mean of nothing is NaN.
 *   max, min: any dtype but bool; NaN propagates; an empty reduction is BURNC_ERR_SHAPE.
 *   argmax, argmin: one axis; i64 index of the first extreme (a NaN counts as the extreme). */
BURNC_API burnc_tensor_t *burnc_sum(burnc_tensor_t *x, int naxes, const int *axes, bool keepdim);
BURNC_API burnc_tensor_t *burnc_mean(burnc_tensor_t *x, int naxes, const int *axes, bool keepdim);
BURNC_API burnc_tensor_t *burnc_prod(burnc_tensor_t *x, int naxes, const int *axes, bool keepdim);
BURNC_API burnc_tensor_t *burnc_max(burnc_tensor_t *x, int naxes, const int *axes, bool keepdim);
BURNC_API burnc_tensor_t *burnc_min(burnc_tensor_t *x, int naxes, const int *axes, bool keepdim);
BURNC_API burnc_tensor_t *burnc_var(burnc_tensor_t *x, int naxes, const int *axes, double correction,
                                    bool keepdim);
BURNC_API burnc_tensor_t *burnc_std(burnc_tensor_t *x, int naxes, const int *axes, double correction,
                                    bool keepdim);
BURNC_API burnc_tensor_t *burnc_argmax(burnc_tensor_t *x, int axis, bool keepdim);
BURNC_API burnc_tensor_t *burnc_argmin(burnc_tensor_t *x, int axis, bool keepdim);

/* Composites, recorded as their elementary ops so fusion sees through them.
 * softmax = exp(x - max) * (1 / sum(exp(x - max))); log_softmax = (x - max) - log(sum(exp(x - max))),
 * over one axis; integer input computes in the default float dtype.
 * layer_norm normalizes over the last `normalized_rank` axes: (x - mean) * (1 / sqrt(var + eps)),
 * var with correction 0 (one reciprocal a row, each within an ulp of the plain division); the _affine form then multiplies by weight and adds bias (both
 * broadcast against those axes). */
BURNC_API burnc_tensor_t *burnc_softmax(burnc_tensor_t *x, int axis);
BURNC_API burnc_tensor_t *burnc_log_softmax(burnc_tensor_t *x, int axis);
BURNC_API burnc_tensor_t *burnc_layer_norm(burnc_tensor_t *x, int normalized_rank, double eps);
BURNC_API burnc_tensor_t *burnc_layer_norm_affine(burnc_tensor_t *x, int normalized_rank, burnc_tensor_t *weight,
                                                  burnc_tensor_t *bias, double eps);

/* numpy.matmul: 1-D operands are promoted to matrices and the added axis removed; batch axes
 * broadcast. Result: the promoted dtype (bool refused); floats accumulate in f32 or better.
 * Numerics on the cpu device: an f32 or f64 element is a chain of fused multiply-adds over
 * k = 0..K-1 in increasing order starting from +0.0, in the operand dtype,
 * c = fma(a[i][k], b[k][j], c), each step rounded once; f16 and bf16 operands run that chain in
 * f32 and round the result once to their dtype; integer dtypes wrap as on ref. The chain is
 * fixed per element, so results do not depend on blocking, tiling, tuning or the thread count
 * (bitwise equal to a host loop doing the same fmaf/fma chain). The ref device accumulates in
 * double and rounds once: the two agree within K * eps * sum |a[i][k] b[k][j]|.
 * On cuda (compute capability 8.0 and up), f16 and bf16 matmuls run on tensor cores: products
 * of the exact operands summed in f32 in the hardware's order (not the fma chain above), the
 * result rounded once to the dtype, so they differ from the cpu device's bits but agree with
 * ref within one rounding of the dtype plus K * 2^-23 * sum |a[i][k] b[k][j]|. With TF32 allowed
 * (burnc_device_set_matmul_tf32) f32 matmuls do the same with each operand first cut to a
 * 10-bit mantissa: rounded to nearest, ties away, on compute capability 8.x; truncated (the low
 * 13 bits dropped, as Hopper's wgmma reads them) on 9.0: within K * 2^-23 * sum |a b| plus
 * 2^-9 * sum |a b| of ref. Operands whose rows are not 16-byte aligned, or with no unit-stride
 * axis, take the f32 fma chain instead. Every other float matmul on cuda runs the fma chain
 * above on the GPU, bitwise equal to the cpu device, with cheap element-wise work that fusion
 * puts right after it (bias, residual, scale, cast, relu) applied in its stores, bitwise as if
 * run apart (costlier work, such as a GELU, runs as a kernel of its own: faster there); integer
 * matmuls run on the host with ref's kernels. */
BURNC_API burnc_tensor_t *burnc_matmul(burnc_tensor_t *a, burnc_tensor_t *b);

/* ---- Movement ---------------------------------------------------------------------------- */
/* Views: share the input's storage where the layout allows (no copy, no work). */

/* New shape with the same element count; one entry may be -1 (inferred). Copies only when the
 * input's strides cannot express the new shape. */
BURNC_API burnc_tensor_t *burnc_reshape(burnc_tensor_t *x, int rank, const int64_t *shape);
/* perm: a permutation of 0..rank-1; result axis i is input axis perm[i]. */
BURNC_API burnc_tensor_t *burnc_permute(burnc_tensor_t *x, int rank, const int *perm);
BURNC_API burnc_tensor_t *burnc_transpose(burnc_tensor_t *x, int axis0, int axis1);
/* Broadcasts to `shape` (rank >= x's rank; -1 keeps the input's size; only size-1 axes grow). */
BURNC_API burnc_tensor_t *burnc_expand(burnc_tensor_t *x, int rank, const int64_t *shape);
/* Python slicing of one axis, x[start:stop:step]: negative indices count from the end, bounds
 * are clamped, step may be negative (not 0). Use INT64_MAX / INT64_MIN for "to the end". */
BURNC_API burnc_tensor_t *burnc_slice(burnc_tensor_t *x, int axis, int64_t start, int64_t stop, int64_t step);
/* Reverses the given axes (naxes 0: all). */
BURNC_API burnc_tensor_t *burnc_flip(burnc_tensor_t *x, int naxes, const int *axes);
/* Removes the given size-1 axes (naxes 0: every size-1 axis); a listed axis of size != 1 is
 * BURNC_ERR_SHAPE. */
BURNC_API burnc_tensor_t *burnc_squeeze(burnc_tensor_t *x, int naxes, const int *axes);
/* Inserts a size-1 axis at position axis in -(rank+1)..rank. */
BURNC_API burnc_tensor_t *burnc_unsqueeze(burnc_tensor_t *x, int axis);

/* Copies. */
/* A dense row-major copy (a new handle to the same tensor when x already is one). */
BURNC_API burnc_tensor_t *burnc_contiguous(burnc_tensor_t *x);
/* Joins n >= 1 tensors along axis; the other axes must match; dtypes promote. */
BURNC_API burnc_tensor_t *burnc_cat(int n, burnc_tensor_t *const *xs, int axis);
/* Stacks n >= 1 tensors of one shape along a new axis in -(rank+1)..rank. */
BURNC_API burnc_tensor_t *burnc_stack(int n, burnc_tensor_t *const *xs, int axis);
/* Pads with a constant: pads[2*i] before and pads[2*i+1] after axis i, for every axis
 * (negative pads crop). */
BURNC_API burnc_tensor_t *burnc_pad(burnc_tensor_t *x, const int64_t *pads, double value);
/* Index ops take i32 or i64 indices; a negative index counts from the end of its axis (once);
 * an index still out of range fails at run time with BURNC_ERR_INDEX, reported by the read or
 * sync that runs the op. Ops with an axis refuse rank-0 tensors (BURNC_ERR_AXIS), like argmax,
 * argmin, softmax and log_softmax.
 * index_select: rows of x along axis picked by idx (1-D). */
BURNC_API burnc_tensor_t *burnc_index_select(burnc_tensor_t *x, int axis, burnc_tensor_t *idx);
/* torch.gather: out[i][j] = x[idx[i][j]][j] for axis 0, and so on; idx has x's rank, its sizes
 * no larger than x's on the other axes; out has idx's shape. */
BURNC_API burnc_tensor_t *burnc_gather(burnc_tensor_t *x, int axis, burnc_tensor_t *idx);
/* torch.scatter_add, out of place: a copy of x where out[idx[i][j]][j] += src[i][j] (axis 0);
 * idx and src of one shape, no larger than x on the other axes. Duplicates accumulate in
 * index order. */
BURNC_API burnc_tensor_t *burnc_scatter_add(burnc_tensor_t *x, int axis, burnc_tensor_t *idx, burnc_tensor_t *src);
/* torch.index_add, out of place: a copy of x where slice idx[i] along axis gets src's slice i
 * added; idx 1-D; src has x's shape except len(idx) on axis. */
BURNC_API burnc_tensor_t *burnc_index_add(burnc_tensor_t *x, int axis, burnc_tensor_t *idx, burnc_tensor_t *src);
/* A copy of x with x[start:stop:step] along axis replaced by value (broadcast to the slice's
 * shape, converted to x's dtype). */
BURNC_API burnc_tensor_t *burnc_slice_assign(burnc_tensor_t *x, int axis, int64_t start, int64_t stop,
                                             int64_t step, burnc_tensor_t *value);

/* ---- Autodiff ---------------------------------------------------------------------------- */
/* Reverse-mode gradients, first order only. As in Burn, autodiff is a property of the device
 * handle a tensor is made on: burnc_device_autodiff(dev) gives a handle on the same compute
 * resource (same stream, memory and configuration) whose tensors carry an autodiff context.
 * An op whose inputs include a tensor that tracks gradients (a leaf made by
 * burnc_tensor_require_grad, or a result computed from one) records a tape node, unless this
 * thread is inside burnc_no_grad_begin/end; its result tracks gradients too. Float results
 * only: comparisons, integer results, argmax/argmin and steps (floor ceil round sign) track
 * nothing. burnc_backward walks the tape in reverse and records the gradient computation with
 * the ordinary ops into the same lazy stream, so it is fused and compiled like the forward
 * pass. A gradient broadcast in the forward pass is summed back to its input's shape.
 * One step of least squares, w of shape [K, N] made on ad = burnc_device_autodiff(dev), a batch
 * x [B, K] and targets y [B, N]:
 *
 *     burnc_tensor_t *wl = burnc_tensor_require_grad(w);       // a leaf
 *     burnc_scope_begin();                                     // the tape keeps what it needs
 *     burnc_tensor_t *err = burnc_sub(burnc_matmul(x, wl), y);
 *     burnc_tensor_t *loss = burnc_tensor_keep(burnc_mean(burnc_mul(err, err), 0, NULL, false));
 *     burnc_scope_end();
 *     burnc_grads_t *g = burnc_backward(loss);
 *     burnc_scope_begin();
 *     burnc_no_grad_begin();                                   // the update tracks nothing
 *     burnc_tensor_t *next = burnc_tensor_keep(burnc_sub(wl, burnc_mul_scalar(burnc_grad(g, wl), 0.1)));
 *     burnc_no_grad_end();
 *     burnc_scope_end();
 *     burnc_grads_release(g);                                  // then release loss and wl
 *
 * Contexts: burnc_device_equal ignores them; a result carries its inputs' context; and
 * burnc_tensor_to_device keeps the tensor's own: a tracked tensor moved to another device keeps
 * tracking there (on that device's autodiff handle, with the same checkpointing) and its
 * gradient flows back through the copy, while a plain tensor stays plain.
 * Threads: recording is thread safe as for any op; a backward pass must not run on a graph
 * that another thread is extending or differentiating at the same time. */
typedef struct burnc_grads burnc_grads_t;

typedef enum burnc_checkpointing {
    BURNC_CHECKPOINT_NONE = 0,     /* keep every output the backward pass needs */
    BURNC_CHECKPOINT_BALANCED = 1, /* recompute cheap ops' outputs during backward */
} burnc_checkpointing_t;

/* A new handle on the same compute resource whose new tensors track gradients once they (or
 * their inputs) require grad. Idempotent: on an autodiff handle it returns a new reference to
 * it, keeping its strategy. NULL with BURNC_ERR_INVALID_ARGUMENT for a NULL device. The handle
 * is released with burnc_device_release; every device function accepts it, and
 * burnc_device_equal ignores the autodiff context. */
BURNC_API burnc_device_t *burnc_device_autodiff(burnc_device_t *dev);
/* A new reference to the plain handle of dev's compute resource (dev itself if plain). */
BURNC_API burnc_device_t *burnc_device_without_autodiff(burnc_device_t *dev);
BURNC_API bool burnc_device_is_autodiff(const burnc_device_t *dev);
/* Turns on BURNC_CHECKPOINT_BALANCED for the nodes recorded from now on by tensors of this
 * handle: element-wise and movement ops keep no values and are recomputed from their inputs
 * during backward; matmul, reductions and the element-wise ops that cost more to compute than
 * to store and read back (gelu and pow: over 128 instructions an element) keep their outputs,
 * as does an element-wise op whose output a later element-wise op reads by broadcast (smaller
 * than what reads it, such as a LayerNorm's 1 / sqrt(var + eps)). Gradients are bitwise the
 * same as without it (recomputing gives the same bits); peak memory is lower.
 * BURNC_ERR_INVALID_ARGUMENT on a NULL device or one without autodiff. */
BURNC_API burnc_status_t burnc_device_gradient_checkpointing(burnc_device_t *dev);
/* The handle's strategy (BURNC_CHECKPOINT_NONE for a plain or NULL device). */
BURNC_API burnc_checkpointing_t burnc_device_gradient_checkpointing_strategy(const burnc_device_t *dev);

/* A new handle of the same values (no copy) that is a leaf tracking its gradient. The tensor
 * must have a float dtype (else BURNC_ERR_UNSUPPORTED_DTYPE) and be made on an autodiff handle
 * (else BURNC_ERR_INVALID_ARGUMENT). A tracked tensor gives a new leaf (its history is cut). */
BURNC_API burnc_tensor_t *burnc_tensor_require_grad(burnc_tensor_t *t);
/* True for leaves and for every result that tracks gradients; false for NULL. */
BURNC_API bool burnc_tensor_requires_grad(const burnc_tensor_t *t);
/* A new handle of the same values that tracks nothing (no copy), in the same context. */
BURNC_API burnc_tensor_t *burnc_tensor_detach(burnc_tensor_t *t);
/* Runs the backward pass from loss (any shape: seeded with ones) and returns the gradients of
 * every leaf that requires grad and that loss depends on; release them with
 * burnc_grads_release. The graph is released afterwards (first order only, one backward per
 * graph): a second backward over any part of the same graph fails with
 * BURNC_ERR_INVALID_ARGUMENT, and so does a loss that tracks nothing. An op without a backward
 * rule on the path fails the same way, naming the op (the graph is then kept). The pass runs
 * the recorded work after each matmul's gradient, so that the values it no longer needs are
 * freed as it goes, and on cuda and vulkan devices first, so that the device computes the
 * forward pass while the backward pass is recorded; the gradients themselves are lazy tensors.
 * Numerics: each gradient is the composition of public ops its rules record, the same on every
 * device (so cpu and cuda gradients agree bitwise where their ops do). For C = A @ B of f32 or
 * f64 matrices whose A has M rows in 2 to 16 chunks of 1024 (a weight's gradient over a batch
 * of 2048 to 16384), B's gradient A^T @ dC is computed by chunk: the chunks' products as one
 * batched matmul, added in chunk order, when those partials take no more memory than A and
 * dC; each chunk's product is the fma chain of burnc_matmul, so the sum is within the same
 * bound of ref, and the GPU gets M / 1024 times as many chains. */
BURNC_API burnc_grads_t *burnc_backward(burnc_tensor_t *loss);
/* The same, adding into existing gradients (accumulation over several losses or micro-batches).
 * On failure the gradients are unchanged. */
BURNC_API burnc_status_t burnc_backward_accumulate(burnc_grads_t *grads, burnc_tensor_t *loss);
/* A new reference to t's gradient (same shape and dtype as t; it tracks nothing). A leaf that
 * requires grad but that the loss did not depend on gives zeros; a tensor that does not
 * require grad, or that is not a leaf, gives NULL with BURNC_ERR_INVALID_ARGUMENT. */
BURNC_API burnc_tensor_t *burnc_grad(const burnc_grads_t *grads, burnc_tensor_t *t);
/* NULL is ignored. */
BURNC_API void burnc_grads_release(burnc_grads_t *grads);
/* Ops recorded by this thread between begin and end track nothing (nestable; an end without a
 * begin is ignored). */
BURNC_API void burnc_no_grad_begin(void);
BURNC_API void burnc_no_grad_end(void);

#ifdef __cplusplus
}
#endif
#endif
