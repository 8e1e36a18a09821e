/* ptx_probe: a one-off check that ir/kernel.h maps onto an NVIDIA GPU (issue 3, item 1).
 *
 * Builds kernels of the kernel IR's two shapes by hand through the LLVM-C API for NVPTX (sm_90,
 * PTX 8.5), in several variants each, runs them through the CUDA driver API (libcuda.so.1 opened
 * with dlopen) and checks them against the host:
 *   - element-wise  y = gelu(x) * w + b  over 2^28 f32 (gelu in the erf form, erf by a small
 *     rational approximation written out of add/mul/fma/div), naive and vectorized variants;
 *     bitwise against the same op sequence in f32 on the host, and against f64;
 *   - row sum of 16384 x 8192 f32 in kernel.h's order (leaves of 4096 positions, lane = j % 32,
 *     each lane in increasing position order, pairwise tree over lanes, then over leaves),
 *     bitwise against a host computation of that order, and against f64; the leaf tree by one
 *     thread per row or by passes of 32 (tree32) that let one long row use the whole GPU.
 * Times every variant with CUDA events (median after warm-up) against cuMemcpyDtoD of the same
 * size in the same run and prints a table at the end.
 *
 * Usage: ptx_probe [--selftest] [--ptx FILE] [--ll FILE] [--seed N] [--no-gpu]
 * Without a CUDA driver it stops after writing the PTX (useful here, where ptxas checks it). */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h> /* types and enums only: the driver is opened with dlopen */
#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

/* kernel.h's reduction constants, repeated so the probe builds on its own. */
enum { LEAF = 4096, LANES = 32, PER_LANE = LEAF / LANES };

/* ---- the element-wise function, defined once for the host in f32 and f64 ------------------ */

/* erf(t) ~ sign(t) * (1 - 1 / (1 + a1|t| + a2 t^2 + a3 |t|^3 + a4 t^4)^4): a classic rational
 * form with max error ~5e-4, enough for a probe that is about order and bandwidth. */
static const float SQRT2F = 1.41421356237309505f;
static const float A1F = 0.278393f, A2F = 0.230389f, A3F = 0.000972f, A4F = 0.078108f;

static float gelu_f32(float x)
{
    float t = x / SQRT2F;
    float ax = fabsf(t);
    float p = fmaf(A4F, ax, A3F);
    p = fmaf(p, ax, A2F);
    p = fmaf(p, ax, A1F);
    p = fmaf(p, ax, 1.0f);
    float p2 = p * p;
    float p4 = p2 * p2;
    float r = 1.0f / p4;
    float e = copysignf(1.0f - r, t);
    float u = e + 1.0f;
    float v = x * u;
    return v / 2.0f;
}

static float ew_f32(float x, float w, float b)
{
    float m = gelu_f32(x) * w;
    return m + b;
}

/* The same function (same coefficients) in f64: measures the f32 rounding, not erf's error. */
static double ew_f64(double x, double w, double b)
{
    double t = x / (double)SQRT2F, ax = fabs(t);
    double p = fma(fma(fma(fma((double)A4F, ax, (double)A3F), ax, (double)A2F), ax, (double)A1F), ax, 1.0);
    double p4 = (p * p) * (p * p);
    double e = copysign(1.0 - 1.0 / p4, t);
    return x * (e + 1.0) / 2.0 * w + b;
}

/* ---- the reduction order of kernel.h, on the host in f32 ---------------------------------- */

/* Pairwise tree in place: level w pairs element i with i + w for i a multiple of 2w; an odd
 * last element is carried up unchanged. */
static float tree_inplace(float *v, size_t n)
{
    for (size_t w = 1; w < n; w *= 2)
        for (size_t i = 0; i + w < n; i += 2 * w)
            v[i] = v[i] + v[i + w];
    return v[0];
}

static float leaf_ref(const float *x, size_t len)
{
    float lane[LANES] = {0};
    for (size_t j = 0; j < len; j++)
        lane[j % LANES] += x[j];
    return tree_inplace(lane, LANES);
}

static float row_ref(const float *x, size_t n, float *leaves)
{
    size_t nl = (n + LEAF - 1) / LEAF;
    for (size_t l = 0; l < nl; l++) {
        size_t len = n - l * LEAF < LEAF ? n - l * LEAF : LEAF;
        leaves[l] = leaf_ref(x + l * LEAF, len);
    }
    return tree_inplace(leaves, nl);
}

/* ---- small utilities ----------------------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)((splitmix(s) >> 40) * 0x1p-24);
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void die(const char *fmt, ...);

/* A parallel for over [0, n) in contiguous chunks; the host side of the checks is 2^28 wide. */
typedef void (*range_fn)(void *ctx, size_t lo, size_t hi, int part);
typedef struct par_job {
    range_fn fn;
    void *ctx;
    size_t lo, hi;
    int part;
} par_job;

static void *par_main(void *p)
{
    par_job *j = p;
    j->fn(j->ctx, j->lo, j->hi, j->part);
    return NULL;
}

enum { MAX_PARTS = 64 };

static int par_parts(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_PARTS ? MAX_PARTS : (int)n;
}

static void par_for(size_t n, range_fn fn, void *ctx)
{
    int parts = par_parts();
    pthread_t th[MAX_PARTS];
    par_job jobs[MAX_PARTS];
    for (int p = 0; p < parts; p++) {
        jobs[p] = (par_job){fn, ctx, n * p / parts, n * (p + 1) / parts, p};
        if (pthread_create(&th[p], NULL, par_main, &jobs[p]) != 0)
            die("pthread_create failed");
    }
    for (int p = 0; p < parts; p++)
        pthread_join(th[p], NULL);
}

/* Fills in chunks seeded by chunk index, so the data does not depend on the thread count. */
typedef struct fill_ctx {
    float *x;
    uint64_t seed;
    float lo, hi;
} fill_ctx;

enum { FILL_CHUNK = 1 << 16 };

static void fill_range(void *p, size_t lo, size_t hi, int part)
{
    (void)part;
    fill_ctx *c = p;
    for (size_t ch = lo; ch < hi; ch++) {
        uint64_t s = c->seed ^ (ch * 0x632be59bd9b4e019ull);
        for (size_t i = ch * FILL_CHUNK; i < (ch + 1) * FILL_CHUNK; i++)
            c->x[i] = uniform(&s, c->lo, c->hi);
    }
}

static void fill(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    fill_ctx c = {x, seed, lo, hi};
    size_t chunks = n / FILL_CHUNK;
    par_for(chunks, fill_range, &c);
    uint64_t s = seed ^ 0xfeedull;
    for (size_t i = chunks * FILL_CHUNK; i < n; i++)
        x[i] = uniform(&s, lo, hi);
}

/* ---- results table -------------------------------------------------------------------------- */

typedef struct result {
    char name[48], check[72];
    double ms, gbs, of_copy;
    int regs, local;
} result;

static result g_res[64];
static int g_nres;

static void add_result(const char *name, double ms, double bytes, double copy_gbs, const char *check,
                       int regs, int local)
{
    if (g_nres == 64)
        return;
    result *r = &g_res[g_nres++];
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->check, sizeof r->check, "%s", check);
    r->ms = ms;
    r->gbs = ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0;
    r->of_copy = copy_gbs > 0 ? r->gbs / copy_gbs : 0;
    r->regs = regs;
    r->local = local;
}

static void print_table(void)
{
    if (!g_nres)
        return;
    printf("\n%-38s %9s %9s %7s %5s %5s  %s\n", "variant", "ms(med)", "GB/s", "/copy", "regs", "lmem",
           "check");
    for (int i = 0; i < g_nres; i++) {
        result *r = &g_res[i];
        printf("%-38s %9.4f %9.1f %7.3f %5d %5d  %s\n", r->name, r->ms, r->gbs, r->of_copy, r->regs,
               r->local, r->check);
    }
    fflush(stdout);
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "FATAL: ");
    vfprintf(stdout, fmt, ap);
    fprintf(stdout, "\n");
    va_end(ap);
    print_table();
    exit(1);
}

/* ---- LLVM: building the kernels --------------------------------------------------------------- */

typedef struct gen {
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMTypeRef f32, i32, i64, i1, v4, gptr, vd;
} gen;

static LLVMValueRef ci64(gen *g, long long v) { return LLVMConstInt(g->i64, (unsigned long long)v, 1); }
static LLVMValueRef ci32(gen *g, int v) { return LLVMConstInt(g->i32, (unsigned long long)(long long)v, 1); }

/* An f32 constant of type t (f32 or <4 x float>); v is already an f32 value, so exact. */
static LLVMValueRef cf(gen *g, LLVMTypeRef t, float v)
{
    LLVMValueRef s = LLVMConstReal(g->f32, v);
    if (t == g->f32)
        return s;
    LLVMValueRef e[4] = {s, s, s, s};
    return LLVMConstVector(e, 4);
}

static LLVMValueRef call_intr(gen *g, const char *name, LLVMTypeRef overload, LLVMValueRef *args, unsigned n)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    if (!id)
        die("LLVM 19 does not know the intrinsic %s", name);
    LLVMTypeRef ov[1] = {overload};
    unsigned nov = overload ? 1 : 0;
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(g->mod, id, ov, nov);
    LLVMTypeRef ft = LLVMIntrinsicGetType(g->ctx, id, ov, nov);
    return LLVMBuildCall2(g->b, ft, fn, args, n, "");
}

static LLVMValueRef sreg(gen *g, const char *which)
{
    char name[64];
    snprintf(name, sizeof name, "llvm.nvvm.read.ptx.sreg.%s", which);
    return LLVMBuildZExt(g->b, call_intr(g, name, NULL, NULL, 0), g->i64, which);
}

/* Global thread index: ctaid.x * ntid.x + tid.x, in i64 (domains exceed 2^31 elements). */
static LLVMValueRef global_id(gen *g)
{
    LLVMValueRef t = LLVMBuildNUWMul(g->b, sreg(g, "ctaid.x"), sreg(g, "ntid.x"), "");
    return LLVMBuildNUWAdd(g->b, t, sreg(g, "tid.x"), "gid");
}

static LLVMValueRef shfl_bfly(gen *g, LLVMValueRef v, int lane_mask)
{
    LLVMValueRef a[4] = {LLVMConstInt(g->i32, 0xffffffffu, 0), v, ci32(g, lane_mask), ci32(g, 0x1f)};
    return call_intr(g, "llvm.nvvm.shfl.sync.bfly.f32", NULL, a, 4);
}

static LLVMValueRef fma3(gen *g, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
    LLVMValueRef args[3] = {a, b, c};
    return call_intr(g, "llvm.fma", LLVMTypeOf(a), args, 3);
}

static LLVMValueRef gep(gen *g, LLVMValueRef p, LLVMValueRef idx)
{
    return LLVMBuildInBoundsGEP2(g->b, g->f32, p, &idx, 1, "");
}

static LLVMValueRef load(gen *g, LLVMTypeRef t, LLVMValueRef p, unsigned align)
{
    LLVMValueRef v = LLVMBuildLoad2(g->b, t, p, "");
    LLVMSetAlignment(v, align);
    return v;
}

static void store(gen *g, LLVMValueRef v, LLVMValueRef p, unsigned align)
{
    LLVMSetAlignment(LLVMBuildStore(g->b, v, p), align);
}

static LLVMValueRef smin(gen *g, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, a, b, ""), a, b, "");
}

static LLVMBasicBlockRef new_block(gen *g, const char *name)
{
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(g->b));
    return LLVMAppendBasicBlockInContext(g->ctx, fn, name);
}

/* A loop `for (iv = start; iv < end (signed); iv = next)` with loop-carried values. After
 * loop_end the builder sits in the exit block, where iv and v[] hold the final values. */
typedef struct loop {
    LLVMBasicBlockRef head, exit;
    LLVMValueRef iv;
    int n;
    LLVMValueRef v[8];
} loop;

static void loop_begin(gen *g, loop *L, LLVMValueRef start, LLVMValueRef end, int n, const LLVMValueRef *init)
{
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
    L->head = new_block(g, "head");
    LLVMBasicBlockRef body = new_block(g, "body");
    L->exit = new_block(g, "exit");
    LLVMBuildBr(g->b, L->head);
    LLVMPositionBuilderAtEnd(g->b, L->head);
    L->iv = LLVMBuildPhi(g->b, g->i64, "iv");
    LLVMAddIncoming(L->iv, &start, &pre, 1);
    L->n = n;
    for (int k = 0; k < n; k++) {
        L->v[k] = LLVMBuildPhi(g->b, LLVMTypeOf(init[k]), "");
        LLVMValueRef iv = init[k];
        LLVMAddIncoming(L->v[k], &iv, &pre, 1);
    }
    LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, L->iv, end, ""), body, L->exit);
    LLVMPositionBuilderAtEnd(g->b, body);
}

static void loop_end(gen *g, loop *L, LLVMValueRef next_iv, const LLVMValueRef *next)
{
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->b);
    LLVMAddIncoming(L->iv, &next_iv, &latch, 1);
    for (int k = 0; k < L->n; k++) {
        LLVMValueRef v = next[k];
        LLVMAddIncoming(L->v[k], &v, &latch, 1);
    }
    LLVMBuildBr(g->b, L->head);
    LLVMPositionBuilderAtEnd(g->b, L->exit);
}

/* `if (cond) return;` */
static void return_if(gen *g, LLVMValueRef cond)
{
    LLVMBasicBlockRef ret = new_block(g, "ret"), cont = new_block(g, "cont");
    LLVMBuildCondBr(g->b, cond, ret, cont);
    LLVMPositionBuilderAtEnd(g->b, ret);
    LLVMBuildRetVoid(g->b);
    LLVMPositionBuilderAtEnd(g->b, cont);
}

static void add_attr(gen *g, LLVMValueRef fn, unsigned idx, const char *name)
{
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    LLVMAddAttributeAtIndex(fn, idx, LLVMCreateEnumAttribute(g->ctx, kind, 0));
}

/* A kernel (PTX calling convention) taking n_ptr global pointers then n_i64 i64 values. Every
 * pointer is noalias; those in ro_mask are also readonly, which lets NVPTX use ld.global.nc. */
static LLVMValueRef kernel_begin(gen *g, const char *name, int n_ptr, unsigned ro_mask, int n_i64)
{
    LLVMTypeRef ps[8];
    for (int i = 0; i < n_ptr + n_i64; i++)
        ps[i] = i < n_ptr ? g->gptr : g->i64;
    LLVMValueRef fn = LLVMAddFunction(g->mod, name, LLVMFunctionType(g->vd, ps, (unsigned)(n_ptr + n_i64), 0));
    LLVMSetFunctionCallConv(fn, LLVMPTXKernelCallConv);
    add_attr(g, fn, LLVMAttributeFunctionIndex, "nounwind");
    for (int i = 0; i < n_ptr; i++) {
        add_attr(g, fn, (unsigned)i + 1, "noalias");
        add_attr(g, fn, (unsigned)i + 1, "nocapture");
        if (ro_mask & (1u << i))
            add_attr(g, fn, (unsigned)i + 1, "readonly");
    }
    LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->ctx, fn, "entry"));
    return fn;
}

/* gelu(x) = x * (erf(x / sqrt2) + 1) / 2, every op rounded, fma only where written. */
static LLVMValueRef emit_gelu(gen *g, LLVMValueRef x)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMBuilderRef b = g->b;
    LLVMValueRef s = LLVMBuildFDiv(b, x, cf(g, t, SQRT2F), "");
    LLVMValueRef ax = call_intr(g, "llvm.fabs", t, &s, 1);
    LLVMValueRef p = fma3(g, cf(g, t, A4F), ax, cf(g, t, A3F));
    p = fma3(g, p, ax, cf(g, t, A2F));
    p = fma3(g, p, ax, cf(g, t, A1F));
    p = fma3(g, p, ax, cf(g, t, 1.0f));
    LLVMValueRef p2 = LLVMBuildFMul(b, p, p, "");
    LLVMValueRef p4 = LLVMBuildFMul(b, p2, p2, "");
    LLVMValueRef r = LLVMBuildFDiv(b, cf(g, t, 1.0f), p4, "");
    LLVMValueRef e1 = LLVMBuildFSub(b, cf(g, t, 1.0f), r, "");
    LLVMValueRef cs[2] = {e1, s};
    LLVMValueRef e = call_intr(g, "llvm.copysign", t, cs, 2);
    LLVMValueRef u = LLVMBuildFAdd(b, e, cf(g, t, 1.0f), "");
    LLVMValueRef v = LLVMBuildFMul(b, x, u, "");
    return LLVMBuildFDiv(b, v, cf(g, t, 2.0f), "");
}

static LLVMValueRef emit_ew(gen *g, LLVMValueRef x, LLVMValueRef w, LLVMValueRef bb)
{
    return LLVMBuildFAdd(g->b, LLVMBuildFMul(g->b, emit_gelu(g, x), w, ""), bb, "");
}

/* ew_naive(x, w, b, y, n): one element per thread. */
static void build_ew_naive(gen *g)
{
    LLVMValueRef fn = kernel_begin(g, "ew_naive", 4, 0x7, 1);
    LLVMValueRef x = LLVMGetParam(fn, 0), w = LLVMGetParam(fn, 1), bb = LLVMGetParam(fn, 2);
    LLVMValueRef y = LLVMGetParam(fn, 3), n = LLVMGetParam(fn, 4);
    LLVMValueRef i = global_id(g);
    return_if(g, LLVMBuildICmp(g->b, LLVMIntSGE, i, n, ""));
    LLVMValueRef v = emit_ew(g, load(g, g->f32, gep(g, x, i), 4), load(g, g->f32, gep(g, w, i), 4),
                             load(g, g->f32, gep(g, bb, i), 4));
    store(g, v, gep(g, y, i), 4);
    LLVMBuildRetVoid(g->b);
}

/* ew_vec<U>(x, w, b, y, n): grid-stride over float4 chunks, U chunks per iteration (all loads
 * issued before the arithmetic), then the remaining chunks one at a time, then the < 4
 * element tail. Buffers must be 16-byte aligned. */
static void build_ew_vec(gen *g, int U)
{
    char name[32];
    snprintf(name, sizeof name, "ew_vec%d", U);
    LLVMValueRef fn = kernel_begin(g, name, 4, 0x7, 1);
    LLVMValueRef x = LLVMGetParam(fn, 0), w = LLVMGetParam(fn, 1), bb = LLVMGetParam(fn, 2);
    LLVMValueRef y = LLVMGetParam(fn, 3), n = LLVMGetParam(fn, 4);
    LLVMBuilderRef b = g->b;
    LLVMValueRef gid = global_id(g);
    LLVMValueRef stride = LLVMBuildNUWMul(b, sreg(g, "nctaid.x"), sreg(g, "ntid.x"), "stride");
    LLVMValueRef n4 = LLVMBuildLShr(b, n, ci64(g, 2), "n4");
    LLVMValueRef end_main = LLVMBuildSub(b, n4, LLVMBuildMul(b, stride, ci64(g, U - 1), ""), "");
    loop m;
    loop_begin(g, &m, gid, end_main, 0, NULL);
    LLVMValueRef xs[8], ws[8], bs[8], offs[8];
    for (int u = 0; u < U; u++) {
        LLVMValueRef c = LLVMBuildAdd(b, m.iv, LLVMBuildMul(b, stride, ci64(g, u), ""), "");
        offs[u] = LLVMBuildShl(b, c, ci64(g, 2), "");
        xs[u] = load(g, g->v4, gep(g, x, offs[u]), 16);
        ws[u] = load(g, g->v4, gep(g, w, offs[u]), 16);
        bs[u] = load(g, g->v4, gep(g, bb, offs[u]), 16);
    }
    for (int u = 0; u < U; u++)
        store(g, emit_ew(g, xs[u], ws[u], bs[u]), gep(g, y, offs[u]), 16);
    loop_end(g, &m, LLVMBuildAdd(b, m.iv, LLVMBuildMul(b, stride, ci64(g, U), ""), ""), NULL);

    loop r;
    loop_begin(g, &r, m.iv, n4, 0, NULL);
    LLVMValueRef off = LLVMBuildShl(b, r.iv, ci64(g, 2), "");
    LLVMValueRef v = emit_ew(g, load(g, g->v4, gep(g, x, off), 16), load(g, g->v4, gep(g, w, off), 16),
                             load(g, g->v4, gep(g, bb, off), 16));
    store(g, v, gep(g, y, off), 16);
    loop_end(g, &r, LLVMBuildAdd(b, r.iv, stride, ""), NULL);

    LLVMValueRef i = LLVMBuildAdd(b, LLVMBuildShl(b, n4, ci64(g, 2), ""), gid, "");
    return_if(g, LLVMBuildICmp(b, LLVMIntSGE, i, n, ""));
    v = emit_ew(g, load(g, g->f32, gep(g, x, i), 4), load(g, g->f32, gep(g, w, i), 4),
                load(g, g->f32, gep(g, bb, i), 4));
    store(g, v, gep(g, y, i), 4);
    LLVMBuildRetVoid(b);
}

/* Where leaf g of a row-major (rows x n) input starts, and how long it is. */
static void leaf_place(gen *g, LLVMValueRef leaf, LLVMValueRef n, LLVMValueRef nleaves, LLVMValueRef *base,
                       LLVMValueRef *len)
{
    LLVMBuilderRef b = g->b;
    LLVMValueRef row = LLVMBuildUDiv(b, leaf, nleaves, "row");
    LLVMValueRef l = LLVMBuildURem(b, leaf, nleaves, "l");
    LLVMValueRef lstart = LLVMBuildMul(b, l, ci64(g, LEAF), "");
    *base = LLVMBuildAdd(b, LLVMBuildMul(b, row, n, ""), lstart, "base");
    *len = smin(g, ci64(g, LEAF), LLVMBuildSub(b, n, lstart, ""));
}

/* Joins the two arms of an if/else that each end with one value; returns the phi. */
static LLVMValueRef join2(gen *g, LLVMBasicBlockRef join, LLVMValueRef va, LLVMBasicBlockRef ba, LLVMValueRef vb,
                          LLVMBasicBlockRef bb)
{
    LLVMPositionBuilderAtEnd(g->b, join);
    LLVMValueRef phi = LLVMBuildPhi(g->b, LLVMTypeOf(va), "");
    LLVMAddIncoming(phi, &va, &ba, 1);
    LLVMAddIncoming(phi, &vb, &bb, 1);
    return phi;
}

/* rsum_warp<U>(x, leafsum, n, total_leaves, leaves_per_row): one warp per leaf, lane = thread.
 * Lane l sums positions l, l+32, ... in order (U loads in flight), then the warp's pairwise tree
 * through butterfly shuffles: at lane 0, level k adds the partial of lanes [0, 2^k) to that of
 * [2^k, 2^(k+1)), exactly kernel.h's tree. Requires blockDim % 32 == 0. */
static void build_rsum_warp(gen *g, int U)
{
    char name[32];
    snprintf(name, sizeof name, "rsum_warp%d", U);
    LLVMValueRef fn = kernel_begin(g, name, 2, 0x1, 3);
    LLVMValueRef x = LLVMGetParam(fn, 0), out = LLVMGetParam(fn, 1);
    LLVMValueRef n = LLVMGetParam(fn, 2), total = LLVMGetParam(fn, 3), nl = LLVMGetParam(fn, 4);
    LLVMBuilderRef b = g->b;
    LLVMValueRef gid = global_id(g);
    LLVMValueRef lane = LLVMBuildAnd(b, gid, ci64(g, 31), "lane");
    LLVMValueRef leaf = LLVMBuildLShr(b, gid, ci64(g, 5), "leaf");
    return_if(g, LLVMBuildICmp(b, LLVMIntUGE, leaf, total, ""));
    LLVMValueRef base, len;
    leaf_place(g, leaf, n, nl, &base, &len);
    LLVMValueRef xl = gep(g, x, LLVMBuildAdd(b, base, lane, ""));
    LLVMValueRef zero = cf(g, g->f32, 0.0f);

    LLVMBasicBlockRef fast = new_block(g, "full"), slow = new_block(g, "partial"), join = new_block(g, "join");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntEQ, len, ci64(g, LEAF), ""), fast, slow);

    LLVMPositionBuilderAtEnd(b, fast);
    loop f;
    loop_begin(g, &f, ci64(g, 0), ci64(g, PER_LANE), 1, &zero);
    LLVMValueRef vals[64], acc = f.v[0];
    for (int u = 0; u < U; u++) {
        LLVMValueRef k = LLVMBuildAdd(b, f.iv, ci64(g, u), "");
        vals[u] = load(g, g->f32, gep(g, xl, LLVMBuildShl(b, k, ci64(g, 5), "")), 4);
    }
    for (int u = 0; u < U; u++)
        acc = LLVMBuildFAdd(b, acc, vals[u], "");
    loop_end(g, &f, LLVMBuildAdd(b, f.iv, ci64(g, U), ""), &acc);
    LLVMValueRef acc_fast = f.v[0];
    LLVMBasicBlockRef fast_end = LLVMGetInsertBlock(b);
    LLVMBuildBr(b, join);

    LLVMPositionBuilderAtEnd(b, slow);
    loop s;
    loop_begin(g, &s, lane, len, 1, &zero);
    acc = LLVMBuildFAdd(b, s.v[0], load(g, g->f32, gep(g, gep(g, x, base), s.iv), 4), "");
    loop_end(g, &s, LLVMBuildAdd(b, s.iv, ci64(g, LANES), ""), &acc);
    LLVMValueRef acc_slow = s.v[0];
    LLVMBasicBlockRef slow_end = LLVMGetInsertBlock(b);
    LLVMBuildBr(b, join);

    acc = join2(g, join, acc_fast, fast_end, acc_slow, slow_end);
    for (int m = 1; m < LANES; m *= 2)
        acc = LLVMBuildFAdd(b, acc, shfl_bfly(g, acc, m), "");
    LLVMBasicBlockRef st = new_block(g, "store"), done = new_block(g, "done");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntEQ, lane, ci64(g, 0), ""), st, done);
    LLVMPositionBuilderAtEnd(b, st);
    store(g, acc, gep(g, out, leaf), 4);
    LLVMBuildBr(b, done);
    LLVMPositionBuilderAtEnd(b, done);
    LLVMBuildRetVoid(b);
}

/* (a0 + a1) + (a2 + a3): the first two levels of the lane tree, inside one thread. */
static LLVMValueRef quad_tree(gen *g, LLVMValueRef a[4])
{
    return LLVMBuildFAdd(g->b, LLVMBuildFAdd(g->b, a[0], a[1], ""), LLVMBuildFAdd(g->b, a[2], a[3], ""), "");
}

/* rsum_quad<U>(x, leafsum, n, total_leaves, leaves_per_row): 8 threads per leaf, thread t
 * owning lanes 4t..4t+3, whose positions 32m + 4t + c are one aligned float4: 16-byte loads in
 * kernel.h's exact order. Lanes 4t..4t+3 combine inside the thread ((a0+a1)+(a2+a3)), then
 * butterflies 1, 2, 4 finish the tree. A warp holds 4 leaves; threads of a leaf past the end
 * run with an empty leaf so every lane reaches the shuffles. Partial leaves and rows not
 * 16-byte aligned (n % 4 != 0) take a scalar path in the same order. */
static void build_rsum_quad(gen *g, int U)
{
    char name[32];
    snprintf(name, sizeof name, "rsum_quad%d", U);
    LLVMValueRef fn = kernel_begin(g, name, 2, 0x1, 3);
    LLVMValueRef x = LLVMGetParam(fn, 0), out = LLVMGetParam(fn, 1);
    LLVMValueRef n = LLVMGetParam(fn, 2), total = LLVMGetParam(fn, 3), nl = LLVMGetParam(fn, 4);
    LLVMBuilderRef b = g->b;
    LLVMValueRef gid = global_id(g);
    LLVMValueRef t8 = LLVMBuildAnd(b, gid, ci64(g, 7), "t8");
    LLVMValueRef leaf = LLVMBuildLShr(b, gid, ci64(g, 3), "leaf");
    LLVMValueRef valid = LLVMBuildICmp(b, LLVMIntULT, leaf, total, "valid");
    LLVMValueRef base, len;
    leaf_place(g, LLVMBuildSelect(b, valid, leaf, ci64(g, 0), ""), n, nl, &base, &len);
    len = LLVMBuildSelect(b, valid, len, ci64(g, 0), "");
    LLVMValueRef xb = gep(g, x, base);
    LLVMValueRef t4 = LLVMBuildShl(b, t8, ci64(g, 2), "");
    LLVMValueRef zero = cf(g, g->f32, 0.0f), zero4 = cf(g, g->v4, 0.0f);

    LLVMValueRef full = LLVMBuildICmp(b, LLVMIntEQ, len, ci64(g, LEAF), "");
    LLVMValueRef aligned = LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildAnd(b, n, ci64(g, 3), ""), ci64(g, 0), "");
    LLVMBasicBlockRef fast = new_block(g, "full"), slow = new_block(g, "partial"), join = new_block(g, "join");
    LLVMBuildCondBr(b, LLVMBuildAnd(b, full, aligned, ""), fast, slow);

    LLVMPositionBuilderAtEnd(b, fast);
    loop f;
    loop_begin(g, &f, ci64(g, 0), ci64(g, PER_LANE), 1, &zero4);
    LLVMValueRef vals[32], acc = f.v[0];
    for (int u = 0; u < U; u++) {
        LLVMValueRef m = LLVMBuildAdd(b, f.iv, ci64(g, u), "");
        LLVMValueRef p = LLVMBuildAdd(b, LLVMBuildShl(b, m, ci64(g, 5), ""), t4, "");
        vals[u] = load(g, g->v4, gep(g, xb, p), 16);
    }
    for (int u = 0; u < U; u++)
        acc = LLVMBuildFAdd(b, acc, vals[u], "");
    loop_end(g, &f, LLVMBuildAdd(b, f.iv, ci64(g, U), ""), &acc);
    LLVMValueRef a[4];
    for (int c = 0; c < 4; c++)
        a[c] = LLVMBuildExtractElement(b, f.v[0], ci32(g, c), "");
    LLVMValueRef s_fast = quad_tree(g, a);
    LLVMBasicBlockRef fast_end = LLVMGetInsertBlock(b);
    LLVMBuildBr(b, join);

    LLVMPositionBuilderAtEnd(b, slow);
    LLVMValueRef rows32 = LLVMBuildLShr(b, LLVMBuildAdd(b, len, ci64(g, 31), ""), ci64(g, 5), "");
    LLVMValueRef init[4] = {zero, zero, zero, zero};
    loop s;
    loop_begin(g, &s, ci64(g, 0), rows32, 4, init);
    LLVMValueRef next[4];
    for (int c = 0; c < 4; c++) {
        LLVMValueRef p = LLVMBuildAdd(b, LLVMBuildAdd(b, LLVMBuildShl(b, s.iv, ci64(g, 5), ""), t4, ""), ci64(g, c), "");
        LLVMValueRef in = LLVMBuildICmp(b, LLVMIntSLT, p, len, "");
        /* out-of-leaf lanes read the leaf's first element (always valid) and keep their sum */
        LLVMValueRef v = load(g, g->f32, gep(g, xb, LLVMBuildSelect(b, in, p, ci64(g, 0), "")), 4);
        next[c] = LLVMBuildSelect(b, in, LLVMBuildFAdd(b, s.v[c], v, ""), s.v[c], "");
    }
    loop_end(g, &s, LLVMBuildAdd(b, s.iv, ci64(g, 1), ""), next);
    for (int c = 0; c < 4; c++)
        a[c] = s.v[c];
    LLVMValueRef s_slow = quad_tree(g, a);
    LLVMBasicBlockRef slow_end = LLVMGetInsertBlock(b);
    LLVMBuildBr(b, join);

    LLVMValueRef sum = join2(g, join, s_fast, fast_end, s_slow, slow_end);
    for (int m = 1; m < 8; m *= 2)
        sum = LLVMBuildFAdd(b, sum, shfl_bfly(g, sum, m), "");
    LLVMBasicBlockRef st = new_block(g, "store"), done = new_block(g, "done");
    LLVMValueRef first = LLVMBuildICmp(b, LLVMIntEQ, t8, ci64(g, 0), "");
    LLVMBuildCondBr(b, LLVMBuildAnd(b, valid, first, ""), st, done);
    LLVMPositionBuilderAtEnd(b, st);
    store(g, sum, gep(g, out, leaf), 4);
    LLVMBuildBr(b, done);
    LLVMPositionBuilderAtEnd(b, done);
    LLVMBuildRetVoid(b);
}

/* rsum_free<U>(x, leafsum, n, total_leaves, leaves_per_row): NOT kernel.h's order, for
 * comparison: one warp per leaf with float4 loads (thread t takes positions 128k + 4t..4t+3),
 * the order a GPU programmer would pick freely. Only for n % 4096 == 0. */
static void build_rsum_free(gen *g, int U)
{
    char name[32];
    snprintf(name, sizeof name, "rsum_free%d", U);
    LLVMValueRef fn = kernel_begin(g, name, 2, 0x1, 3);
    LLVMValueRef x = LLVMGetParam(fn, 0), out = LLVMGetParam(fn, 1);
    LLVMValueRef total = LLVMGetParam(fn, 3);
    LLVMBuilderRef b = g->b;
    LLVMValueRef gid = global_id(g);
    LLVMValueRef t = LLVMBuildAnd(b, gid, ci64(g, 31), "t");
    LLVMValueRef leaf = LLVMBuildLShr(b, gid, ci64(g, 5), "leaf");
    return_if(g, LLVMBuildICmp(b, LLVMIntUGE, leaf, total, ""));
    LLVMValueRef xb = gep(g, x, LLVMBuildAdd(b, LLVMBuildMul(b, leaf, ci64(g, LEAF), ""),
                                               LLVMBuildShl(b, t, ci64(g, 2), ""), ""));
    LLVMValueRef zero4 = cf(g, g->v4, 0.0f);
    loop f;
    loop_begin(g, &f, ci64(g, 0), ci64(g, LEAF / 128), 1, &zero4);
    LLVMValueRef vals[32], acc = f.v[0];
    for (int u = 0; u < U; u++) {
        LLVMValueRef k = LLVMBuildAdd(b, f.iv, ci64(g, u), "");
        vals[u] = load(g, g->v4, gep(g, xb, LLVMBuildShl(b, k, ci64(g, 7), "")), 16);
    }
    for (int u = 0; u < U; u++)
        acc = LLVMBuildFAdd(b, acc, vals[u], "");
    loop_end(g, &f, LLVMBuildAdd(b, f.iv, ci64(g, U), ""), &acc);
    LLVMValueRef a[4];
    for (int c = 0; c < 4; c++)
        a[c] = LLVMBuildExtractElement(b, f.v[0], ci32(g, c), "");
    LLVMValueRef sum = quad_tree(g, a);
    for (int m = 1; m < LANES; m *= 2)
        sum = LLVMBuildFAdd(b, sum, shfl_bfly(g, sum, m), "");
    LLVMBasicBlockRef st = new_block(g, "store"), done = new_block(g, "done");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntEQ, t, ci64(g, 0), ""), st, done);
    LLVMPositionBuilderAtEnd(b, st);
    store(g, sum, gep(g, out, leaf), 4);
    LLVMBuildBr(b, done);
    LLVMPositionBuilderAtEnd(b, done);
    LLVMBuildRetVoid(b);
}

/* leaf_tree(leafsum, out, rows, leaves_per_row): one thread per row combines the row's leaf
 * sums by the pairwise tree, in place (same loop as tree_inplace on the host). */
static void build_leaf_tree(gen *g)
{
    LLVMValueRef fn = kernel_begin(g, "leaf_tree", 2, 0x0, 2);
    LLVMValueRef ls = LLVMGetParam(fn, 0), out = LLVMGetParam(fn, 1);
    LLVMValueRef rows = LLVMGetParam(fn, 2), nl = LLVMGetParam(fn, 3);
    LLVMBuilderRef b = g->b;
    LLVMValueRef r = global_id(g);
    return_if(g, LLVMBuildICmp(b, LLVMIntSGE, r, rows, ""));
    LLVMValueRef p = gep(g, ls, LLVMBuildMul(b, r, nl, ""));
    loop w;
    loop_begin(g, &w, ci64(g, 1), nl, 0, NULL);
    loop i;
    loop_begin(g, &i, ci64(g, 0), LLVMBuildSub(b, nl, w.iv, ""), 0, NULL);
    LLVMValueRef pi = gep(g, p, i.iv), pj = gep(g, p, LLVMBuildAdd(b, i.iv, w.iv, ""));
    store(g, LLVMBuildFAdd(b, load(g, g->f32, pi, 4), load(g, g->f32, pj, 4), ""), pi, 4);
    loop_end(g, &i, LLVMBuildAdd(b, i.iv, LLVMBuildShl(b, w.iv, ci64(g, 1), ""), ""), NULL);
    loop_end(g, &w, LLVMBuildShl(b, w.iv, ci64(g, 1), ""), NULL);
    store(g, load(g, g->f32, p, 4), gep(g, out, r), 4);
    LLVMBuildRetVoid(b);
}

/* tree32(in, out, rows, count, chunks): one pass of the leaf tree for rows with many leaves.
 * Warp w takes values [32c, 32c + 32) of row w / chunks (c = w % chunks), pads past `count`
 * with -0.0 and reduces them by butterflies. Because the tree pairs aligned power-of-two blocks,
 * a tree over chunks of 32 subtrees is the whole tree, and padding with -0.0 (x + -0.0 == x
 * for every x) is the same as carrying an odd last element up: passes with count -> chunks
 * until 1 give kernel.h's order exactly, with all of the GPU working on a single long row. */
static void build_tree32(gen *g)
{
    LLVMValueRef fn = kernel_begin(g, "tree32", 2, 0x1, 3);
    LLVMValueRef in = LLVMGetParam(fn, 0), out = LLVMGetParam(fn, 1);
    LLVMValueRef rows = LLVMGetParam(fn, 2), count = LLVMGetParam(fn, 3), chunks = LLVMGetParam(fn, 4);
    LLVMBuilderRef b = g->b;
    LLVMValueRef gid = global_id(g);
    LLVMValueRef lane = LLVMBuildAnd(b, gid, ci64(g, 31), "lane");
    LLVMValueRef w = LLVMBuildLShr(b, gid, ci64(g, 5), "w");
    return_if(g, LLVMBuildICmp(b, LLVMIntUGE, w, LLVMBuildMul(b, rows, chunks, ""), ""));
    LLVMValueRef row = LLVMBuildUDiv(b, w, chunks, ""), c = LLVMBuildURem(b, w, chunks, "");
    LLVMValueRef idx = LLVMBuildAdd(b, LLVMBuildShl(b, c, ci64(g, 5), ""), lane, "");
    LLVMValueRef in_row = LLVMBuildICmp(b, LLVMIntULT, idx, count, "");
    LLVMValueRef at = LLVMBuildAdd(b, LLVMBuildMul(b, row, count, ""), LLVMBuildSelect(b, in_row, idx, ci64(g, 0), ""), "");
    LLVMValueRef v = load(g, g->f32, gep(g, in, at), 4);
    v = LLVMBuildSelect(b, in_row, v, cf(g, g->f32, -0.0f), "");
    for (int m = 1; m < LANES; m *= 2)
        v = LLVMBuildFAdd(b, v, shfl_bfly(g, v, m), "");
    LLVMBasicBlockRef st = new_block(g, "store"), done = new_block(g, "done");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntEQ, lane, ci64(g, 0), ""), st, done);
    LLVMPositionBuilderAtEnd(b, st);
    store(g, v, gep(g, out, w), 4);
    LLVMBuildBr(b, done);
    LLVMPositionBuilderAtEnd(b, done);
    LLVMBuildRetVoid(b);
}

typedef struct ptx {
    char *text;
    double ms_ir, ms_opt, ms_emit;
} ptx;

enum { K_ALL = 0, K_EW_VEC1_ONLY = 1 };

/* Builds every kernel (K_ALL) or only ew_vec1, to time the first call of a single kernel. */
static ptx build_ptx(const char *ll_path, int which)
{
    ptx res = {0};
    double t0 = now_ms();
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    const char *triple = "nvptx64-nvidia-cuda";
    LLVMTargetRef target;
    char *err = NULL;
    if (LLVMGetTargetFromTriple(triple, &target, &err))
        die("NVPTX target: %s", err);
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, triple, "sm_90", "+ptx85", LLVMCodeGenLevelAggressive,
                                                      LLVMRelocDefault, LLVMCodeModelDefault);
    gen g = {0};
    g.ctx = LLVMContextCreate();
    g.mod = LLVMModuleCreateWithNameInContext("ptx_probe", g.ctx);
    g.b = LLVMCreateBuilderInContext(g.ctx);
    g.f32 = LLVMFloatTypeInContext(g.ctx);
    g.i32 = LLVMInt32TypeInContext(g.ctx);
    g.i64 = LLVMInt64TypeInContext(g.ctx);
    g.i1 = LLVMInt1TypeInContext(g.ctx);
    g.v4 = LLVMVectorType(g.f32, 4);
    g.gptr = LLVMPointerTypeInContext(g.ctx, 1);
    g.vd = LLVMVoidTypeInContext(g.ctx);
    LLVMSetTarget(g.mod, triple);
    LLVMTargetDataRef dl = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(g.mod, dl);

    build_ew_vec(&g, 1);
    if (which == K_ALL) {
        build_ew_naive(&g);
        build_ew_vec(&g, 2);
        build_ew_vec(&g, 4);
        build_rsum_warp(&g, 8);
        build_rsum_warp(&g, 32);
        build_rsum_quad(&g, 4);
        build_rsum_quad(&g, 16);
        build_rsum_free(&g, 8);
        build_leaf_tree(&g);
        build_tree32(&g);
    }
    if (LLVMVerifyModule(g.mod, LLVMReturnStatusAction, &err))
        die("module does not verify: %s", err);
    LLVMDisposeMessage(err);
    double t1 = now_ms();

    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = LLVMRunPasses(g.mod, "default<O3>", tm, po);
    if (e) {
        char *m = LLVMGetErrorMessage(e);
        die("O3: %s", m);
    }
    LLVMDisposePassBuilderOptions(po);
    double t2 = now_ms();
    if (ll_path && LLVMPrintModuleToFile(g.mod, ll_path, &err))
        die("writing %s: %s", ll_path, err);

    LLVMMemoryBufferRef buf;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, g.mod, LLVMAssemblyFile, &err, &buf))
        die("PTX emission: %s", err);
    size_t sz = LLVMGetBufferSize(buf);
    res.text = malloc(sz + 1);
    if (!res.text)
        die("out of memory");
    memcpy(res.text, LLVMGetBufferStart(buf), sz);
    res.text[sz] = 0;
    LLVMDisposeMemoryBuffer(buf);
    double t3 = now_ms();
    res.ms_ir = t1 - t0;
    res.ms_opt = t2 - t1;
    res.ms_emit = t3 - t2;

    LLVMDisposeTargetData(dl);
    LLVMDisposeBuilder(g.b);
    LLVMDisposeModule(g.mod);
    LLVMContextDispose(g.ctx);
    LLVMDisposeTargetMachine(tm);
    return res;
}

/* Counts of the instructions that answer this probe's questions, per .entry. */
static size_t count_in(const char *s, const char *end, const char *what)
{
    size_t n = 0, wl = strlen(what);
    for (const char *p = s; (p = strstr(p, what)) && p < end; p += wl)
        n++;
    return n;
}

static void ptx_stats(const char *text)
{
    static const char *what[] = {"ld.global.nc.v4.f32", "ld.global.nc.f32", "ld.global.f32", "st.global.v4.f32",
                                 "div.rn.f32",          "fma.rn.f32",       "mul.rn.f32",    "mul.f32",
                                 "add.rn.f32",          "add.f32",          ".ftz",          "shfl.sync.bfly",
                                 "div.u64",             "rem.u64"};
    printf("PTX per kernel:\n");
    for (const char *e = strstr(text, ".entry "); e;) {
        const char *next = strstr(e + 1, ".entry ");
        const char *end = next ? next : e + strlen(e);
        const char *nm = e + 7, *paren = strchr(nm, '(');
        printf("  %-12.*s", (int)(paren - nm), nm);
        for (size_t i = 0; i < sizeof what / sizeof what[0]; i++) {
            size_t c = count_in(e, end, what[i]);
            if (c)
                printf(" %s:%zu", what[i], c);
        }
        printf("\n");
        e = next;
    }
}

/* ---- host self-test of the order (runs anywhere, no GPU) -------------------------------------- */

/* The tree as kernel.h words it: level by level, pairs (0,1), (2,3), ..., odd last carried. */
static float tree_levels(const float *in, size_t n)
{
    float v[256];
    memcpy(v, in, n * sizeof *v);
    while (n > 1) {
        size_t m = 0;
        for (size_t i = 0; i + 1 < n; i += 2)
            v[m++] = v[i] + v[i + 1];
        if (n % 2)
            v[m++] = v[n - 1];
        n = m;
    }
    return v[0];
}

/* The same tree computed streaming, with O(log n) state (a binary counter of aligned subtrees,
 * merged right to left at the end): shows a GPU may split the leaf tree at power-of-two-aligned
 * boundaries across blocks and still reproduce it. */
static float tree_stream(const float *in, size_t n)
{
    float st[64];
    size_t cnt[64], sp = 0;
    for (size_t i = 0; i < n; i++) {
        st[sp] = in[i];
        cnt[sp++] = 1;
        while (sp >= 2 && cnt[sp - 1] == cnt[sp - 2]) {
            st[sp - 2] = st[sp - 2] + st[sp - 1];
            cnt[sp - 2] *= 2;
            sp--;
        }
    }
    while (sp >= 2) {
        st[sp - 2] = st[sp - 2] + st[sp - 1];
        sp--;
    }
    return st[0];
}

/* The two GPU mappings' arithmetic, replayed on the host: warp (lane = thread, butterflies
 * 1..16) and quad (thread t owns lanes 4t..4t+3, (a0+a1)+(a2+a3), butterflies 1, 2, 4). */
static float leaf_warp_sim(const float *x, size_t len)
{
    float lane[LANES] = {0}, nx[LANES];
    for (int l = 0; l < LANES; l++)
        for (size_t j = (size_t)l; j < len; j += LANES)
            lane[l] = lane[l] + x[j];
    for (int m = 1; m < LANES; m *= 2) {
        for (int l = 0; l < LANES; l++)
            nx[l] = lane[l] + lane[l ^ m];
        memcpy(lane, nx, sizeof lane);
    }
    return lane[0];
}

static float leaf_quad_sim(const float *x, size_t len)
{
    float s[8], nx[8];
    for (int t = 0; t < 8; t++) {
        float a[4] = {0, 0, 0, 0};
        for (size_t m = 0; 32 * m < len; m++)
            for (int c = 0; c < 4; c++) {
                size_t p = 32 * m + 4 * (size_t)t + (size_t)c;
                if (p < len)
                    a[c] = a[c] + x[p];
            }
        s[t] = (a[0] + a[1]) + (a[2] + a[3]);
    }
    for (int m = 1; m < 8; m *= 2) {
        for (int t = 0; t < 8; t++)
            nx[t] = s[t] + s[t ^ m];
        memcpy(s, nx, sizeof s);
    }
    return s[0];
}

static void ew_verify(const float *x, const float *w, const float *b, const float *y, size_t n, char *msg,
                      size_t cap);

/* Runs the host check of the element-wise kernel on host-made output, clean and with one flipped
 * element, so the checking code itself is tested before it judges a GPU. */
static int selftest_ew_check(void)
{
    size_t n = (1u << 20) + 3;
    float *x = malloc(4 * n * sizeof *x);
    if (!x)
        die("out of memory");
    float *w = x + n, *b = w + n, *y = b + n;
    fill(x, n, 1, -5.0f, 5.0f);
    fill(w, n, 2, -1.0f, 1.0f);
    fill(b, n, 3, -1.0f, 1.0f);
    for (size_t i = 0; i < n; i++)
        y[i] = ew_f32(x[i], w[i], b[i]);
    char ok[128], bad[128];
    ew_verify(x, w, b, y, n, ok, sizeof ok);
    y[n / 2] = nextafterf(y[n / 2], INFINITY);
    ew_verify(x, w, b, y, n, bad, sizeof bad);
    free(x);
    printf("selftest: element-wise check on host output: '%s'; with one element off: '%s'\n", ok, bad);
    return !strstr(ok, "bitwise ok") || !strstr(bad, "1 differ");
}

/* The tree32 passes on the host: chunks of 32 padded with -0.0, repeated until one value. */
static float tree_passes(const float *in, size_t n)
{
    float *a = malloc(n * sizeof *a);
    if (!a)
        die("out of memory");
    memcpy(a, in, n * sizeof *a);
    while (n > 1) {
        size_t chunks = (n + 31) / 32;
        for (size_t c = 0; c < chunks; c++) {
            float v[32];
            for (size_t i = 0; i < 32; i++)
                v[i] = 32 * c + i < n ? a[32 * c + i] : -0.0f;
            a[c] = tree_inplace(v, 32);
        }
        n = chunks;
    }
    float r = a[0];
    free(a);
    return r;
}

static int selftest_passes(void)
{
    uint64_t s = 777;
    int bad = 0;
    float *v = malloc(5000 * sizeof *v), *w = malloc(5000 * sizeof *w);
    if (!v || !w)
        die("out of memory");
    for (size_t n = 1; n <= 5000; n += 1 + n / 7) {
        for (size_t i = 0; i < n; i++) {
            uint64_t k = splitmix(&s) % 8;
            v[i] = k == 0 ? -0.0f : k == 1 ? 0.0f : uniform(&s, -1e3f, 1e3f) * (float)(1u << (splitmix(&s) % 20));
        }
        memcpy(w, v, n * sizeof *v);
        float r0 = tree_inplace(w, n), r1 = tree_passes(v, n);
        if (bits_of(r0) != bits_of(r1)) {
            printf("selftest: tree32 passes differ at n=%zu: %a %a\n", n, r0, r1);
            bad++;
        }
        /* all -0.0 input: the carried tree keeps -0.0, so must the padded one */
        for (size_t i = 0; i < n; i++)
            v[i] = -0.0f;
        memcpy(w, v, n * sizeof *v);
        if (bits_of(tree_inplace(w, n)) != bits_of(tree_passes(v, n)))
            bad++;
    }
    free(v);
    free(w);
    printf("selftest: tree32 passes (pad -0.0) equal the carried tree, n=1..5000: %s\n", bad ? "FAILED" : "ok");
    return bad;
}

static int selftest(void)
{
    uint64_t s = 12345;
    int bad = 0;
    float v[256], a[256], leaf[LEAF];
    for (size_t n = 1; n <= 200; n++) {
        for (size_t i = 0; i < n; i++)
            v[i] = uniform(&s, -1e3f, 1e3f) * (float)(1u << (splitmix(&s) % 20));
        memcpy(a, v, n * sizeof *v);
        float r0 = tree_inplace(a, n), r1 = tree_levels(v, n), r2 = tree_stream(v, n);
        if (bits_of(r0) != bits_of(r1) || bits_of(r0) != bits_of(r2)) {
            printf("selftest: tree differs at n=%zu: %a %a %a\n", n, r0, r1, r2);
            bad++;
        }
    }
    static const size_t lens[] = {1, 7, 31, 32, 33, 100, 1000, 4095, 4096};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        for (int rep = 0; rep < 20; rep++) {
            for (size_t i = 0; i < LEAF; i++)
                leaf[i] = uniform(&s, -1.0f, 1.0f) * (float)(1u << (splitmix(&s) % 24));
            float r = leaf_ref(leaf, lens[k]);
            float w = leaf_warp_sim(leaf, lens[k]), q = leaf_quad_sim(leaf, lens[k]);
            if (bits_of(r) != bits_of(w) || bits_of(r) != bits_of(q)) {
                printf("selftest: leaf of %zu differs: ref %a warp %a quad %a\n", lens[k], r, w, q);
                bad++;
            }
        }
    }
    printf("selftest: tree (in place / levels / streaming, n=1..200) and leaf mappings (warp, quad): %s\n",
           bad ? "FAILED" : "ok");
    return bad + selftest_ew_check() + selftest_passes();
}

/* ---- CUDA driver API ---------------------------------------------------------------------------- */

typedef struct cu {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*ModuleLoadDataEx)(CUmodule *, const void *, unsigned, CUjit_option *, void **);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*FuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
    CUresult (*OccupancyMaxActiveBlocks)(int *, CUfunction, int, size_t);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*MemsetD32)(CUdeviceptr, unsigned, size_t);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*CtxSynchronize)(void);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUevent e0, e1;
    int sms, l2;
} cu;

static cu C;

#define CK(call)                                                                                          \
    do {                                                                                                  \
        CUresult rc_ = (call);                                                                            \
        if (rc_ != CUDA_SUCCESS) {                                                                        \
            const char *s_ = "?";                                                                         \
            if (C.GetErrorString)                                                                         \
                C.GetErrorString(rc_, &s_);                                                               \
            die("%s failed: %d %s (line %d)", #call, (int)rc_, s_, __LINE__);                           \
        }                                                                                                 \
    } while (0)

static void *sym(void *lib, const char *a, const char *b)
{
    void *p = dlsym(lib, a);
    if (!p && b)
        p = dlsym(lib, b);
    if (!p)
        die("libcuda.so.1 lacks %s", a);
    return p;
}

/* Opens the driver; false when there is none (this machine). */
static int cu_open(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return 0;
#define S(field, a, b) *(void **)&C.field = sym(lib, a, b)
    S(Init, "cuInit", NULL);
    S(DeviceGet, "cuDeviceGet", NULL);
    S(DeviceGetName, "cuDeviceGetName", NULL);
    S(DeviceGetAttribute, "cuDeviceGetAttribute", NULL);
    S(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL);
    S(CtxSetCurrent, "cuCtxSetCurrent", NULL);
    S(ModuleLoadDataEx, "cuModuleLoadDataEx", NULL);
    S(ModuleGetFunction, "cuModuleGetFunction", NULL);
    S(FuncGetAttribute, "cuFuncGetAttribute", NULL);
    S(OccupancyMaxActiveBlocks, "cuOccupancyMaxActiveBlocksPerMultiprocessor", NULL);
    S(MemAlloc, "cuMemAlloc_v2", NULL);
    S(MemFree, "cuMemFree_v2", NULL);
    S(MemcpyHtoD, "cuMemcpyHtoD_v2", NULL);
    S(MemcpyDtoH, "cuMemcpyDtoH_v2", NULL);
    S(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL);
    S(MemsetD32, "cuMemsetD32_v2", NULL);
    S(LaunchKernel, "cuLaunchKernel", NULL);
    S(CtxSynchronize, "cuCtxSynchronize", NULL);
    S(EventCreate, "cuEventCreate", NULL);
    S(EventRecord, "cuEventRecord", NULL);
    S(EventSynchronize, "cuEventSynchronize", NULL);
    S(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
    S(GetErrorString, "cuGetErrorString", NULL);
#undef S
    CK(C.Init(0));
    CUdevice dev;
    CK(C.DeviceGet(&dev, 0));
    char name[128];
    CK(C.DeviceGetName(name, sizeof name, dev));
    CK(C.DeviceGetAttribute(&C.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CK(C.DeviceGetAttribute(&C.l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
    int major, minor;
    CK(C.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CK(C.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    CUcontext ctx;
    CK(C.PrimaryCtxRetain(&ctx, dev));
    CK(C.CtxSetCurrent(ctx));
    CK(C.EventCreate(&C.e0, CU_EVENT_DEFAULT));
    CK(C.EventCreate(&C.e1, CU_EVENT_DEFAULT));
    printf("device: %s, sm_%d%d, %d SMs, L2 %d MB\n", name, major, minor, C.sms, C.l2 >> 20);
    return 1;
}

/* One or two launches (or a device copy) run and timed as one unit. */
typedef struct launch {
    CUfunction f;
    unsigned grid, block;
    int nargs;
    uint64_t val[6];
    void *args[6];
} launch;

typedef struct job {
    int nl;
    launch l[8];
    CUdeviceptr cp_dst, cp_src;
    size_t cp_bytes; /* a copy instead of launches when nonzero */
} job;

static void job_run(job *j)
{
    if (j->cp_bytes) {
        CK(C.MemcpyDtoDAsync(j->cp_dst, j->cp_src, j->cp_bytes, 0));
        return;
    }
    for (int i = 0; i < j->nl; i++) {
        launch *l = &j->l[i];
        for (int a = 0; a < l->nargs; a++)
            l->args[a] = &l->val[a];
        CK(C.LaunchKernel(l->f, l->grid, 1, 1, l->block, 1, 1, 0, 0, l->args, NULL));
    }
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

enum { WARM = 3, REPS = 21 };

static double job_median_ms(job *j)
{
    float t[REPS];
    for (int i = 0; i < WARM; i++)
        job_run(j);
    CK(C.CtxSynchronize());
    for (int i = 0; i < REPS; i++) {
        CK(C.EventRecord(C.e0, 0));
        job_run(j);
        CK(C.EventRecord(C.e1, 0));
        CK(C.EventSynchronize(C.e1));
        CK(C.EventElapsedTime(&t[i], C.e0, C.e1));
    }
    qsort(t, REPS, sizeof t[0], cmp_float);
    return t[REPS / 2];
}

static launch mk_launch(CUfunction f, unsigned grid, unsigned block, int nargs, const uint64_t *vals)
{
    launch l = {.f = f, .grid = grid, .block = block, .nargs = nargs};
    memcpy(l.val, vals, (size_t)nargs * sizeof *vals);
    return l;
}

static CUdeviceptr dalloc(size_t bytes)
{
    CUdeviceptr p;
    CK(C.MemAlloc(&p, bytes));
    return p;
}

static void func_res(CUfunction f, int *regs, int *local)
{
    CK(C.FuncGetAttribute(regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
    CK(C.FuncGetAttribute(local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f));
}

/* ---- element-wise run --------------------------------------------------------------------------- */

typedef struct ew_check {
    const float *x, *w, *b, *y;
    size_t bad[MAX_PARTS], poison[MAX_PARTS], first[MAX_PARTS];
    double d2[MAX_PARTS], r2[MAX_PARTS];
} ew_check;

static void ew_check_range(void *p, size_t lo, size_t hi, int part)
{
    ew_check *c = p;
    size_t bad = 0, poison = 0, first = SIZE_MAX;
    double d2 = 0, r2 = 0;
    for (size_t i = lo; i < hi; i++) {
        float ref = ew_f32(c->x[i], c->w[i], c->b[i]);
        uint32_t got = bits_of(c->y[i]);
        if (got == 0xffffffffu)
            poison++;
        if (got != bits_of(ref)) {
            if (!bad)
                first = i;
            bad++;
        }
        double r = ew_f64(c->x[i], c->w[i], c->b[i]), d = (double)c->y[i] - r;
        d2 += d * d;
        r2 += r * r;
    }
    c->bad[part] = bad;
    c->poison[part] = poison;
    c->first[part] = first;
    c->d2[part] = d2;
    c->r2[part] = r2;
}

/* Compares y with the host's f32 result (bitwise) and the f64 one (relative 2-norm error). */
static void ew_verify(const float *x, const float *w, const float *b, const float *y, size_t n, char *msg, size_t cap)
{
    static ew_check c;
    memset(&c, 0, sizeof c);
    c.x = x, c.w = w, c.b = b, c.y = y;
    par_for(n, ew_check_range, &c);
    size_t bad = 0, poison = 0, first = SIZE_MAX;
    double d2 = 0, r2 = 0;
    for (int p = 0; p < MAX_PARTS; p++) {
        bad += c.bad[p];
        poison += c.poison[p];
        if (c.bad[p] && c.first[p] < first)
            first = c.first[p];
        d2 += c.d2[p];
        r2 += c.r2[p];
    }
    if (bad)
        snprintf(msg, cap, "%zu differ (first %zu: %a vs %a), %zu unwritten, rel %.2e", bad, first, y[first],
                 ew_f32(x[first], w[first], b[first]), poison, sqrt(d2 / r2));
    else
        snprintf(msg, cap, "bitwise ok, rel vs f64 %.2e", sqrt(d2 / r2));
}

static void run_elementwise(CUmodule mod, size_t n, uint64_t seed, CUdeviceptr *out_buf, double *copy_gbs)
{
    size_t bytes = n * sizeof(float);
    float *x = malloc(bytes), *w = malloc(bytes), *b = malloc(bytes), *y = malloc(bytes);
    if (!x || !w || !b || !y)
        die("out of host memory");
    double t0 = now_ms();
    fill(x, n, seed ^ 1, -5.0f, 5.0f);
    fill(w, n, seed ^ 2, -1.0f, 1.0f);
    fill(b, n, seed ^ 3, -1.0f, 1.0f);
    CUdeviceptr dx = dalloc(bytes), dw = dalloc(bytes), db = dalloc(bytes), dy = dalloc(bytes);
    CK(C.MemcpyHtoD(dx, x, bytes));
    CK(C.MemcpyHtoD(dw, w, bytes));
    CK(C.MemcpyHtoD(db, b, bytes));
    printf("element-wise: n = %zu (%.2f GiB per buffer), data ready in %.0f ms\n", n, bytes / 1073741824.0,
           now_ms() - t0);

    job cp = {.cp_dst = dy, .cp_src = dx, .cp_bytes = bytes};
    double copy_ms = job_median_ms(&cp);
    *copy_gbs = 2.0 * bytes / (copy_ms * 1e-3) / 1e9;
    add_result("copy DtoD 1 GiB", copy_ms, 2.0 * bytes, *copy_gbs, "(read+write)", 0, 0);

    struct {
        const char *name, *fn;
        int per_thread; /* elements per thread; 0: grid-stride, one wave of resident blocks */
    } vars[] = {
        {"ew naive 1/thread", "ew_naive", 1}, {"ew vec4 x1, 1 pass", "ew_vec1", 4},
        {"ew vec4 x4, 1 pass", "ew_vec4", 16}, {"ew vec4 x1, grid-stride", "ew_vec1", 0},
        {"ew vec4 x2, grid-stride", "ew_vec2", 0}, {"ew vec4 x4, grid-stride", "ew_vec4", 0},
    };
    uint64_t vals[5] = {dx, dw, db, dy, n};
    for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++) {
        CUfunction f;
        CK(C.ModuleGetFunction(&f, mod, vars[v].fn));
        int regs, local;
        func_res(f, &regs, &local);
        unsigned block = 256;
        int occ;
        CK(C.OccupancyMaxActiveBlocks(&occ, f, (int)block, 0));
        size_t grid = vars[v].per_thread ? (n / (size_t)vars[v].per_thread + block - 1) / block
                                         : (size_t)C.sms * (size_t)occ;
        job j = {.nl = 1};
        j.l[0] = mk_launch(f, (unsigned)grid, block, 5, vals);
        CK(C.MemsetD32(dy, 0xffffffffu, n));
        job_run(&j);
        CK(C.CtxSynchronize());
        CK(C.MemcpyDtoH(y, dy, bytes));
        char msg[128];
        ew_verify(x, w, b, y, n, msg, sizeof msg);
        double ms = job_median_ms(&j);
        add_result(vars[v].name, ms, 4.0 * bytes, *copy_gbs, msg, regs, local);
        printf("  %-26s grid %7zu (%d blocks/SM resident): %.4f ms, %s\n", vars[v].name, grid, occ, ms, msg);
        fflush(stdout);
    }
    copy_ms = job_median_ms(&cp);
    add_result("copy DtoD 1 GiB (again)", copy_ms, 2.0 * bytes, *copy_gbs, "spread of the ceiling", 0, 0);
    CK(C.MemFree(dx));
    CK(C.MemFree(dw));
    CK(C.MemFree(db));
    *out_buf = dy;
    free(x);
    free(w);
    free(b);
    free(y);
}

/* ---- row-sum run ---------------------------------------------------------------------------------- */

typedef struct rs_ref {
    const float *x;
    size_t n;
    float *ref;
    double *ref64;
} rs_ref;

static void rs_ref_range(void *p, size_t lo, size_t hi, int part)
{
    (void)part;
    rs_ref *c = p;
    size_t nl = (c->n + LEAF - 1) / LEAF;
    float *leaves = malloc(nl * sizeof *leaves);
    if (!leaves)
        die("out of memory");
    for (size_t r = lo; r < hi; r++) {
        const float *row = c->x + r * c->n;
        c->ref[r] = row_ref(row, c->n, leaves);
        double s = 0;
        for (size_t j = 0; j < c->n; j++)
            s += row[j];
        c->ref64[r] = s;
    }
    free(leaves);
}

static void rs_verify(const float *got, const float *ref, const double *ref64, size_t rows, int bitwise, char *msg,
                      size_t cap)
{
    size_t bad = 0, first = 0;
    double d2 = 0, r2 = 0, dh2 = 0;
    for (size_t r = 0; r < rows; r++) {
        if (bits_of(got[r]) != bits_of(ref[r]) && !bad++)
            first = r;
        double d = (double)got[r] - ref64[r], dh = (double)ref[r] - ref64[r];
        d2 += d * d;
        dh2 += dh * dh;
        r2 += ref64[r] * ref64[r];
    }
    if (!bitwise)
        snprintf(msg, cap, "other order: %zu rows differ from kernel.h, rel %.2e (kernel.h %.2e)", bad,
                 sqrt(d2 / r2), sqrt(dh2 / r2));
    else if (bad)
        snprintf(msg, cap, "%zu rows differ (first %zu: %a vs %a), rel %.2e", bad, first, got[first], ref[first],
                 sqrt(d2 / r2));
    else
        snprintf(msg, cap, "bitwise ok, rel vs f64 %.2e", sqrt(d2 / r2));
}

typedef struct rs_var {
    const char *name, *fn;
    int threads_per_leaf, bitwise;
    int tree32; /* leaf tree by tree32 passes (else leaf_tree, one thread per row) */
} rs_var;

static const rs_var RS_VARS[] = {
    {"rsum warp/leaf U=8", "rsum_warp8", 32, 1, 0},      {"rsum warp/leaf U=32", "rsum_warp32", 32, 1, 0},
    {"rsum 8thr/leaf f4 U=4", "rsum_quad4", 8, 1, 0},    {"rsum 8thr/leaf f4 U=16", "rsum_quad16", 8, 1, 0},
    {"rsum free order f4 U=8", "rsum_free8", 32, 0, 0},  {"rsum warp U=32 +tree32", "rsum_warp32", 32, 1, 1},
    {"rsum free f4 U=8 +tree32", "rsum_free8", 32, 0, 1},
};

/* The leaf pass, then the leaf tree: one leaf_tree launch, or tree32 passes ping-ponging
 * between dls and dls2 (L -> ceil(L/32) -> ... -> 1, the last pass writing dout). */
static job rs_job(CUmodule mod, const rs_var *v, CUdeviceptr dx, CUdeviceptr dls, CUdeviceptr dls2,
                  CUdeviceptr dout, size_t rows, size_t n, int *regs, int *local)
{
    size_t nl = (n + LEAF - 1) / LEAF, total = rows * nl;
    CUfunction f, t;
    CK(C.ModuleGetFunction(&f, mod, v->fn));
    CK(C.ModuleGetFunction(&t, mod, v->tree32 ? "tree32" : "leaf_tree"));
    func_res(f, regs, local);
    unsigned block = 256;
    size_t leaves_per_block = block / (unsigned)v->threads_per_leaf;
    uint64_t a1[5] = {dx, dls, n, total, nl};
    job j = {.nl = 1};
    j.l[0] = mk_launch(f, (unsigned)((total + leaves_per_block - 1) / leaves_per_block), block, 5, a1);
    if (!v->tree32) {
        uint64_t a2[4] = {dls, dout, rows, nl};
        j.l[j.nl++] = mk_launch(t, (unsigned)((rows + block - 1) / block), block, 4, a2);
        return j;
    }
    CUdeviceptr in = dls, other = dls2;
    for (size_t count = nl;;) {
        size_t chunks = (count + 31) / 32, warps = rows * chunks;
        CUdeviceptr dst = chunks == 1 ? dout : other;
        uint64_t a2[5] = {in, dst, rows, count, chunks};
        if (j.nl == 8)
            die("too many tree32 passes");
        j.l[j.nl++] = mk_launch(t, (unsigned)((warps + 7) / 8), block, 5, a2);
        if (chunks == 1)
            return j;
        other = in;
        in = dst;
        count = chunks;
    }
}

/* Runs every variant on one shape; timed == 0 checks only. */
static void run_rowsum_shape(CUmodule mod, size_t rows, size_t n, uint64_t seed, int timed, CUdeviceptr copy_dst,
                             double *copy_gbs)
{
    /* one thread per row walking a long row's leaf tree would take milliseconds */
    int long_rows = (n + LEAF - 1) / LEAF > 256;
    size_t cnt = rows * n, nl = (n + LEAF - 1) / LEAF;
    float *x = malloc(cnt * sizeof *x), *ref = malloc(rows * sizeof *ref), *got = malloc(rows * sizeof *got);
    double *ref64 = malloc(rows * sizeof *ref64);
    if (!x || !ref || !got || !ref64)
        die("out of host memory");
    fill(x, cnt, seed, -1.0f, 1.0f);
    rs_ref rc = {x, n, ref, ref64};
    par_for(rows, rs_ref_range, &rc);
    CUdeviceptr dx = dalloc(cnt * sizeof(float)), dls = dalloc(rows * nl * sizeof(float));
    CUdeviceptr dls2 = dalloc(rows * ((nl + 31) / 32) * sizeof(float));
    CUdeviceptr dout = dalloc(rows * sizeof(float));
    CK(C.MemcpyHtoD(dx, x, cnt * sizeof(float)));
    printf("row sum: %zu rows x %zu (%zu leaves per row)\n", rows, n, nl);
    double bytes = (double)cnt * 4 + (double)rows * 4;
    if (timed) {
        job cp = {.cp_dst = copy_dst, .cp_src = dx, .cp_bytes = cnt * sizeof(float)};
        double ms = job_median_ms(&cp);
        *copy_gbs = 2.0 * cnt * 4 / (ms * 1e-3) / 1e9;
        char cname[40];
        snprintf(cname, sizeof cname, "copy DtoD %zu MiB", cnt * 4 >> 20);
        add_result(cname, ms, 2.0 * cnt * 4, *copy_gbs, "(read+write)", 0, 0);
    }
    for (size_t v = 0; v < sizeof RS_VARS / sizeof RS_VARS[0]; v++) {
        if ((!RS_VARS[v].bitwise && n % LEAF) || (long_rows && !RS_VARS[v].tree32))
            continue;
        int regs, local;
        job j = rs_job(mod, &RS_VARS[v], dx, dls, dls2, dout, rows, n, &regs, &local);
        CK(C.MemsetD32(dout, 0xffffffffu, rows));
        CK(C.MemsetD32(dls, 0xffffffffu, rows * nl));
        job_run(&j);
        CK(C.CtxSynchronize());
        CK(C.MemcpyDtoH(got, dout, rows * sizeof(float)));
        char msg[128], name[64];
        rs_verify(got, ref, ref64, rows, RS_VARS[v].bitwise, msg, sizeof msg);
        if (timed) {
            double ms = job_median_ms(&j);
            snprintf(name, sizeof name, "%zux%zu %s", rows, n, RS_VARS[v].name);
            add_result(name, ms, bytes, *copy_gbs, msg, regs, local);
            /* the leaf pass alone: what the second launch costs */
            job j1 = j;
            j1.nl = 1;
            double ms1 = job_median_ms(&j1);
            add_result("  leaf pass only", ms1, bytes, *copy_gbs, "", regs, local);
            printf("  %-32s %.4f ms (leaf pass %.4f, %d launches): %s\n", name, ms, ms1, j.nl, msg);
        } else {
            snprintf(name, sizeof name, "%zux%zu %s%s", rows, n, RS_VARS[v].fn, RS_VARS[v].tree32 ? "+t32" : "");
            add_result(name, 0, 0, 0, msg, regs, local);
            printf("  %-26s %s\n", name, msg);
        }
        fflush(stdout);
    }
    CK(C.MemFree(dx));
    CK(C.MemFree(dls));
    CK(C.MemFree(dls2));
    CK(C.MemFree(dout));
    free(x);
    free(ref);
    free(got);
    free(ref64);
}

/* ---- main ------------------------------------------------------------------------------------------- */

static CUmodule load_module(const char *text)
{
    static char info[1 << 16], errl[1 << 14];
    CUjit_option opt[5] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                           CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE};
    void *val[5] = {info, (void *)(uintptr_t)sizeof info, errl, (void *)(uintptr_t)sizeof errl, (void *)(uintptr_t)1};
    CUmodule mod;
    double t0 = now_ms();
    CUresult rc = C.ModuleLoadDataEx(&mod, text, 5, opt, val);
    double t1 = now_ms();
    if (rc != CUDA_SUCCESS)
        die("cuModuleLoadDataEx: %d\n%s", (int)rc, errl);
    printf("cuModuleLoadDataEx (driver JIT of all kernels): %.1f ms\n%s\n", t1 - t0, info);
    return mod;
}

/* The first call of one new element-wise kernel, as a fused chain would pay it: LLVM (IR, O3,
 * PTX) then the driver's JIT without logs, then one launch on 2^20 elements and a sync. */
static void first_call_probe(void)
{
    double t0 = now_ms();
    ptx p = build_ptx(NULL, K_EW_VEC1_ONLY);
    double t1 = now_ms();
    CUmodule mod;
    CK(C.ModuleLoadDataEx(&mod, p.text, 0, NULL, NULL));
    CUfunction f;
    CK(C.ModuleGetFunction(&f, mod, "ew_vec1"));
    double t2 = now_ms();
    size_t n = 1 << 20;
    CUdeviceptr d = dalloc(4 * n * sizeof(float));
    CK(C.MemsetD32(d, 0x3f800000u, 3 * n));
    uint64_t a[5] = {d, d + n * 4, d + 2 * n * 4, d + 3 * n * 4, n};
    job j = {.nl = 1};
    j.l[0] = mk_launch(f, (unsigned)(n / 4 / 256), 256, 5, a);
    double t3 = now_ms();
    job_run(&j);
    CK(C.CtxSynchronize());
    double t4 = now_ms();
    CK(C.MemFree(d));
    printf("first call of one kernel (ew_vec1): LLVM %.1f ms (IR %.1f, O3 %.1f, PTX %.1f), driver JIT %.1f ms, "
           "launch+sync %.2f ms\n",
           t1 - t0, p.ms_ir, p.ms_opt, p.ms_emit, t2 - t1, t4 - t3);
    char msg[96];
    snprintf(msg, sizeof msg, "LLVM %.1f + JIT %.1f + run %.2f ms", t1 - t0, t2 - t1, t4 - t3);
    add_result("first call ew_vec1 (2^20)", t4 - t0, 0, 0, msg, 0, 0);
    free(p.text);
}

int main(int argc, char **argv)
{
    const char *ptx_path = NULL, *ll_path = NULL;
    int self = 0, no_gpu = 0;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--selftest"))
            self = 1;
        else if (!strcmp(argv[i], "--no-gpu"))
            no_gpu = 1;
        else if (!strcmp(argv[i], "--ptx") && i + 1 < argc)
            ptx_path = argv[++i];
        else if (!strcmp(argv[i], "--ll") && i + 1 < argc)
            ll_path = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else
            die("usage: ptx_probe [--selftest] [--ptx FILE] [--ll FILE] [--seed N] [--no-gpu]");
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((self || no_gpu) && selftest())
        return 1;
    ptx p = build_ptx(ll_path, K_ALL);
    printf("LLVM: IR %.1f ms, O3 %.1f ms, PTX emission %.1f ms (11 kernels, %zu bytes of PTX)\n", p.ms_ir,
           p.ms_opt, p.ms_emit, strlen(p.text));
    ptx_stats(p.text);
    if (ptx_path) {
        FILE *f = fopen(ptx_path, "w");
        if (!f || fputs(p.text, f) < 0 || fclose(f))
            die("cannot write %s", ptx_path);
    }
    if (no_gpu || !cu_open()) {
        printf("no CUDA driver here: PTX only\n");
        free(p.text);
        return 0;
    }
    printf("seed %llu, host threads %d\n", (unsigned long long)seed, par_parts());
    first_call_probe();
    CUmodule mod = load_module(p.text);
    free(p.text);

    CUdeviceptr spare;
    double copy_gbs, copy512 = 0;
    run_elementwise(mod, (size_t)1 << 28, seed, &spare, &copy_gbs);
    /* shapes that exercise partial leaves, odd leaf counts, rows not 16-byte aligned */
    static const size_t small[][2] = {{37, 4 * LEAF + 1000}, {5, 3 * LEAF + 3}, {3, 100},
                                      {2, 7 * LEAF},        {1, 1},           {3, 70 * LEAF + 5}};
    for (size_t s = 0; s < sizeof small / sizeof small[0]; s++)
        run_rowsum_shape(mod, small[s][0], small[s][1], seed + 11 + s, 0, 0, NULL);
    run_rowsum_shape(mod, 16384, 8192, seed + 7, 1, spare, &copy512);
    /* few long rows: the whole-tensor sum of TARGETS.md (one row of 65536 leaves) and 64 rows */
    run_rowsum_shape(mod, 64, (size_t)1 << 22, seed + 8, 1, spare, &copy512);
    run_rowsum_shape(mod, 1, (size_t)1 << 28, seed + 9, 1, spare, &copy512);
    CK(C.MemFree(spare));
    print_table();
    int bad = 0;
    for (int i = 0; i < g_nres; i++)
        bad += strstr(g_res[i].check, "differ") && !strstr(g_res[i].check, "other order");
    printf("%s\n", bad ? "SOME CHECKS FAILED" : "all checks passed");
    return bad != 0;
}
