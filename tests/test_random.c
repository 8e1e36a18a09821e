/* Random op chains through the public API only. Each chain is built three times from the same
 * host data: on `cpu` with fusion, on `cpu` in eager mode (burnc_device_set_fusion) and on
 * `ref`. Fused and eager must agree bit for bit (NaN equals NaN), reductions included: the
 * kernel IR fixes their order. cpu must agree with ref within an error bound carried along the
 * chain.
 *
 * The bound. Every node gets an absolute bound `err` on |cpu - ref|, from its inputs' bounds and
 * from ref's values of the node and its inputs. Correctly rounded ops (arithmetic, sqrt, casts,
 * movement, comparisons, max/min, where, clamp) on exact inputs must be bitwise. Otherwise
 * err = L * err_in + rounding, where L is the op's largest slope on ref's values widened by
 * err_in, and rounding is 1 ulp of the result for correctly rounded ops, 4 ulps for the math
 * functions (faithful on cpu, include/burnc.h, while ref rounds once; f16/bf16 round an f32
 * result once more), 8 for gelu, silu and rsqrt (more roundings), and for reductions n ulps of
 * n times the largest input (the cpu sums in a fixed tree, ref in double). Ops whose result jumps (floor, sign,
 * comparisons, argmax, casts to integers) only ever take exact inputs, so no bound has to cover
 * a jump. Element-wise chains of exact ops are therefore held to bitwise equality with ref too.
 *
 * Structure and data. A chain's structure (ops, ranks, dtypes, which axes have size 1 and which
 * axes match, view kinds, slice steps) comes from one random stream; sizes, scalars and values
 * from another. Chain i uses structure i % STRUCTURES with its own data, so each structure runs
 * several times with other extents, scalars and values: those are kernel arguments, so the reuse
 * also exercises the plan and kernel caches, and a cold kernel cache costs only STRUCTURES
 * chains' compiles. Values stay in range by interval bounds kept on the structure (exp of
 * values <= 8, logs and divisions of values >= 0.25, every node squashed back under a cap per
 * dtype), so no seed can make a chain overflow or divide by zero.
 *
 * BURNC_TEST_SEED overrides the seed; BURNC_TEST_CHAIN=i runs chain i alone (with its seed, to
 * reproduce a failure). */
#define _GNU_SOURCE /* mkstemp */
#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* cpu runs CHAINS chains over STRUCTURES structures; other devices run DEVICE_CHAINS chains, one
 * per structure (their driver compiles are slower: about 60 ms a shader on lavapipe, 100 ms a
 * module through the CUDA driver's JIT), and the structures are what a codegen is tested on. */
enum { CHAINS = 1000, STRUCTURES = 200, DEVICE_CHAINS = 60, MAX_NODES = 160, MAX_SYMS = 128, MAX_RANK = 4 };
static const uint64_t DEFAULT_SEED = 20261129;
static const double NUMEL_CAP = 40000; /* structural bound on any node's element count */

/* ---- Devices and the codegen log ---------------------------------------------------------- */

/* The device under test: BURNC_TEST_DEVICE, else "cpu"; skipped with the reason when it cannot
 * be opened. */
static burnc_device_t *open_test_device(void)
{
    const char *env = getenv("BURNC_TEST_DEVICE");
    const char *spec = env && *env ? env : "cpu";
    burnc_device_t *dev = burnc_device_open(spec);
    if (!dev)
        cr_skip_test("device '%s' is not available: %s", spec, burnc_error_message());
    return dev;
}

/* Kernels built: compiled by LLVM ("miss, compiled") or loaded from the disk cache ("disk
 * hit"); memory hits cost nothing and are not counted. The callback may run on any thread. */
static atomic_int llvm_compiles, disk_loads, compile_us;

static void count_codegen(void *user, const char *topic, const char *message)
{
    (void)user;
    if (strcmp(topic, "codegen") != 0)
        return;
    const char *m = strstr(message, ": miss, compiled in ");
    if (m) {
        atomic_fetch_add(&llvm_compiles, 1);
        atomic_fetch_add(&compile_us, (int)(1000 * atof(m + strlen(": miss, compiled in "))));
    } else if (strstr(message, ": disk hit")) {
        atomic_fetch_add(&disk_loads, 1);
    }
}

static int kernels_built(void) { return atomic_load(&llvm_compiles) + atomic_load(&disk_loads); }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Which chain is being made, for messages; and a check of the generator's own invariants. */
static char chain_tag[128];
#define GEN_CHECK(cond) cr_assert((cond), "%s: generator invariant failed: %s", chain_tag, #cond)

/* ---- Random streams (splitmix64) ---------------------------------------------------------- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t r_u64(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static int r_int(rng *r, int n) { return (int)(r_u64(r) % (uint64_t)n); }
static bool r_pct(rng *r, int pct) { return r_int(r, 100) < pct; }
static double r_unif(rng *r, double lo, double hi) { return lo + (hi - lo) * (double)(r_u64(r) >> 11) * 0x1p-53; }

static uint64_t mix2(uint64_t a, uint64_t b)
{
    rng r = {a ^ (b * 0xd1342543de82ef95u + 0x632be59bd9b4e019u)};
    r_u64(&r);
    return r_u64(&r);
}

#define PICK(r, table) ((table)[r_int((r), COUNT(table))])

/* ---- Dtypes ------------------------------------------------------------------------------- */

static bool is_float(burnc_dtype_t t)
{
    return t == BURNC_DTYPE_F32 || t == BURNC_DTYPE_F64 || t == BURNC_DTYPE_F16 || t == BURNC_DTYPE_BF16;
}

static int dt_order(burnc_dtype_t t)
{
    switch (t) {
    case BURNC_DTYPE_BOOL: return 0;
    case BURNC_DTYPE_U8: return 1;
    case BURNC_DTYPE_I32: return 2;
    case BURNC_DTYPE_I64: return 3;
    case BURNC_DTYPE_F16:
    case BURNC_DTYPE_BF16: return 4;
    case BURNC_DTYPE_F32: return 5;
    default: return 6;
    }
}

/* include/burnc.h: bool < u8 < i32 < i64 < (f16, bf16) < f32 < f64; f16 with bf16 gives f32. */
static burnc_dtype_t promote(burnc_dtype_t a, burnc_dtype_t b)
{
    if (a == b)
        return a;
    if (dt_order(a) == 4 && dt_order(b) == 4)
        return BURNC_DTYPE_F32;
    return dt_order(a) >= dt_order(b) ? a : b;
}

/* Unit roundoff of the dtype, and of what its reductions accumulate in. */
static double unit(burnc_dtype_t t)
{
    switch (t) {
    case BURNC_DTYPE_F64: return 0x1p-53;
    case BURNC_DTYPE_F32: return 0x1p-24;
    case BURNC_DTYPE_F16: return 0x1p-11;
    case BURNC_DTYPE_BF16: return 0x1p-8;
    default: return 0;
    }
}

static double acc_unit(burnc_dtype_t t) { return t == BURNC_DTYPE_F64 ? 0x1p-53 : is_float(t) ? 0x1p-24 : 0; }

/* The smallest subnormal: an ulp near zero. */
static double tiny(burnc_dtype_t t)
{
    switch (t) {
    case BURNC_DTYPE_F64: return 0x1p-1074;
    case BURNC_DTYPE_F32: return 0x1p-149;
    case BURNC_DTYPE_F16: return 0x1p-24;
    case BURNC_DTYPE_BF16: return 0x1p-133;
    default: return 0;
    }
}

/* Every node's values stay within +-cap (a larger node is squashed at once); with operands
 * under the cap of the result's dtype no op below can overflow (f16: 100 * 100, 100 / 0.25,
 * exp(8), 2 * 100^2 for var; i32: 1000 * 1000). */
static double cap_of(burnc_dtype_t t)
{
    switch (t) {
    case BURNC_DTYPE_F16:
    case BURNC_DTYPE_BF16: return 100;
    case BURNC_DTYPE_F32:
    case BURNC_DTYPE_F64: return 1e4;
    case BURNC_DTYPE_BOOL: return 1;
    default: return 1000;
    }
}

static double limit_of(burnc_dtype_t t) { return t == BURNC_DTYPE_F16 ? 6e4 : t == BURNC_DTYPE_F64 ? 1e300 : 1e30; }

static void store(void *base, burnc_dtype_t dt, int64_t i, double v)
{
    switch (dt) {
    case BURNC_DTYPE_F32: ((float *)base)[i] = (float)v; break;
    case BURNC_DTYPE_F64: ((double *)base)[i] = v; break;
    case BURNC_DTYPE_F16: ((uint16_t *)base)[i] = burnc_f32_to_f16((float)v); break;
    case BURNC_DTYPE_BF16: ((uint16_t *)base)[i] = burnc_f32_to_bf16((float)v); break;
    case BURNC_DTYPE_I32: ((int32_t *)base)[i] = (int32_t)v; break;
    case BURNC_DTYPE_I64: ((int64_t *)base)[i] = (int64_t)v; break;
    default: ((uint8_t *)base)[i] = (uint8_t)(v != 0); break;
    }
}

/* The same value bit for bit (every dtype here converts to double exactly), NaN equal to NaN. */
static bool same_bits(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

/* ---- Op tables ---------------------------------------------------------------------------- */

typedef burnc_tensor_t *(*un_fn)(burnc_tensor_t *);
typedef burnc_tensor_t *(*bin_fn)(burnc_tensor_t *, burnc_tensor_t *);
typedef burnc_tensor_t *(*sc_fn)(burnc_tensor_t *, double);

enum ucls { UC_EXACT, UC_JUMP, UC_MATH }; /* correctly rounded; jumps; faithful math */
enum udom { UD_ANY, UD_NONNEG, UD_POS, UD_EXP, UD_TAN }; /* x >= 0; x >= 0.25; x <= 8; |x| <= 1.2 */

enum uid {
    U_NEG, U_ABS, U_SIGN, U_EXP, U_EXP2, U_EXPM1, U_LOG, U_LOG2, U_LOG1P, U_SQRT, U_RSQRT, U_RECIP,
    U_SIN, U_COS, U_TAN, U_TANH, U_SIGMOID, U_RELU, U_GELU, U_SILU, U_ERF, U_FLOOR, U_CEIL, U_ROUND, U_NOT,
};

static const struct {
    const char *name;
    un_fn fn;
    enum ucls cls;
    enum udom dom;
    bool ints;    /* takes integer input, keeping its dtype */
    double slope; /* the largest |f'| where that is a constant */
} UN[] = {
    [U_NEG] = {"neg", burnc_neg, UC_EXACT, UD_ANY, true, 1},
    [U_ABS] = {"abs", burnc_abs, UC_EXACT, UD_ANY, true, 1},
    [U_SIGN] = {"sign", burnc_sign, UC_JUMP, UD_ANY, true, 0},
    [U_EXP] = {"exp", burnc_exp, UC_MATH, UD_EXP, false, 0},
    [U_EXP2] = {"exp2", burnc_exp2, UC_MATH, UD_EXP, false, 0},
    [U_EXPM1] = {"expm1", burnc_expm1, UC_MATH, UD_EXP, false, 0},
    [U_LOG] = {"log", burnc_log, UC_MATH, UD_POS, false, 0},
    [U_LOG2] = {"log2", burnc_log2, UC_MATH, UD_POS, false, 0},
    [U_LOG1P] = {"log1p", burnc_log1p, UC_MATH, UD_NONNEG, false, 0},
    [U_SQRT] = {"sqrt", burnc_sqrt, UC_EXACT, UD_NONNEG, false, 0},
    [U_RSQRT] = {"rsqrt", burnc_rsqrt, UC_MATH, UD_POS, false, 0},
    [U_RECIP] = {"reciprocal", burnc_reciprocal, UC_EXACT, UD_POS, false, 0},
    [U_SIN] = {"sin", burnc_sin, UC_MATH, UD_ANY, false, 1},
    [U_COS] = {"cos", burnc_cos, UC_MATH, UD_ANY, false, 1},
    [U_TAN] = {"tan", burnc_tan, UC_MATH, UD_TAN, false, 0},
    [U_TANH] = {"tanh", burnc_tanh, UC_MATH, UD_ANY, false, 1},
    [U_SIGMOID] = {"sigmoid", burnc_sigmoid, UC_MATH, UD_ANY, false, 0.25},
    [U_RELU] = {"relu", burnc_relu, UC_EXACT, UD_ANY, true, 1},
    [U_GELU] = {"gelu", burnc_gelu, UC_MATH, UD_ANY, false, 1.13},
    [U_SILU] = {"silu", burnc_silu, UC_MATH, UD_ANY, false, 1.1},
    [U_ERF] = {"erf", burnc_erf, UC_MATH, UD_ANY, false, 1.13},
    [U_FLOOR] = {"floor", burnc_floor, UC_JUMP, UD_ANY, true, 0},
    [U_CEIL] = {"ceil", burnc_ceil, UC_JUMP, UD_ANY, true, 0},
    [U_ROUND] = {"round", burnc_round, UC_JUMP, UD_ANY, true, 0},
    [U_NOT] = {"logical_not", burnc_logical_not, UC_JUMP, UD_ANY, true, 0},
};

enum bid { B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN, B_REM, B_ATAN2, B_EQ, B_NE, B_LT, B_LE, B_GT, B_GE,
           B_AND, B_OR, B_XOR };

static const struct {
    const char *name;
    bin_fn fn;
    sc_fn sfn;
} BIN[] = {
    [B_ADD] = {"add", burnc_add, burnc_add_scalar},
    [B_SUB] = {"sub", burnc_sub, burnc_sub_scalar},
    [B_MUL] = {"mul", burnc_mul, burnc_mul_scalar},
    [B_DIV] = {"div", burnc_div, burnc_div_scalar},
    [B_POW] = {"pow", burnc_pow, burnc_pow_scalar},
    [B_MAX] = {"maximum", burnc_maximum, burnc_maximum_scalar},
    [B_MIN] = {"minimum", burnc_minimum, burnc_minimum_scalar},
    [B_REM] = {"remainder", burnc_remainder, burnc_remainder_scalar},
    [B_ATAN2] = {"atan2", burnc_atan2, burnc_atan2_scalar},
    [B_EQ] = {"eq", burnc_eq, burnc_eq_scalar},
    [B_NE] = {"ne", burnc_ne, burnc_ne_scalar},
    [B_LT] = {"lt", burnc_lt, burnc_lt_scalar},
    [B_LE] = {"le", burnc_le, burnc_le_scalar},
    [B_GT] = {"gt", burnc_gt, burnc_gt_scalar},
    [B_GE] = {"ge", burnc_ge, burnc_ge_scalar},
    [B_AND] = {"logical_and", burnc_logical_and, burnc_logical_and_scalar},
    [B_OR] = {"logical_or", burnc_logical_or, burnc_logical_or_scalar},
    [B_XOR] = {"logical_xor", burnc_logical_xor, burnc_logical_xor_scalar},
};

static bool is_compare(int f) { return f >= B_EQ; }

enum rid { R_SUM, R_MEAN, R_MAX, R_MIN, R_VAR, R_STD };
static const char *const RED_NAME[] = {"sum", "mean", "max", "min", "var", "std"};

enum kind {
    K_INPUT, K_UNARY, K_BINARY, K_SCALAR, K_WHERE, K_CLAMP, K_CAST, K_REDUCE, K_ARGMAX, K_ARGMIN, K_SOFTMAX,
    K_LOG_SOFTMAX, K_LAYER_NORM, K_PERMUTE, K_TRANSPOSE, K_SLICE, K_FLIP, K_EXPAND, K_RESHAPE, K_UNSQUEEZE,
    K_SQUEEZE, K_CONTIGUOUS, K_COUNT
};
static const char *const KIND_NAME[K_COUNT] = {
    "input", "unary", "binary", "scalar", "where", "clamp", "cast", "reduce", "argmax", "argmin", "softmax",
    "log_softmax", "layer_norm", "permute", "transpose", "slice", "flip", "expand", "reshape", "unsqueeze",
    "squeeze", "contiguous"};

/* ---- Chains ------------------------------------------------------------------------------- */

/* A dimension: its size is data; whether it is 1, which dimensions equal it and bounds on it
 * are structure. Derived dimensions are memoized, so equal derivations broadcast together. */
typedef struct sym {
    int64_t size;
    double lb, ub;
    bool split_ok; /* a base size: composite, so it splits into two factors >= 2 */
    int kind, a;
    int64_t p[3];
} sym;
enum { SY_ONE, SY_BASE, SY_SLICE, SY_MERGE, SY_SPLIT };

/* What the cpu builds do with a node's handle: keep it to the end and read it, release it right
 * after its last consumer is recorded (an in-place candidate), or leave it to the scope. */
enum fate { F_KEEP, F_EARLY, F_SCOPE };

typedef struct node {
    enum kind k;
    int fn; /* unary, binary or reduction id */
    int in[3], n_in;
    double s[2]; /* scalar operand; clamp bounds; correction; eps */
    burnc_dtype_t dt;
    int rank, sym[MAX_RANK];
    uint32_t mask; /* reduced or flipped axes */
    bool keepdim, flag; /* flag: the op's alternative argument form (naxes 0, -1 sizes, ...) */
    int axis, axis2, perm[MAX_RANK];
    int64_t sl[3];
    double lo, hi; /* bounds on the values, from the structure */
    bool exact;    /* cpu must equal ref bitwise */
    enum fate fate;
    int last_use;
    void *host; /* inputs */
    /* from ref */
    double *val;
    int64_t n;
    double mag, minabs, err;
} node;

typedef struct chain {
    node nd[MAX_NODES];
    int n;
    sym sy[MAX_SYMS];
    int n_sym;
    rng S, D; /* structure, data */
    int cur;
    bool scoped;
} chain;

static double amax(const node *x) { return fmax(fabs(x->lo), fabs(x->hi)); }

static int sym_push(chain *c, sym s)
{
    GEN_CHECK(c->n_sym < MAX_SYMS);
    c->sy[c->n_sym] = s;
    return c->n_sym++;
}

static int sym_find(const chain *c, int kind, int a, const int64_t *p)
{
    for (int i = 1; i < c->n_sym; i++)
        if (c->sy[i].kind == kind && c->sy[i].a == a && c->sy[i].p[0] == p[0] && c->sy[i].p[1] == p[1] &&
            c->sy[i].p[2] == p[2])
            return i;
    return -1;
}

static int sym_base(chain *c)
{
    static const int64_t sizes[] = {4, 6, 8, 9, 10, 12, 16, 20};
    return sym_push(c, (sym){.size = PICK(&c->D, sizes), .lb = 4, .ub = 20, .split_ok = true, .kind = SY_BASE, .a = -1,
                             .p = {(int64_t)c->n_sym, 0, 0}});
}

/* An existing base dimension (so shapes keep matching), or now and then a new one. */
static int sym_some_base(chain *c)
{
    int cand[MAX_SYMS], n = 0;
    for (int i = 1; i < c->n_sym; i++)
        if (c->sy[i].kind == SY_BASE)
            cand[n++] = i;
    return n && r_pct(&c->S, 75) ? cand[r_int(&c->S, n)] : sym_base(c);
}

/* Python slice length, bounds clamped. */
static int64_t slice_len(int64_t n, int64_t start, int64_t stop, int64_t step)
{
    if (step > 0) {
        start = start < 0 ? (start + n < 0 ? 0 : start + n) : (start > n ? n : start);
        stop = stop < 0 ? (stop + n < 0 ? 0 : stop + n) : (stop > n ? n : stop);
        return stop > start ? (stop - start + step - 1) / step : 0;
    }
    start = start < 0 ? (start + n < -1 ? -1 : start + n) : (start > n - 1 ? n - 1 : start);
    stop = stop < 0 ? (stop + n < -1 ? -1 : stop + n) : (stop > n - 1 ? n - 1 : stop);
    return start > stop ? (start - stop - step - 1) / -step : 0;
}

static int sym_slice(chain *c, int s, const int64_t *p)
{
    int hit = sym_find(c, SY_SLICE, s, p);
    if (hit >= 0)
        return hit;
    const sym *b = &c->sy[s];
    return sym_push(c, (sym){.size = slice_len(b->size, p[0], p[1], p[2]),
                             .lb = (double)slice_len((int64_t)b->lb, p[0], p[1], p[2]),
                             .ub = (double)slice_len((int64_t)b->ub, p[0], p[1], p[2]), .kind = SY_SLICE, .a = s,
                             .p = {p[0], p[1], p[2]}});
}

static int sym_merge(chain *c, int a, int b)
{
    if (a == SY_ONE)
        return b;
    if (b == SY_ONE)
        return a;
    const int64_t p[3] = {b, 0, 0};
    int hit = sym_find(c, SY_MERGE, a, p);
    if (hit >= 0)
        return hit;
    return sym_push(c, (sym){.size = c->sy[a].size * c->sy[b].size, .lb = c->sy[a].lb * c->sy[b].lb,
                             .ub = c->sy[a].ub * c->sy[b].ub, .kind = SY_MERGE, .a = a, .p = {b, 0, 0}});
}

static int64_t smallest_factor(int64_t n)
{
    for (int64_t f = 2; f * f <= n; f++)
        if (n % f == 0)
            return f;
    return n;
}

static int sym_split(chain *c, int s, int part)
{
    const int64_t p[3] = {part, 0, 0};
    int hit = sym_find(c, SY_SPLIT, s, p);
    if (hit >= 0)
        return hit;
    int64_t f = smallest_factor(c->sy[s].size);
    return sym_push(c, (sym){.size = part ? c->sy[s].size / f : f, .lb = 2, .ub = c->sy[s].ub / 2, .kind = SY_SPLIT,
                             .a = s, .p = {part, 0, 0}});
}

static double numel_ub(const chain *c, int rank, const int *syms)
{
    double n = 1;
    for (int d = 0; d < rank; d++)
        n *= syms[d] == SY_ONE ? 1 : c->sy[syms[d]].ub;
    return n;
}

static int64_t numel_of(const chain *c, const node *x)
{
    int64_t n = 1;
    for (int d = 0; d < x->rank; d++)
        n *= x->sym[d] == SY_ONE ? 1 : c->sy[x->sym[d]].size;
    return n;
}

static void shape_of(const chain *c, const node *x, int64_t *shape)
{
    for (int d = 0; d < x->rank; d++)
        shape[d] = x->sym[d] == SY_ONE ? 1 : c->sy[x->sym[d]].size;
}

/* numpy broadcasting on dimension symbols. */
static bool bcast(const node *a, const node *b, int *rank, int *out)
{
    int r = a->rank > b->rank ? a->rank : b->rank;
    for (int i = 0; i < r; i++) {
        int sa = i < a->rank ? a->sym[a->rank - 1 - i] : SY_ONE;
        int sb = i < b->rank ? b->sym[b->rank - 1 - i] : SY_ONE;
        if (sa != sb && sa != SY_ONE && sb != SY_ONE)
            return false;
        out[r - 1 - i] = sa == SY_ONE ? sb : sa;
    }
    *rank = r;
    return true;
}

static bool has_one(const node *x)
{
    for (int d = 0; d < x->rank; d++)
        if (x->sym[d] == SY_ONE)
            return true;
    return false;
}

/* ---- Node constructors (structure, intervals, exactness) ---------------------------------- */

static int push(chain *c, node x)
{
    GEN_CHECK(c->n < MAX_NODES);
    x.last_use = -1;
    c->nd[c->n] = x;
    return c->n++;
}

static node like(const chain *c, enum kind k, int a)
{
    const node *x = &c->nd[a];
    node y = {.k = k, .in = {a, -1, -1}, .n_in = 1, .dt = x->dt, .rank = x->rank, .lo = x->lo, .hi = x->hi,
              .exact = x->exact};
    memcpy(y.sym, x->sym, sizeof y.sym);
    return y;
}

static int mk_input(chain *c, burnc_dtype_t dt, int rank, const int *syms)
{
    node x = {.k = K_INPUT, .dt = dt, .rank = rank, .exact = true, .n_in = 0};
    memcpy(x.sym, syms, (size_t)rank * sizeof *syms);
    bool fl = is_float(dt);
    x.lo = fl ? -4 : -20;
    x.hi = -x.lo;
    int64_t n = numel_of(c, &x);
    x.host = calloc((size_t)(n ? n : 1), burnc_dtype_size(dt));
    cr_assert_not_null(x.host);
    for (int64_t i = 0; i < n; i++) {
        double v;
        int kind = r_int(&c->D, 100);
        if (!fl)
            v = (double)(r_int(&c->D, 41) - 20);
        else if (kind < 4)
            v = kind < 3 ? 0.0 : -0.0;
        else if (kind < 10)
            v = 0.5 * (r_int(&c->D, 17) - 8); /* ties for round, equal values for max and argmax */
        else
            v = r_unif(&c->D, -4, 4);
        store(x.host, dt, i, v);
    }
    return push(c, x);
}

static double un_eval(int f, double x)
{
    switch (f) {
    case U_EXP: return exp(x);
    case U_EXP2: return exp2(x);
    case U_EXPM1: return expm1(x);
    case U_LOG: return log(x);
    case U_LOG2: return log2(x);
    case U_LOG1P: return log1p(x);
    case U_SQRT: return sqrt(x);
    case U_TAN: return tan(x);
    case U_TANH: return tanh(x);
    case U_SIGMOID: return 1 / (1 + exp(-x));
    default: return erf(x);
    }
}

static void un_interval(int f, double lo, double hi, double *olo, double *ohi)
{
    switch (f) {
    case U_NEG: *olo = -hi, *ohi = -lo; return;
    case U_ABS:
        if (lo >= 0)
            *olo = lo, *ohi = hi;
        else if (hi <= 0)
            *olo = -hi, *ohi = -lo;
        else
            *olo = 0, *ohi = fmax(-lo, hi);
        return;
    case U_RELU: *olo = fmax(lo, 0), *ohi = fmax(hi, 0); return;
    case U_SIGN:
    case U_SIN:
    case U_COS: *olo = -1, *ohi = 1; return;
    case U_FLOOR:
    case U_CEIL:
    case U_ROUND: *olo = floor(lo), *ohi = ceil(hi); return;
    case U_NOT: *olo = 0, *ohi = 1; return;
    case U_GELU: *olo = -0.2, *ohi = fmax(hi, 0); return;
    case U_SILU: *olo = -0.3, *ohi = fmax(hi, 0); return;
    case U_RECIP: *olo = 1 / hi, *ohi = 1 / lo; return;
    case U_RSQRT: *olo = 1 / sqrt(hi), *ohi = 1 / sqrt(lo); return;
    default: *olo = un_eval(f, lo), *ohi = un_eval(f, hi); return; /* increasing */
    }
}

static int mk_unary(chain *c, int f, int a)
{
    node y = like(c, K_UNARY, a);
    y.fn = f;
    if (f == U_NOT)
        y.dt = BURNC_DTYPE_BOOL;
    un_interval(f, c->nd[a].lo, c->nd[a].hi, &y.lo, &y.hi);
    if (UN[f].cls == UC_JUMP) /* a jump only ever sees exact values */
        GEN_CHECK(c->nd[a].exact);
    y.exact = c->nd[a].exact && UN[f].cls != UC_MATH;
    return push(c, y);
}

static void corners(double alo, double ahi, double blo, double bhi, double (*op)(double, double), double *lo,
                    double *hi)
{
    double v[4] = {op(alo, blo), op(alo, bhi), op(ahi, blo), op(ahi, bhi)};
    *lo = *hi = v[0];
    for (int i = 1; i < 4; i++)
        *lo = fmin(*lo, v[i]), *hi = fmax(*hi, v[i]);
}

static double op_mul(double a, double b) { return a * b; }
static double op_div(double a, double b) { return a / b; }

static void bin_interval(int f, burnc_dtype_t dt, double alo, double ahi, double blo, double bhi, bool self,
                         double *lo, double *hi)
{
    switch (f) {
    case B_ADD: *lo = alo + blo, *hi = ahi + bhi; return;
    case B_SUB: *lo = alo - bhi, *hi = ahi - blo; return;
    case B_MUL:
        corners(alo, ahi, blo, bhi, op_mul, lo, hi);
        if (self) /* a square */
            *lo = alo <= 0 && ahi >= 0 ? 0 : fmin(alo * alo, ahi * ahi);
        return;
    case B_DIV:
        if (is_float(dt)) {
            corners(alo, ahi, blo, bhi, op_div, lo, hi);
        } else { /* floor division: |q| <= |a| (dividing by zero gives 0) */
            *hi = fmax(fabs(alo), fabs(ahi)) + 1;
            *lo = -*hi;
        }
        return;
    case B_POW: corners(alo, ahi, blo, bhi, pow, lo, hi); return; /* a > 0: exp(b log a) is bilinear */
    case B_MAX: *lo = fmax(alo, blo), *hi = fmax(ahi, bhi); return;
    case B_MIN: *lo = fmin(alo, blo), *hi = fmin(ahi, bhi); return;
    case B_REM: *hi = fmax(fabs(blo), fabs(bhi)), *lo = -*hi; return;
    case B_ATAN2: *lo = -M_PI, *hi = M_PI; return;
    default: *lo = 0, *hi = 1; return;
    }
}

static int mk_binary(chain *c, int f, int a, int b)
{
    const node *x = &c->nd[a], *z = &c->nd[b];
    node y = {.k = K_BINARY, .fn = f, .in = {a, b, -1}, .n_in = 2};
    GEN_CHECK(bcast(x, z, &y.rank, y.sym));
    y.dt = is_compare(f) ? BURNC_DTYPE_BOOL : promote(x->dt, z->dt);
    bin_interval(f, y.dt, x->lo, x->hi, z->lo, z->hi, a == b, &y.lo, &y.hi);
    y.exact = x->exact && z->exact && f != B_POW && f != B_ATAN2;
    return push(c, y);
}

/* op(a, s) with s drawn from [slo, shi] (data); the bounds use the whole range. */
static int mk_scalar(chain *c, int f, int a, double slo, double shi, bool integral)
{
    node y = like(c, K_SCALAR, a);
    y.fn = f;
    double s = r_unif(&c->D, slo, shi);
    y.s[0] = integral ? round(s) : s;
    if (is_compare(f))
        y.dt = BURNC_DTYPE_BOOL;
    bin_interval(f, y.dt, c->nd[a].lo, c->nd[a].hi, slo, shi, false, &y.lo, &y.hi);
    y.exact = c->nd[a].exact && f != B_POW && f != B_ATAN2;
    return push(c, y);
}

static int mk_where(chain *c, int cond, int a, int b)
{
    node y = {.k = K_WHERE, .in = {cond, a, b}, .n_in = 3};
    int r1, s1[MAX_RANK];
    GEN_CHECK(bcast(&c->nd[a], &c->nd[b], &r1, s1));
    node tmp = {.rank = r1};
    memcpy(tmp.sym, s1, sizeof s1);
    GEN_CHECK(bcast(&c->nd[cond], &tmp, &y.rank, y.sym));
    GEN_CHECK(c->nd[cond].exact);
    y.dt = promote(c->nd[a].dt, c->nd[b].dt);
    y.lo = fmin(c->nd[a].lo, c->nd[b].lo);
    y.hi = fmax(c->nd[a].hi, c->nd[b].hi);
    y.exact = c->nd[a].exact && c->nd[b].exact;
    return push(c, y);
}

static int mk_cast(chain *c, int a, burnc_dtype_t dt)
{
    node y = like(c, K_CAST, a);
    y.dt = dt;
    if (!is_float(dt)) {
        GEN_CHECK(c->nd[a].exact); /* truncation jumps */
        y.lo = trunc(y.lo), y.hi = trunc(y.hi);
    }
    return push(c, y);
}

static void reduced_count(const chain *c, const node *x, uint32_t mask, double *lb, double *ub)
{
    *lb = *ub = 1;
    for (int d = 0; d < x->rank; d++)
        if (mask >> d & 1 && x->sym[d] != SY_ONE)
            *lb *= c->sy[x->sym[d]].lb, *ub *= c->sy[x->sym[d]].ub;
}

static void reduce_shape(const node *x, uint32_t mask, bool keepdim, node *y)
{
    y->rank = 0;
    for (int d = 0; d < x->rank; d++) {
        if (!(mask >> d & 1))
            y->sym[y->rank++] = x->sym[d];
        else if (keepdim)
            y->sym[y->rank++] = SY_ONE;
    }
}

static int mk_reduce(chain *c, int f, int a, uint32_t mask, bool keepdim, double correction)
{
    const node *x = &c->nd[a];
    node y = like(c, K_REDUCE, a);
    y.fn = f;
    y.mask = mask;
    y.keepdim = keepdim;
    y.s[0] = correction;
    y.flag = mask == (1u << x->rank) - 1 && r_pct(&c->S, 50); /* naxes 0: every axis */
    y.axis = r_pct(&c->S, 30); /* negative axis numbers */
    reduce_shape(x, mask, keepdim, &y);
    double nlb, nub, w = x->hi - x->lo;
    reduced_count(c, x, mask, &nlb, &nub);
    switch (f) {
    case R_SUM:
        if (!is_float(x->dt))
            y.dt = BURNC_DTYPE_I64;
        y.lo = fmin(nlb * x->lo, nub * x->lo);
        y.hi = fmax(nlb * x->hi, nub * x->hi);
        break;
    case R_VAR: y.lo = 0, y.hi = w * w / 4 * (correction ? 2 : 1); break;
    case R_STD: y.lo = 0, y.hi = sqrt(w * w / 4 * (correction ? 2 : 1)); break;
    default: break; /* mean, max, min: within the input's bounds */
    }
    y.exact = x->exact && (f == R_MAX || f == R_MIN || (f == R_SUM && !is_float(x->dt)));
    return push(c, y);
}

/* ---- Generation --------------------------------------------------------------------------- */

static int settle(chain *c, int a);

/* Back to [-1, 1] (floats) or [0, 10] (integers). */
static int squash(chain *c, int a)
{
    const node *x = &c->nd[a];
    if (!is_float(x->dt))
        return mk_scalar(c, B_REM, a, 5, 11, true);
    if (r_pct(&c->S, 50))
        return mk_unary(c, U_TANH, a);
    double b = fmax(amax(x), 1);
    return mk_scalar(c, B_MUL, a, 0.5 / b, 1 / b, false);
}

static int fit(chain *c, int a, double bound)
{
    return amax(&c->nd[a]) > bound ? squash(c, a) : a;
}

static int settle(chain *c, int a) { return c->cur = fit(c, a, cap_of(c->nd[a].dt)); }

static int cond_nonneg(chain *c, int a) { return c->nd[a].lo >= 0 ? a : mk_unary(c, U_ABS, a); }

/* >= 0.25: |a| + s with s in [0.5, 1.5] (integers: [1, 3]). */
static int cond_pos(chain *c, int a)
{
    if (c->nd[a].lo >= 0.25)
        return a;
    bool fl = is_float(c->nd[a].dt);
    return mk_scalar(c, B_ADD, cond_nonneg(c, a), fl ? 0.5 : 1, fl ? 1.5 : 3, !fl);
}

static int condition(chain *c, int a, enum udom d)
{
    switch (d) {
    case UD_NONNEG: return cond_nonneg(c, a);
    case UD_POS: return cond_pos(c, a);
    case UD_EXP: return c->nd[a].hi <= 8 ? a : squash(c, a);
    case UD_TAN: return amax(&c->nd[a]) <= 1.2 ? a : mk_unary(c, U_TANH, a);
    default: return a;
    }
}

static burnc_dtype_t random_dtype(rng *s)
{
    static const burnc_dtype_t pick[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F32, BURNC_DTYPE_F32, BURNC_DTYPE_F32,
                                         BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16,
                                         BURNC_DTYPE_I32};
    return PICK(s, pick);
}

/* A new input shaped to broadcast with a: a's axes, some of them 1 ([m,1], [1,n]), fewer
 * leading axes ([n]), a size where a has 1 (outer products) or one more leading axis; now and
 * then stored transposed and read through a permute. */
static int new_partner(chain *c, int a, burnc_dtype_t dt)
{
    const node *x = &c->nd[a];
    int rank = x->rank, syms[MAX_RANK];
    int drop = rank && r_pct(&c->S, 25) ? 1 + r_int(&c->S, rank) : 0;
    rank -= drop;
    for (int d = 0; d < rank; d++) {
        int s = x->sym[d + drop];
        if (s == SY_ONE)
            syms[d] = r_pct(&c->S, 40) ? sym_some_base(c) : SY_ONE;
        else
            syms[d] = r_pct(&c->S, 70) ? s : SY_ONE;
    }
    if (rank < MAX_RANK && drop == 0 && r_pct(&c->S, 10)) {
        memmove(syms + 1, syms, (size_t)rank * sizeof *syms);
        syms[0] = sym_some_base(c);
        rank++;
    }
    node probe = {.rank = rank};
    memcpy(probe.sym, syms, sizeof syms);
    int br, bs[MAX_RANK];
    if (!bcast(x, &probe, &br, bs) || numel_ub(c, br, bs) > NUMEL_CAP) { /* a's own shape */
        rank = x->rank;
        memcpy(syms, x->sym, sizeof syms);
    }
    if (rank >= 2 && r_pct(&c->S, 20)) {
        int rev[MAX_RANK];
        node v;
        for (int d = 0; d < rank; d++)
            rev[d] = syms[rank - 1 - d];
        int t = mk_input(c, dt, rank, rev);
        v = like(c, K_PERMUTE, t);
        for (int d = 0; d < rank; d++)
            v.perm[d] = rank - 1 - d, v.sym[d] = syms[d];
        return push(c, v);
    }
    return mk_input(c, dt, rank, syms);
}

/* A second operand for a: a node of the chain that broadcasts with a, or a new input. */
static int partner(chain *c, int a, bool need_exact, bool same_dtype)
{
    if (r_pct(&c->S, 45)) {
        int cand[MAX_NODES], nc = 0;
        for (int j = 0; j < c->n; j++) {
            const node *z = &c->nd[j];
            int r, s[MAX_RANK];
            if (j == a || z->dt == BURNC_DTYPE_BOOL || (need_exact && !z->exact) ||
                (same_dtype && z->dt != c->nd[a].dt) || !bcast(&c->nd[a], z, &r, s) || numel_ub(c, r, s) > NUMEL_CAP)
                continue;
            cand[nc++] = j;
        }
        if (nc)
            return cand[r_int(&c->S, nc)];
    }
    burnc_dtype_t dt = c->nd[a].dt;
    if (!same_dtype && r_pct(&c->S, 20))
        dt = random_dtype(&c->S);
    return new_partner(c, a, dt);
}

static int g_unary(chain *c, int a)
{
    static const int FL[] = {U_NEG, U_ABS, U_EXP, U_EXP2, U_EXPM1, U_LOG, U_LOG2, U_LOG1P, U_SQRT, U_RSQRT,
                             U_RECIP, U_SIN, U_COS, U_TAN, U_TANH, U_SIGMOID, U_RELU, U_GELU, U_SILU, U_ERF,
                             U_SIGN, U_FLOOR, U_CEIL, U_ROUND};
    static const int IN[] = {U_NEG, U_ABS, U_RELU, U_SIGN, U_FLOOR, U_ROUND};
    bool fl = is_float(c->nd[a].dt);
    int f = fl ? PICK(&c->S, FL) : PICK(&c->S, IN);
    if (UN[f].cls == UC_JUMP && !c->nd[a].exact)
        f = U_TANH;
    a = condition(c, a, UN[f].dom);
    return settle(c, mk_unary(c, f, a));
}

static int g_binary(chain *c, int a)
{
    static const int FL[] = {B_ADD, B_ADD, B_SUB, B_MUL, B_MUL, B_DIV, B_POW, B_MAX, B_MIN, B_ATAN2};
    static const int IN[] = {B_ADD, B_SUB, B_MUL, B_DIV, B_REM, B_MAX, B_MIN};
    int b = partner(c, a, false, false);
    if (r_pct(&c->S, 30)) {
        int t = a;
        a = b, b = t;
    }
    burnc_dtype_t rt = promote(c->nd[a].dt, c->nd[b].dt);
    int f = is_float(rt) ? PICK(&c->S, FL) : PICK(&c->S, IN);
    double cap = cap_of(rt);
    a = fit(c, a, cap);
    b = a == b ? a : fit(c, b, cap);
    if (f == B_DIV && is_float(rt)) {
        b = cond_pos(c, b);
        if (r_pct(&c->S, 30))
            b = mk_unary(c, U_NEG, b);
    } else if (f == B_POW) {
        a = cond_pos(c, a);
        b = fit(c, b, 2);
    } else if (f == B_ATAN2 && !(c->nd[a].exact && c->nd[b].exact)) {
        b = cond_pos(c, b);
    }
    return settle(c, mk_binary(c, f, a, b));
}

static int g_scalar(chain *c, int a)
{
    static const int FL[] = {B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN, B_ATAN2};
    static const int IN[] = {B_ADD, B_SUB, B_MUL, B_DIV, B_REM, B_MAX, B_MIN};
    bool fl = is_float(c->nd[a].dt);
    int f = fl ? PICK(&c->S, FL) : PICK(&c->S, IN);
    switch (f) {
    case B_ADD:
    case B_SUB: return settle(c, mk_scalar(c, f, a, fl ? -3 : -5, fl ? 3 : 5, !fl));
    case B_MUL: return settle(c, mk_scalar(c, f, a, -2, 2, !fl));
    case B_DIV:
        if (!fl)
            return settle(c, mk_scalar(c, f, a, -4, 4, true));
        return settle(c, r_pct(&c->S, 50) ? mk_scalar(c, f, a, 0.5, 2, false) : mk_scalar(c, f, a, -2, -0.5, false));
    case B_POW: return settle(c, mk_scalar(c, f, cond_pos(c, a), -2, 2, false));
    case B_REM: return settle(c, mk_scalar(c, f, a, -7, 7, true));
    case B_ATAN2: return settle(c, mk_scalar(c, f, a, 0.5, 2, false));
    default: return settle(c, mk_scalar(c, f, a, fl ? -1 : -5, fl ? 1 : 5, !fl));
    }
}

/* A boolean of the shape of a (or broadcasting with it) that is exact. */
static int g_condition(chain *c, int a)
{
    static const int CMP[] = {B_EQ, B_NE, B_LT, B_LE, B_GT, B_GE};
    int x = a;
    if (!c->nd[a].exact || r_pct(&c->S, 20))
        x = new_partner(c, a, r_pct(&c->S, 70) ? c->nd[a].dt : BURNC_DTYPE_I32);
    int cond;
    if (r_pct(&c->S, 50)) {
        cond = mk_scalar(c, PICK(&c->S, CMP), x, -1, 1, !is_float(c->nd[x].dt));
    } else {
        int y = partner(c, x, true, false);
        cond = mk_binary(c, PICK(&c->S, CMP), x, y);
    }
    switch (r_int(&c->S, 5)) {
    case 0: return mk_unary(c, U_NOT, cond);
    case 1: {
        static const int LOGIC[] = {B_AND, B_OR, B_XOR};
        int other = mk_scalar(c, PICK(&c->S, CMP), new_partner(c, x, BURNC_DTYPE_F32), -1, 1, false);
        int r, s[MAX_RANK];
        return bcast(&c->nd[cond], &c->nd[other], &r, s) ? mk_binary(c, PICK(&c->S, LOGIC), cond, other) : cond;
    }
    default: return cond;
    }
}

static int g_where(chain *c, int a)
{
    int cond = g_condition(c, a);
    int b = partner(c, a, false, r_pct(&c->S, 60));
    int r, s[MAX_RANK] = {0};
    node tmp = {.rank = c->nd[a].rank};
    memcpy(tmp.sym, c->nd[a].sym, sizeof tmp.sym);
    if (!bcast(&tmp, &c->nd[cond], &r, s))
        return a;
    tmp.rank = r;
    memcpy(tmp.sym, s, sizeof s);
    if (!bcast(&tmp, &c->nd[b], &r, s) || numel_ub(c, r, s) > NUMEL_CAP)
        b = mk_unary(c, U_NEG, a); /* where(cond, a, -a) */
    double cap = cap_of(promote(c->nd[a].dt, c->nd[b].dt));
    a = fit(c, a, cap);
    b = fit(c, b, cap);
    return settle(c, r_pct(&c->S, 50) ? mk_where(c, cond, a, b) : mk_where(c, cond, b, a));
}

static int g_clamp(chain *c, int a)
{
    const node *x = &c->nd[a];
    bool fl = is_float(x->dt);
    double llo = fl ? -2 : -5, lhi = fl ? -0.5 : -1, hlo = fl ? 0.5 : 1, hhi = fl ? 2 : 5;
    node y = like(c, K_CLAMP, a);
    y.s[0] = r_unif(&c->D, llo, lhi);
    y.s[1] = r_unif(&c->D, hlo, hhi);
    if (!fl)
        y.s[0] = round(y.s[0]), y.s[1] = round(y.s[1]);
    if (r_pct(&c->S, 15)) { /* one-sided */
        if (r_pct(&c->S, 50))
            y.s[0] = -INFINITY, llo = lhi = -INFINITY;
        else
            y.s[1] = INFINITY, hlo = hhi = INFINITY;
    }
    y.lo = fmin(fmax(x->lo, llo), hlo);
    y.hi = fmin(fmax(x->hi, lhi), hhi);
    return settle(c, push(c, y));
}

static int g_cast(chain *c, int a)
{
    static const burnc_dtype_t FL[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16,
                                       BURNC_DTYPE_I32};
    burnc_dtype_t from = c->nd[a].dt, to = PICK(&c->S, FL);
    if (to == from)
        to = is_float(from) ? BURNC_DTYPE_I32 : BURNC_DTYPE_F32;
    if (!is_float(to) && (!c->nd[a].exact || amax(&c->nd[a]) > cap_of(to)))
        to = from == BURNC_DTYPE_F32 ? BURNC_DTYPE_F16 : BURNC_DTYPE_F32;
    a = fit(c, a, cap_of(to));
    return settle(c, mk_cast(c, a, to));
}

/* A random non-empty set of axes. */
static uint32_t random_mask(rng *s, int rank)
{
    return (uint32_t)r_int(s, (1 << rank) - 1) + 1;
}

/* Reductions; half of the keepdim ones feed straight back into element-wise work with their
 * input (x - mean(x), x / max|x|, ...). */
static int g_reduce(chain *c, int a)
{
    static const int FL[] = {R_SUM, R_MEAN, R_MAX, R_MIN, R_VAR, R_STD};
    static const int IN[] = {R_SUM, R_MAX, R_MIN};
    const node *x = &c->nd[a];
    if (x->rank == 0)
        return g_unary(c, a);
    bool fl = is_float(x->dt);
    int f = fl ? PICK(&c->S, FL) : PICK(&c->S, IN);
    uint32_t mask = random_mask(&c->S, x->rank);
    bool keepdim = r_pct(&c->S, 50);
    double nlb, nub;
    reduced_count(c, x, mask, &nlb, &nub);
    double corr = (f == R_VAR || f == R_STD) && nlb >= 2 && r_pct(&c->S, 50) ? 1 : 0;
    if (f == R_SUM && fl && nub * amax(x) > limit_of(x->dt))
        a = squash(c, a);
    int r = mk_reduce(c, f, a, mask, keepdim, corr);
    if (keepdim && r_pct(&c->S, 50)) {
        static const int BACK[] = {B_SUB, B_ADD, B_MUL, B_DIV};
        int g = PICK(&c->S, BACK);
        burnc_dtype_t rt = promote(c->nd[a].dt, c->nd[r].dt);
        a = fit(c, a, cap_of(rt));
        r = fit(c, r, cap_of(rt));
        if (g == B_DIV && is_float(rt))
            r = cond_pos(c, r);
        r = mk_binary(c, g, a, r);
    }
    return settle(c, r);
}

static int g_arg(chain *c, int a)
{
    const node *x = &c->nd[a];
    if (x->rank == 0 || !x->exact)
        return g_reduce(c, a);
    node y = like(c, r_pct(&c->S, 50) ? K_ARGMAX : K_ARGMIN, a);
    y.axis = r_int(&c->S, x->rank);
    y.keepdim = r_pct(&c->S, 50);
    y.flag = r_pct(&c->S, 30); /* a negative axis */
    reduce_shape(x, 1u << y.axis, y.keepdim, &y);
    y.dt = BURNC_DTYPE_I64;
    y.lo = 0;
    y.hi = x->sym[y.axis] == SY_ONE ? 0 : c->sy[x->sym[y.axis]].ub - 1;
    return settle(c, push(c, y));
}

/* Softmax and layer norm written out: reductions with keepdim, broadcast back. */
static int g_pattern(chain *c, int a)
{
    const node *x = &c->nd[a];
    if (!is_float(x->dt) || x->rank == 0)
        return g_reduce(c, a);
    uint32_t mask = r_pct(&c->S, 70) ? 1u << (x->rank - 1) : random_mask(&c->S, x->rank);
    double nlb, nub, lo = x->lo, hi = x->hi;
    reduced_count(c, x, mask, &nlb, &nub);
    if (r_pct(&c->S, 50)) { /* softmax */
        int m = mk_reduce(c, R_MAX, a, mask, true, 0);
        int d = mk_binary(c, B_SUB, a, m);
        c->nd[d].lo = lo - hi, c->nd[d].hi = 0; /* x - max(x) <= 0 */
        int e = mk_unary(c, U_EXP, d);
        if (nub > limit_of(c->nd[e].dt))
            return settle(c, e);
        int s = mk_reduce(c, R_SUM, e, mask, true, 0);
        c->nd[s].lo = 1; /* the largest element contributes exp(0) */
        return settle(c, mk_binary(c, B_DIV, e, s));
    }
    int mu = mk_reduce(c, R_MEAN, a, mask, true, 0);
    int d = mk_binary(c, B_SUB, a, mu);
    int v = r_pct(&c->S, 50) ? mk_reduce(c, R_MEAN, mk_binary(c, B_MUL, d, d), mask, true, 0)
                               : mk_reduce(c, R_VAR, a, mask, true, 0);
    int ve = mk_scalar(c, B_ADD, v, 1e-3, 1e-1, false);
    int r = mk_unary(c, U_RSQRT, ve); /* >= 1e-3: no conditioning, the point of the pattern */
    return settle(c, mk_binary(c, B_MUL, d, r));
}

/* softmax, log_softmax and layer_norm through the API (recorded as their elementary ops). */
static int g_composite(chain *c, int a)
{
    const node *x = &c->nd[a];
    if (!is_float(x->dt) || x->rank == 0)
        return g_reduce(c, a);
    int which = r_int(&c->S, 3);
    node y = like(c, which == 0 ? K_SOFTMAX : which == 1 ? K_LOG_SOFTMAX : K_LAYER_NORM, a);
    y.exact = false;
    if (which < 2) {
        y.axis = r_pct(&c->S, 60) ? x->rank - 1 : r_int(&c->S, x->rank);
        double n = x->sym[y.axis] == SY_ONE ? 1 : c->sy[x->sym[y.axis]].ub;
        y.lo = which == 0 ? 0 : x->lo - x->hi - log(n);
        y.hi = which == 0 ? 1 : 0;
        return settle(c, push(c, y));
    }
    y.axis = 1 + r_int(&c->S, x->rank); /* normalized_rank */
    y.s[0] = r_unif(&c->D, 1e-3, 1e-1);
    double nlb, nub;
    reduced_count(c, x, ((1u << y.axis) - 1) << (x->rank - y.axis), &nlb, &nub);
    y.hi = fmin(sqrt(nub), (x->hi - x->lo) / sqrt(1e-3));
    y.lo = -y.hi;
    if (r_pct(&c->S, 50)) { /* affine: weight and bias over the normalized axes */
        int w = mk_input(c, x->dt, y.axis, x->sym + x->rank - y.axis);
        int b = mk_input(c, x->dt, y.axis, x->sym + x->rank - y.axis);
        y.in[1] = w, y.in[2] = b, y.n_in = 3;
        double m = y.hi * 4 + 4;
        y.lo = -m, y.hi = m;
    }
    return settle(c, push(c, y));
}

static int g_view(chain *c, int a)
{
    const node *x = &c->nd[a];
    enum kind opts[16];
    int n = 0, sliceable = 0, splittable = 0;
    for (int d = 0; d < x->rank; d++) {
        sliceable += x->sym[d] != SY_ONE && c->sy[x->sym[d]].lb >= 4;
        splittable += x->sym[d] != SY_ONE && c->sy[x->sym[d]].split_ok;
    }
    if (x->rank >= 2)
        opts[n++] = K_PERMUTE, opts[n++] = K_TRANSPOSE;
    if (sliceable)
        opts[n++] = K_SLICE, opts[n++] = K_SLICE;
    if (x->rank >= 1)
        opts[n++] = K_FLIP;
    if (has_one(x) || x->rank < MAX_RANK)
        opts[n++] = K_EXPAND;
    opts[n++] = K_RESHAPE;
    if (x->rank < MAX_RANK)
        opts[n++] = K_UNSQUEEZE;
    if (has_one(x)) /* keepdim reductions leave size-1 axes: remove them often */
        opts[n++] = K_SQUEEZE, opts[n++] = K_SQUEEZE, opts[n++] = K_SQUEEZE;
    opts[n++] = K_CONTIGUOUS;
    node y = like(c, opts[r_int(&c->S, n)], a);
    switch (y.k) {
    case K_PERMUTE:
        for (int d = 0; d < x->rank; d++)
            y.perm[d] = d;
        for (int d = x->rank - 1; d > 0; d--) {
            int j = r_int(&c->S, d + 1), t = y.perm[d];
            y.perm[d] = y.perm[j], y.perm[j] = t;
        }
        for (int d = 0; d < x->rank; d++)
            y.sym[d] = x->sym[y.perm[d]];
        break;
    case K_TRANSPOSE:
        y.axis = r_int(&c->S, x->rank);
        y.axis2 = (y.axis + 1 + r_int(&c->S, x->rank - 1)) % x->rank;
        y.sym[y.axis] = x->sym[y.axis2], y.sym[y.axis2] = x->sym[y.axis];
        break;
    case K_SLICE: {
        static const int64_t P[][3] = {{1, INT64_MAX, 1}, {0, INT64_MAX, 2}, {1, INT64_MAX, 2}, {0, -1, 1},
                                       {1, -1, 2},        {INT64_MAX, INT64_MIN, -1}, {-2, INT64_MIN, -2},
                                       {INT64_MAX, 0, -1}, {0, 3, 1}, {-3, INT64_MAX, 1}};
        int k = r_int(&c->S, sliceable);
        for (int d = 0; d < x->rank; d++)
            if (x->sym[d] != SY_ONE && c->sy[x->sym[d]].lb >= 4 && k-- == 0)
                y.axis = d;
        int p = r_int(&c->S, COUNT(P));
        while (slice_len((int64_t)c->sy[x->sym[y.axis]].lb, P[p][0], P[p][1], P[p][2]) < 2)
            p = (p + 1) % COUNT(P);
        memcpy(y.sl, P[p], sizeof y.sl);
        y.sym[y.axis] = sym_slice(c, x->sym[y.axis], y.sl);
        break;
    }
    case K_FLIP: y.mask = random_mask(&c->S, x->rank); break;
    case K_EXPAND: {
        y.flag = r_pct(&c->S, 50); /* -1 for the sizes that stay */
        for (int d = 0; d < x->rank; d++)
            if (x->sym[d] == SY_ONE && r_pct(&c->S, 70)) {
                y.sym[d] = sym_some_base(c);
                if (numel_ub(c, y.rank, y.sym) > NUMEL_CAP)
                    y.sym[d] = SY_ONE;
            }
        if (x->rank < MAX_RANK && r_pct(&c->S, 50)) {
            memmove(y.sym + 1, y.sym, (size_t)y.rank * sizeof *y.sym);
            y.sym[0] = sym_some_base(c);
            y.rank++;
            if (numel_ub(c, y.rank, y.sym) > NUMEL_CAP)
                y.sym[0] = SY_ONE;
        }
        break;
    }
    case K_RESHAPE: {
        int how = r_int(&c->S, 4);
        if (how == 0 && splittable && x->rank < MAX_RANK) { /* split an axis in two */
            int k = r_int(&c->S, splittable), d = 0;
            for (int e = 0; e < x->rank; e++)
                if (x->sym[e] != SY_ONE && c->sy[x->sym[e]].split_ok && k-- == 0)
                    d = e;
            memmove(y.sym + d + 2, x->sym + d + 1, (size_t)(x->rank - d - 1) * sizeof *y.sym);
            y.sym[d] = sym_split(c, x->sym[d], 0);
            y.sym[d + 1] = sym_split(c, x->sym[d], 1);
            y.rank++;
        } else if (how == 1 && x->rank >= 2) { /* merge two neighbours */
            int d = r_int(&c->S, x->rank - 1);
            y.sym[d] = sym_merge(c, x->sym[d], x->sym[d + 1]);
            memmove(y.sym + d + 1, x->sym + d + 2, (size_t)(x->rank - d - 2) * sizeof *y.sym);
            y.rank--;
        } else if (how == 2 && x->rank < MAX_RANK) { /* a size-1 axis */
            int d = r_int(&c->S, x->rank + 1);
            memmove(y.sym + d + 1, x->sym + d, (size_t)(x->rank - d) * sizeof *y.sym);
            y.sym[d] = SY_ONE;
            y.rank++;
        } else { /* flatten */
            int s = SY_ONE;
            for (int d = 0; d < x->rank; d++)
                s = sym_merge(c, s, x->sym[d]);
            y.rank = 1;
            y.sym[0] = s;
        }
        y.axis = y.rank && r_pct(&c->S, 40) ? r_int(&c->S, y.rank) : -1; /* the axis given as -1 */
        break;
    }
    case K_UNSQUEEZE:
        y.axis = r_int(&c->S, x->rank + 1);
        memmove(y.sym + y.axis + 1, x->sym + y.axis, (size_t)(x->rank - y.axis) * sizeof *y.sym);
        y.sym[y.axis] = SY_ONE;
        y.rank++;
        y.flag = r_pct(&c->S, 30); /* a negative axis */
        break;
    case K_SQUEEZE: {
        y.flag = r_pct(&c->S, 30); /* naxes 0: every size-1 axis */
        int ones = 0;
        for (int d = 0; d < x->rank; d++)
            ones += x->sym[d] == SY_ONE;
        int k = r_int(&c->S, ones);
        y.rank = 0;
        for (int d = 0; d < x->rank; d++) {
            if (x->sym[d] == SY_ONE && (y.flag || k-- == 0)) {
                if (!y.flag)
                    y.axis = d;
                continue;
            }
            y.sym[y.rank++] = x->sym[d];
        }
        break;
    }
    default: break;
    }
    return c->cur = push(c, y);
}

/* An operand: mostly the chain's latest value, sometimes an earlier one. */
static int pick_operand(chain *c)
{
    if (r_pct(&c->S, 75) && c->nd[c->cur].dt != BURNC_DTYPE_BOOL)
        return c->cur;
    int cand[MAX_NODES], n = 0;
    for (int j = 0; j < c->n; j++)
        if (c->nd[j].dt != BURNC_DTYPE_BOOL)
            cand[n++] = j;
    return cand[r_int(&c->S, n)];
}

static void step(chain *c)
{
    int a = pick_operand(c), r = r_int(&c->S, 100);
    if (r < 18)
        g_unary(c, a);
    else if (r < 36)
        g_binary(c, a);
    else if (r < 46)
        g_scalar(c, a);
    else if (r < 58)
        g_view(c, a);
    else if (r < 66)
        g_reduce(c, a);
    else if (r < 70)
        g_arg(c, a);
    else if (r < 75)
        g_pattern(c, a);
    else if (r < 80)
        g_composite(c, a);
    else if (r < 87)
        g_cast(c, a);
    else if (r < 94)
        g_where(c, a);
    else
        g_clamp(c, a);
}

static void gen_chain(chain *c, uint64_t structure, uint64_t data)
{
    memset(c, 0, sizeof *c);
    c->S.s = structure;
    c->D.s = data;
    c->sy[0] = (sym){.size = 1, .lb = 1, .ub = 1, .kind = SY_ONE, .a = -1};
    c->n_sym = 1;
    int rank = 1 + r_int(&c->S, 3), syms[MAX_RANK];
    for (int d = 0; d < rank; d++)
        syms[d] = sym_base(c);
    c->cur = mk_input(c, random_dtype(&c->S), rank, syms);
    int ops = 3 + r_int(&c->S, 12);
    for (int i = 0; i < ops && c->n < MAX_NODES - 24; i++)
        step(c);
    c->scoped = r_pct(&c->S, 60);
    for (int i = 0; i < c->n; i++) {
        int f = r_int(&c->S, 100);
        c->nd[i].fate = f < 30 ? F_KEEP : f < 65 ? F_EARLY : F_SCOPE;
        for (int k = 0; k < c->nd[i].n_in; k++)
            c->nd[c->nd[i].in[k]].last_use = i;
    }
    c->nd[c->cur].fate = F_KEEP;
}

static void free_chain(chain *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->nd[i].host);
        free(c->nd[i].val);
    }
    free(c);
}

/* ---- Building a chain on a device --------------------------------------------------------- */

static burnc_tensor_t *make(const chain *c, int i, burnc_device_t *dev, burnc_tensor_t *const *h)
{
    const node *x = &c->nd[i];
    burnc_tensor_t *a = x->n_in ? h[x->in[0]] : NULL;
    int64_t shape[MAX_RANK];
    int axes[MAX_RANK], n = 0;
    shape_of(c, x, shape);
    switch (x->k) {
    case K_INPUT: return burnc_tensor_from_data(dev, x->dt, x->rank, shape, x->host);
    case K_UNARY: return UN[x->fn].fn(a);
    case K_BINARY: return BIN[x->fn].fn(a, h[x->in[1]]);
    case K_SCALAR: return BIN[x->fn].sfn(a, x->s[0]);
    case K_WHERE: return burnc_where(a, h[x->in[1]], h[x->in[2]]);
    case K_CLAMP: return burnc_clamp(a, x->s[0], x->s[1]);
    case K_CAST: return burnc_cast(a, x->dt);
    case K_REDUCE: {
        int r = c->nd[x->in[0]].rank;
        for (int d = 0; d < r; d++)
            if (x->mask >> d & 1)
                axes[n++] = x->axis ? d - r : d;
        if (x->flag)
            n = 0;
        switch (x->fn) {
        case R_SUM: return burnc_sum(a, n, axes, x->keepdim);
        case R_MEAN: return burnc_mean(a, n, axes, x->keepdim);
        case R_MAX: return burnc_max(a, n, axes, x->keepdim);
        case R_MIN: return burnc_min(a, n, axes, x->keepdim);
        case R_VAR: return burnc_var(a, n, axes, x->s[0], x->keepdim);
        default: return burnc_std(a, n, axes, x->s[0], x->keepdim);
        }
    }
    case K_ARGMAX:
    case K_ARGMIN: {
        int ax = x->flag ? x->axis - c->nd[x->in[0]].rank : x->axis;
        return x->k == K_ARGMAX ? burnc_argmax(a, ax, x->keepdim) : burnc_argmin(a, ax, x->keepdim);
    }
    case K_SOFTMAX: return burnc_softmax(a, x->axis);
    case K_LOG_SOFTMAX: return burnc_log_softmax(a, x->axis);
    case K_LAYER_NORM:
        if (x->n_in == 3)
            return burnc_layer_norm_affine(a, x->axis, h[x->in[1]], h[x->in[2]], x->s[0]);
        return burnc_layer_norm(a, x->axis, x->s[0]);
    case K_PERMUTE: return burnc_permute(a, x->rank, x->perm);
    case K_TRANSPOSE: return burnc_transpose(a, x->axis, x->axis2);
    case K_SLICE: return burnc_slice(a, x->axis, x->sl[0], x->sl[1], x->sl[2]);
    case K_FLIP:
        for (int d = 0; d < x->rank; d++)
            if (x->mask >> d & 1)
                axes[n++] = d;
        return burnc_flip(a, n, axes);
    case K_EXPAND: {
        const node *in = &c->nd[x->in[0]];
        for (int d = 0; x->flag && d < in->rank; d++)
            if (in->sym[d] == x->sym[x->rank - in->rank + d])
                shape[x->rank - in->rank + d] = -1;
        return burnc_expand(a, x->rank, shape);
    }
    case K_RESHAPE:
        if (x->axis >= 0)
            shape[x->axis] = -1;
        return burnc_reshape(a, x->rank, shape);
    case K_UNSQUEEZE: return burnc_unsqueeze(a, x->flag ? x->axis - x->rank : x->axis);
    case K_SQUEEZE: return x->flag ? burnc_squeeze(a, 0, NULL) : burnc_squeeze(a, 1, &x->axis);
    default: return burnc_contiguous(a);
    }
}

typedef struct run {
    burnc_tensor_t *h[MAX_NODES];
    bool owned[MAX_NODES];
    void *out[MAX_NODES]; /* the kept nodes' bytes */
    char why[768];
} run;

static void run_free(run *r)
{
    for (int i = 0; i < MAX_NODES; i++)
        free(r->out[i]);
}

static void fail_build(run *r, const chain *c, int i, const char *what)
{
    snprintf(r->why, sizeof r->why, "#%d %s: %s: %s (%s)", i, KIND_NAME[c->nd[i].k], what,
             burnc_status_name(burnc_error_code()), burnc_error_message());
}

/* Out of a scope every handle is the caller's; a scope's handle left to it is not. */
static enum fate fate_of(const chain *c, int i)
{
    return c->nd[i].fate == F_SCOPE && !c->scoped ? F_EARLY : c->nd[i].fate;
}

/* Builds the chain with the handle fates of the cpu builds, then reads the kept nodes. */
static bool build_cpu(const chain *c, burnc_device_t *dev, run *r)
{
    bool ok = true;
    if (c->scoped)
        burnc_scope_begin();
    for (int i = 0; i < c->n && ok; i++) {
        const node *x = &c->nd[i];
        burnc_tensor_t *t = make(c, i, dev, r->h);
        if (!t) {
            fail_build(r, c, i, "recording failed");
            ok = false;
            break;
        }
        r->h[i] = t;
        enum fate f = fate_of(c, i);
        if (c->scoped && f != F_SCOPE)
            burnc_tensor_keep(t);
        r->owned[i] = f != F_SCOPE;
        for (int k = 0; k < x->n_in; k++) {
            int j = x->in[k];
            if (fate_of(c, j) == F_EARLY && c->nd[j].last_use == i && r->h[j]) {
                burnc_tensor_release(r->h[j]); /* an in-place candidate: i's input has no other user */
                r->h[j] = NULL;
                r->owned[j] = false;
            }
        }
        if (f == F_EARLY && x->last_use < 0) { /* dead on arrival */
            burnc_tensor_release(t);
            r->h[i] = NULL;
            r->owned[i] = false;
        }
    }
    if (c->scoped)
        burnc_scope_end();
    for (int i = c->n - 1; ok && i >= 0; i--) { /* reads in reverse: the output first */
        if (c->nd[i].fate != F_KEEP)
            continue;
        size_t bytes = (size_t)c->nd[i].n * burnc_dtype_size(c->nd[i].dt);
        r->out[i] = malloc(bytes ? bytes : 1);
        cr_assert_not_null(r->out[i]);
        if (burnc_tensor_read(r->h[i], r->out[i], bytes) != BURNC_OK) {
            fail_build(r, c, i, "read failed");
            ok = false;
        }
    }
    for (int i = 0; i < c->n; i++)
        if (r->owned[i])
            burnc_tensor_release(r->h[i]);
    return ok;
}

/* Builds every node on ref, checks the shapes and dtypes the generator predicted, and keeps
 * every node's values. */
static bool build_ref(chain *c, burnc_device_t *dev, run *r)
{
    bool ok = true;
    for (int i = 0; i < c->n && ok; i++) {
        node *x = &c->nd[i];
        burnc_tensor_t *t = r->h[i] = make(c, i, dev, r->h);
        if (!t) {
            fail_build(r, c, i, "recording failed on ref");
            ok = false;
            break;
        }
        int64_t shape[MAX_RANK];
        shape_of(c, x, shape);
        bool same = burnc_tensor_rank(t) == x->rank && burnc_tensor_dtype(t) == x->dt;
        for (int d = 0; same && d < x->rank; d++)
            same = burnc_tensor_shape(t)[d] == shape[d];
        if (!same) {
            snprintf(r->why, sizeof r->why, "#%d %s: ref made a %s tensor of rank %d, expected %s of rank %d", i,
                     KIND_NAME[x->k], burnc_dtype_name(burnc_tensor_dtype(t)), burnc_tensor_rank(t),
                     burnc_dtype_name(x->dt), x->rank);
            ok = false;
            break;
        }
        x->n = numel_of(c, x);
        size_t bytes = (size_t)x->n * burnc_dtype_size(x->dt);
        void *buf = malloc(bytes ? bytes : 1);
        x->val = malloc((size_t)(x->n ? x->n : 1) * sizeof *x->val);
        cr_assert(buf && x->val);
        if (burnc_tensor_read(t, buf, bytes) != BURNC_OK) {
            fail_build(r, c, i, "read failed on ref");
            ok = false;
        }
        for (int64_t e = 0; ok && e < x->n; e++)
            x->val[e] = bt_load(buf, x->dt, e);
        free(buf);
    }
    for (int i = 0; i < c->n; i++)
        burnc_tensor_release(r->h[i]);
    return ok;
}

/* ---- Error bounds ------------------------------------------------------------------------- */

static void stats(node *x)
{
    x->mag = 0;
    x->minabs = INFINITY;
    for (int64_t e = 0; e < x->n; e++) {
        double v = fabs(x->val[e]);
        if (isfinite(v))
            x->mag = fmax(x->mag, v);
        x->minabs = fmin(x->minabs, v);
    }
}

/* k ulps of the node's dtype at its largest magnitude, and k subnormal ulps near zero. */
static double ulps(const node *y, double k) { return k * (2 * unit(y->dt) * y->mag + tiny(y->dt)); }

static double div_guard(double num, double den) { return den > 0 ? num / den : INFINITY; }

static double unary_err(const node *y, const node *x)
{
    double e = x->err, m = x->minabs;
    switch (y->fn) {
    case U_NEG:
    case U_ABS:
    case U_RELU: return e;
    case U_SQRT: return fmin(sqrt(e), div_guard(e, sqrt(m))) + ulps(y, 1);
    case U_RECIP: return div_guard(e, m * (m - e)) + ulps(y, 1);
    case U_RSQRT: return div_guard(0.5 * e, pow(fmax(m - e, 0), 1.5)) + ulps(y, 8);
    case U_EXP: return y->mag * expm1(e) + ulps(y, 4);
    case U_EXP2: return y->mag * expm1(e * M_LN2) + ulps(y, 4);
    case U_EXPM1: return (y->mag + 1) * expm1(e) + ulps(y, 4);
    case U_LOG: return div_guard(e, m - e) + ulps(y, 4);
    case U_LOG2: return div_guard(e, (m - e) * M_LN2) + ulps(y, 4);
    case U_LOG1P: return div_guard(e, 1 + m - e) + ulps(y, 4);
    case U_TAN: {
        double t = tan(fmin(atan(y->mag) + e, 1.55));
        return (1 + t * t) * e + ulps(y, 4);
    }
    case U_GELU:
    case U_SILU: return UN[y->fn].slope * e + ulps(y, 8); /* erf or sigmoid, then more roundings */
    default: return UN[y->fn].slope * e + ulps(y, 4);
    }
}

static double binary_err(const node *y, double ea, double amag, double amin, double eb, double bmag, double bmin)
{
    switch (y->fn) {
    case B_ADD:
    case B_SUB: return ea + eb + ulps(y, 1);
    case B_MUL: return ea * bmag + eb * amag + ea * eb + ulps(y, 1);
    case B_DIV: return div_guard(ea + y->mag * eb, bmin - eb) + ulps(y, 1);
    case B_MAX:
    case B_MIN: return fmax(ea, eb);
    case B_ATAN2:
        if (ea == 0 && eb == 0)
            return ulps(y, 4);
        return div_guard(ea + eb, bmin - eb) + ulps(y, 4);
    case B_POW: { /* corners of the perturbed box: a^b and b a^(b-1) are monotone in each */
        double alo = amin - ea, ahi = amag + ea, bm = bmag + eb;
        if (alo <= 0)
            return INFINITY;
        double p = fmax(fmax(pow(alo, bm), pow(alo, -bm)), fmax(pow(ahi, bm), pow(ahi, -bm)));
        double q = fmax(fmax(pow(alo, bm - 1), pow(alo, -bm - 1)), fmax(pow(ahi, bm - 1), pow(ahi, -bm - 1)));
        double ln = fmax(fabs(log(alo)), fabs(log(ahi)));
        return bm * q * ea + p * ln * eb + ulps(y, 4);
    }
    default: return INFINITY; /* remainder and comparisons only see exact values */
    }
}

/* The smallest variance (correction 0) of x's rows of `row` elements, in double. */
static void row_vars(const node *x, int64_t row, double *vmin)
{
    *vmin = INFINITY;
    for (int64_t r0 = 0; r0 < x->n; r0 += row) {
        double s = 0, q = 0;
        for (int64_t e = 0; e < row; e++)
            s += x->val[r0 + e];
        s /= (double)row;
        for (int64_t e = 0; e < row; e++)
            q += (x->val[r0 + e] - s) * (x->val[r0 + e] - s);
        *vmin = fmin(*vmin, q / (double)row);
    }
    if (x->n == 0)
        *vmin = 1;
}

static double reduce_err(const node *y, const node *x)
{
    double n = (double)(y->n ? x->n / y->n : 1), e = x->err, m = x->mag, ua = acc_unit(x->dt);
    if (y->n == 0)
        return 0;
    switch (y->fn) {
    case R_SUM: return n * e + ulps(y, 1) + 2 * n * n * ua * m;
    case R_MEAN: return e + ulps(y, 2) + 2 * n * ua * m;
    case R_MAX:
    case R_MIN: return e;
    default: {
        double k = n / fmax(n - y->s[0], 1);
        double ev = k * (4 * m * e + e * e + 8 * (n + 4) * unit(x->dt) * m * m);
        if (y->fn == R_VAR)
            return ev + ulps(y, 2);
        double smin = y->minabs; /* std: sqrt is 1/(2 sqrt v)-Lipschitz above v */
        return fmin(sqrt(ev), div_guard(ev, smin)) + ulps(y, 2);
    }
    }
}

static double composite_err(const chain *c, const node *y)
{
    const node *x = &c->nd[y->in[0]];
    double e = x->err, m = x->mag, u = unit(y->dt), ua = acc_unit(y->dt);
    if (y->k != K_LAYER_NORM) {
        double n = x->sym[y->axis] == SY_ONE ? 1 : (double)c->sy[x->sym[y->axis]].size;
        if (y->k == K_SOFTMAX)
            return 0.5 * e + y->mag * (2 * u * (4 * m + 10) + 2 * n * ua) + 8 * tiny(y->dt);
        return 2 * e + 2 * u * (4 * m + 8 + y->mag + log(n) + 2) + 2 * n * ua + 8 * tiny(y->dt);
    }
    int64_t row = 1;
    for (int d = x->rank - y->axis; d < x->rank; d++)
        row *= x->sym[d] == SY_ONE ? 1 : c->sy[x->sym[d]].size;
    double n = (double)row, vmin;
    row_vars(x, row, &vmin);
    double s2 = vmin + y->s[0], s = sqrt(s2);
    double ev = 4 * m * e + e * e + 8 * (n + 8) * u * m * m;
    double ynorm = fmin(sqrt(n), 2 * m / s);
    double rel_s = ev < s2 ? ev / s2 : 1e300;
    double err = (2 * e + 4 * u * m + 2 * n * ua * m) / s + ynorm * rel_s + 8 * u * ynorm + 8 * tiny(y->dt);
    if (y->n_in == 3) {
        const node *w = &c->nd[y->in[1]], *b = &c->nd[y->in[2]];
        err = err * w->mag + ynorm * w->err + b->err + ulps(y, 2);
    }
    return err;
}

static double node_err(const chain *c, const node *y)
{
    if (y->exact)
        return 0;
    const node *a = y->n_in ? &c->nd[y->in[0]] : NULL;
    switch (y->k) {
    case K_UNARY: return unary_err(y, a);
    case K_BINARY: {
        const node *b = &c->nd[y->in[1]];
        return binary_err(y, a->err, a->mag, a->minabs, b->err, b->mag, b->minabs);
    }
    case K_SCALAR: return binary_err(y, a->err, a->mag, a->minabs, 0, fabs(y->s[0]), fabs(y->s[0]));
    case K_WHERE: return fmax(c->nd[y->in[1]].err, c->nd[y->in[2]].err);
    case K_CAST: return a->err + (unit(y->dt) > unit(a->dt) ? ulps(y, 1) : 0);
    case K_REDUCE: return reduce_err(y, a);
    case K_SOFTMAX:
    case K_LOG_SOFTMAX:
    case K_LAYER_NORM: return composite_err(c, y);
    default: return a->err; /* clamp and views */
    }
}

/* ---- Reports ------------------------------------------------------------------------------ */

/* Criterion's TAP mode (how meson runs the suites) drops what a test writes to stderr, so a
 * failure's description travels in the assertion message; it also goes to stderr for direct
 * runs. */
typedef struct text {
    char buf[32768];
    size_t n;
} text;

static void say(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(text *t, const char *fmt, ...)
{
    if (t->n >= sizeof t->buf - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(t->buf + t->n, sizeof t->buf - t->n, fmt, ap);
    va_end(ap);
    t->n = w < 0 ? t->n : t->n + (size_t)w < sizeof t->buf ? t->n + (size_t)w : sizeof t->buf - 1;
}

static void print_node(text *f, const chain *c, int i)
{
    const node *x = &c->nd[i];
    char name[96] = "", shape[96] = "";
    switch (x->k) {
    case K_UNARY: snprintf(name, sizeof name, "%s", UN[x->fn].name); break;
    case K_BINARY: snprintf(name, sizeof name, "%s", BIN[x->fn].name); break;
    case K_SCALAR: snprintf(name, sizeof name, "%s_scalar(%.9g)", BIN[x->fn].name, x->s[0]); break;
    case K_CLAMP: snprintf(name, sizeof name, "clamp(%g, %g)", x->s[0], x->s[1]); break;
    case K_REDUCE:
        snprintf(name, sizeof name, "%s(mask %#x%s%s%s)", RED_NAME[x->fn], x->mask, x->keepdim ? ", keepdim" : "",
                 x->flag ? ", naxes 0" : "", x->fn >= R_VAR && x->s[0] ? ", correction 1" : "");
        break;
    case K_ARGMAX:
    case K_ARGMIN:
    case K_SOFTMAX:
    case K_LOG_SOFTMAX:
    case K_UNSQUEEZE:
    case K_SQUEEZE: snprintf(name, sizeof name, "%s(axis %d)", KIND_NAME[x->k], x->axis); break;
    case K_LAYER_NORM:
        snprintf(name, sizeof name, "layer_norm%s(rank %d, eps %g)", x->n_in == 3 ? "_affine" : "", x->axis, x->s[0]);
        break;
    case K_SLICE:
        snprintf(name, sizeof name, "slice(axis %d, %lld:%lld:%lld)", x->axis, (long long)x->sl[0], (long long)x->sl[1],
                 (long long)x->sl[2]);
        break;
    case K_TRANSPOSE: snprintf(name, sizeof name, "transpose(%d, %d)", x->axis, x->axis2); break;
    case K_FLIP: snprintf(name, sizeof name, "flip(mask %#x)", x->mask); break;
    default: snprintf(name, sizeof name, "%s", KIND_NAME[x->k]); break;
    }
    size_t n = 0;
    for (int d = 0; d < x->rank && n < sizeof shape; d++)
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", d ? "," : "",
                              (long long)(x->sym[d] == SY_ONE ? 1 : c->sy[x->sym[d]].size));
    say(f, "#   #%-3d %-40s", i, name);
    for (int k = 0; k < x->n_in; k++)
        say(f, "%s#%d", k ? ", " : " (", x->in[k]);
    say(f, "%s -> %s [%s] %s, bounds [%g, %g], err %g, %s\n", x->n_in ? ")" : "", burnc_dtype_name(x->dt), shape,
            x->exact ? "exact" : "inexact", x->lo, x->hi, x->err,
            x->fate == F_KEEP ? "kept" : x->fate == F_EARLY ? "released early" : "left to the scope");
}

static void print_chain(text *f, const chain *c)
{
    say(f, "# %s, %s:\n", chain_tag, c->scoped ? "built in a scope" : "built without a scope");
    for (int i = 0; i < c->n; i++)
        print_node(f, c, i);
}

/* ---- The random test ---------------------------------------------------------------------- */

typedef struct totals {
    int chains, nodes, compared, elements, failed, fused_kernels, eager_kernels;
    int kinds[K_COUNT];
    int dtypes[9];
} totals;

/* The largest |cpu - ref| / err met, and how many inexact elements differed from ref at all:
 * the bounds are not vacuous. */
static double worst_ratio;
static long inexact_differing;

/* First difference of kept node i: fused against eager bitwise, fused against ref within err. */
static bool check_node(const chain *c, int i, const void *fused, const void *eager, char *why, size_t len)
{
    const node *x = &c->nd[i];
    for (int64_t e = 0; e < x->n; e++) {
        double f = bt_load(fused, x->dt, e), g = bt_load(eager, x->dt, e), r = x->val[e];
        if (!same_bits(f, g)) {
            snprintf(why, len, "#%d element %lld: fused %.17g (%a) but eager %.17g (%a); ref %.17g", i, (long long)e,
                     f, f, g, g, r);
            return false;
        }
        bool ok;
        if (x->exact || !isfinite(r))
            ok = same_bits(f, r);
        else
            ok = fabs(f - r) <= x->err;
        if (ok && !x->exact && f != r) {
            inexact_differing++;
            worst_ratio = fmax(worst_ratio, fabs(f - r) / x->err);
        }
        if (!ok) {
            snprintf(why, len, "#%d element %lld: cpu %.17g (%a), ref %.17g (%a): |diff| %g, allowed %s%g", i,
                     (long long)e, f, f, r, r, fabs(f - r), x->exact ? "bitwise, " : "", x->err);
            return false;
        }
    }
    return true;
}

static bool run_chain(chain *c, burnc_device_t *cpu, burnc_device_t *ref, totals *t, text *report)
{
    run rr = {0}, rf = {0}, re = {0};
    char why[1024] = "";
    bool ok = build_ref(c, ref, &rr);
    if (ok) {
        for (int i = 0; i < c->n; i++) {
            stats(&c->nd[i]);
            double e = node_err(c, &c->nd[i]);
            c->nd[i].err = isnan(e) ? INFINITY : e;
        }
        BT_ASSERT_OK(burnc_device_set_fusion(cpu, true));
        int k0 = kernels_built();
        ok = build_cpu(c, cpu, &rf);
        t->fused_kernels += kernels_built() - k0;
        if (ok) {
            BT_ASSERT_OK(burnc_device_set_fusion(cpu, false));
            k0 = kernels_built();
            ok = build_cpu(c, cpu, &re);
            t->eager_kernels += kernels_built() - k0;
            if (!ok)
                snprintf(why, sizeof why, "eager: %s", re.why);
        } else {
            snprintf(why, sizeof why, "fused: %s", rf.why);
        }
    } else {
        snprintf(why, sizeof why, "%s", rr.why);
    }
    int bad = 0;
    char detail[8][512];
    for (int i = 0; ok && i < c->n; i++) {
        if (c->nd[i].fate != F_KEEP)
            continue;
        t->compared++;
        t->elements += (int)c->nd[i].n;
        if (!check_node(c, i, rf.out[i], re.out[i], detail[bad < 8 ? bad : 7], sizeof detail[0]))
            bad++;
    }
    t->chains++;
    t->nodes += c->n;
    for (int i = 0; i < c->n; i++) {
        t->kinds[c->nd[i].k]++;
        t->dtypes[c->nd[i].dt]++;
    }
    if (!ok || bad) {
        if (t->failed < 3) {
            size_t from = report->n;
            print_chain(report, c);
            if (!ok)
                say(report, "#   FAILED: %s\n", why);
            for (int k = 0; k < bad && k < 8; k++)
                say(report, "#   MISMATCH: %s\n", detail[k]);
            fputs(report->buf + from, stderr);
        }
        t->failed++;
    }
    run_free(&rf);
    run_free(&re);
    return ok && !bad;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 0) : dflt;
}

Test(random, chains_agree_fused_eager_and_ref)
{
    uint64_t seed = env_u64("BURNC_TEST_SEED", DEFAULT_SEED);
    long only = getenv("BURNC_TEST_CHAIN") ? (long)env_u64("BURNC_TEST_CHAIN", 0) : -1;
    burnc_device_t *cpu = open_test_device(), *ref = bt_ref();
    const char *spec = getenv("BURNC_TEST_DEVICE");
    int chains = spec && *spec && strcmp(spec, "cpu") != 0 ? DEVICE_CHAINS : CHAINS;
    if (only >= chains)
        chains = (int)only + 1;
    fprintf(stderr, "# random chains: seed %llu (BURNC_TEST_SEED overrides), %d chains over %d structures\n",
            (unsigned long long)seed, chains, STRUCTURES);
    atomic_store(&llvm_compiles, 0);
    atomic_store(&disk_loads, 0);
    burnc_log_set_callback(count_codegen, NULL);
    totals t = {0};
    static text report;
    report.n = 0;
    report.buf[0] = '\0';
    double t0 = now_s();
    for (int i = 0; i < chains; i++) {
        if (only >= 0 && i != only)
            continue;
        chain *c = malloc(sizeof *c);
        cr_assert_not_null(c);
        snprintf(chain_tag, sizeof chain_tag, "chain %d of seed %llu (BURNC_TEST_SEED=%llu BURNC_TEST_CHAIN=%d)", i,
                 (unsigned long long)seed, (unsigned long long)seed, i);
        gen_chain(c, mix2(seed, (uint64_t)(i % STRUCTURES)), mix2(~seed, (uint64_t)i));
        run_chain(c, cpu, ref, &t, &report);
        free_chain(c);
    }
    double secs = now_s() - t0;
    burnc_log_set_callback(NULL, NULL);
    BT_ASSERT_OK(burnc_device_set_fusion(cpu, true));
    fprintf(stderr,
            "# random chains: %d chains, %d nodes, %d kept values (%d elements) compared, %d failed; "
            "%d kernels compiled by LLVM (%.1f s), %d loaded from the disk cache (%d new for fused "
            "plans, %d for eager ops); %.1f s\n",
            t.chains, t.nodes, t.compared, t.elements, t.failed, atomic_load(&llvm_compiles),
            1e-6 * atomic_load(&compile_us), atomic_load(&disk_loads), t.fused_kernels, t.eager_kernels, secs);
    fprintf(stderr, "# %ld inexact elements differ from ref; the largest difference is %.3g of its bound\n",
            inexact_differing, worst_ratio);
    fprintf(stderr, "# nodes by kind:");
    for (int k = 0; k < K_COUNT; k++)
        fprintf(stderr, " %s %d", KIND_NAME[k], t.kinds[k]);
    fprintf(stderr, "\n# nodes by dtype:");
    for (int d = 1; d < 9; d++)
        fprintf(stderr, " %s %d", burnc_dtype_name((burnc_dtype_t)d), t.dtypes[d]);
    fprintf(stderr, "\n");
    cr_assert_eq(t.failed, 0, "%d of %d chains failed (seed %llu); the first:\n%s", t.failed, t.chains,
                 (unsigned long long)seed, report.buf);
    /* every handle was released, early or late: no buffer may stay in use */
    BT_ASSERT_OK(burnc_device_sync(cpu));
    cr_assert_eq(bt_memory(cpu).buffers_in_use, 0, "cpu: %llu buffers still in use after the chains",
                 (unsigned long long)bt_memory(cpu).buffers_in_use);
    cr_assert_eq(bt_memory(ref).buffers_in_use, 0, "ref: %llu buffers still in use after the chains",
                 (unsigned long long)bt_memory(ref).buffers_in_use);
    if (only < 0) { /* the generator reaches every kind of node and dtype */
        for (int k = 0; k < K_COUNT; k++)
            cr_assert_gt(t.kinds[k], 0, "no %s node in %d chains", KIND_NAME[k], t.chains);
        const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16,
                                     BURNC_DTYPE_I32, BURNC_DTYPE_I64, BURNC_DTYPE_BOOL};
        for (int d = 0; d < COUNT(dts); d++)
            cr_assert_gt(t.dtypes[dts[d]], 0, "no %s node", burnc_dtype_name(dts[d]));
    }
    burnc_device_release(ref);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* ---- A training loop: its scalars change every step, its kernels do not -------------------- */

typedef struct params {
    burnc_tensor_t *x, *m, *v, *target;
} params;

static void params_init(params *p, burnc_device_t *dev, int64_t n, const float *x0, const float *t0)
{
    const int64_t shape[1] = {n};
    p->x = bt_f32(dev, 1, shape, x0);
    p->target = bt_f32(dev, 1, shape, t0);
    p->m = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_F32, 1, shape));
    p->v = BT_NOT_NULL(burnc_zeros(dev, BURNC_DTYPE_F32, 1, shape));
}

static void params_release(params *p)
{
    burnc_tensor_release(p->x);
    burnc_tensor_release(p->m);
    burnc_tensor_release(p->v);
    burnc_tensor_release(p->target);
}

/* Step t of Adam on (x - target)^2 plus a plain SGD term: x -= lr_t mhat / (sqrt(vhat) + eps)
 * + lr_t / 10 g, with mhat = m / (1 - 0.9^t), vhat = v / (1 - 0.999^t). Every op rounds
 * correctly, so cpu and ref agree bitwise. The old x, m and v are released once the step is
 * recorded: in-place candidates. */
static void adam_step(params *p, int t, double lr)
{
    burnc_scope_begin();
    burnc_tensor_t *g = burnc_mul_scalar(burnc_sub(p->x, p->target), 2.0);
    burnc_tensor_t *m = burnc_add(burnc_mul_scalar(p->m, 0.9), burnc_mul_scalar(g, 0.1));
    burnc_tensor_t *v = burnc_add(burnc_mul_scalar(p->v, 0.999), burnc_mul_scalar(burnc_mul(g, g), 0.001));
    burnc_tensor_t *mhat = burnc_div_scalar(m, 1 - pow(0.9, t));
    burnc_tensor_t *vhat = burnc_div_scalar(v, 1 - pow(0.999, t));
    burnc_tensor_t *upd = burnc_div(mhat, burnc_add_scalar(burnc_sqrt(vhat), 1e-8));
    burnc_tensor_t *x = burnc_sub(burnc_sub(p->x, burnc_mul_scalar(upd, lr)), burnc_mul_scalar(g, lr / 10));
    burnc_tensor_keep(BT_NOT_NULL(x));
    burnc_tensor_keep(BT_NOT_NULL(m));
    burnc_tensor_keep(BT_NOT_NULL(v));
    burnc_scope_end();
    burnc_tensor_release(p->x);
    burnc_tensor_release(p->m);
    burnc_tensor_release(p->v);
    p->x = x, p->m = m, p->v = v;
}

Test(random, training_loop_compiles_once)
{
    enum { N = 1000, STEPS = 21 };
    static float x0[N], t0[N], xc[N], xr[N];
    rng r = {7};
    for (int i = 0; i < N; i++)
        x0[i] = (float)r_unif(&r, -3, 3), t0[i] = (float)r_unif(&r, -1, 1);
    burnc_device_t *cpu = open_test_device(), *ref = bt_ref();
    params pc, pr;
    params_init(&pc, cpu, N, x0, t0);
    params_init(&pr, ref, N, x0, t0);
    BT_ASSERT_OK(burnc_device_sync(cpu));
    burnc_log_set_callback(count_codegen, NULL);
    int built[STEPS];
    for (int t = 1; t <= STEPS; t++) {
        double lr = 0.05 / sqrt(t);
        int k0 = kernels_built();
        adam_step(&pc, t, lr);
        bt_read_f32(pc.x, xc, N);
        built[t - 1] = kernels_built() - k0;
        adam_step(&pr, t, lr);
        bt_read_f32(pr.x, xr, N);
        for (int i = 0; i < N; i++)
            cr_assert(same_bits(xc[i], xr[i]), "step %d element %d: cpu %a, ref %a", t, i, (double)xc[i],
                      (double)xr[i]);
    }
    burnc_log_set_callback(NULL, NULL);
    fprintf(stderr, "# training loop: kernels built per step:");
    for (int t = 0; t < STEPS; t++)
        fprintf(stderr, " %d", built[t]);
    fprintf(stderr, "\n");
    cr_assert_gt(built[0], 0, "the first step built no kernel: is the kernel log silent?");
    for (int t = 1; t < STEPS; t++)
        cr_assert_eq(built[t], 0, "step %d built %d kernels (the first built %d): a scalar or a buffer got into "
                     "the kernel's structure", t + 1, built[t], built[0]);
    cr_assert(fabsf(xc[0] - t0[0]) < fabsf(x0[0] - t0[0]) || fabsf(x0[0] - t0[0]) < 0.1f, "x did not move to target");
    params_release(&pc);
    params_release(&pr);
    burnc_device_release(ref);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}

/* ---- Row composites in at most two kernels, as burnc_device_write_graph draws them -------- */

enum { ROW_SOFTMAX, ROW_SOFTMAX_WRITTEN_OUT, ROW_LOG_SOFTMAX, ROW_LAYER_NORM, ROW_KINDS };
static const char *const ROW_NAME[ROW_KINDS] = {"softmax", "softmax written out", "log_softmax", "layer_norm"};

static burnc_tensor_t *row_op(int kind, burnc_tensor_t *x)
{
    const int last[1] = {1};
    burnc_tensor_t *y;
    burnc_scope_begin();
    switch (kind) {
    case ROW_SOFTMAX: y = burnc_softmax(x, 1); break;
    case ROW_SOFTMAX_WRITTEN_OUT: {
        burnc_tensor_t *e = burnc_exp(burnc_sub(x, burnc_max(x, 1, last, true)));
        y = burnc_div(e, burnc_sum(e, 1, last, true));
        break;
    }
    case ROW_LOG_SOFTMAX: y = burnc_log_softmax(x, -1); break;
    default: y = burnc_layer_norm(x, 1, 1e-5); break;
    }
    burnc_tensor_keep(BT_NOT_NULL(y));
    burnc_scope_end();
    return y;
}

static int count_in_file(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    int k = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        k++;
    return k;
}

Test(random, row_softmax_graph_has_at_most_two_kernels)
{
    enum { ROWS = 33, COLS = 257 };
    static float x[ROWS * COLS], yc[ROWS * COLS], yr[ROWS * COLS];
    const int64_t shape[2] = {ROWS, COLS};
    rng r = {11};
    for (int i = 0; i < ROWS * COLS; i++)
        x[i] = (float)r_unif(&r, -6, 6);
    char path[] = "/tmp/burnc-test-graph-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    burnc_device_t *cpu = open_test_device(), *ref = bt_ref();
    BT_ASSERT_OK(burnc_device_set_fusion(cpu, true)); /* even under BURNC_FUSION=0 */
    for (int k = 0; k < ROW_KINDS; k++) {
        burnc_tensor_t *xc = bt_f32(cpu, 2, shape, x), *xr = bt_f32(ref, 2, shape, x);
        BT_ASSERT_OK(burnc_device_sync(cpu)); /* only the row op is pending */
        burnc_tensor_t *c = row_op(k, xc), *rf = row_op(k, xr);
        BT_ASSERT_OK(burnc_device_write_graph(cpu, path));
        int clusters = count_in_file(path, "subgraph cluster_"), opaque = count_in_file(path, "shape=box");
        fprintf(stderr, "# %s over rows of [%d, %d]: %d kernels\n", ROW_NAME[k], ROWS, COLS, clusters);
        cr_assert(clusters >= 1 && clusters <= 2, "%s over rows: %d kernel clusters in %s", ROW_NAME[k], clusters,
                  path);
        cr_assert_eq(opaque, 0, "%s over rows: %d opaque ops", ROW_NAME[k], opaque);
        bt_read_f32(c, yc, ROWS * COLS);
        bt_read_f32(rf, yr, ROWS * COLS);
        for (int i = 0; i < ROWS * COLS; i++) /* exp and log within an ulp or two, summed over 257 */
            cr_assert(fabsf(yc[i] - yr[i]) <= 1e-5f * fmaxf(1, fabsf(yr[i])), "%s element %d: cpu %.9g, ref %.9g",
                      ROW_NAME[k], i, (double)yc[i], (double)yr[i]);
        burnc_tensor_release(c);
        burnc_tensor_release(rf);
        burnc_tensor_release(xc);
        burnc_tensor_release(xr);
    }
    unlink(path);
    burnc_device_release(ref);
    burnc_device_release(cpu);
    BT_LEAK_CHECK();
}
