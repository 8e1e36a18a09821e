/* The PTX code generator (codegen/llvm_ptx.c) and the launch planner (codegen/ptx_plan.c),
 * checked without a GPU: PTX is generated for many kernels and assembled by ptxas for sm_90
 * (skipped with a reason when no CUDA toolkit is installed), its text is searched for what the
 * numerics forbid (contractible add/mul/sub, .ftz, approximations, fma without KIR_FMA), and
 * the plans are replayed in C: every position, row and leaf covered by exactly one thread or
 * warp, the parameter words where ptx.h says. */
#include <dlfcn.h>
#include <math.h>
#include <regex.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen/cg.h"
#include "codegen/ptx.h"
#include "kernel.h"
#include "kernel_ops.h"
#include "tests/common.h"
#include "tests/kir_build.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- The module and ptxas ------------------------------------------------------------------ */

static const cg_llvm_api *llvm_api(void)
{
    const cg_llvm_api *api = kb_llvm_api("this build has no LLVM 19, so no PTX generator");
    cr_assert(api->compile_ptx, "the module has no compile_ptx");
    return api;
}

static bool executable(const char *p) { return p && access(p, X_OK) == 0; }

/* ptxas from $CUDA_HOME or $CUDA_PATH, then PATH, then the toolkit's default prefix. */
static const char *find_ptxas(void)
{
    static char found[4096];
    if (found[0])
        return found;
    const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), NULL};
    for (int i = 0; homes[i]; i++) {
        snprintf(found, sizeof found, "%s/bin/ptxas", homes[i]);
        if (executable(found))
            return found;
    }
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        snprintf(found, sizeof found, "%.*s/ptxas", (int)n, path);
        if (n && executable(found))
            return found;
        path = end ? end + 1 : NULL;
    }
    snprintf(found, sizeof found, "/usr/local/cuda/bin/ptxas");
    if (executable(found))
        return found;
    found[0] = '\0';
    return NULL;
}

/* Assembles ptx for sm_90 with extra ptxas flags; false with ptxas' output in log. */
static bool ptxas_run(const char *ptx, const char *flags, char *log, size_t cap)
{
    char dir[] = "/tmp/burnc-ptx-XXXXXX";
    cr_assert(mkdtemp(dir), "mkdtemp failed");
    char src[256], out[256], cmd[8192];
    snprintf(src, sizeof src, "%s/k.ptx", dir);
    snprintf(out, sizeof out, "%s/log", dir);
    FILE *f = fopen(src, "w");
    cr_assert(f);
    fputs(ptx, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' -arch=sm_90 %s -o %s/k.cubin %s > %s 2>&1", find_ptxas(), flags, dir, src, out);
    int rc = system(cmd);
    log[0] = '\0';
    f = fopen(out, "r");
    if (f) {
        size_t n = fread(log, 1, cap - 1, f);
        log[n] = '\0';
        fclose(f);
    }
    char rm[512];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    cr_assert_eq(system(rm), 0);
    return rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

static bool ptxas_ok(const char *ptx, const char *name, char *log, size_t cap)
{
    (void)name;
    return ptxas_run(ptx, "", log, cap);
}

/* Registers and spilled bytes of one entry, from ptxas -v (false without ptxas). */
static bool ptxas_usage(const char *ptx, const char *entry, int *regs, int *spills)
{
    static char log[65536];
    if (!find_ptxas())
        return false;
    cr_assert(ptxas_run(ptx, "-v", log, sizeof log), "ptxas -v failed:\n%s", log);
    char key[128];
    snprintf(key, sizeof key, "entry function '%s'", entry);
    const char *at = strstr(log, key);
    cr_assert(at, "ptxas -v says nothing about %s", entry);
    const char *sp = strstr(at, "bytes spill stores"), *rg = strstr(at, "registers");
    cr_assert(sp && rg, "ptxas -v: no usage lines for %s", entry);
    while (sp > at && sp[-1] == ' ')
        sp--;
    while (sp > at && sp[-1] >= '0' && sp[-1] <= '9')
        sp--;
    const char *u = strstr(at, "Used ");
    cr_assert(u && u < rg);
    *spills = atoi(sp);
    *regs = atoi(u + 5);
    return true;
}

/* Instructions in one entry's PTX body: lines ending in ';' between its braces (a rough count
 * of what a thread issues, printed as evidence next to ptxas' registers). */
static int ptx_lines(const char *ptx, const char *entry, const char *what)
{
    char key[128];
    snprintf(key, sizeof key, ".entry %s(", entry);
    const char *at = strstr(ptx, key);
    if (!at)
        return -1;
    const char *end = strstr(at, "\n}");
    int n = 0;
    for (const char *l = strchr(at, '\n'); l && (!end || l < end); l = strchr(l + 1, '\n')) {
        const char *e = strchr(l + 1, '\n');
        size_t len = e ? (size_t)(e - l - 1) : strlen(l + 1);
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)(len < 255 ? len : 255), l + 1);
        if (strchr(line, ';') && (!what || strstr(line, what)))
            n++;
    }
    return n;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- Building kernels ------------------------------------------------------------------------ */

/* ---- Generating and checking PTX ------------------------------------------------------------- */

static bool matches(const char *text, const char *re)
{
    regex_t r;
    cr_assert_eq(regcomp(&r, re, REG_EXTENDED | REG_NOSUB | REG_NEWLINE), 0, "bad regex %s", re);
    bool m = regexec(&r, text, 0, NULL, 0) == 0;
    regfree(&r);
    return m;
}

/* Generates k's PTX for sm_90 with 16-bit tables luts (NULL: none), checks the text and
 * assembles it; returns it (caller frees). */
static char *gen_ptx_luts(kir_kernel *k, const cg_ptx_options *o, const cg_ptx_luts *luts)
{
    char why[512];
    cr_assert(kir_valid(k, why, sizeof why), "kernel %s is not valid: %s", k->name, why);
    const cg_llvm_api *api = llvm_api();
    cg_ptx_options def = {.sm = 90};
    char *ptx = NULL;
    size_t size = 0;
    char err[1024] = "";
    double t0 = now_ms();
    bool ok = api->compile_ptx(k, o ? o : &def, luts, &ptx, &size, err, sizeof err);
    double ms = now_ms() - t0;
    cr_assert(ok, "compile_ptx %s failed: %s", k->name, err);
    cr_assert(ptx && size == strlen(ptx), "%s: PTX size %zu, text length %zu", k->name, size, ptx ? strlen(ptx) : 0);
    printf("ptx %-24s %6zu bytes  %6.1f ms\n", k->name, size, ms);
    const char *dump = getenv("BURNC_PTX_DUMP_DIR"); /* for reading the PTX by eye */
    if (dump && *dump) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.ptx", dump, k->name);
        FILE *f = fopen(path, "w");
        if (f) {
            fputs(ptx, f);
            fclose(f);
        }
    }
    fflush(stdout);
    cr_assert(strstr(ptx, ".target sm_90"), "%s: no .target sm_90", k->name);
    char dep[256];
    cr_assert(bt_grid_dependency_ok(ptx, 90, dep, sizeof dep), "%s: %s", k->name, dep);
    /* every float add/sub/mul rounds (.rn): ptxas may contract only the plain forms */
    cr_assert(!matches(ptx, "[[:space:]](add|sub|mul)\\.f(32|64)[[:space:]]"), "%s: a contractible float op", k->name);
    cr_assert(!strstr(ptx, ".ftz"), "%s: .ftz", k->name);
    cr_assert(!strstr(ptx, ".approx") && !strstr(ptx, ".full."), "%s: an approximate op", k->name);
    cr_assert(!matches(ptx, "[[:space:]]fma\\.rn\\.f(32|64)") || has_op(k, KIR_FMA), "%s: fma without KIR_FMA",
              k->name);
    if (has_op(k, KIR_FMA) && !(luts && luts->n)) /* a table replaces the instructions it holds */
        cr_assert(matches(ptx, "fma\\.rn\\.f(32|64)"), "%s: KIR_FMA gave no fma.rn", k->name);
    if (find_ptxas()) {
        static char log[65536];
        cr_assert(ptxas_ok(ptx, k->name, log, sizeof log), "ptxas rejects %s:\n%s", k->name, log);
    }
    return ptx;
}

static char *gen_ptx(kir_kernel *k, const cg_ptx_options *o) { return gen_ptx_luts(k, o, NULL); }

static void need_ptxas(void)
{
    if (!find_ptxas())
        printf("ptx: no ptxas (CUDA toolkit) found: the PTX is checked but not assembled\n");
}

typedef struct launch_args {
    void *in[KIR_MAX_INPUTS], *out[KIR_MAX_OUTPUTS];
    int64_t ext[BURNC_MAX_RANK], in_off[KIR_MAX_INPUTS], out_off[KIR_MAX_OUTPUTS];
    int64_t in_str[KIR_MAX_INPUTS * BURNC_MAX_RANK], out_str[KIR_MAX_OUTPUTS * BURNC_MAX_RANK];
    kir_scalar sc[8];
    kir_args a;
} launch_args;

/* Row-major contiguous strides for every slot (0 where the class is ZERO), device-like
 * addresses 256 bytes apart per slot, zero offsets. */
static void contiguous_args(const kir_kernel *k, launch_args *la, const int64_t *ext)
{
    memset(la, 0, sizeof *la);
    for (int d = 0; d < k->rank; d++)
        la->ext[d] = ext[d];
    for (int s = 0; s < k->n_inputs + k->n_outputs; s++) {
        bool out = s >= k->n_inputs;
        int i = out ? s - k->n_inputs : s;
        const kir_slot *sl = out ? &k->outputs[i] : &k->inputs[i];
        int64_t *st = (out ? la->out_str : la->in_str) + i * k->rank, m = 1;
        for (int d = k->rank - 1; d >= 0; d--) {
            bool row_out = out && d >= k->n_outer;
            st[d] = sl->stride[d] == KIR_STRIDE_ZERO || row_out ? 0 : m;
            if (st[d])
                m *= ext[d];
        }
        void *addr = (void *)(uintptr_t)(0x7f0000000000ull + (uint64_t)s * 0x100000000ull);
        if (out)
            la->out[i] = addr;
        else
            la->in[i] = addr;
    }
    la->a = (kir_args){.inputs = la->in,
                       .outputs = la->out,
                       .extents = la->ext,
                       .in_offsets = la->in_off,
                       .in_strides = la->in_str,
                       .out_offsets = la->out_off,
                       .out_strides = la->out_str,
                       .scalars = la->sc};
}

static bool plan(const kir_kernel *k, const cg_ptx_options *o, const launch_args *la, uint64_t scratch, cg_ptx_plan *p,
                 char *why, size_t cap)
{
    return cg_ptx_plan_launches(k, o, &la->a, scratch, p, why, cap);
}

/* ---- Element-wise kernels -------------------------------------------------------------------- */

static const burnc_dtype_t ALL_DT[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16,
                                       BURNC_DTYPE_I32, BURNC_DTYPE_I64, BURNC_DTYPE_U8,  BURNC_DTYPE_BOOL};

/* out = f(a, b) in a's value type, stored as dt: the type's arithmetic, division and
 * remainder included, plus conversions to and from f32. */
static void ew_kernel(kir_kernel *k, burnc_dtype_t dt, const char *cls_a, const char *cls_b, int rank)
{
    kir_init(k, rank, rank);
    int a = in_slot(k, dt, cls_a), b = in_slot(k, dt, cls_b);
    int o = out_slot(k, dt, "2221" + 4 - rank);
    kir_type t = kir_type_of(dt);
    int32_t x = LD(k, a), y = LD(k, b), v;
    if (t == KIR_BOOL) {
        v = OP3(k, KIR_SELECT, KIR_BOOL, x, OP1(k, KIR_NOT, KIR_BOOL, y), OP2(k, KIR_AND, KIR_BOOL, x, y));
    } else if (kir_type_is_float(t)) {
        int32_t s = OP2(k, KIR_ADD, t, OP2(k, KIR_MUL, t, x, y), OP2(k, KIR_DIV, t, x, y));
        s = OP2(k, KIR_SUB, t, s, OP1(k, KIR_SQRT, t, OP1(k, KIR_ABS, t, y)));
        s = OP2(k, KIR_REM, t, s, OP1(k, KIR_RINT, t, y));
        v = OP3(k, KIR_SELECT, t, OP2(k, KIR_LT, KIR_BOOL, x, y), s, OP1(k, KIR_FLOOR, t, x));
    } else {
        int32_t s = OP2(k, KIR_ADD, t, OP2(k, KIR_MUL, t, x, y), OP2(k, KIR_DIV, t, x, y));
        s = OP2(k, KIR_XOR, t, OP2(k, KIR_REM, t, s, y), OP2(k, KIR_SHR, t, x, y));
        int32_t f = OP1(k, KIR_CONVERT, KIR_F32, s);
        v = OP1(k, KIR_CONVERT, t, OP1(k, KIR_SQRT, KIR_F32, f));
    }
    STORE(k, o, v, false);
    snprintf(k->name, sizeof k->name, "ew_%s_%s_%s", burnc_dtype_name(dt), cls_a, cls_b);
}

Test(ptx, elementwise_every_dtype)
{
    need_ptxas();
    for (size_t i = 0; i < COUNT(ALL_DT); i++) {
        kir_kernel k;
        ew_kernel(&k, ALL_DT[i], "11", "11", 2);
        char *ptx = gen_ptx(&k, NULL);
        cr_assert(strstr(ptx, ".entry " CG_PTX_ENTRY_EW), "%s: no %s entry", k.name, CG_PTX_ENTRY_EW);
        cr_assert(strstr(ptx, "ld.global.nc"), "%s: inputs are not read through ld.global.nc", k.name);
        free(ptx);
        kir_free(&k);
    }
    BT_LEAK_CHECK();
}

Test(ptx, elementwise_broadcast_and_strided)
{
    static const char *cls[][2] = {{"01", "10"}, {"22", "00"}, {"21", "02"}, {"00", "11"}};
    for (size_t c = 0; c < COUNT(cls); c++)
        for (size_t i = 0; i < COUNT(ALL_DT); i += 3) {
            kir_kernel k;
            ew_kernel(&k, ALL_DT[i], cls[c][0], cls[c][1], 2);
            free(gen_ptx(&k, NULL));
            kir_free(&k);
        }
    BT_LEAK_CHECK();
}

/* Every items and block the planner may be given, rank 1 to 4. */
Test(ptx, elementwise_options)
{
    static const int items[] = {1, 2, 4, 8};
    for (size_t i = 0; i < COUNT(items); i++)
        for (int rank = 0; rank <= 4; rank++) {
            kir_kernel k;
            ew_kernel(&k, i % 2 ? BURNC_DTYPE_F16 : BURNC_DTYPE_F32, "2222" + 4 - rank, "1111" + 4 - rank, rank);
            cg_ptx_options o = {.sm = 90, .items = items[i], .block = 128};
            free(gen_ptx(&k, &o));
            kir_free(&k);
        }
    BT_LEAK_CHECK();
}

/* Conversions between every pair of value types, through stores of every dtype. */
Test(ptx, elementwise_conversions)
{
    static const kir_type types[] = {KIR_BOOL, KIR_U8, KIR_I32, KIR_U32, KIR_I64, KIR_U64, KIR_F32, KIR_F64};
    for (size_t i = 0; i < COUNT(ALL_DT); i++) {
        kir_kernel k;
        kir_init(&k, 1, 1);
        int a = in_slot(&k, ALL_DT[i], "1");
        int32_t x = LD(&k, a);
        for (size_t t = 0; t < COUNT(types); t++) {
            int32_t c = OP1(&k, KIR_CONVERT, types[t], x);
            burnc_dtype_t to = ALL_DT[(i + t) % COUNT(ALL_DT)];
            kir_type st = kir_type_of(to);
            int o = out_slot(&k, to, "1");
            STORE(&k, o, OP1(&k, KIR_CONVERT, st, c), false);
            if (k.n_outputs == KIR_MAX_OUTPUTS)
                break;
        }
        snprintf(k.name, sizeof k.name, "convert_from_%s", burnc_dtype_name(ALL_DT[i]));
        free(gen_ptx(&k, NULL));
        kir_free(&k);
    }
    BT_LEAK_CHECK();
}

/* An output that overwrites its input: that input is read with plain loads (no .nc). */
Test(ptx, elementwise_in_place)
{
    kir_kernel k;
    kir_init(&k, 1, 1);
    int a = in_slot(&k, BURNC_DTYPE_F32, "1");
    int o = out_slot(&k, BURNC_DTYPE_F32, "1");
    STORE(&k, o, OP2(&k, KIR_MUL, KIR_F32, LD(&k, a), kir_const_f(&k, KIR_F32, 3.0)), false);
    snprintf(k.name, sizeof k.name, "in_place");
    char *ptx = gen_ptx(&k, NULL);
    cr_assert(strstr(ptx, "ld.global.nc"), "without in_place the input should be read through ld.global.nc");
    free(ptx);
    k.in_place[0] = 1 + a;
    ptx = gen_ptx(&k, NULL);
    cr_assert(!strstr(ptx, "ld.global.nc"), "an input overwritten in place is read through ld.global.nc:\n%s", ptx);
    cr_assert(strstr(ptx, "ld.global"), "no load at all");
    free(ptx);
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* KIR_FMA gives fma.rn, a math function (whose expansion has fma) assembles too. */
Test(ptx, elementwise_fma_and_math)
{
    kir_kernel k;
    kir_init(&k, 1, 1);
    int a = in_slot(&k, BURNC_DTYPE_F32, "1"), b = in_slot(&k, BURNC_DTYPE_F64, "1");
    int o = out_slot(&k, BURNC_DTYPE_F32, "1"), o2 = out_slot(&k, BURNC_DTYPE_F64, "1");
    int32_t x = LD(&k, a);
    STORE(&k, o, OP3(&k, KIR_FMA, KIR_F32, x, x, kir_erf(&k, x)), false);
    STORE(&k, o2, kir_exp(&k, LD(&k, b)), false);
    int32_t s = kir_emit(&k, KIR_ARG, KIR_F32, 0, -1, -1);
    k.n_scalars = 1;
    k.stores[0].value = OP2(&k, KIR_ADD, KIR_F32, k.stores[0].value, s);
    snprintf(k.name, sizeof k.name, "fma_erf_exp");
    free(gen_ptx(&k, NULL));
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* Every opcode on every value type it takes, with every leaf (constants, scalars, index,
 * extent, row length), folded into one stored value per type. */
Test(ptx, elementwise_every_opcode)
{
    static const kir_type types[] = {KIR_BOOL, KIR_U8, KIR_I32, KIR_U32, KIR_I64, KIR_U64, KIR_F32, KIR_F64};
    for (size_t i = 0; i < COUNT(types); i++) {
        kir_type t = types[i];
        kir_kernel k;
        kir_init(&k, 2, 2);
        k.n_scalars = 2;
        int a = in_slot(&k, BURNC_DTYPE_F64, "21"), b = in_slot(&k, BURNC_DTYPE_I64, "01");
        int32_t x = OP1(&k, KIR_CONVERT, t, LD(&k, a)), y = OP1(&k, KIR_CONVERT, t, LD(&k, b));
        int32_t z = OP1(&k, KIR_CONVERT, t, kir_emit(&k, KIR_ARG, KIR_I64, 0, -1, -1));
        z = OP3(&k, KIR_SELECT, t, kir_emit(&k, KIR_ARG, KIR_BOOL, 1, -1, -1), z, x);
        int32_t idx = OP2(&k, KIR_ADD, KIR_I64, kir_emit(&k, KIR_INDEX, KIR_I64, 0, -1, -1),
                          OP2(&k, KIR_MUL, KIR_I64, kir_emit(&k, KIR_EXTENT, KIR_I64, 1, -1, -1),
                              kir_emit(&k, KIR_ROW_LEN, KIR_I64, -1, -1, -1)));
        y = OP3(&k, KIR_SELECT, t, OP2(&k, KIR_LT, KIR_BOOL, idx, kir_const_i(&k, KIR_I64, 9)), y, z);
        int32_t acc = x;
        if (t == KIR_BOOL) {
            acc = OP2(&k, KIR_XOR, t, OP2(&k, KIR_AND, t, x, y), OP2(&k, KIR_OR, t, OP1(&k, KIR_NOT, t, x), y));
            acc = OP2(&k, KIR_NE, KIR_BOOL, acc, OP2(&k, KIR_LE, KIR_BOOL, x, y));
        } else {
            static const kir_opcode bin[] = {KIR_ADD, KIR_SUB, KIR_MUL, KIR_DIV, KIR_REM};
            for (size_t o = 0; o < COUNT(bin); o++)
                acc = OP2(&k, bin[o], t, acc, OP2(&k, bin[o], t, y, x));
            acc = OP2(&k, KIR_ADD, t, acc, OP1(&k, KIR_NEG, t, OP1(&k, KIR_ABS, t, y)));
            static const kir_opcode cmp[] = {KIR_EQ, KIR_NE, KIR_LT, KIR_LE, KIR_GT, KIR_GE};
            for (size_t o = 0; o < COUNT(cmp); o++)
                acc = OP3(&k, KIR_SELECT, t, OP2(&k, cmp[o], KIR_BOOL, acc, y), acc, x);
            if (kir_type_is_float(t)) {
                static const kir_opcode un[] = {KIR_SQRT, KIR_FLOOR, KIR_CEIL, KIR_TRUNC, KIR_RINT};
                for (size_t o = 0; o < COUNT(un); o++)
                    acc = OP2(&k, KIR_ADD, t, acc, OP1(&k, un[o], t, OP2(&k, KIR_MUL, t, y, kir_const_f(&k, t, 0.37))));
                acc = OP3(&k, KIR_FMA, t, acc, y, x);
                kir_type it = t == KIR_F32 ? KIR_U32 : KIR_U64;
                acc = OP1(&k, KIR_BITCAST, t,
                          OP2(&k, KIR_XOR, it, OP1(&k, KIR_BITCAST, it, acc), kir_const_i(&k, it, 1)));
                if (t == KIR_F32) {
                    int32_t r = kir_emit(&k, KIR_ROUND, KIR_F32, acc, -1, -1);
                    k.insts[r].imm.i = KIR_BF16;
                    acc = OP2(&k, KIR_ADD, t, r, acc);
                }
            } else {
                static const kir_opcode bits[] = {KIR_AND, KIR_OR, KIR_XOR, KIR_SHL, KIR_SHR};
                for (size_t o = 0; o < COUNT(bits); o++)
                    acc = OP2(&k, bits[o], t, acc, OP2(&k, KIR_ADD, t, y, x));
                acc = OP1(&k, KIR_NOT, t, acc);
                if (t == KIR_U32 || t == KIR_U64)
                    acc = OP2(&k, KIR_ADD, t, acc, OP2(&k, KIR_MULHI, t, acc, y));
                if (t == KIR_I32 || t == KIR_I64) {
                    kir_type ft = t == KIR_I32 ? KIR_F32 : KIR_F64;
                    acc = OP1(&k, KIR_BITCAST, t,
                              OP2(&k, KIR_MUL, ft, OP1(&k, KIR_BITCAST, ft, acc), OP1(&k, KIR_CONVERT, ft, y)));
                }
            }
        }
        int o = out_slot(&k, BURNC_DTYPE_F64, "21");
        STORE(&k, o, OP1(&k, KIR_CONVERT, KIR_F64, acc), false);
        if (t != KIR_BOOL) /* a row store of an element-wise kernel: once per position */
            STORE(&k, out_slot(&k, BURNC_DTYPE_BF16, "21"), acc, true);
        snprintf(k.name, sizeof k.name, "every_op_%d", (int)t);
        free(gen_ptx(&k, NULL));
        kir_free(&k);
    }
    BT_LEAK_CHECK();
}

/* Stages over no axes (n_outer == rank): the row entries, one position per row. */
Test(ptx, stages_without_reduced_axes)
{
    kir_kernel k;
    kir_init(&k, 1, 1);
    int a = in_slot(&k, BURNC_DTYPE_F32, "1");
    int o = out_slot(&k, BURNC_DTYPE_F32, "1");
    STAGE(&k, KIR_COMBINE_SUM, LD(&k, a));
    STORE(&k, o, REDUCED(&k, 0), true);
    snprintf(k.name, sizeof k.name, "stage_no_axes");
    char *ptx = gen_ptx(&k, NULL);
    cr_assert(strstr(ptx, ".entry " CG_PTX_ENTRY_ROWS_WARP) && !strstr(ptx, ".entry " CG_PTX_ENTRY_EW));
    free(ptx);
    launch_args la;
    int64_t n = 1000;
    contiguous_args(&k, &la, &n);
    cg_ptx_options opt = {.sm = 90};
    cg_ptx_plan p;
    char why[256];
    cr_assert(plan(&k, &opt, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert(p.n == 1 && strcmp(p.launch[0].entry, CG_PTX_ENTRY_ROWS_WARP) == 0);
    cr_assert_eq(p.launch[0].words[cg_ptx_params_layout(&k).launch + CG_PTX_L_COUNT], 1000u);
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* Burn's GELU example in elementary ops, then * w + b (the bench's gelu chain). */
Test(ptx, elementwise_gelu)
{
    kir_kernel k;
    kir_init(&k, 1, 1);
    int a = in_slot(&k, BURNC_DTYPE_F32, "1"), w = in_slot(&k, BURNC_DTYPE_F32, "1"),
        b = in_slot(&k, BURNC_DTYPE_F32, "1");
    int o = out_slot(&k, BURNC_DTYPE_F32, "1");
    int32_t x = LD(&k, a);
    int32_t e = kir_erf(&k, OP2(&k, KIR_DIV, KIR_F32, x, kir_const_f(&k, KIR_F32, 1.4142135623730951)));
    int32_t y = OP2(&k, KIR_DIV, KIR_F32,
                    OP2(&k, KIR_MUL, KIR_F32, x, OP2(&k, KIR_ADD, KIR_F32, e, kir_const_f(&k, KIR_F32, 1.0))),
                    kir_const_f(&k, KIR_F32, 2.0));
    STORE(&k, o, OP2(&k, KIR_ADD, KIR_F32, OP2(&k, KIR_MUL, KIR_F32, y, LD(&k, w)), LD(&k, b)), false);
    snprintf(k.name, sizeof k.name, "gelu");
    cr_assert_eq(cg_ptx_default_items(&k), 4, "three streamed inputs: a vector each is enough in flight");
    char *ptx = gen_ptx(&k, NULL);
    cr_assert(strstr(ptx, "ld.global.nc.v4.f32") && strstr(ptx, "st.global.v4.f32"), "no 16-byte vector path");
    free(ptx);
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* The gelu op as the recorder emits it (ir/kernel_ops.c): f32 math stored as bf16, the
 * matmul epilogue of the bench's gelu(A @ B + bias). */
Test(ptx, elementwise_gelu_op)
{
    kir_kernel k;
    kir_init(&k, 1, 1);
    int a = in_slot(&k, BURNC_DTYPE_BF16, "1");
    int o = out_slot(&k, BURNC_DTYPE_BF16, "1");
    STORE(&k, o, kir_unary_op_to(&k, IR_OP_GELU, KIR_F32, LD(&k, a), NULL, BURNC_DTYPE_BF16), false);
    snprintf(k.name, sizeof k.name, "gelu_op");
    free(gen_ptx(&k, NULL));
    kir_free(&k);
    /* gelu(x + bias) over rows, bias broadcast along them */
    kir_init(&k, 2, 1);
    a = in_slot(&k, BURNC_DTYPE_BF16, "21");
    int bias = in_slot(&k, BURNC_DTYPE_BF16, "01");
    o = out_slot(&k, BURNC_DTYPE_BF16, "21");
    int32_t s = kir_round(&k, OP2(&k, KIR_ADD, KIR_F32, LD(&k, a), LD(&k, bias)), KIR_BF16);
    STORE(&k, o, kir_unary_op_to(&k, IR_OP_GELU, KIR_F32, s, NULL, BURNC_DTYPE_BF16), false);
    snprintf(k.name, sizeof k.name, "bias_gelu_op");
    char *ptx = gen_ptx(&k, NULL);
    free(ptx);
    kir_free(&k);
    BT_LEAK_CHECK();
}

static void softmax_kernel(kir_kernel *k, burnc_dtype_t dt);

/* gelu(round(a + bias)) into a 16-bit output, the epilogue of a 16-bit gelu(A @ B + bias);
 * returns the round, the table's source. */
static int32_t bias_gelu16(kir_kernel *k, burnc_dtype_t dt)
{
    kir_init(k, 2, 2);
    int a = in_slot(k, dt, "21"), bias = in_slot(k, dt, "01");
    int o = out_slot(k, dt, "21");
    kir_type ft = dt == BURNC_DTYPE_BF16 ? KIR_BF16 : KIR_F16;
    int32_t s = kir_round(k, OP2(k, KIR_ADD, KIR_F32, LD(k, a), LD(k, bias)), ft);
    STORE(k, o, kir_unary_op_to(k, IR_OP_GELU, KIR_F32, s, NULL, dt), false);
    snprintf(k->name, sizeof k->name, "bias_gelu_%s", burnc_dtype_name(dt));
    return s;
}

/* The 16-bit tables (codegen/ptx_lut.c): which stores take one, that each entry is what the
 * whole kernel computes for that input, bit for bit (kir_eval with a bias of -0, which adds
 * exactly), and
 * that the PTX holds the table and a gather instead of the GELU's arithmetic. */
Test(ptx, lut16)
{
    const burnc_dtype_t dts[2] = {BURNC_DTYPE_BF16, BURNC_DTYPE_F16};
    uint16_t *in = malloc(CG_PTX_LUT_SIZE * 2), *out = malloc(CG_PTX_LUT_SIZE * 2), *zeros = malloc(CG_PTX_LUT_SIZE * 2);
    cr_assert(in && out && zeros);
    for (int i = 0; i < CG_PTX_LUT_SIZE; i++)
        in[i] = (uint16_t)i;
    for (int d = 0; d < 2; d++) {
        kir_kernel k;
        int32_t src = bias_gelu16(&k, dts[d]);
        cr_assert_eq(cg_ptx_lut_source(&k, 0), src, "%s: the table's source is the rounded sum", k.name);
        cg_ptx_luts l;
        cr_assert(cg_ptx_luts_make(&k, &l));
        cr_assert(l.n == 1 && l.lut[0].store == 0 && l.lut[0].src == src && l.lut[0].src_dt == dts[d]);
        for (int i = 0; i < CG_PTX_LUT_SIZE; i++)
            zeros[i] = 0x8000; /* -0 */
        void *ins[2] = {in, zeros}, *outs[1] = {out};
        int64_t ext[2] = {1, CG_PTX_LUT_SIZE}, zero[2] = {0, 0}, is[4] = {0, 1, 0, 1}, os[2] = {0, 1};
        kir_args a = {.inputs = ins, .outputs = outs, .extents = ext, .in_offsets = zero, .in_strides = is,
                      .out_offsets = zero, .out_strides = os};
        cr_assert_eq(kir_eval(&k, &a), BURNC_OK);
        int bad = 0;
        for (int i = 0; i < CG_PTX_LUT_SIZE; i++)
            bad += l.lut[0].table[i] != out[i];
        cr_assert_eq(bad, 0, "%s: %d table entries differ from the kernel's results", k.name, bad);
        char *plain = gen_ptx(&k, NULL), *tab = gen_ptx_luts(&k, NULL, &l);
        int n_plain = ptx_lines(plain, CG_PTX_ENTRY_EW, NULL), n_tab = ptx_lines(tab, CG_PTX_ENTRY_EW, NULL);
        printf("%s: %d PTX instructions without the table, %d with it\n", k.name, n_plain, n_tab);
        cr_assert(strstr(tab, "burnc_lut0") && matches(tab, "ld\\.global\\.nc\\.(u|b)16"), "%s: no table gather",
                  k.name);
        cr_assert(!strstr(tab, "fma.rn.f32") && strstr(plain, "fma.rn.f32"), "%s: the GELU is still computed", k.name);
        cr_assert(n_tab * 5 < n_plain * 3, "%s: %d instructions with the table, %d without", k.name, n_tab, n_plain);
        free(plain), free(tab);
        /* a table that does not fit the kernel is refused, not trusted */
        const cg_llvm_api *api = llvm_api();
        cg_ptx_options o = {.sm = 90};
        char *ptx = NULL, err[256] = "";
        size_t size;
        l.lut[0].store = 1;
        cr_assert(!api->compile_ptx(&k, &o, &l, &ptx, &size, err, sizeof err) && strstr(err, "16-bit table"), "%s",
                  err);
        l.lut[0].store = 0;
        cg_ptx_luts_free(&l);
        kir_free(&k);
    }
    /* no table: an f32 output, a cheap chain, two 16-bit inputs, a row kernel */
    kir_kernel k;
    kir_init(&k, 1, 1);
    int a = in_slot(&k, BURNC_DTYPE_BF16, "1"), b = in_slot(&k, BURNC_DTYPE_BF16, "1");
    int o32 = out_slot(&k, BURNC_DTYPE_F32, "1"), o16 = out_slot(&k, BURNC_DTYPE_BF16, "1"),
        o2 = out_slot(&k, BURNC_DTYPE_BF16, "1");
    STORE(&k, o32, kir_unary_op(&k, IR_OP_GELU, KIR_F32, LD(&k, a), NULL), false);
    STORE(&k, o16, OP2(&k, KIR_ADD, KIR_F32, LD(&k, a), kir_const_f(&k, KIR_F32, 1.0)), false);
    STORE(&k, o2, kir_unary_op_to(&k, IR_OP_GELU, KIR_F32, OP2(&k, KIR_MUL, KIR_F32, LD(&k, a), LD(&k, b)), NULL,
                                  BURNC_DTYPE_BF16), false);
    for (int st = 0; st < 3; st++)
        cr_assert_eq(cg_ptx_lut_source(&k, st), -1, "store %d took a table", st);
    kir_free(&k);
    softmax_kernel(&k, BURNC_DTYPE_BF16);
    cr_assert_eq(cg_ptx_lut_source(&k, 0), -1, "a row kernel took a table");
    kir_free(&k);
    free(in), free(out), free(zeros);
    BT_LEAK_CHECK();
}

/* ---- Row kernels ------------------------------------------------------------------------------ */

/* softmax over the last axis of [rows, n] (dt storage, f32 math): max, sum of exp, divide. */
static void softmax_kernel(kir_kernel *k, burnc_dtype_t dt)
{
    kir_init(k, 2, 1);
    int a = in_slot(k, dt, "21");
    int o = out_slot(k, dt, "21");
    int32_t x = LD(k, a);
    int m = STAGE(k, KIR_COMBINE_MAX, x);
    int32_t e = kir_exp(k, OP2(k, KIR_SUB, KIR_F32, x, REDUCED(k, m)));
    int s = STAGE(k, KIR_COMBINE_SUM, e);
    STORE(k, o, OP2(k, KIR_DIV, KIR_F32, e, REDUCED(k, s)), false);
    snprintf(k->name, sizeof k->name, "softmax_%s", burnc_dtype_name(dt));
}

/* layer_norm: mean, variance, (x - mean) / sqrt(var + eps) * w + b, plus the mean as a row
 * output. */
static void layer_norm_kernel(kir_kernel *k)
{
    kir_init(k, 2, 1);
    int a = in_slot(k, BURNC_DTYPE_F32, "21"), w = in_slot(k, BURNC_DTYPE_F32, "01"),
        bb = in_slot(k, BURNC_DTYPE_F32, "01");
    int o = out_slot(k, BURNC_DTYPE_F32, "21"), om = out_slot(k, BURNC_DTYPE_F32, "20");
    int32_t x = LD(k, a);
    int32_t n = OP1(k, KIR_CONVERT, KIR_F32, kir_emit(k, KIR_ROW_LEN, KIR_I64, -1, -1, -1));
    int s1 = STAGE(k, KIR_COMBINE_SUM, x);
    int32_t mean = OP2(k, KIR_DIV, KIR_F32, REDUCED(k, s1), n);
    int32_t d = OP2(k, KIR_SUB, KIR_F32, x, mean);
    int s2 = STAGE(k, KIR_COMBINE_SUM, OP2(k, KIR_MUL, KIR_F32, d, d));
    int32_t var = OP2(k, KIR_DIV, KIR_F32, REDUCED(k, s2), n);
    int32_t r = OP1(k, KIR_SQRT, KIR_F32, OP2(k, KIR_ADD, KIR_F32, var, kir_const_f(k, KIR_F32, 1e-5)));
    STORE(k, o, OP3(k, KIR_FMA, KIR_F32, OP2(k, KIR_DIV, KIR_F32, d, r), LD(k, w), LD(k, bb)), false);
    STORE(k, om, mean, true);
    snprintf(k->name, sizeof k->name, "layer_norm");
}

static void arg_kernel(kir_kernel *k, kir_combiner comb, burnc_dtype_t dt)
{
    kir_init(k, 3, 1);
    int a = in_slot(k, dt, "222");
    int o = out_slot(k, BURNC_DTYPE_I64, "200");
    STAGE(k, comb, LD(k, a));
    STORE(k, o, REDUCED(k, 0), true);
    snprintf(k->name, sizeof k->name, "%s_%s", comb == KIR_COMBINE_ARGMAX ? "argmax" : "argmin", burnc_dtype_name(dt));
}

/* sum of everything (rank 2, no outer axis), in dt's value type */
static void sum_kernel(kir_kernel *k, burnc_dtype_t dt, kir_combiner comb)
{
    kir_init(k, 2, 0);
    int a = in_slot(k, dt, "21");
    kir_type t = kir_type_of(dt);
    int o = out_slot(k, dt == BURNC_DTYPE_BOOL ? BURNC_DTYPE_I64 : dt, "00");
    int32_t x = LD(k, a);
    if (t == KIR_BOOL)
        x = OP1(k, KIR_CONVERT, KIR_I64, x);
    STAGE(k, comb, x);
    int32_t r = REDUCED(k, 0);
    if (t == KIR_F32 && (dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16))
        r = OP1(k, KIR_CONVERT, KIR_F32, r);
    STORE(k, o, r, true);
    snprintf(k->name, sizeof k->name, "reduce%d_%s", (int)comb, burnc_dtype_name(dt));
}

static void expect_entries(const char *ptx, const char *name, bool multipass)
{
    cr_assert(strstr(ptx, ".entry " CG_PTX_ENTRY_ROWS_WARP), "%s: no warp-per-row entry", name);
    cr_assert(strstr(ptx, ".entry " CG_PTX_ENTRY_ROWS_BLOCK), "%s: no block-per-row entry", name);
    cr_assert_eq(strstr(ptx, ".entry " CG_PTX_ENTRY_LEAVES) != NULL, multipass, "%s: leaves entry", name);
    cr_assert_eq(strstr(ptx, ".entry " CG_PTX_ENTRY_TREE) != NULL, multipass, "%s: tree entry", name);
    cr_assert_eq(strstr(ptx, ".entry " CG_PTX_ENTRY_FINISH) != NULL, multipass, "%s: finish entry", name);
    cr_assert(strstr(ptx, "shfl.sync.bfly"), "%s: no butterfly shuffles", name);
    cr_assert(strstr(ptx, "bar.sync") || strstr(ptx, "barrier.sync"), "%s: no block barrier", name);
}

Test(ptx, rows_softmax_layer_norm)
{
    need_ptxas();
    static const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F16, BURNC_DTYPE_BF16};
    for (size_t i = 0; i < COUNT(dts); i++) {
        kir_kernel k;
        softmax_kernel(&k, dts[i]);
        char *ptx = gen_ptx(&k, NULL);
        expect_entries(ptx, k.name, false);
        free(ptx);
        kir_free(&k);
    }
    kir_kernel k;
    layer_norm_kernel(&k);
    char *ptx = gen_ptx(&k, NULL);
    expect_entries(ptx, k.name, false);
    /* x is read by both stages and the stores: the shared-memory row entry keeps it on chip */
    cr_assert(strstr(ptx, ".entry " CG_PTX_ENTRY_ROWS_SMEM), "layer_norm: no shared-memory row entry");
    cr_assert(strstr(ptx, ".extern .shared") && strstr(ptx, "ld.shared.f32") && strstr(ptx, "st.shared.f32"),
              "layer_norm: the row is not kept in dynamic shared memory");
    free(ptx);
    cg_ptx_options o = {.sm = 90, .block = 1024, .rows_per_block = 32};
    free(gen_ptx(&k, &o));
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* The kernels burnc-bench's CUDA workloads fuse (BURNC_DUMP_DIR's .kir of softmax, layer_norm
 * and bcast): checked for what their speed depends on, with ptxas' registers and the PTX's
 * instruction counts printed as evidence. */
static void bench_layer_norm_kernel(kir_kernel *k)
{
    kir_init(k, 2, 1);
    int a = in_slot(k, BURNC_DTYPE_F32, "21");
    int o = out_slot(k, BURNC_DTYPE_F32, "21");
    int32_t x = LD(k, a);
    int32_t n = OP1(k, KIR_CONVERT, KIR_F32, kir_emit(k, KIR_ROW_LEN, KIR_I64, -1, -1, -1));
    int s1 = STAGE(k, KIR_COMBINE_SUM, x);
    int32_t d = OP2(k, KIR_SUB, KIR_F32, x, OP2(k, KIR_DIV, KIR_F32, REDUCED(k, s1), n));
    int s2 = STAGE(k, KIR_COMBINE_SUM, OP2(k, KIR_MUL, KIR_F32, d, d));
    int32_t var = OP2(k, KIR_DIV, KIR_F32, REDUCED(k, s2), n);
    int32_t eps = kir_emit(k, KIR_ARG, KIR_F32, 0, -1, -1);
    k->n_scalars = 1;
    STORE(k, o, OP2(k, KIR_DIV, KIR_F32, d, OP1(k, KIR_SQRT, KIR_F32, OP2(k, KIR_ADD, KIR_F32, var, eps))), false);
    snprintf(k->name, sizeof k->name, "bench_layer_norm");
}

/* x [r, n], u and w [n], v and z [r, 1]: the bench's ten-op broadcast chain. */
static void bcast_kernel(kir_kernel *k)
{
    kir_init(k, 2, 2);
    int x = in_slot(k, BURNC_DTYPE_F32, "21"), u = in_slot(k, BURNC_DTYPE_F32, "01"),
        v = in_slot(k, BURNC_DTYPE_F32, "10"), w = in_slot(k, BURNC_DTYPE_F32, "01"),
        z = in_slot(k, BURNC_DTYPE_F32, "10");
    int o = out_slot(k, BURNC_DTYPE_F32, "21");
    int32_t lx = LD(k, x), lu = LD(k, u), lv = LD(k, v), lw = LD(k, w), lz = LD(k, z);
    int32_t t = OP2(k, KIR_MUL, KIR_F32, OP2(k, KIR_SUB, KIR_F32, OP2(k, KIR_ADD, KIR_F32,
                                                                      OP2(k, KIR_MUL, KIR_F32, lx, lu), lv), lw), lz);
    int32_t gt = OP2(k, KIR_GT, KIR_BOOL, t, lu), nan = OP2(k, KIR_NE, KIR_BOOL, t, t);
    t = OP3(k, KIR_SELECT, KIR_F32, OP2(k, KIR_OR, KIR_BOOL, gt, nan), t, lu);
    t = OP2(k, KIR_MUL, KIR_F32, OP2(k, KIR_ADD, KIR_F32, t, lx), kir_emit(k, KIR_ARG, KIR_F32, 0, -1, -1));
    k->n_scalars = 1;
    t = OP2(k, KIR_ADD, KIR_F32, OP1(k, KIR_ABS, KIR_F32, OP2(k, KIR_SUB, KIR_F32, t, lv)), lw);
    STORE(k, o, t, false);
    snprintf(k->name, sizeof k->name, "bench_bcast");
}

static void report_entry(const char *ptx, const char *kernel, const char *entry, int max_regs)
{
    int regs = -1, spills = -1;
    bool have = ptxas_usage(ptx, entry, &regs, &spills);
    printf("ptx %s %s: %d instructions (%d ld.global, %d st.global, %d ld.shared, %d st.shared, %d bar.sync)",
           kernel, entry, ptx_lines(ptx, entry, NULL), ptx_lines(ptx, entry, "ld.global"),
           ptx_lines(ptx, entry, "st.global"), ptx_lines(ptx, entry, "ld.shared"), ptx_lines(ptx, entry, "st.shared"),
           ptx_lines(ptx, entry, "bar.sync"));
    if (have)
        printf(", %d registers, %d bytes spilled\n", regs, spills);
    else
        printf(" (no ptxas: registers not checked)\n");
    if (have) {
        cr_assert_eq(spills, 0, "%s %s spills %d bytes", kernel, entry, spills);
        cr_assert(regs <= max_regs, "%s %s: %d registers, more than %d (fewer blocks per SM)", kernel, entry, regs,
                  max_regs);
    }
}

/* The deep MLP's LayerNorm forward + GELU as fusion makes it: y = x + bias, the row's mean and
 * variance, x-hat, z = x-hat g + b and gelu(z), all three stored (autodiff keeps them). */
static void ln_gelu_kernel(kir_kernel *k, burnc_dtype_t dt)
{
    kir_type t = kir_type_of(dt);
    kir_init(k, 2, 1);
    int x = in_slot(k, dt, "21"), bias = in_slot(k, dt, "01"), g = in_slot(k, dt, "01"), b = in_slot(k, dt, "01");
    int o_hat = out_slot(k, dt, "21"), o_z = out_slot(k, dt, "21"), o_y = out_slot(k, dt, "21");
    int32_t y = OP2(k, KIR_ADD, t, LD(k, x), LD(k, bias));
    int32_t n = OP1(k, KIR_CONVERT, t, kir_emit(k, KIR_ROW_LEN, KIR_I64, -1, -1, -1));
    int s1 = STAGE(k, KIR_COMBINE_SUM, y);
    int32_t d = OP2(k, KIR_SUB, t, y, OP2(k, KIR_DIV, t, REDUCED(k, s1), n));
    int s2 = STAGE(k, KIR_COMBINE_SUM, OP2(k, KIR_MUL, t, d, d));
    int32_t var = OP2(k, KIR_ADD, t, OP2(k, KIR_DIV, t, REDUCED(k, s2), n), kir_emit(k, KIR_ARG, t, 0, -1, -1));
    k->n_scalars = 1;
    int32_t one = kir_emit(k, KIR_CONST, t, -1, -1, -1);
    k->insts[one].imm.f = 1.0;
    int32_t hat = OP2(k, KIR_MUL, t, d, OP2(k, KIR_DIV, t, one, OP1(k, KIR_SQRT, t, var)));
    int32_t z = OP2(k, KIR_ADD, t, OP2(k, KIR_MUL, t, hat, LD(k, g)), LD(k, b));
    STORE(k, o_hat, hat, false);
    STORE(k, o_z, z, false);
    STORE(k, o_y, kir_unary_op(k, IR_OP_GELU, t, z, NULL), false);
    snprintf(k->name, sizeof k->name, "ln_gelu_%s", burnc_dtype_name(dt));
}

/* The warp-per-row entry of f32 kernels is capped at 64 registers (4 blocks of 256 threads an
 * SM); f64 kernels are not. Under the cap ptxas 13.0 keeps the deep MLP's LayerNorm forward +
 * GELU within 12 bytes of spills (3 registers, in L1), which the H200 measured as faster than
 * 72 registers at 3 blocks an SM; a larger spill would have to be measured again. */
Test(ptx, rows_warp_entry_at_64_registers)
{
    need_ptxas();
    for (int f64 = 0; f64 < 2; f64++) {
        kir_kernel k;
        ln_gelu_kernel(&k, f64 ? BURNC_DTYPE_F64 : BURNC_DTYPE_F32);
        char *ptx = gen_ptx(&k, NULL);
        char key[64];
        snprintf(key, sizeof key, ".entry %s(", CG_PTX_ENTRY_ROWS_WARP);
        const char *at = strstr(ptx, key), *body = at ? strchr(at, '{') : NULL;
        cr_assert(body, "%s: no %s entry", k.name, CG_PTX_ENTRY_ROWS_WARP);
        const char *cap = strstr(at, ".maxnreg 64");
        cr_assert_eq(cap && cap < body, !f64, "%s: the warp-per-row entry is %scapped", k.name, f64 ? "" : "not ");
        int regs = -1, spills = -1;
        if (!f64 && ptxas_usage(ptx, CG_PTX_ENTRY_ROWS_WARP, &regs, &spills)) {
            printf("ptx %s %s: %d registers, %d bytes spilled\n", k.name, CG_PTX_ENTRY_ROWS_WARP, regs, spills);
            cr_assert(regs <= 64 && spills <= 16, "%s: %d registers, %d bytes spilled", k.name, regs, spills);
        }
        free(ptx);
        kir_free(&k);
    }
}

Test(ptx, bench_kernels)
{
    need_ptxas();
    kir_kernel k;
    softmax_kernel(&k, BURNC_DTYPE_F32);
    launch_args la;
    int64_t ext[2] = {16384, 8192};
    contiguous_args(&k, &la, ext);
    cg_ptx_options o = {.sm = 90};
    cg_ptx_plan p;
    char why[256];
    cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
    /* the row once from global memory, in 16-byte pieces, the exp values over it: 32 KB, so
     * six blocks of 256 threads per SM */
    cr_assert_str_eq(p.launch[0].entry, CG_PTX_ENTRY_ROWS_SMEM);
    cr_assert_eq(p.launch[0].shared_bytes, 32768u);
    int flags = cg_ptx_params_layout(&k).launch + CG_PTX_L_FLAGS;
    cr_assert_eq(p.launch[0].words[flags], (uint64_t)CG_PTX_FLAG_ROW_VEC, "the test's outputs have row strides 0");
    /* the element stores' rows as a dense output has them: 4 positions a thread, 16-byte
     * stores; not when the output starts one element off */
    la.out_str[0] = ext[1], la.out_str[1] = 1;
    cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert_eq(p.launch[0].words[flags], (uint64_t)(CG_PTX_FLAG_ROW_VEC | CG_PTX_FLAG_ROW_VEC_OUT));
    la.out_off[0] = 1;
    cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert_eq(p.launch[0].words[flags], (uint64_t)CG_PTX_FLAG_ROW_VEC);
    char *ptx = gen_ptx(&k, NULL);
    cr_assert(ptx_lines(ptx, CG_PTX_ENTRY_ROWS_SMEM, "ld.global.nc.v4") > 0, "softmax: no 16-byte row copy");
    cr_assert(ptx_lines(ptx, CG_PTX_ENTRY_ROWS_SMEM, "st.global.v4") > 0, "softmax: no 16-byte stores");
    cr_assert(strstr(ptx, ".maxnreg 40"), "softmax: no register cap on the shared-memory row entry");
    /* the max taken during the copy, NaN-propagating, the warps' results through shared memory */
    cr_assert(ptx_lines(ptx, CG_PTX_ENTRY_ROWS_SMEM, "max.NaN.f32") > 0, "softmax: the max is not taken in the copy");
    cr_assert(strstr(ptx, "burnc_sh_part"), "softmax: no shared array of the warps' partial maxima");
    report_entry(ptx, k.name, CG_PTX_ENTRY_ROWS_SMEM, 40);
    free(ptx);
    kir_free(&k);

    bench_layer_norm_kernel(&k);
    contiguous_args(&k, &la, ext);
    cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert_str_eq(p.launch[0].entry, CG_PTX_ENTRY_ROWS_SMEM);
    cr_assert_eq(p.launch[0].shared_bytes, 32768u);
    ptx = gen_ptx(&k, NULL);
    cr_assert(ptx_lines(ptx, CG_PTX_ENTRY_ROWS_SMEM, "ld.global.nc.v4") > 0, "layer_norm: no 16-byte row copy");
    cr_assert(!strstr(ptx, "max.NaN.f32"), "layer_norm: sums have no order-free path");
    report_entry(ptx, k.name, CG_PTX_ENTRY_ROWS_SMEM, 40);
    free(ptx);
    kir_free(&k);

    bcast_kernel(&k);
    contiguous_args(&k, &la, ext);
    cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert_str_eq(p.launch[0].entry, CG_PTX_ENTRY_EW);
    /* one input moves along both axes: 8 positions per thread, two 16-byte vectors of x in
     * flight, on the innermost path */
    cr_assert_eq(cg_ptx_default_items(&k), 8);
    cr_assert_eq(p.launch[0].words[cg_ptx_params_layout(&k).launch + CG_PTX_L_FLAGS], (uint64_t)CG_PTX_FLAG_INNER);
    cr_assert_eq((uint64_t)p.launch[0].grid[0] * p.launch[0].block[0] * 8, (uint64_t)(ext[0] * ext[1]));
    ptx = gen_ptx(&k, NULL);
    report_entry(ptx, k.name, CG_PTX_ENTRY_EW, 64);
    free(ptx);
    cg_ptx_options o4 = {.sm = 90, .items = 4};
    snprintf(k.name, sizeof k.name, "bench_bcast_i4");
    ptx = gen_ptx(&k, &o4);
    report_entry(ptx, k.name, CG_PTX_ENTRY_EW, 64);
    free(ptx);
    kir_free(&k);
    BT_LEAK_CHECK();
}

Test(ptx, rows_argmax_argmin)
{
    static const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64,  BURNC_DTYPE_I32, BURNC_DTYPE_BF16,
                                        BURNC_DTYPE_U8,  BURNC_DTYPE_BOOL, BURNC_DTYPE_I64};
    for (size_t i = 0; i < COUNT(dts); i++)
        for (int c = 0; c < 2; c++) {
            kir_kernel k;
            arg_kernel(&k, c ? KIR_COMBINE_ARGMIN : KIR_COMBINE_ARGMAX, dts[i]);
            char *ptx = gen_ptx(&k, NULL);
            expect_entries(ptx, k.name, true);
            free(ptx);
            kir_free(&k);
        }
    BT_LEAK_CHECK();
}

Test(ptx, whole_tensor_reductions)
{
    static const burnc_dtype_t dts[] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16,
                                        BURNC_DTYPE_I32, BURNC_DTYPE_I64, BURNC_DTYPE_BOOL};
    static const kir_combiner combs[] = {KIR_COMBINE_SUM, KIR_COMBINE_PROD, KIR_COMBINE_MAX, KIR_COMBINE_MIN};
    for (size_t i = 0; i < COUNT(dts); i++)
        for (size_t c = 0; c < COUNT(combs); c++) {
            if (dts[i] == BURNC_DTYPE_BOOL && c > 0)
                continue;
            kir_kernel k;
            sum_kernel(&k, dts[i], combs[c]);
            char *ptx = gen_ptx(&k, NULL);
            expect_entries(ptx, k.name, true);
            cr_assert(!strstr(ptx, CG_PTX_ENTRY_ROWS_SMEM), "%s: one phase, nothing to keep on chip", k.name);
            free(ptx);
            kir_free(&k);
        }
    BT_LEAK_CHECK();
}

/* ---- Refusals --------------------------------------------------------------------------------- */

Test(ptx, refuses_old_sm_and_bad_options)
{
    const cg_llvm_api *api = llvm_api();
    kir_kernel k;
    ew_kernel(&k, BURNC_DTYPE_F32, "1", "1", 1);
    char *ptx = (char *)1;
    size_t size = 7;
    char err[512] = "";
    cg_ptx_options o = {.sm = 61};
    cr_assert(!api->compile_ptx(&k, &o, NULL, &ptx, &size, err, sizeof err));
    cr_assert(ptx == NULL && size == 0, "outputs not cleared on failure");
    cr_assert(strstr(err, "6.1") && strstr(err, "7.0") && strstr(err, k.name), "message: %s", err);
    cr_assert(!api->compile_ptx(&k, NULL, NULL, &ptx, &size, err, sizeof err));
    cr_assert(strstr(err, "compute capability"), "message: %s", err);
    o = (cg_ptx_options){.sm = 90, .block = 100};
    cr_assert(!api->compile_ptx(&k, &o, NULL, &ptx, &size, err, sizeof err));
    cr_assert(strstr(err, "block 100"), "message: %s", err);
    o = (cg_ptx_options){.sm = 90, .items = 3};
    cr_assert(!api->compile_ptx(&k, &o, NULL, &ptx, &size, err, sizeof err));
    cr_assert(strstr(err, "items 3"), "message: %s", err);
    o = (cg_ptx_options){.sm = 90, .rows_per_block = 33};
    cr_assert(!api->compile_ptx(&k, &o, NULL, &ptx, &size, err, sizeof err));
    cr_assert(strstr(err, "rows_per_block 33"), "message: %s", err);
    uint8_t op = k.insts[k.n_insts - 1].op;
    k.insts[k.n_insts - 1].op = KIR_OPCODE_COUNT; /* a broken kernel */
    o = (cg_ptx_options){.sm = 90};
    cr_assert(!api->compile_ptx(&k, &o, NULL, &ptx, &size, err, sizeof err));
    cr_assert(strstr(err, "compile_ptx") && strstr(err, "opcode"), "message: %s", err);
    k.insts[k.n_insts - 1].op = op;
    k.in_place[0] = 9;
    cr_assert(!api->compile_ptx(&k, &o, NULL, &ptx, &size, err, sizeof err));
    cr_assert(strstr(err, "overwrites input 8"), "message: %s", err);
    k.in_place[0] = 0;
    /* still usable afterwards; newer GPUs get the newest target LLVM knows */
    o = (cg_ptx_options){.sm = 120};
    cr_assert(api->compile_ptx(&k, &o, NULL, &ptx, &size, err, sizeof err), "%s", err);
    cr_assert(strstr(ptx, ".target sm_90"));
    cr_assert(bt_grid_dependency_ok(ptx, 120, err, sizeof err), "%s", err);
    free(ptx);
    /* below sm_90 no griddepcontrol (ptxas would reject it) */
    o = (cg_ptx_options){.sm = 75};
    cr_assert(api->compile_ptx(&k, &o, NULL, &ptx, &size, err, sizeof err), "%s", err);
    cr_assert(strstr(ptx, ".target sm_75"));
    cr_assert(bt_grid_dependency_ok(ptx, 75, err, sizeof err), "%s", err);
    free(ptx);
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* ptxas is a real check: it rejects a broken module. */
Test(ptx, ptxas_rejects_broken_ptx)
{
    if (!find_ptxas())
        cr_skip("no ptxas (CUDA toolkit) found: nothing to check");
    static char log[65536];
    const char *bad =
        ".version 8.5\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tadd.rn.f32 %f1, %f2;\n}\n";
    cr_assert(!ptxas_ok(bad, "broken", log, sizeof log), "ptxas accepted a broken module");
    cr_assert(log[0], "ptxas said nothing");
    BT_LEAK_CHECK();
}

/* ---- The planner ------------------------------------------------------------------------------ */

/* The words ptx.h documents, at the places it documents them (numbers written out). */
Test(ptx, plan_words_layout)
{
    kir_kernel k;
    kir_init(&k, 3, 3);
    int a = in_slot(&k, BURNC_DTYPE_F32, "222"), b = in_slot(&k, BURNC_DTYPE_F32, "010");
    int o = out_slot(&k, BURNC_DTYPE_F32, "222");
    k.n_scalars = 2;
    int32_t s1 = kir_emit(&k, KIR_ARG, KIR_F32, 1, -1, -1);
    STORE(&k, o, OP2(&k, KIR_MUL, KIR_F32, OP2(&k, KIR_ADD, KIR_F32, LD(&k, a), LD(&k, b)), s1), false);
    snprintf(k.name, sizeof k.name, "layout");
    cg_ptx_layout l = cg_ptx_params_layout(&k);
    cr_assert_eq(l.in_addr, 0);
    cr_assert_eq(l.out_addr, 2);
    cr_assert_eq(l.extents, 3);
    cr_assert_eq(l.in_off, 6);
    cr_assert_eq(l.in_stride, 8);
    cr_assert_eq(l.out_off, 14);
    cr_assert_eq(l.out_stride, 15);
    cr_assert_eq(l.scalars, 18);
    cr_assert_eq(l.launch, 20);
    cr_assert_eq(l.n_words, 28);

    launch_args la;
    int64_t ext[3] = {4, 5, 6};
    contiguous_args(&k, &la, ext);
    la.in_off[0] = 3;
    la.in_off[1] = 11;
    la.out_off[0] = 7;
    la.in_str[0 * 3 + 0] = 1000; /* a transposed-looking input: no fast path */
    la.sc[0].f = 2.5;
    la.sc[1].i = -3;
    cg_ptx_plan p;
    char why[256];
    cg_ptx_options opt = {.sm = 90};
    cr_assert(plan(&k, &opt, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert_eq(p.n, 1);
    const cg_ptx_launch *x = &p.launch[0];
    cr_assert_str_eq(x->entry, CG_PTX_ENTRY_EW);
    cr_assert_eq(x->n_words, 28u);
    cr_assert_eq(x->words[0], (uint64_t)(uintptr_t)la.in[0]);
    cr_assert_eq(x->words[1], (uint64_t)(uintptr_t)la.in[1]);
    cr_assert_eq(x->words[2], (uint64_t)(uintptr_t)la.out[0]);
    cr_assert(x->words[3] == 4 && x->words[4] == 5 && x->words[5] == 6);
    cr_assert(x->words[6] == 3 && x->words[7] == 11);
    cr_assert(x->words[8] == 1000 && x->words[9] == 6 && x->words[10] == 1, "input 0 strides");
    cr_assert(x->words[11] == 0 && x->words[12] == 1 && x->words[13] == 0, "input 1 strides (ZERO, UNIT, ZERO)");
    cr_assert_eq(x->words[14], 7u);
    cr_assert(x->words[15] == 30 && x->words[16] == 6 && x->words[17] == 1);
    double f;
    memcpy(&f, &x->words[18], sizeof f);
    cr_assert_eq(f, 2.5);
    cr_assert_eq((int64_t)x->words[19], -3);
    cr_assert_eq(x->words[20 + CG_PTX_L_COUNT], 120u);
    cr_assert_eq(x->words[20 + CG_PTX_L_FLAGS], 0u, "a strided input took the fast path");
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* Row-major indices of flat position p. */
static void unflatten(uint64_t p, const int64_t *ext, int rank, uint64_t *idx)
{
    for (int d = rank - 1; d > 0; d--) {
        idx[d] = p % (uint64_t)ext[d];
        p /= (uint64_t)ext[d];
    }
    if (rank > 0)
        idx[0] = p;
}

/* Replays the element-wise entry's index math: every position written by exactly one thread,
 * and the indices of a thread's later items (stepped from the first's, with carries) those
 * of their positions. */
static void replay_ew(const cg_ptx_launch *x, int items, uint64_t n, const int64_t *ext, int rank)
{
    uint8_t *seen = calloc(n ? n : 1, 1);
    cr_assert(seen);
    cr_assert_eq(x->grid[1], 1u);
    cr_assert_eq(x->grid[2], 1u);
    for (uint64_t b = 0; b < x->grid[0]; b++)
        for (uint64_t t = 0; t < x->block[0]; t++) {
            uint64_t p0 = (b * x->block[0] + t) * (uint64_t)items, idx[BURNC_MAX_RANK], want[BURNC_MAX_RANK];
            unflatten(p0, ext, rank, idx);
            for (int i = 0; i < items; i++) {
                if (i > 0) { /* step_index of llvm_ptx.c */
                    uint64_t carry = 1;
                    for (int d = rank - 1; d >= 0; d--) {
                        idx[d] += carry;
                        if (d == 0)
                            break;
                        carry = idx[d] == (uint64_t)ext[d];
                        if (carry)
                            idx[d] = 0;
                    }
                }
                if (p0 + (uint64_t)i >= n)
                    continue;
                seen[p0 + (uint64_t)i]++;
                unflatten(p0 + (uint64_t)i, ext, rank, want);
                cr_assert(memcmp(idx, want, sizeof(uint64_t) * (size_t)rank) == 0, "position %llu: stepped indices",
                          (unsigned long long)(p0 + (uint64_t)i));
            }
        }
    for (uint64_t p = 0; p < n; p++)
        cr_assert_eq(seen[p], 1, "position %llu written %d times", (unsigned long long)p, seen[p]);
    /* and no block is wholly idle */
    cr_assert((uint64_t)(x->grid[0] - 1) * x->block[0] * (uint64_t)items < n, "a block with no position");
    free(seen);
}

Test(ptx, plan_elementwise_covers_domain)
{
    static const int64_t shapes[][3] = {{1, 1, 1},   {1, 1, 7},    {1, 3, 5},    {2, 3, 129},
                                        {17, 33, 1}, {1, 1, 1000}, {5, 1, 4096}, {3, 7, 11}};
    static const int items[] = {1, 2, 4, 8}, blocks[] = {64, 96, 256, 1024};
    kir_kernel k;
    ew_kernel(&k, BURNC_DTYPE_F32, "222", "111", 3);
    for (size_t s = 0; s < COUNT(shapes); s++)
        for (size_t i = 0; i < COUNT(items); i++)
            for (size_t bl = 0; bl < COUNT(blocks); bl++) {
                launch_args la;
                contiguous_args(&k, &la, shapes[s]);
                cg_ptx_options o = {.sm = 90, .items = items[i], .block = blocks[bl]};
                cg_ptx_plan p;
                char why[256];
                cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
                cr_assert_eq(p.n, 1);
                cr_assert_eq(p.launch[0].block[0], (uint32_t)blocks[bl]);
                uint64_t n = (uint64_t)(shapes[s][0] * shapes[s][1] * shapes[s][2]);
                cr_assert_eq(p.launch[0].words[cg_ptx_params_layout(&k).launch + CG_PTX_L_COUNT], n);
                replay_ew(&p.launch[0], items[i], n, shapes[s], 3);
            }
    kir_free(&k);
    /* a rank-0 domain: one position */
    ew_kernel(&k, BURNC_DTYPE_F32, "", "", 0);
    launch_args la;
    contiguous_args(&k, &la, NULL);
    cg_ptx_options o = {.sm = 90};
    cg_ptx_plan p;
    char why[256];
    cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert(p.n == 1 && p.launch[0].grid[0] == 1);
    cr_assert_eq(p.launch[0].words[cg_ptx_params_layout(&k).launch + CG_PTX_L_COUNT], 1u);
    replay_ew(&p.launch[0], cg_ptx_default_items(&k), 1, NULL, 0);
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* The fast-path flag: contiguous and aligned slots only. */
Test(ptx, plan_fast_path_flag)
{
    kir_kernel k;
    ew_kernel(&k, BURNC_DTYPE_F32, "22", "00", 2);
    int64_t ext[2] = {6, 8};
    int lw = cg_ptx_params_layout(&k).launch + CG_PTX_L_FLAGS;
    cg_ptx_options o = {.sm = 90, .items = 4};
    cg_ptx_plan p;
    char why[256];
    launch_args la;
    struct {
        const char *what;
        int change;
        uint64_t want;
    } cases[] = {{"contiguous, aligned, a uniform input", 0, 1},
                 {"base not 16-byte aligned", 1, 0},
                 {"offset of one element", 2, 0},
                 {"offset of four elements", 3, 1},
                 {"transposed strides", 4, 0},
                 {"an output offset of 2 elements", 5, 0},
                 {"extent-1 axis with any stride", 6, 1}};
    for (size_t c = 0; c < COUNT(cases); c++) {
        int64_t e[2] = {ext[0], ext[1]};
        if (cases[c].change == 6)
            e[0] = 1;
        contiguous_args(&k, &la, e);
        switch (cases[c].change) {
        case 1: la.in[0] = (char *)la.in[0] + 4; break;
        case 2: la.in_off[0] = 1; break;
        case 3: la.in_off[0] = 4; break;
        case 4: la.in_str[0] = 1, la.in_str[1] = 6; break;
        case 5: la.out_off[0] = 2; break;
        case 6: la.in_str[0] = 12345; break;
        default: break;
        }
        cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
        cr_assert_eq(p.launch[0].words[lw], cases[c].want, "%s: flag %llu", cases[c].what,
                     (unsigned long long)p.launch[0].words[lw]);
    }
    /* f64 with items 4 (32 bytes): 16-byte alignment is enough */
    kir_free(&k);
    ew_kernel(&k, BURNC_DTYPE_F64, "1", "1", 1);
    int64_t n = 100;
    contiguous_args(&k, &la, &n);
    la.in_off[0] = 2;
    cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert_eq(p.launch[0].words[cg_ptx_params_layout(&k).launch + CG_PTX_L_FLAGS], 1u);
    la.in_off[0] = 1;
    cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert_eq(p.launch[0].words[cg_ptx_params_layout(&k).launch + CG_PTX_L_FLAGS], 0u);
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* The innermost-path flag: a broadcast [n] row and a broadcast [rows, 1] column beside a
 * contiguous input, as in x * w + b over rows; the thread's items in one row, vectors aligned. */
Test(ptx, plan_inner_path_flag)
{
    kir_kernel k;
    kir_init(&k, 2, 2);
    int a = in_slot(&k, BURNC_DTYPE_F32, "21"), w = in_slot(&k, BURNC_DTYPE_F32, "01"),
        c = in_slot(&k, BURNC_DTYPE_F32, "20");
    int o = out_slot(&k, BURNC_DTYPE_F32, "21");
    int32_t v = OP3(&k, KIR_FMA, KIR_F32, LD(&k, a), LD(&k, w), LD(&k, c));
    STORE(&k, o, OP2(&k, KIR_ADD, KIR_F32, v, OP1(&k, KIR_CONVERT, KIR_F32, kir_emit(&k, KIR_INDEX, KIR_I64, 1, -1, -1))),
          false);
    snprintf(k.name, sizeof k.name, "ew_inner_bcast");
    cr_assert(cg_ptx_has_inner(&k));
    int lw = cg_ptx_params_layout(&k).launch + CG_PTX_L_FLAGS;
    cg_ptx_options opt = {.sm = 90, .items = 4};
    cg_ptx_plan p;
    char why[256];
    launch_args la;
    struct {
        const char *what;
        int64_t rows, n;
        int change;
        uint64_t want;
    } cases[] = {{"rows of 8", 6, 8, 0, CG_PTX_FLAG_INNER},
                 {"rows of 10: items cross rows", 6, 10, 0, 0},
                 {"x's rows 12 apart (padded)", 6, 8, 1, CG_PTX_FLAG_INNER},
                 {"x's rows 10 apart: unaligned", 6, 8, 2, 0},
                 {"w offset of one element", 6, 8, 3, 0},
                 {"column offset of one element (scalar loads)", 6, 8, 4, CG_PTX_FLAG_INNER},
                 {"output offset of two elements", 6, 8, 5, 0},
                 {"one row of 8: the column is still broadcast", 1, 8, 0, CG_PTX_FLAG_INNER}};
    for (size_t i = 0; i < COUNT(cases); i++) {
        int64_t ext[2] = {cases[i].rows, cases[i].n};
        contiguous_args(&k, &la, ext);
        switch (cases[i].change) {
        case 1: la.in_str[a * 2] = 12; break;
        case 2: la.in_str[a * 2] = 10; break;
        case 3: la.in_off[w] = 1; break;
        case 4: la.in_off[c] = 1; break;
        case 5: la.out_off[o] = 2; break;
        default: break;
        }
        cr_assert(plan(&k, &opt, &la, 0, &p, why, sizeof why), "%s", why);
        cr_assert_eq(p.launch[0].words[lw], cases[i].want, "%s: flags %llu", cases[i].what,
                     (unsigned long long)p.launch[0].words[lw]);
        uint64_t total = (uint64_t)(ext[0] * ext[1]);
        replay_ew(&p.launch[0], 4, total, ext, 2);
        if (cases[i].want == CG_PTX_FLAG_INNER) /* every thread's items in one row */
            for (uint64_t p0 = 0; p0 < total; p0 += 4)
                cr_assert(p0 % (uint64_t)ext[1] + 4 <= (uint64_t)ext[1]);
    }
    need_ptxas();
    char *ptx = gen_ptx(&k, &opt);
    /* the fast path's three vectors, the innermost path's two (x and the row w; the column
     * is one element) */
    int v4 = 0;
    for (const char *q = ptx; (q = strstr(q, "ld.global")); q++) {
        const char *eol = q + strcspn(q, "\n"), *v = strstr(q, ".v4.f32");
        v4 += v && v < eol;
    }
    cr_assert_eq(v4, 5, "%d vector loads", v4);
    cr_assert(!strstr(ptx, "ld.global.v4"), "a vector load of a read-only input is not ld.global.nc");
    free(ptx);
    kir_free(&k);
    /* an input with any stride on the last axis: no innermost path */
    ew_kernel(&k, BURNC_DTYPE_F32, "22", "11", 2);
    cr_assert(!cg_ptx_has_inner(&k));
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* positions() of llvm_ptx.c: groups of 8 (first, first + step, ...) while a group's last
 * position is in range, then one at a time; hits[base + j] counts position j. */
static void walk(int64_t first, int64_t step, int64_t end, uint32_t *hits, int64_t base)
{
    int64_t i = first;
    for (; i + 7 * step < end; i += 8 * step)
        for (int u = 0; u < 8; u++)
            hits[base + i + u * step]++;
    for (; i < end; i += step)
        hits[base + i]++;
}

static void expect_once(const uint32_t *hits, int64_t rows, int64_t n, const char *what)
{
    for (int64_t i = 0; i < rows * n; i++)
        cr_assert_eq(hits[i], 1u, "shape %lld x %lld: position %lld %s %u times", (long long)rows, (long long)n,
                     (long long)i, what, hits[i]);
}

/* Replays the row entries: warp per row (every row and every position once), block per row
 * (every leaf once, by whole warps, in rounds of 32; element stores by the whole block) and
 * the shared-memory entry (the same, after the block copied every position once). */
Test(ptx, plan_rows_cover_rows_and_leaves)
{
    static const int64_t shapes[][2] = {{1, 1},   {3, 100},           {37, 4096},        {1000, 33},   {5, 0},
                                        {2, 4097}, {30, 3 * 4096 + 7}, {3, 70 * 4096 + 5}, {4, 8192}, {2, 16384},
                                        {2, 16385}};
    static const int rpbs[] = {1, 4, 8, 32}, blocks[] = {64, 256, 1024};
    kir_kernel k;
    softmax_kernel(&k, BURNC_DTYPE_F32);
    bool cached[KIR_MAX_INPUTS], kept[KIR_MAX_STAGES];
    cr_assert_eq(cg_ptx_row_cached(&k, cached), 1, "softmax reads x in three phases");
    cr_assert(cg_ptx_row_kept(&k, kept) == 1 && kept[1], "softmax divides the exp values the sum stage computes");
    int alias[KIR_MAX_STAGES];
    cg_ptx_row_alias(&k, cached, kept, alias);
    cr_assert(alias[0] == -1 && alias[1] == 0, "the exp values go over x, which the stores no longer read");    for (size_t s = 0; s < COUNT(shapes); s++)
        for (size_t r = 0; r < COUNT(rpbs); r++) {
            int64_t rows = shapes[s][0], n = shapes[s][1];
            launch_args la;
            contiguous_args(&k, &la, shapes[s]);
            cg_ptx_options o = {.sm = 90, .rows_per_block = rpbs[r], .block = blocks[r % 3]};
            cg_ptx_plan p;
            char why[256];
            cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
            cr_assert_eq(p.n, 1);
            cr_assert_eq(p.scratch_bytes, 0u);
            const cg_ptx_launch *x = &p.launch[0];
            cr_assert_eq(x->words[cg_ptx_params_layout(&k).launch + CG_PTX_L_COUNT], (uint64_t)rows);
            size_t cells = (size_t)(rows * (n ? n : 1));
            uint32_t *hits = calloc(cells, sizeof *hits), *stores = calloc(cells, sizeof *stores),
                     *copies = calloc(cells, sizeof *copies);
            cr_assert(hits && stores && copies);
            if (n <= KIR_LEAF) {
                cr_assert_str_eq(x->entry, CG_PTX_ENTRY_ROWS_WARP);
                cr_assert_eq(x->block[0], (uint32_t)(32 * rpbs[r]));
                cr_assert_eq(x->shared_bytes, 0u);
                for (uint64_t b = 0; b < x->grid[0]; b++)
                    for (uint32_t t = 0; t < x->block[0]; t++) {
                        uint64_t row = b * (uint64_t)rpbs[r] + t / 32;
                        if (row >= (uint64_t)rows)
                            continue;
                        walk(t % 32, 32, n, hits, (int64_t)row * n);
                        walk(t % 32, 32, n, stores, (int64_t)row * n);
                    }
            } else {
                int64_t leaves = (n + KIR_LEAF - 1) / KIR_LEAF, chunks = (leaves + 31) / 32;
                /* x, then the exp values over it */
                uint64_t smem_bytes = (uint64_t)((n * 4 + 15) / 16 * 16);
                bool smem = smem_bytes <= CG_PTX_SMEM_ROW_BYTES;
                cr_assert_str_eq(x->entry, smem ? CG_PTX_ENTRY_ROWS_SMEM : CG_PTX_ENTRY_ROWS_BLOCK, "%lld x %lld",
                                 (long long)rows, (long long)n);
                cr_assert_eq(x->grid[0], (uint32_t)rows);
                /* without shared memory, no more warps than leaves (idle warps only cost) */
                int64_t want = smem || blocks[r % 3] <= 32 * leaves ? blocks[r % 3] : 32 * leaves;
                cr_assert_eq(x->block[0], (uint32_t)want, "%lld x %lld: block %u", (long long)rows, (long long)n,
                             x->block[0]);
                uint64_t asked = smem_bytes > CG_PTX_SMEM_DEFAULT ? CG_PTX_SMEM_ROW_BYTES : smem_bytes;
                cr_assert_eq(x->shared_bytes, smem ? (uint32_t)asked : 0u);
                /* contiguous rows of a multiple of 4 floats, 256-byte aligned: 16-byte copies */
                uint64_t flags = x->words[cg_ptx_params_layout(&k).launch + CG_PTX_L_FLAGS];
                cr_assert_eq(flags, smem && n % 4 == 0 ? (uint64_t)CG_PTX_FLAG_ROW_VEC : 0u, "%lld x %lld: flags %llu",
                             (long long)rows, (long long)n, (unsigned long long)flags);
                int64_t warps = x->block[0] / 32;
                for (int64_t row = 0; row < rows; row++) {
                    for (uint32_t t = 0; smem && t < x->block[0]; t++)
                        walk(t, x->block[0], n, copies, row * n);
                    for (int64_t c = 0; c < chunks; c++)
                        for (int64_t w = 0; w < warps; w++)
                            for (int64_t li = w; li < 32; li += warps) {
                                int64_t leaf = c * 32 + li;
                                if (leaf >= leaves)
                                    continue;
                                int64_t end = leaf * KIR_LEAF + KIR_LEAF < n ? leaf * KIR_LEAF + KIR_LEAF : n;
                                for (int lane = 0; lane < 32; lane++)
                                    walk(leaf * KIR_LEAF + lane, 32, end, hits, row * n);
                            }
                    for (uint32_t t = 0; t < x->block[0]; t++)
                        walk(t, x->block[0], n, stores, row * n);
                }
                if (smem)
                    expect_once(copies, rows, n, "copied to shared memory");
            }
            expect_once(hits, rows, n, "reduced");
            expect_once(stores, rows, n, "stored");
            free(hits);
            free(stores);
            free(copies);
        }
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* Which inputs the shared-memory entry keeps, and the shared memory the plan asks for. */
Test(ptx, plan_rows_shared_memory)
{
    bool cached[KIR_MAX_INPUTS];
    kir_kernel k;
    layer_norm_kernel(&k);
    cr_assert_eq(cg_ptx_row_cached(&k, cached), 1);
    cr_assert(cached[0] && !cached[1] && !cached[2], "layer_norm: only x is read by more than one phase");
    bool kept[KIR_MAX_STAGES];
    cr_assert_eq(cg_ptx_row_kept(&k, kept), 0, "layer_norm: the stages' values are x (cached) and d * d (not reused)");
    kir_free(&k);
    sum_kernel(&k, BURNC_DTYPE_F32, KIR_COMBINE_SUM);
    cr_assert_eq(cg_ptx_row_cached(&k, cached), 0);
    kir_free(&k);
    /* a [rows, n] f16 input read by a stage and the stores, an f32 one by two stages, a row
     * input read by everything, and an f64 one read by the stores only */
    kir_init(&k, 2, 1);
    int a = in_slot(&k, BURNC_DTYPE_F16, "21"), b = in_slot(&k, BURNC_DTYPE_F32, "22"),
        c = in_slot(&k, BURNC_DTYPE_F32, "20"), d = in_slot(&k, BURNC_DTYPE_F64, "21");
    int o = out_slot(&k, BURNC_DTYPE_F32, "21");
    int32_t xc = LD(&k, c);
    int s0 = STAGE(&k, KIR_COMBINE_SUM, OP2(&k, KIR_ADD, KIR_F32, LD(&k, a), xc));
    int s1 = STAGE(&k, KIR_COMBINE_MAX, OP2(&k, KIR_MUL, KIR_F32, LD(&k, b), REDUCED(&k, s0)));
    int s2 = STAGE(&k, KIR_COMBINE_MIN, OP2(&k, KIR_SUB, KIR_F32, LD(&k, b), xc));
    int32_t v = OP2(&k, KIR_ADD, KIR_F32, LD(&k, a), OP1(&k, KIR_CONVERT, KIR_F32, LD(&k, d)));
    v = OP2(&k, KIR_ADD, KIR_F32, v, OP2(&k, KIR_ADD, KIR_F32, REDUCED(&k, s1), REDUCED(&k, s2)));
    STORE(&k, o, v, false);
    snprintf(k.name, sizeof k.name, "smem_mixed");
    cr_assert_eq(cg_ptx_row_cached(&k, cached), 2);
    cr_assert(cached[a] && cached[b] && !cached[c] && !cached[d]);
    cr_assert_eq(cg_ptx_row_kept(&k, kept), 0);
    int64_t n = 5001;
    int64_t ext[2] = {3, n};
    launch_args la;
    contiguous_args(&k, &la, ext);
    cg_ptx_options opt = {.sm = 90};
    cg_ptx_plan p;
    char why[256];
    cr_assert(plan(&k, &opt, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert_str_eq(p.launch[0].entry, CG_PTX_ENTRY_ROWS_SMEM);
    cr_assert_eq(p.launch[0].shared_bytes, (uint32_t)(10016 + 20016), "regions of 2n and 4n bytes, 16-byte rounded");
    cr_assert_eq(p.launch[0].block[0], (uint32_t)CG_PTX_DEFAULT_BLOCK);
    /* past the limit: the block entry, which re-reads the row */
    ext[1] = CG_PTX_SMEM_ROW_BYTES / 6 + 100;
    contiguous_args(&k, &la, ext);
    cr_assert(plan(&k, &opt, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert_str_eq(p.launch[0].entry, CG_PTX_ENTRY_ROWS_BLOCK);
    cr_assert_eq(p.launch[0].shared_bytes, 0u);
    need_ptxas();
    char *ptx = gen_ptx(&k, NULL);
    cr_assert(strstr(ptx, ".entry " CG_PTX_ENTRY_ROWS_SMEM));
    cr_assert(strstr(ptx, "ld.shared.u16") || strstr(ptx, "ld.shared.b16"), "the f16 row is not read from shared");
    free(ptx);
    kir_free(&k);
    /* an f64 stage value the stores reuse: kept after the cached f32 input */
    kir_init(&k, 2, 1);
    a = in_slot(&k, BURNC_DTYPE_F32, "21");
    o = out_slot(&k, BURNC_DTYPE_F64, "21");
    int32_t y = OP2(&k, KIR_MUL, KIR_F64, OP1(&k, KIR_CONVERT, KIR_F64, LD(&k, a)), kir_const_f(&k, KIR_F64, 3.0));
    s0 = STAGE(&k, KIR_COMBINE_SUM, y);
    STORE(&k, o, OP2(&k, KIR_DIV, KIR_F64, y, REDUCED(&k, s0)), false);
    snprintf(k.name, sizeof k.name, "smem_kept_f64");
    /* x is read once, where the block computes the kept values; the stores read those */
    cr_assert_eq(cg_ptx_row_cached(&k, cached), 0);
    cr_assert(cg_ptx_row_kept(&k, kept) == 1 && kept[0]);
    ext[1] = 6145;
    contiguous_args(&k, &la, ext);
    cr_assert(plan(&k, &opt, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert_str_eq(p.launch[0].entry, CG_PTX_ENTRY_ROWS_SMEM);
    /* one region of 8n bytes, 16-byte rounded: 49168, past 48 KB, so the most */
    cr_assert_eq(p.launch[0].shared_bytes, (uint32_t)CG_PTX_SMEM_ROW_BYTES);
    ptx = gen_ptx(&k, NULL);
    cr_assert(strstr(ptx, "st.shared.f64") && strstr(ptx, "ld.shared.f64"), "the f64 values are not kept");
    free(ptx);
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* kernel.h's pairwise tree over v[0..n) with an odd last element carried up. */
static float tree_carry(float *v, int64_t n)
{
    if (n == 0)
        return 0.0f;
    while (n > 1) {
        int64_t m = 0;
        for (int64_t i = 0; i < n; i += 2)
            v[m++] = i + 1 < n ? v[i] + v[i + 1] : v[i];
        n = m;
    }
    return v[0];
}

/* What the tree passes do: chunks of 32 padded with +0.0, each reduced by the lane tree. */
static float tree_passes(float *v, int64_t n, int *passes)
{
    *passes = 0;
    while (n > 1) {
        int64_t m = (n + 31) / 32;
        for (int64_t c = 0; c < m; c++) {
            float lane[32];
            for (int l = 0; l < 32; l++)
                lane[l] = c * 32 + l < n ? v[c * 32 + l] : 0.0f;
            v[c] = tree_carry(lane, 32);
        }
        n = m;
        ++*passes;
    }
    return v[0];
}

/* What the block-per-row entry does: chunk results pushed on a binary-counter stack, then
 * folded from the smallest pending subtree up. */
static float tree_stack(const float *v, int64_t n)
{
    float stack[64];
    int64_t chunks = (n + 31) / 32;
    for (int64_t c = 0; c < chunks; c++) {
        float lane[32];
        for (int l = 0; l < 32; l++)
            lane[l] = c * 32 + l < n ? v[c * 32 + l] : 0.0f;
        float r = tree_carry(lane, 32);
        int l = 0;
        while ((c >> l) & 1)
            r = stack[l] + r, l++;
        stack[l] = r;
    }
    float acc = 0.0f;
    bool have = false;
    for (int l = 0; l < 64; l++)
        if ((chunks >> l) & 1) {
            acc = have ? stack[l] + acc : stack[l];
            have = true;
        }
    return acc;
}

/* The orders the entries implement are kernel.h's, bitwise (float sums are order-sensitive:
 * a wrong pairing shows up). */
Test(ptx, reduction_orders_agree)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    static const int64_t sizes[] = {1, 2, 3, 31, 32, 33, 63, 64, 65, 100, 1000, 1023, 1024, 1025, 5000, 33000};
    for (size_t s = 0; s < COUNT(sizes); s++) {
        int64_t n = sizes[s];
        float *v = malloc((size_t)n * sizeof *v), *w = malloc((size_t)n * sizeof *w);
        cr_assert(v && w);
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            v[i] = (float)((double)(seed >> 11) * 0x1p-53 - 0.3) * (float)(1 << (seed >> 60));
        }
        memcpy(w, v, (size_t)n * sizeof *v);
        float want = tree_carry(w, n);
        float stacked = tree_stack(v, n);
        int passes;
        memcpy(w, v, (size_t)n * sizeof *v);
        float passed = tree_passes(w, n, &passes);
        cr_assert(memcmp(&want, &stacked, sizeof want) == 0, "n %lld: stack %a, tree %a", (long long)n, stacked, want);
        cr_assert(memcmp(&want, &passed, sizeof want) == 0, "n %lld: passes %a, tree %a", (long long)n, passed, want);
        free(v);
        free(w);
    }
    BT_LEAK_CHECK();
}

/* IEEE maximum (minimum): NaN if either is, -0 below +0; the order-free fold of the copy. */
static float ieee_max(float a, float b, bool max)
{
    if (isnan(a) || isnan(b))
        return NAN;
    if (a == b)
        return (signbit(a) != 0) == max ? b : a; /* max keeps +0, min keeps -0 */
    return (a > b) == max ? a : b;
}

/* The shared-memory row entry folds a max (min) stage of an f32 input during its copy, in no
 * kernel.h order (codegen/llvm_ptx.c, fast_stage), and keeps that result unless it is a zero or
 * a NaN, where kernel.h's order decides which of the equal elements wins (+0 or -0, which
 * payload). Against kir_eval on rows of ties, signed zeros, infinities, subnormals and NaNs:
 * the same bits whenever it is kept, and a zero or NaN exactly when kir_eval's is one. */
Test(ptx, fast_max_exact_unless_zero_or_nan)
{
    enum { ROWS = 64, N = 9000 };
    static const float pool[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, -2.5f, INFINITY, -INFINITY, 0x1p-149f, -0x1p-149f};
    float *x = malloc((size_t)ROWS * N * sizeof *x), want[ROWS];
    cr_assert(x);
    uint64_t st = 0x2545f4914f6cdd1dull;
    for (int comb = KIR_COMBINE_MAX; comb <= KIR_COMBINE_MIN; comb++) {
        bool max = comb == KIR_COMBINE_MAX;
        kir_kernel k;
        kir_init(&k, 2, 1);
        int a = in_slot(&k, BURNC_DTYPE_F32, "21"), o = out_slot(&k, BURNC_DTYPE_F32, "20");
        STAGE(&k, comb, LD(&k, a));
        STORE(&k, o, REDUCED(&k, 0), true);
        for (int r = 0; r < ROWS; r++)
            for (int j = 0; j < N; j++) {
                st ^= st << 13, st ^= st >> 7, st ^= st << 17;
                float v = pool[st % COUNT(pool)];
                if (r % 4 == 1 && st % 997 == 0) { /* NaNs of several payloads and signs */
                    uint32_t bits = 0x7fc00000u | (uint32_t)(st >> 40 & 0x3fffff) | (uint32_t)(st >> 63) << 31;
                    memcpy(&v, &bits, sizeof v);
                }
                if (r % 4 == 2 && v != 0.0f) /* nothing beyond the zeros (of both signs) */
                    v = max ? -fabsf(v) : fabsf(v);
                x[(size_t)r * N + (size_t)j] = v;
            }
        void *ins[1] = {x}, *outs[1] = {want};
        int64_t ext[2] = {ROWS, N}, in_off[1] = {0}, out_off[1] = {0}, in_str[2] = {N, 1}, out_str[2] = {1, 0};
        kir_args args = {.inputs = ins, .outputs = outs, .extents = ext, .in_offsets = in_off, .in_strides = in_str,
                         .out_offsets = out_off, .out_strides = out_str};
        cr_assert_eq(kir_eval(&k, &args), BURNC_OK);
        int kept = 0, exact = 0;
        for (int r = 0; r < ROWS; r++) {
            float fast = max ? -INFINITY : INFINITY;
            for (int j = N - 1; j >= 0; j--) /* another order than kernel.h's */
                fast = ieee_max(fast, x[(size_t)r * N + (size_t)((j * 7919) % N)], max);
            bool special = isnan(fast) || fast == 0.0f;
            cr_assert_eq(special, isnan(want[r]) || want[r] == 0.0f, "row %d: fast %a, kernel order %a", r,
                         (double)fast, (double)want[r]);
            if (!special)
                cr_assert(!memcmp(&fast, &want[r], sizeof fast), "row %d: fast %a, kernel order %a", r, (double)fast,
                          (double)want[r]);
            kept += !special, exact += special;
        }
        cr_assert(kept > 0 && exact > 0, "%d rows kept the fast result, %d took kernel.h's order", kept, exact);
        kir_free(&k);
    }
    free(x);
    BT_LEAK_CHECK();
}

/* Few long rows of a one-stage kernel: leaves, tree passes, finish; scratch asked for first. */
Test(ptx, plan_multipass)
{
    static const int64_t shapes[][2] = {{1, 8 * 4096}, {3, 8 * 4096 + 5}, {100, 40000},
                                        {1, 1 << 28},  {263, 9 * 4096},   {2, 33 * 4096}};
    kir_kernel k;
    arg_kernel(&k, KIR_COMBINE_ARGMAX, BURNC_DTYPE_F32);
    k.rank = 2;
    k.inputs[0].stride[2] = 0;
    k.outputs[0].stride[2] = 0;
    int lw = cg_ptx_params_layout(&k).launch;
    for (size_t s = 0; s < COUNT(shapes); s++) {
        int64_t rows = shapes[s][0], n = shapes[s][1], leaves = (n + KIR_LEAF - 1) / KIR_LEAF;
        launch_args la;
        contiguous_args(&k, &la, shapes[s]);
        cg_ptx_options o = {.sm = 90, .block = 128};
        cg_ptx_plan p;
        char why[256];
        cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
        cr_assert_eq(p.n, 0, "launches planned without scratch");
        size_t bytes = p.scratch_bytes;
        cr_assert(bytes >= (size_t)(rows * leaves * CG_PTX_RECORD_BYTES), "scratch %zu bytes", bytes);
        uint64_t base = 0x7e0000000000ull;
        cr_assert(plan(&k, &o, &la, base, &p, why, sizeof why), "%s", why);
        cr_assert_eq(p.scratch_bytes, bytes);
        cr_assert(p.n >= 3);
        cr_assert_str_eq(p.launch[0].entry, CG_PTX_ENTRY_LEAVES);
        cr_assert_str_eq(p.launch[p.n - 1].entry, CG_PTX_ENTRY_FINISH);
        /* leaves: warp gw takes leaf gw % L of row gw / L, every one once */
        const cg_ptx_launch *x = &p.launch[0];
        cr_assert_eq(x->words[lw + CG_PTX_L_LEAVES], (uint64_t)leaves);
        uint64_t warps = (uint64_t)x->grid[0] * x->block[0] / 32;
        cr_assert(warps >= (uint64_t)(rows * leaves) && warps < (uint64_t)(rows * leaves) + x->block[0] / 32);
        uint64_t src = x->words[lw + CG_PTX_L_DST], m = (uint64_t)leaves;
        cr_assert(src >= base && src + (uint64_t)(rows * leaves) * CG_PTX_RECORD_BYTES <= base + bytes);
        /* tree passes: SRC is the last DST, counts shrink by 32 to 1, buffers never overlap */
        int i = 1;
        for (; i < p.n - 1; i++) {
            x = &p.launch[i];
            cr_assert_str_eq(x->entry, CG_PTX_ENTRY_TREE);
            cr_assert_eq(x->words[lw + CG_PTX_L_SRC], src);
            cr_assert_eq(x->words[lw + CG_PTX_L_SRC_N], m);
            uint64_t m2 = (m + 31) / 32, dst = x->words[lw + CG_PTX_L_DST];
            cr_assert_eq(x->words[lw + CG_PTX_L_DST_N], m2);
            cr_assert_eq(x->words[lw + CG_PTX_L_COUNT], (uint64_t)rows);
            cr_assert((uint64_t)x->grid[0] * x->block[0] / 32 >= (uint64_t)rows * m2);
            cr_assert(dst >= base && dst + (uint64_t)rows * m2 * CG_PTX_RECORD_BYTES <= base + bytes);
            cr_assert(dst + (uint64_t)rows * m2 * CG_PTX_RECORD_BYTES <= src ||
                          src + (uint64_t)rows * m * CG_PTX_RECORD_BYTES <= dst,
                      "pass %d reads what it writes", i);
            src = dst;
            m = m2;
        }
        cr_assert_eq(m, 1u, "the passes end with %llu records per row", (unsigned long long)m);
        x = &p.launch[p.n - 1];
        cr_assert_eq(x->words[lw + CG_PTX_L_SRC], src);
        cr_assert((uint64_t)x->grid[0] * x->block[0] >= (uint64_t)rows);
        int passes = 0;
        for (uint64_t q = (uint64_t)leaves; q > 1; q = (q + 31) / 32)
            passes++;
        cr_assert_eq(p.n, passes + 2);
    }
    /* many rows, or few leaves, or element stores: a single launch */
    int64_t many[2] = {264, 9 * 4096}, short_rows[2] = {3, 7 * 4096};
    launch_args la;
    cg_ptx_plan p;
    char why[256];
    cg_ptx_options o = {.sm = 90};
    contiguous_args(&k, &la, many);
    cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why) && p.n == 1 && p.scratch_bytes == 0);
    cr_assert_str_eq(p.launch[0].entry, CG_PTX_ENTRY_ROWS_BLOCK);
    contiguous_args(&k, &la, short_rows);
    cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why) && p.n == 1);
    cr_assert_str_eq(p.launch[0].entry, CG_PTX_ENTRY_ROWS_BLOCK);
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* A loss's kernel (a whole-tensor sum, the difference kept as an element output) takes the
 * multi-pass entries; element stores of a value that uses the sum (softmax's) do not. */
Test(ptx, multipass_with_independent_element_stores)
{
    for (int dependent = 0; dependent < 2; dependent++) {
        kir_kernel k;
        kir_init(&k, 1, 0);
        int x = in_slot(&k, BURNC_DTYPE_F32, "u"), d = out_slot(&k, BURNC_DTYPE_F32, "u");
        int sum = out_slot(&k, BURNC_DTYPE_F32, "0");
        int32_t v = OP2(&k, KIR_MUL, KIR_F32, LD(&k, x), LD(&k, x));
        int st = STAGE(&k, KIR_COMBINE_SUM, v);
        STORE(&k, sum, REDUCED(&k, st), true);
        STORE(&k, d, dependent ? OP2(&k, KIR_DIV, KIR_F32, v, REDUCED(&k, st)) : v, false);
        cr_assert_eq(cg_ptx_has_multipass(&k), !dependent, "element store %s the sum",
                     dependent ? "using" : "independent of");
        snprintf(k.name, sizeof k.name, "loss_%d", dependent);
        char *ptx = gen_ptx(&k, NULL);
        expect_entries(ptx, k.name, !dependent);
        free(ptx);
        kir_free(&k);
    }
    BT_LEAK_CHECK();
}

/* Sums over a strided reduced axis of rows that lie side by side (over the batch axis: the
 * rows are columns) take the column entry; rows laid out along the reduced axis, few long
 * rows (the multi-pass entries) and mixed layouts do not. */
Test(ptx, plan_columns)
{
    kir_kernel k;
    kir_init(&k, 2, 1);
    int x = in_slot(&k, BURNC_DTYPE_F32, "22"), w = in_slot(&k, BURNC_DTYPE_F32, "22");
    int o = out_slot(&k, BURNC_DTYPE_F32, "20");
    STORE(&k, o, REDUCED(&k, STAGE(&k, KIR_COMBINE_SUM, OP2(&k, KIR_MUL, KIR_F32, LD(&k, x), LD(&k, w)))), true);
    snprintf(k.name, sizeof k.name, "colsum");
    cr_assert(cg_ptx_has_cols(&k));
    char *ptx = gen_ptx(&k, NULL);
    cr_assert(strstr(ptx, ".entry " CG_PTX_ENTRY_COLS), "no column entry");
    free(ptx);
    static const struct {
        int64_t ext[2], str[2][2]; /* the strides of x and w */
        const char *entry;
    } cases[] = {
        {{1024, 4096}, {{1, 1024}, {1, 1024}}, CG_PTX_ENTRY_COLS},       /* x * w summed over the batch */
        {{1000, 9000}, {{1, 1000}, {0, 1}}, CG_PTX_ENTRY_COLS},          /* w a [batch] vector */
        {{1024, 4096}, {{4096, 1}, {4096, 1}}, CG_PTX_ENTRY_ROWS_WARP},  /* rows along the reduced axis */
        {{1024, 4096}, {{1, 1024}, {4096, 1}}, CG_PTX_ENTRY_ROWS_WARP},  /* one of each */
        {{1024, 4096}, {{2, 2048}, {2, 2048}}, CG_PTX_ENTRY_ROWS_WARP},  /* every other column */
        {{1, 4096}, {{1, 1}, {1, 1}}, CG_PTX_ENTRY_ROWS_WARP},           /* a single row */
        {{3, 40000}, {{1, 3}, {1, 3}}, CG_PTX_ENTRY_LEAVES},             /* few long rows */
        {{20, 40000}, {{1, 20}, {1, 20}}, CG_PTX_ENTRY_COLS},            /* enough for 2 blocks */
    };
    for (size_t i = 0; i < COUNT(cases); i++) {
        launch_args la;
        contiguous_args(&k, &la, cases[i].ext);
        for (int s = 0; s < 2; s++)
            memcpy(la.in_str + 2 * s, cases[i].str[s], sizeof cases[i].str[s]);
        cg_ptx_options opt = {.sm = 90, .block = 128};
        cg_ptx_plan p;
        char why[256];
        cr_assert(plan(&k, &opt, &la, 1 << 20, &p, why, sizeof why), "%s", why);
        cr_assert_str_eq(p.launch[0].entry, cases[i].entry, "case %zu", i);
        if (!strcmp(cases[i].entry, CG_PTX_ENTRY_COLS)) {
            cr_assert_eq(p.n, 1);
            cr_assert_eq(p.launch[0].block[0], 8 * KIR_LANES, "the entry's block, whatever the options");
            cr_assert_eq(p.launch[0].grid[0], (cases[i].ext[0] + 7) / 8);
        }
    }
    /* autotune's row candidates choose the rows per block: 4 to 32 (1024 threads), and the
     * entry's shared memory fits at each (ptxas checks it where present) */
    static const int rpb[][2] = {{1, 4}, {2, 4}, {4, 4}, {8, 8}, {16, 16}, {31, 16}, {32, 32}};
    for (size_t i = 0; i < COUNT(rpb); i++) {
        cg_ptx_options opt = {.sm = 90, .rows_per_block = rpb[i][0]};
        cr_assert_eq(cg_ptx_cols(&opt), rpb[i][1], "rows_per_block %d", rpb[i][0]);
        launch_args la;
        contiguous_args(&k, &la, (int64_t[]){1000, 333});
        la.in_str[0] = la.in_str[2] = 1, la.in_str[1] = la.in_str[3] = 1000;
        cg_ptx_plan p;
        char why[256];
        cr_assert(plan(&k, &opt, &la, 0, &p, why, sizeof why), "%s", why);
        cr_assert_str_eq(p.launch[0].entry, CG_PTX_ENTRY_COLS);
        cr_assert_eq(p.launch[0].block[0], (uint32_t)rpb[i][1] * KIR_LANES);
        cr_assert_eq(p.launch[0].grid[0], (1000u + (uint32_t)rpb[i][1] - 1) / (uint32_t)rpb[i][1]);
        if (rpb[i][0] == rpb[i][1])
            free(gen_ptx(&k, &opt));
    }
    kir_free(&k);
    /* no reduced axis of runtime stride, or rows that never move: no column entry */
    static const char *none[][2] = {{"21", "20"}, {"02", "00"}};
    for (size_t i = 0; i < COUNT(none); i++) {
        kir_init(&k, 2, 1);
        int a = in_slot(&k, BURNC_DTYPE_F32, none[i][0]), r = out_slot(&k, BURNC_DTYPE_F32, none[i][1]);
        STORE(&k, r, REDUCED(&k, STAGE(&k, KIR_COMBINE_SUM, LD(&k, a))), true);
        snprintf(k.name, sizeof k.name, "rows_%zu", i);
        cr_assert(!cg_ptx_has_cols(&k), "%s", none[i][0]);
        ptx = gen_ptx(&k, NULL);
        cr_assert(!strstr(ptx, ".entry " CG_PTX_ENTRY_COLS), "%s: a column entry", none[i][0]);
        free(ptx);
        kir_free(&k);
    }
    BT_LEAK_CHECK();
}

/* Stages whose values use no result of one another share the column entry's pass, two at most
 * and one at 32 rows a block (their leaf stacks share static shared memory); a stage that reads
 * an earlier one's result starts a pass. Element stores that use a result of the last pass wait
 * for it (the block's threads times 4). */
Test(ptx, columns_one_pass)
{
    for (int dep = 0; dep < 3; dep++) {
        kir_kernel k;
        kir_init(&k, 2, 1);
        int x = in_slot(&k, BURNC_DTYPE_F32, "22"), w = in_slot(&k, BURNC_DTYPE_F32, "22");
        int o1 = out_slot(&k, BURNC_DTYPE_F32, "20"), o2 = out_slot(&k, BURNC_DTYPE_F32, "20");
        int og = out_slot(&k, BURNC_DTYPE_F32, "22");
        int32_t g = OP2(&k, KIR_MUL, KIR_F32, LD(&k, x), LD(&k, w));
        int32_t r1 = REDUCED(&k, STAGE(&k, KIR_COMBINE_SUM, g));
        int32_t v2 = dep == 1 ? OP2(&k, KIR_SUB, KIR_F32, LD(&k, x), r1) : OP2(&k, KIR_MUL, KIR_F32, g, LD(&k, x));
        int32_t r2 = REDUCED(&k, STAGE(&k, KIR_COMBINE_MAX, v2));
        STORE(&k, o1, r1, true);
        STORE(&k, o2, r2, true);
        STORE(&k, og, dep == 2 ? OP2(&k, KIR_MUL, KIR_F32, g, r1) : g, false);
        snprintf(k.name, sizeof k.name, "passes_%d", dep);
        bool uses[CG_PTX_MULTIPASS_MAX_INSTS];
        cr_assert_eq(cg_ptx_cols_pass(&k, 0, 8, uses), dep == 1 ? 1 : 2, "kernel %d", dep);
        cr_assert_eq(cg_ptx_cols_pass(&k, 0, 32, uses), 1);
        cr_assert_eq(cg_ptx_cols_pass(&k, 1, 8, uses), 1);
        cr_assert_eq(cg_ptx_cols_pass_stores(&k, 8), dep != 2, "kernel %d", dep);
        cr_assert_eq(cg_ptx_cols_pass_stores(&k, 32), true, "kernel %d: the last stage alone", dep);
        cg_ptx_options o8 = {.sm = 90, .rows_per_block = 8}, o32 = {.sm = 90, .rows_per_block = 32};
        cr_assert_eq(cg_ptx_cols_threads(&k, &o8), dep == 2 ? 4 * 8 * KIR_LANES : 8 * KIR_LANES);
        free(gen_ptx(&k, &o8));
        snprintf(k.name, sizeof k.name, "passes_%d_c32", dep);
        free(gen_ptx(&k, &o32));
        kir_free(&k);
    }
    BT_LEAK_CHECK();
}

/* A value stored at every position and used by the stages (a GELU kept for backward and summed
 * for a bias): the warp-per-row entry stores it first and reads it back (plain ld.global, the
 * only loads not through the non-coherent path) instead of evaluating it per phase; a cheap
 * value, or one written to an output of a narrower type, is evaluated again. The column entry
 * stores it in its stage's pass, a lane a row at a time (its block: the lanes), unless the
 * stored value uses the stage's result (variant 3): then every thread of 4 a lane stores after
 * the stage. */
Test(ptx, early_stores_read_back)
{
    for (int variant = 0; variant < 4; variant++) {
        kir_kernel k;
        kir_init(&k, 2, 1);
        int x = in_slot(&k, BURNC_DTYPE_F32, "12");
        int g = out_slot(&k, variant == 2 ? BURNC_DTYPE_BF16 : BURNC_DTYPE_F32, "12"),
            o = out_slot(&k, BURNC_DTYPE_F32, "10");
        int32_t v = LD(&k, x);
        if (variant != 1)
            v = kir_exp(&k, v); /* dozens of instructions */
        int32_t w = OP2(&k, KIR_MUL, KIR_F32, v, LD(&k, x)), red = REDUCED(&k, STAGE(&k, KIR_COMBINE_SUM, w));
        STORE(&k, o, red, true);
        STORE(&k, g, variant == 3 ? OP2(&k, KIR_MUL, KIR_F32, v, red) : v, false);
        snprintf(k.name, sizeof k.name, "early_%d", variant);
        char *ptx = gen_ptx(&k, NULL);
        static const char *const entries[] = {CG_PTX_ENTRY_ROWS_WARP, CG_PTX_ENTRY_COLS};
        for (size_t e = 0; e < COUNT(entries); e++) {
            char head[64];
            snprintf(head, sizeof head, ".entry %s(", entries[e]);
            char *at = strstr(ptx, head);
            cr_assert(at, "%s: no %s", k.name, entries[e]);
            char *next = strstr(at + 1, ".entry"), keep = 0;
            if (next)
                keep = *next, *next = 0;
            bool plain = strstr(at, "ld.global.f32") != NULL;
            /* the threads of the default 8 rows: ptxas must fit them, or the launch fails */
            const char *maxntid = e == 0 ? NULL : variant == 3 ? ".maxntid 1024" : ".maxntid 256";
            cr_assert(!maxntid || strstr(at, maxntid), "%s: no %s on the column entry", k.name, maxntid);
            if (next)
                *next = keep;
            cr_assert_eq(plain, variant == 0 && e == 0, "%s, %s: read back %d", k.name, entries[e], plain);
        }
        free(ptx);
        /* element stores after the stage: the column entry takes 4 threads a lane, up to 1024 */
        static const int rpb_pass[][2] = {{4, 128}, {8, 256}, {32, 1024}}, rpb_late[][2] = {{4, 512}, {8, 1024}, {32, 1024}};
        const int(*rpb)[2] = variant == 3 ? rpb_late : rpb_pass;
        for (size_t i = 0; i < COUNT(rpb_pass); i++) {
            cg_ptx_options opt = {.sm = 90, .rows_per_block = rpb[i][0]};
            launch_args la;
            contiguous_args(&k, &la, (int64_t[]){100, 300});
            la.in_str[0] = la.out_str[0] = 1, la.in_str[1] = la.out_str[1] = 100;
            cg_ptx_plan p;
            char why[256];
            cr_assert(plan(&k, &opt, &la, 0, &p, why, sizeof why), "%s", why);
            cr_assert_str_eq(p.launch[0].entry, CG_PTX_ENTRY_COLS);
            cr_assert_eq(p.launch[0].block[0], (uint32_t)rpb[i][1], "rows_per_block %d", rpb[i][0]);
            cr_assert_eq(p.launch[0].grid[0], (100u + (uint32_t)rpb[i][0] - 1) / (uint32_t)rpb[i][0]);
        }
        kir_free(&k);
    }
    BT_LEAK_CHECK();
}

Test(ptx, plan_refuses_past_grid_limits)
{
    kir_kernel k;
    ew_kernel(&k, BURNC_DTYPE_F32, "1", "1", 1);
    launch_args la;
    cg_ptx_plan p;
    char why[256] = "";
    cg_ptx_options o = {.sm = 90};
    int64_t n = INT64_C(1) << 43;
    contiguous_args(&k, &la, &n);
    cr_assert(!plan(&k, &o, &la, 0, &p, why, sizeof why));
    cr_assert(strstr(why, "grid limit") && strstr(why, "8796093022208") && strstr(why, k.name), "why: %s", why);
    n = 0; /* and an empty domain launches nothing */
    contiguous_args(&k, &la, &n);
    cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why) && p.n == 0);
    n = -1;
    contiguous_args(&k, &la, &n);
    cr_assert(!plan(&k, &o, &la, 0, &p, why, sizeof why));
    cr_assert(strstr(why, "negative extent -1"), "why: %s", why);
    kir_free(&k);

    softmax_kernel(&k, BURNC_DTYPE_F32);
    int64_t block_rows[2] = {INT64_C(1) << 31, 5000}, warp_rows[2] = {INT64_C(1) << 40, 10};
    contiguous_args(&k, &la, block_rows);
    cr_assert(!plan(&k, &o, &la, 0, &p, why, sizeof why));
    cr_assert(strstr(why, "2147483648 rows") && strstr(why, "grid limit"), "why: %s", why);
    contiguous_args(&k, &la, warp_rows);
    cr_assert(!plan(&k, &o, &la, 0, &p, why, sizeof why));
    cr_assert(strstr(why, "grid limit"), "why: %s", why);
    int64_t fine[2] = {(INT64_C(1) << 31) - 1, 5000};
    contiguous_args(&k, &la, fine);
    cr_assert(plan(&k, &o, &la, 0, &p, why, sizeof why), "%s", why);
    cr_assert_eq(p.launch[0].grid[0], (uint32_t)((INT64_C(1) << 31) - 1));
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* ---- On a GPU: the row entries against the cpu device ------------------------------------------ */

/* op 0 softmax, 1 log_softmax, 2 layer_norm over the last axis of x (rows x n, from data); view
 * 1 takes columns [1, n + 1) of a rows x (n + 1) tensor (rows not 16-byte aligned: the
 * element-wise copy), view 2 the transpose of an n x rows tensor (strided rows). */
static void row_op(burnc_device_t *dev, const float *data, int64_t rows, int64_t n, int op, int view, float *out)
{
    burnc_scope_begin();
    burnc_tensor_t *x;
    if (view == 1) {
        x = burnc_slice(bt_f32(dev, 2, (int64_t[]){rows, n + 1}, data), 1, 1, n + 1, 1);
    } else if (view == 2) {
        x = burnc_transpose(bt_f32(dev, 2, (int64_t[]){n, rows}, data), 0, 1);
    } else
        x = bt_f32(dev, 2, (int64_t[]){rows, n}, data);
    burnc_tensor_t *y = op == 0 ? burnc_softmax(x, 1) : op == 1 ? burnc_log_softmax(x, 1) : burnc_layer_norm(x, 1, 1e-5);
    bt_read_f32(BT_NOT_NULL(y), out, rows * n);
    burnc_scope_end();
}

/* The shared-memory row entry (16-byte and element copies, values kept over the row they came
 * from, rows of up to 64 KB) and the block entry past it give the cpu device's bits. */
Test(ptx, gpu_rows_match_cpu)
{
    burnc_device_t *gpu = burnc_device_open("cuda:0");
    if (!gpu && burnc_error_code() == BURNC_ERR_UNAVAILABLE)
        cr_skip_test("cuda:0 is not available: %s", burnc_error_message());
    cr_assert_not_null(gpu, "cuda:0: %s", burnc_error_message());
    burnc_device_t *cpu = burnc_device_open("cpu");
    if (!cpu) {
        burnc_device_release(gpu);
        cr_skip_test("cpu is not available to compare with: %s", burnc_error_message());
    }
    static const int64_t shapes[][2] = {{37, 8192}, {5, 4100}, {3, 6001}, {4, 16384}, {2, 16388}, {9, 4097}};
    /* zeros 1: rows of values <= 0 with zeros of both signs, so the row max is a zero and the
     * shared-memory row entry redoes the max in kernel.h's order (its tie decides the sign) */
    for (int zeros = 0; zeros < 2; zeros++) {
        for (size_t s = 0; s < COUNT(shapes); s++)
            for (int op = 0; op < 3; op++)
                for (int view = 0; view < 3; view++) {
                    if (zeros && (op == 2 || s >= 3))
                        continue;
                    int64_t rows = shapes[s][0], n = shapes[s][1], total = rows * (n + 1);
                    float *data = malloc((size_t)total * sizeof *data), *a = malloc((size_t)(rows * n) * sizeof *a),
                          *b = malloc((size_t)(rows * n) * sizeof *b);
                    cr_assert(data && a && b);
                    uint64_t st = 0x9e3779b97f4a7c15u * (s * 9 + (size_t)op * 3 + (size_t)view + 1);
                    for (int64_t i = 0; i < total; i++) {
                        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
                        data[i] = (float)((double)(st >> 11) * 0x1p-53 * 16 - 8);
                        if (zeros)
                            data[i] = st % 5 == 0 ? (st & 8 ? 0.0f : -0.0f) : -fabsf(data[i]);
                    }
                    data[3] = -0.0f, data[4] = 0.0f; /* a signed-zero tie for the max */
                    row_op(gpu, data, rows, n, op, view, a);
                    row_op(cpu, data, rows, n, op, view, b);
                    for (int64_t i = 0; i < rows * n; i++)
                        cr_assert(!memcmp(&a[i], &b[i], sizeof *a),
                                  "%lld x %lld, op %d, view %d, zeros %d: element %lld is %a on cuda:0, %a on cpu",
                                  (long long)rows, (long long)n, op, view, zeros, (long long)i, (double)a[i],
                                  (double)b[i]);
                    free(data), free(a), free(b);
                }
    }
    burnc_device_release(cpu);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

/* Reductions over axis 0 of x [n, m] (the column entry, or the multi-pass one for few long
 * columns): op 0 sum of x * w (burnc-bench's colsum), 1 softmax (two stages and element
 * stores), 2 argmax (positions), 3 mean and variance through a strided view (x transposed
 * back, so the rows are contiguous and the columns are not: the row entries); 4 and 5 a GELU
 * kept as an output and summed times x over axis 0 (the column entry, which stores it in its
 * stage's pass) or 1 (the warp-per-row entry for rows of a leaf or less, whose stage reads the
 * GELU back: early_stores); 6 a GELU kept and summed over axis 0 alone and times x (two
 * stages in one pass of the column entry, LayerNorm's weight and bias gradients); 7 x over
 * the sum plus the maximum of its column (two stages in one pass, element stores after them).
 * Returns the floats written to out. */
static int64_t col_op(burnc_device_t *dev, const float *data, int64_t n, int64_t m, int op, float *out)
{
    burnc_scope_begin();
    burnc_tensor_t *x = bt_f32(dev, 2, (int64_t[]){n, m}, data), *y;
    if (op == 6) {
        burnc_tensor_t *g = burnc_gelu(burnc_mul(x, bt_f32(dev, 2, (int64_t[]){n, m}, data + n * m)));
        burnc_tensor_t *s1 = burnc_sum(g, 1, (int[]){0}, false), *s2 = burnc_sum(burnc_mul(g, x), 1, (int[]){0}, false);
        bt_read_f32(BT_NOT_NULL(s1), out, m);
        bt_read_f32(BT_NOT_NULL(s2), out + m, m);
        bt_read_f32(BT_NOT_NULL(g), out + 2 * m, n * m);
        burnc_scope_end();
        return 2 * m + n * m;
    }
    if (op == 7) {
        burnc_tensor_t *d = burnc_add(burnc_sum(x, 1, (int[]){0}, true), burnc_max(x, 1, (int[]){0}, true));
        bt_read_f32(BT_NOT_NULL(burnc_div(x, d)), out, n * m);
        burnc_scope_end();
        return n * m;
    }
    if (op >= 4) {
        burnc_tensor_t *g = burnc_gelu(burnc_mul(x, bt_f32(dev, 2, (int64_t[]){n, m}, data + n * m)));
        y = burnc_sum(burnc_mul(g, x), 1, (int[]){op == 4 ? 0 : 1}, false);
        bt_read_f32(BT_NOT_NULL(y), out, op == 4 ? m : n);
        bt_read_f32(BT_NOT_NULL(g), out + (op == 4 ? m : n), n * m);
        burnc_scope_end();
        return (op == 4 ? m : n) + n * m;
    }
    if (op == 0)
        y = burnc_sum(burnc_mul(x, bt_f32(dev, 2, (int64_t[]){n, m}, data + n * m)), 1, (int[]){0}, false);
    else if (op == 1)
        y = burnc_softmax(x, 0);
    else if (op == 2)
        y = burnc_cast(burnc_argmax(x, 0, false), BURNC_DTYPE_F32);
    else {
        burnc_tensor_t *t = burnc_transpose(bt_f32(dev, 2, (int64_t[]){m, n}, data), 0, 1);
        y = burnc_var(t, 1, (int[]){0}, 1.0, false);
    }
    bt_read_f32(BT_NOT_NULL(y), out, op == 1 ? n * m : m);
    burnc_scope_end();
    return op == 1 ? n * m : m;
}

Test(ptx, gpu_columns_match_cpu)
{
    burnc_device_t *gpu = burnc_device_open("cuda:0");
    if (!gpu && burnc_error_code() == BURNC_ERR_UNAVAILABLE)
        cr_skip_test("cuda:0 is not available: %s", burnc_error_message());
    cr_assert_not_null(gpu, "cuda:0: %s", burnc_error_message());
    burnc_device_t *cpu = burnc_device_open("cpu");
    if (!cpu) {
        burnc_device_release(gpu);
        cr_skip_test("cpu is not available to compare with: %s", burnc_error_message());
    }
    /* one leaf, a partial block of columns, several leaves with a partial last one, few long
     * columns (multi-pass), one column */
    static const int64_t shapes[][2] = {{4096, 1024}, {33, 7}, {9000, 13}, {5000, 100}, {40000, 3}, {4097, 1}};
    for (size_t s = 0; s < COUNT(shapes); s++)
        for (int op = 0; op < 8; op++) {
            int64_t n = shapes[s][0], m = shapes[s][1], total = 2 * n * m;
            float *data = malloc((size_t)total * sizeof *data), *a = malloc((size_t)(n * m + n + m) * sizeof *a),
                  *b = malloc((size_t)(n * m + n + m) * sizeof *b);
            cr_assert(data && a && b);
            uint64_t st = 0x9e3779b97f4a7c15u * (s * 8 + (size_t)op + 1);
            for (int64_t i = 0; i < total; i++) {
                st ^= st << 13, st ^= st >> 7, st ^= st << 17;
                data[i] = (float)((double)(st >> 11) * 0x1p-53 * 16 - 8);
            }
            data[m] = data[0]; /* a tie for argmax: the first position wins */
            int64_t got = col_op(gpu, data, n, m, op, a);
            cr_assert_eq(col_op(cpu, data, n, m, op, b), got);
            for (int64_t i = 0; i < got; i++)
                cr_assert(!memcmp(&a[i], &b[i], sizeof *a), "%lld x %lld, op %d: element %lld is %a on cuda:0, %a on cpu",
                          (long long)n, (long long)m, op, (long long)i, (double)a[i], (double)b[i]);
            free(data), free(a), free(b);
        }
    burnc_device_release(cpu);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

/* The broadcast chain of burnc-bench (x [r, n] with [n] and [r, 1] operands) and a unary op:
 * kernels with one streamed input, 8 positions per thread by default (cg_ptx_default_items),
 * on the innermost path (n a multiple of 8), the general one (n = 8k + 4) and the fast path with
 * a partial last thread. */
static void ew_ops(burnc_device_t *dev, const float *data, int64_t r, int64_t n, float *out)
{
    burnc_scope_begin();
    burnc_tensor_t *x = bt_f32(dev, 2, (int64_t[]){r, n}, data), *a = bt_f32(dev, 1, (int64_t[]){n}, data + r * n),
                   *b = bt_f32(dev, 1, (int64_t[]){n}, data + r * n + n),
                   *c = bt_f32(dev, 2, (int64_t[]){r, 1}, data + r * n + 2 * n),
                   *d = bt_f32(dev, 2, (int64_t[]){r, 1}, data + r * n + 2 * n + r);
    burnc_tensor_t *t = burnc_mul(burnc_sub(burnc_add(burnc_mul(x, a), c), b), d);
    t = burnc_add(burnc_abs(burnc_sub(burnc_mul_scalar(burnc_add(burnc_maximum(t, a), x), 0.5), c)), b);
    bt_read_f32(BT_NOT_NULL(t), out, r * n);
    bt_read_f32(BT_NOT_NULL(burnc_exp(x)), out + r * n, r * n);
    burnc_scope_end();
}

Test(ptx, gpu_elementwise_match_cpu)
{
    burnc_device_t *gpu = burnc_device_open("cuda:0");
    if (!gpu && burnc_error_code() == BURNC_ERR_UNAVAILABLE)
        cr_skip_test("cuda:0 is not available: %s", burnc_error_message());
    cr_assert_not_null(gpu, "cuda:0: %s", burnc_error_message());
    burnc_device_t *cpu = burnc_device_open("cpu");
    if (!cpu) {
        burnc_device_release(gpu);
        cr_skip_test("cpu is not available to compare with: %s", burnc_error_message());
    }
    static const int64_t shapes[][2] = {{33, 1000}, {7, 1004}, {5, 4096}, {3, 100003}};
    for (size_t s = 0; s < COUNT(shapes); s++) {
        int64_t r = shapes[s][0], n = shapes[s][1], total = r * n + 2 * n + 2 * r;
        float *data = malloc((size_t)total * sizeof *data), *a = malloc((size_t)(2 * r * n) * sizeof *a),
              *b = malloc((size_t)(2 * r * n) * sizeof *b);
        cr_assert(data && a && b);
        uint64_t st = 0x9e3779b97f4a7c15u * (s + 1);
        for (int64_t i = 0; i < total; i++) {
            st ^= st << 13, st ^= st >> 7, st ^= st << 17;
            data[i] = (float)((double)(st >> 11) * 0x1p-53 * 8 - 4);
        }
        ew_ops(gpu, data, r, n, a);
        ew_ops(cpu, data, r, n, b);
        for (int64_t i = 0; i < 2 * r * n; i++)
            cr_assert(!memcmp(&a[i], &b[i], sizeof *a), "%lld x %lld: element %lld is %a on cuda:0, %a on cpu",
                      (long long)r, (long long)n, (long long)i, (double)a[i], (double)b[i]);
        free(data), free(a), free(b);
    }
    burnc_device_release(cpu);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}
