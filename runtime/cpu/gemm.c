/* Matmul on the cpu device: packed panels, cache blocking and an LLVM micro-kernel
 * (codegen/llvm_gemm.c), split across the device's thread pool.
 *
 * Numerics (include/burnc.h, burnc_matmul): every element of C is one chain of fma over
 * k = 0..K-1 in increasing order, starting from +0.0, in f32 or f64 (f16 and bf16 operands are
 * widened exactly to f32 while packing and the f32 result is rounded once to the output dtype).
 * The micro-kernel does one fma per k per element; K is cut into blocks of kc that are run in
 * order, the first starting from +0.0 and each later one from the C the previous one left.
 * Packing copies values (or widens them exactly) and pads with zeros that only reach discarded
 * lanes. So MR x NR, MC/KC/NC, the split across threads and tuning never change a bit: the
 * portable C micro-kernel below (used for tiny products and when LLVM cannot compile) gives
 * the same results too.
 *
 * Loop nest (BLIS): for each batch, for jc over N by NC, for pc over K by KC: pack B[pc.., jc..]
 * (KC x NC, in NR-wide row slivers) once, shared; then tasks over row blocks of C (and column
 * chunks when there are few rows) each pack their MC x KC block of A (MR-wide column slivers)
 * into a buffer of their own and run the macro-kernel: jr over NR slivers of B, ir over MR
 * slivers of A, one micro-kernel call per tile. Many small batches run one batch per task
 * instead. Operands are read through their views (any strides, transposed or broadcast); only
 * packing reads them.
 *
 * Blocking comes from the cache sizes sysfs reports (the BLIS analytical model, simplified):
 * KC so that an MR x KC sliver of A and a KC x NR sliver of B fit in L1 together, MC so that
 * the MC x KC block of A takes half of L2, NC so that the KC x NC panel of B takes half of L3.
 *
 * Autotune (family "cpu.gemm"): the micro-kernel shape once per ISA and dtype ("uk" keys,
 * timed on in-cache packed tiles), then one of three blockings around the analytical one per
 * shape bucket (dtype, micro-kernel, M, N, K rounded into buckets, operand layouts), timed on
 * private buffers of the launch's shape with M and N capped at TUNE_MAX_MN. */
#include <math.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autotune.h"
#include "burnc_config.h"
#include "codegen/kcache.h"
#include "cpu.h"

#ifdef BURNC_LLVM_VERSION
#define COMPILER_ID "llvm-" BURNC_LLVM_VERSION
#else
#define COMPILER_ID "llvm-19"
#endif

enum {
    SMALL_WORK = 1 << 15, /* M*N*K below this: the portable kernel, no compile */
    BATCH_TASK_WORK = 1 << 22, /* batches at most this big run one per task */
    TUNE_MAX_MN = 2048,
    PORT_MR = 4, PORT_NR = 8,
};

/* ---- Micro-kernels ------------------------------------------------------------------------ */

typedef struct ukernel {
    int bits, mr, nr, lanes;
    cg_gemm_fn fn;
} ukernel;

/* The portable micro-kernel: the same chains with the C library's fma. */
static void port_f32(int64_t kc, const void *a, const void *b, void *c, int64_t ldc, int64_t accumulate)
{
    const float *pa = a, *pb = b;
    float *pc = c;
    for (int i = 0; i < PORT_MR; i++)
        for (int j = 0; j < PORT_NR; j++) {
            float s = accumulate ? pc[i * ldc + j] : 0.0f;
            for (int64_t k = 0; k < kc; k++)
                s = fmaf(pa[k * PORT_MR + i], pb[k * PORT_NR + j], s);
            pc[i * ldc + j] = s;
        }
}

static void port_f64(int64_t kc, const void *a, const void *b, void *c, int64_t ldc, int64_t accumulate)
{
    const double *pa = a, *pb = b;
    double *pc = c;
    for (int i = 0; i < PORT_MR; i++)
        for (int j = 0; j < PORT_NR; j++) {
            double s = accumulate ? pc[i * ldc + j] : 0.0;
            for (int64_t k = 0; k < kc; k++)
                s = fma(pa[k * PORT_MR + i], pb[k * PORT_NR + j], s);
            pc[i * ldc + j] = s;
        }
}

static ukernel portable(int bits)
{
    return (ukernel){.bits = bits, .mr = PORT_MR, .nr = PORT_NR, .lanes = 1, .fn = bits == 32 ? port_f32 : port_f64};
}

/* Shapes in vectors (rows x vectors per row); a host uses those whose accumulators, B vectors
 * and broadcast fit its vector registers. */
typedef struct uk_shape {
    int mr, nv;
} uk_shape;
static const uk_shape UK_SHAPES[] = {{6, 2}, {8, 2}, {12, 2}, {14, 2}, {8, 3}, {4, 3}, {4, 2}};
enum { N_UK = sizeof UK_SHAPES / sizeof UK_SHAPES[0], N_BLOCKINGS = 3, N_CANDS = N_UK + N_BLOCKINGS };

static int host_vector_bits(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f"))
        return 512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return 256;
#endif
    return 128;
}

static bool uk_fits(int u)
{
    int regs = host_vector_bits() == 512 ? 32 : 16;
    return UK_SHAPES[u].mr * UK_SHAPES[u].nv + UK_SHAPES[u].nv + 1 <= regs;
}

static int uk_heuristic(void) { return host_vector_bits() == 512 ? 2 : 0; } /* 12x2 : 6x2 */

/* Loaded micro-kernels, for the life of the process (code does not depend on the device). */
static struct {
    mtx_t lock;
    once_flag once;
    int n;
    struct {
        cg_gemm_spec spec;
        cg_gemm_fn fn; /* NULL: compiling failed, use the portable kernel */
    } e[2 * N_UK];
    cg_cpu_kernel objs[2 * N_UK];
    kc_cache *disk;
} uks = {.once = ONCE_FLAG_INIT};

static void uks_init(void)
{
    mtx_init(&uks.lock, mtx_plain);
    uks.disk = kc_open(NULL, NULL, 0);
}

static uint64_t spec_key(const cg_gemm_spec *s)
{
    char text[64];
    int n = snprintf(text, sizeof text, "gemm f%d %dx%d lanes %d", s->bits, s->mr, s->nr, s->lanes);
    return kc_key(kc_hash(text, (size_t)n, 0x67656d6d), kc_host_fingerprint(), COMPILER_ID);
}

/* The loader finds the micro-kernel as a kernel's rows function: cast it back (through a
 * generic function pointer type, which says the cast is meant). */
static cg_gemm_fn as_gemm(const cg_cpu_kernel *obj) { return (cg_gemm_fn)(void (*)(void))obj->rows; }

/* The disk cache, then LLVM; NULL (logged) when neither gives code. Called with uks.lock. */
static cg_gemm_fn uk_build(const cg_gemm_spec *s, cg_cpu_kernel *obj)
{
    uint64_t key = spec_key(s);
    char err[512] = "";
    void *data = NULL;
    size_t size = 0;
    if (uks.disk && kc_get(uks.disk, key, &data, &size)) {
        bool ok = cg_object_load(data, size, obj, err, sizeof err);
        free(data);
        if (ok)
            return as_gemm(obj);
        rt_log("codegen", "gemm micro-kernel: cached object unusable (%s): compiling again", err);
    }
    const cg_llvm_api *api = rt_llvm_api();
    if (!api) {
        rt_log("codegen", "gemm micro-kernel: %s: the portable kernel runs instead", burnc_error_message());
        burnc_error_clear();
        return NULL;
    }
    if (!api->compile_gemm(s, &data, &size, err, sizeof err) || !cg_object_load(data, size, obj, err, sizeof err)) {
        free(data);
        rt_log("codegen", "gemm micro-kernel f%d %dx%d: %s: the portable kernel runs instead", s->bits, s->mr, s->nr,
               err);
        return NULL;
    }
    bool stored = uks.disk && kc_put(uks.disk, key, data, size);
    free(data);
    rt_log("codegen", "gemm micro-kernel f%d %dx%d (%d lanes): compiled%s", s->bits, s->mr, s->nr, s->lanes,
           stored ? ", stored on disk" : "");
    return as_gemm(obj);
}

/* Micro-kernel shape u (of UK_SHAPES) for f32 or f64; the portable kernel if it cannot be had. */
static ukernel uk_get(int bits, int u)
{
    call_once(&uks.once, uks_init);
    int lanes = host_vector_bits() / bits;
    cg_gemm_spec s = {.bits = bits, .mr = UK_SHAPES[u].mr, .nr = UK_SHAPES[u].nv * lanes, .lanes = lanes};
    mtx_lock(&uks.lock);
    cg_gemm_fn fn = NULL;
    int i = 0;
    while (i < uks.n && memcmp(&uks.e[i].spec, &s, sizeof s) != 0)
        i++;
    if (i < uks.n) {
        fn = uks.e[i].fn;
    } else if (i < 2 * N_UK) {
        fn = uk_build(&s, &uks.objs[i]);
        uks.e[i].spec = s;
        uks.e[i].fn = fn;
        uks.n++;
    }
    mtx_unlock(&uks.lock);
    if (!fn)
        return portable(bits);
    return (ukernel){.bits = bits, .mr = s.mr, .nr = s.nr, .lanes = lanes, .fn = fn};
}

/* ---- Cache sizes and blocking ------------------------------------------------------------- */

static once_flag caches_once = ONCE_FLAG_INIT;
static int64_t cache_l1 = 32 << 10, cache_l2 = 512 << 10, cache_l3 = 8 << 20;

static int64_t sysfs_value(int index, const char *what, char *text, size_t cap)
{
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", index, what);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    unsigned long v = 0;
    char unit = 0;
    int got = text ? (fgets(text, (int)cap, f) != NULL) : fscanf(f, "%lu%c", &v, &unit);
    fclose(f);
    if (text)
        return got ? 0 : -1;
    if (got < 1)
        return -1;
    return unit == 'K' ? (int64_t)v << 10 : unit == 'M' ? (int64_t)v << 20 : (int64_t)v;
}

static void read_caches(void)
{
    for (int i = 0; i < 8; i++) {
        char type[32] = "";
        int64_t level = sysfs_value(i, "level", NULL, 0), size = sysfs_value(i, "size", NULL, 0);
        if (level < 1 || size <= 0 || sysfs_value(i, "type", type, sizeof type) < 0 || strncmp(type, "Instruction", 11) == 0)
            continue;
        *(level == 1 ? &cache_l1 : level == 2 ? &cache_l2 : &cache_l3) = size;
    }
    rt_log("runtime", "gemm: caches L1 %lld KiB, L2 %lld KiB, L3 %lld KiB", (long long)(cache_l1 >> 10),
           (long long)(cache_l2 >> 10), (long long)(cache_l3 >> 10));
}

int64_t cpu_cache_size(int level)
{
    call_once(&caches_once, read_caches);
    return level <= 1 ? cache_l1 : level == 2 ? cache_l2 : cache_l3;
}

typedef struct blocking {
    int64_t mc, kc, nc;
} blocking;

static int64_t round_down(int64_t v, int64_t m, int64_t lo) { return v / m * m < lo ? lo : v / m * m; }

/* The analytical blocking for micro-kernel k, scaled by candidate b: b0 as the model says,
 * b1 twice the KC and half the MC (the same A block; fewer passes over C), b2 half the KC
 * and twice the MC. */
static blocking blocking_for(const ukernel *k, int b)
{
    call_once(&caches_once, read_caches);
    int64_t es = k->bits / 8;
    int64_t kc = round_down(cache_l1 / ((k->mr + k->nr) * es), 8, 64);
    int64_t mc = round_down(cache_l2 / 2 / (kc * es), k->mr, k->mr);
    if (b == 1)
        kc *= 2, mc = round_down(mc / 2, k->mr, k->mr);
    else if (b == 2)
        kc = round_down(kc / 2, 8, 32), mc *= 2;
    int64_t nc = round_down(cache_l3 / 2 / (kc * es), k->nr, k->nr);
    return (blocking){.mc = mc, .kc = kc, .nc = nc};
}

/* ---- One matmul --------------------------------------------------------------------------- */

typedef struct gemm {
    burnc_dtype_t dt; /* of the operands */
    int64_t esz;      /* compute element size */
    ukernel k;
    blocking bl;
    int64_t M, N, K, batches;
    int rb; /* batch axes */
    int64_t bshape[BURNC_MAX_RANK];
    const char *a, *b; /* operand storages */
    int64_t a_off, b_off, a_rs, a_cs, b_rs, b_cs, a_bst[BURNC_MAX_RANK], b_bst[BURNC_MAX_RANK];
    char *c; /* C in the compute dtype, dense [batches, M, N] */
    /* The epilogue: called with flat ranges of C once they are final (NULL: none). */
    void (*epi)(void *ctx, int64_t first, int64_t count);
    void *epi_ctx;
    int threads;
    /* buffers: per slot an A block and a tile, B panels per slot in batch mode, else one */
    int n_slots;
    atomic_int *slot_busy;
    char **slot_a, **slot_b, **slot_t;
    char *panel_b;
} gemm;

static void operand_offsets(const gemm *g, int64_t t, int64_t *oa, int64_t *ob)
{
    *oa = g->a_off, *ob = g->b_off;
    for (int d = g->rb - 1; d >= 0; d--) {
        int64_t i = t % g->bshape[d];
        t /= g->bshape[d];
        *oa += i * g->a_bst[d];
        *ob += i * g->b_bst[d];
    }
}

/* Packing: A[i0.., p0..] (mc x kc) as MR-wide column slivers, B[p0.., j0..] (kc x nc) as
 * NR-wide row slivers, zero-padded; f16 and bf16 widened to f32 (exactly). */
#define PACKERS(SUF, TS, TC, LOAD)                                                                        \
    static void pack_a_##SUF(void *dst, const void *src, int64_t rs, int64_t cs, int64_t mc, int64_t kc, \
                             int mr)                                                                      \
    {                                                                                                     \
        TC *out = dst;                                                                                    \
        const TS *a = src;                                                                                \
        for (int64_t s = 0; s < mc; s += mr) {                                                            \
            int64_t h = mc - s < mr ? mc - s : mr;                                                        \
            if (cs == 1 && h == mr) { /* rows are contiguous: read each along k */                        \
                for (int64_t i = 0; i < mr; i++)                                                          \
                    for (int64_t k = 0; k < kc; k++)                                                      \
                        out[k * mr + i] = LOAD(a[(s + i) * rs + k]);                                      \
                out += kc * mr;                                                                           \
                continue;                                                                                 \
            }                                                                                             \
            for (int64_t k = 0; k < kc; k++, out += mr) {                                                 \
                const TS *p = a + s * rs + k * cs;                                                        \
                int64_t i = 0;                                                                            \
                for (; i < h; i++)                                                                        \
                    out[i] = LOAD(p[i * rs]);                                                             \
                for (; i < mr; i++)                                                                       \
                    out[i] = 0;                                                                           \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    static void pack_b_##SUF(void *dst, const void *src, int64_t rs, int64_t cs, int64_t kc, int64_t nc, \
                             int nr)                                                                      \
    {                                                                                                     \
        TC *out = dst;                                                                                    \
        const TS *b = src;                                                                                \
        for (int64_t t = 0; t < nc; t += nr) {                                                            \
            int64_t w = nc - t < nr ? nc - t : nr;                                                        \
            if (rs == 1 && cs != 1 && w == nr) { /* transposed: columns are contiguous along k */          \
                for (int64_t j = 0; j < nr; j++)                                                          \
                    for (int64_t k = 0; k < kc; k++)                                                      \
                        out[k * nr + j] = LOAD(b[(t + j) * cs + k]);                                      \
                out += kc * nr;                                                                           \
                continue;                                                                                 \
            }                                                                                             \
            for (int64_t k = 0; k < kc; k++, out += nr) {                                                 \
                const TS *p = b + k * rs + t * cs;                                                        \
                int64_t j = 0;                                                                            \
                if (cs == 1)                                                                              \
                    for (; j < w; j++)                                                                    \
                        out[j] = LOAD(p[j]);                                                              \
                else                                                                                      \
                    for (; j < w; j++)                                                                    \
                        out[j] = LOAD(p[j * cs]);                                                         \
                for (; j < nr; j++)                                                                       \
                    out[j] = 0;                                                                           \
            }                                                                                             \
        }                                                                                                 \
    }
#define LOAD_SAME(x) (x)
PACKERS(f32, float, float, LOAD_SAME)
PACKERS(f64, double, double, LOAD_SAME)
PACKERS(f16, uint16_t, float, burnc_f16_to_f32)
PACKERS(bf16, uint16_t, float, burnc_bf16_to_f32)

static void pack_a(const gemm *g, void *dst, int64_t off, int64_t i0, int64_t p0, int64_t mc, int64_t kc)
{
    int64_t at = off + i0 * g->a_rs + p0 * g->a_cs, es = (int64_t)ir_dtype_size(g->dt);
    const char *src = g->a + at * es;
    switch (g->dt) {
    case BURNC_DTYPE_F64: pack_a_f64(dst, src, g->a_rs, g->a_cs, mc, kc, g->k.mr); break;
    case BURNC_DTYPE_F16: pack_a_f16(dst, src, g->a_rs, g->a_cs, mc, kc, g->k.mr); break;
    case BURNC_DTYPE_BF16: pack_a_bf16(dst, src, g->a_rs, g->a_cs, mc, kc, g->k.mr); break;
    default: pack_a_f32(dst, src, g->a_rs, g->a_cs, mc, kc, g->k.mr); break;
    }
}

static void pack_b(const gemm *g, void *dst, int64_t off, int64_t p0, int64_t j0, int64_t kc, int64_t nc)
{
    int64_t at = off + p0 * g->b_rs + j0 * g->b_cs, es = (int64_t)ir_dtype_size(g->dt);
    const char *src = g->b + at * es;
    switch (g->dt) {
    case BURNC_DTYPE_F64: pack_b_f64(dst, src, g->b_rs, g->b_cs, kc, nc, g->k.nr); break;
    case BURNC_DTYPE_F16: pack_b_f16(dst, src, g->b_rs, g->b_cs, kc, nc, g->k.nr); break;
    case BURNC_DTYPE_BF16: pack_b_bf16(dst, src, g->b_rs, g->b_cs, kc, nc, g->k.nr); break;
    default: pack_b_f32(dst, src, g->b_rs, g->b_cs, kc, nc, g->k.nr); break;
    }
}

/* C[0..mc, 0..nc] (c points at its first element, row stride N) from packed A and B. Edge
 * tiles go through tmp (MR x NR) so the micro-kernel always writes whole tiles. */
static void macro_kernel(const gemm *g, const char *ap, const char *bp, char *c, int64_t mc, int64_t nc, int64_t kc,
                         bool accumulate, char *tmp)
{
    const int mr = g->k.mr, nr = g->k.nr;
    const int64_t es = g->esz, ldc = g->N;
    for (int64_t jr = 0; jr < nc; jr += nr) {
        int64_t w = nc - jr < nr ? nc - jr : nr;
        const char *pb = bp + jr * kc * es;
        for (int64_t ir = 0; ir < mc; ir += mr) {
            int64_t h = mc - ir < mr ? mc - ir : mr;
            const char *pa = ap + ir * kc * es;
            char *cc = c + (ir * ldc + jr) * es;
            if (h == mr && w == nr) {
                g->k.fn(kc, pa, pb, cc, ldc, accumulate);
                continue;
            }
            for (int64_t i = 0; accumulate && i < h; i++)
                memcpy(tmp + i * nr * es, cc + i * ldc * es, (size_t)(w * es));
            g->k.fn(kc, pa, pb, tmp, nr, accumulate);
            for (int64_t i = 0; i < h; i++)
                memcpy(cc + i * ldc * es, tmp + i * nr * es, (size_t)(w * es));
        }
    }
}

/* One (batch, jc, pc) step: the B panel is packed, tasks cover row blocks x column chunks. */
typedef struct step {
    const gemm *g;
    int64_t t, oa, ob;
    char *c; /* the batch's C */
    int64_t jc, nc, pc, kc;
    int64_t mc, n_ic; /* row blocks of mc rows (the last may be shorter) */
    int64_t ncw, n_jr; /* column chunks of ncw columns, a multiple of NR */
    int64_t b_tasks, b_per; /* B packing: tasks of b_per slivers */
    char *panel;
    int slot; /* >= 0: a batch task's own slot; < 0: claim one per task */
} step;

static int slot_claim(const gemm *g)
{
    for (;;)
        for (int s = 0; s < g->n_slots; s++) {
            int free_ = 0;
            if (atomic_compare_exchange_strong(&g->slot_busy[s], &free_, 1))
                return s;
        }
}

static void pack_b_task(void *ctx, int64_t i)
{
    const step *st = ctx;
    const gemm *g = st->g;
    int64_t j0 = i * st->b_per * g->k.nr, n = st->nc - j0;
    if (n > st->b_per * g->k.nr)
        n = st->b_per * g->k.nr;
    if (n > 0)
        pack_b(g, st->panel + j0 * st->kc * g->esz, st->ob, st->pc, st->jc + j0, st->kc, n);
}

static void compute_task(void *ctx, int64_t i)
{
    const step *st = ctx;
    const gemm *g = st->g;
    int64_t ic = i / st->n_jr, jr = i % st->n_jr;
    int64_t i0 = ic * st->mc, mc = g->M - i0 < st->mc ? g->M - i0 : st->mc;
    int64_t j0 = jr * st->ncw, nc = st->nc - j0 < st->ncw ? st->nc - j0 : st->ncw;
    if (mc <= 0 || nc <= 0)
        return;
    int s = st->slot >= 0 ? st->slot : slot_claim(g);
    pack_a(g, g->slot_a[s], st->oa, i0, st->pc, mc, st->kc);
    macro_kernel(g, g->slot_a[s], st->panel + j0 * st->kc * g->esz, st->c + (i0 * g->N + st->jc + j0) * g->esz, mc,
                 nc, st->kc, st->pc > 0, g->slot_t[s]);
    if (g->epi && st->pc + st->kc >= g->K) /* the block's last K step: these rows of C are final */
        for (int64_t i = i0; i < i0 + mc; i++)
            g->epi(g->epi_ctx, (st->t * g->M + i) * g->N + st->jc + j0, nc);
    if (st->slot < 0)
        atomic_store(&g->slot_busy[s], 0);
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Batch t on the pool (pool != NULL) or inline on slot `slot`. */
static void run_batch(const gemm *g, cpu_threads *pool, int64_t t, int slot)
{
    step st = {.g = g, .t = t, .slot = pool ? -1 : slot};
    operand_offsets(g, t, &st.oa, &st.ob);
    st.c = g->c + t * g->M * g->N * g->esz;
    int want = pool ? 2 * g->threads : 1; /* tasks per step: a few per thread balance */
    int64_t mr = g->k.mr, nr = g->k.nr;
    st.n_ic = cdiv(g->M, g->bl.mc);
    if (st.n_ic < want)
        st.n_ic = cdiv(g->M, mr) < want ? cdiv(g->M, mr) : want;
    st.mc = cdiv(cdiv(g->M, st.n_ic), mr) * mr;
    st.n_ic = cdiv(g->M, st.mc);
    st.panel = pool ? g->panel_b : g->slot_b[slot];
    for (st.jc = 0; st.jc < g->N; st.jc += g->bl.nc) {
        st.nc = g->N - st.jc < g->bl.nc ? g->N - st.jc : g->bl.nc;
        int64_t slivers = cdiv(st.nc, nr);
        st.n_jr = st.n_ic >= want ? 1 : cdiv(want, st.n_ic);
        if (st.n_jr > slivers)
            st.n_jr = slivers;
        st.ncw = cdiv(slivers, st.n_jr) * nr;
        st.n_jr = cdiv(st.nc, st.ncw);
        st.b_tasks = pool && slivers >= 2 * g->threads ? 2 * g->threads : 1;
        st.b_per = cdiv(slivers, st.b_tasks);
        for (st.pc = 0; st.pc < g->K; st.pc += g->bl.kc) {
            st.kc = g->K - st.pc < g->bl.kc ? g->K - st.pc : g->bl.kc;
            if (pool) {
                cpu_threads_run(pool, st.b_tasks, pack_b_task, &st);
                cpu_threads_run(pool, st.n_ic * st.n_jr, compute_task, &st);
            } else {
                for (int64_t i = 0; i < st.b_tasks; i++)
                    pack_b_task(&st, i);
                for (int64_t i = 0; i < st.n_ic * st.n_jr; i++)
                    compute_task(&st, i);
            }
        }
    }
}

static void batch_task(void *ctx, int64_t t)
{
    const gemm *g = ctx;
    int s = slot_claim(g);
    run_batch(g, NULL, t, s);
    atomic_store(&g->slot_busy[s], 0);
}

static void gemm_free(gemm *g)
{
    for (int s = 0; s < g->n_slots; s++) {
        free(g->slot_a ? g->slot_a[s] : NULL);
        free(g->slot_b ? g->slot_b[s] : NULL);
        free(g->slot_t ? g->slot_t[s] : NULL);
    }
    free(g->slot_a);
    free(g->slot_b);
    free(g->slot_t);
    free((void *)g->slot_busy);
    free(g->panel_b);
}

static void *buffer(int64_t bytes) { return aligned_alloc(64, (size_t)((bytes + 127) / 64 * 64)); }

/* Runs g (operands, C, k and bl set) on the pool; false when out of memory. */
static bool gemm_exec(gemm *g, cpu_threads *pool)
{
    if (g->M == 0 || g->N == 0 || g->batches == 0)
        return true;
    if (g->K == 0) { /* no terms: every chain is its starting +0.0 */
        memset(g->c, 0, (size_t)(g->batches * g->M * g->N * g->esz));
        if (g->epi)
            g->epi(g->epi_ctx, 0, g->batches * g->M * g->N);
        return true;
    }
    g->threads = cpu_threads_count(pool);
    bool per_batch = g->batches >= g->threads && g->threads > 1 && g->M * g->N * g->K <= BATCH_TASK_WORK;
    int64_t mr = g->k.mr, nr = g->k.nr, es = g->esz;
    int64_t kc = g->K < g->bl.kc ? g->K : g->bl.kc;
    int64_t mc = (g->M < g->bl.mc ? cdiv(g->M, mr) * mr : g->bl.mc) + mr;
    int64_t nc = g->N < g->bl.nc ? cdiv(g->N, nr) * nr : g->bl.nc;
    g->n_slots = g->threads;
    g->slot_busy = calloc((size_t)g->n_slots, sizeof *g->slot_busy);
    g->slot_a = calloc((size_t)g->n_slots, sizeof *g->slot_a);
    g->slot_b = calloc((size_t)g->n_slots, sizeof *g->slot_b);
    g->slot_t = calloc((size_t)g->n_slots, sizeof *g->slot_t);
    bool ok = g->slot_busy && g->slot_a && g->slot_b && g->slot_t;
    for (int s = 0; ok && s < g->n_slots; s++) {
        atomic_init(&g->slot_busy[s], 0);
        ok = (g->slot_a[s] = buffer(mc * kc * es)) && (g->slot_t[s] = buffer(mr * nr * es)) &&
             (!per_batch || (g->slot_b[s] = buffer(nc * kc * es)));
    }
    ok = ok && (per_batch || (g->panel_b = buffer(nc * kc * es)));
    if (ok) {
        if (per_batch)
            cpu_threads_run(pool, g->batches, batch_task, g);
        else
            for (int64_t t = 0; t < g->batches; t++)
                run_batch(g, pool, t, 0);
    }
    gemm_free(g);
    return ok;
}

/* ---- Autotune ----------------------------------------------------------------------------- */

static char cand_names[N_CANDS][16];
static const char *cand_ptrs[N_CANDS];
static at_family family = {"cpu.gemm", N_CANDS, cand_ptrs};
static once_flag family_once = ONCE_FLAG_INIT;

static void family_init(void)
{
    for (int u = 0; u < N_UK; u++)
        snprintf(cand_names[u], sizeof cand_names[u], "uk%dx%dv", UK_SHAPES[u].mr, UK_SHAPES[u].nv);
    for (int b = 0; b < N_BLOCKINGS; b++)
        snprintf(cand_names[N_UK + b], sizeof cand_names[N_UK + b], "b%d", b);
    for (int c = 0; c < N_CANDS; c++)
        cand_ptrs[c] = cand_names[c];
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Micro-kernel candidates: a whole 768^3 gemm on private buffers with each shape and its
 * analytical blocking, on the pool. (Timing the kernels alone on tiles in L1 favoured the
 * largest tiles, which lose at real sizes to packing and the caches.) */
enum { UK_TUNE_N = 768 };
typedef struct uk_bench {
    int bits;
    cpu_threads *pool;
    char *a, *b, *c;
} uk_bench;

static double time_uk(void *user, int c)
{
    uk_bench *ub = user;
    if (c >= N_UK)
        return -1;
    gemm g = {.dt = ub->bits == 64 ? BURNC_DTYPE_F64 : BURNC_DTYPE_F32, .esz = ub->bits / 8,
              .k = uk_get(ub->bits, c), .M = UK_TUNE_N, .N = UK_TUNE_N, .K = UK_TUNE_N, .batches = 1,
              .a_rs = UK_TUNE_N, .a_cs = 1, .b_rs = UK_TUNE_N, .b_cs = 1, .a = ub->a, .b = ub->b, .c = ub->c};
    if (g.k.lanes == 1)
        return -1; /* did not compile: the portable kernel is no candidate */
    g.bl = blocking_for(&g.k, 0);
    double t0 = now_ms();
    return gemm_exec(&g, ub->pool) ? now_ms() - t0 : -1;
}

static int choose_uk(int bits, cpu_threads *pool)
{
    bool valid[N_CANDS] = {0};
    for (int u = 0; u < N_UK; u++)
        valid[u] = uk_fits(u);
    char key[48];
    snprintf(key, sizeof key, "uk f%d v%d", bits, host_vector_bits());
    at_query q = {.fingerprint = cpu_tune_fingerprint(), .family = &family, .key = key, .heuristic = uk_heuristic(),
                  .valid = valid};
    uk_bench ub = {.bits = bits, .pool = pool};
    int64_t bytes = (int64_t)UK_TUNE_N * UK_TUNE_N * (bits / 8);
    bool timing = at_get_mode() == AT_MODE_ON && (ub.a = buffer(bytes)) && (ub.b = buffer(bytes)) &&
                  (ub.c = buffer(bytes));
    if (timing) { /* zeros: finite whatever the shape */
        memset(ub.a, 0, (size_t)bytes), memset(ub.b, 0, (size_t)bytes);
    }
    int c = at_decide(&q, timing ? time_uk : NULL, &ub, NULL);
    free(ub.a), free(ub.b), free(ub.c);
    return c < N_UK && valid[c] ? c : uk_heuristic();
}

/* Blocking candidates: the whole gemm on private buffers. */
typedef struct blk_bench {
    gemm g;
    cpu_threads *pool;
    char *a, *b, *c;
} blk_bench;

static double time_blocking(void *user, int c)
{
    blk_bench *bb = user;
    if (c < N_UK)
        return -1;
    gemm g = bb->g;
    g.bl = blocking_for(&g.k, c - N_UK);
    double t0 = now_ms();
    return gemm_exec(&g, bb->pool) ? now_ms() - t0 : -1;
}

static char layout_of(int64_t rs, int64_t cs) { return cs == 1 ? 'n' : rs == 1 ? 't' : 's'; }

/* The blocking for g (k chosen), tuned on private buffers when the mode says so. */
static blocking choose_blocking(const gemm *g0, cpu_threads *pool)
{
    bool valid[N_CANDS] = {0};
    for (int b = 0; b < N_BLOCKINGS; b++)
        valid[N_UK + b] = true;
    at_buckets bk = at_get_buckets();
    char key[160];
    snprintf(key, sizeof key, "f%lld %s%dx%d m%lld n%lld k%lld a%c b%c", (long long)g0->esz * 8,
             g0->k.lanes == 1 ? "p" : "u", g0->k.mr, g0->k.nr, (long long)at_bucket(g0->M, bk),
             (long long)at_bucket(g0->N, bk), (long long)at_bucket(g0->K, bk), layout_of(g0->a_rs, g0->a_cs),
             layout_of(g0->b_rs, g0->b_cs));
    at_query q = {.fingerprint = cpu_tune_fingerprint(), .family = &family, .key = key, .heuristic = N_UK,
                  .valid = valid};
    blk_bench bb = {.pool = pool};
    bool timing = at_get_mode() == AT_MODE_ON && g0->k.lanes > 1;
    if (timing) {
        /* the launch's layout classes and K, M and N capped; one batch; values 0..1/8 */
        gemm *g = &bb.g;
        *g = (gemm){.dt = g0->dt, .esz = g0->esz, .k = g0->k, .K = g0->K, .batches = 1};
        g->M = g0->M < TUNE_MAX_MN ? g0->M : TUNE_MAX_MN;
        g->N = g0->N < TUNE_MAX_MN ? g0->N : TUNE_MAX_MN;
        int64_t es = (int64_t)ir_dtype_size(g0->dt);
        bool at = layout_of(g0->a_rs, g0->a_cs) == 't', bt = layout_of(g0->b_rs, g0->b_cs) == 't';
        g->a_rs = at ? 1 : g->K, g->a_cs = at ? g->M : 1;
        g->b_rs = bt ? 1 : g->N, g->b_cs = bt ? g->K : 1;
        timing = (bb.a = buffer(g->M * g->K * es)) && (bb.b = buffer(g->K * g->N * es)) &&
                 (bb.c = buffer(g->M * g->N * g->esz));
        if (timing) {
            memset(bb.a, 0, (size_t)(g->M * g->K * es));
            memset(bb.b, 0, (size_t)(g->K * g->N * es));
            g->a = bb.a, g->b = bb.b, g->c = bb.c;
        }
    }
    int c = at_decide(&q, timing ? time_blocking : NULL, &bb, NULL);
    free(bb.a), free(bb.b), free(bb.c);
    return blocking_for(&g0->k, c >= N_UK && c < N_CANDS ? c - N_UK : 0);
}

/* ---- The record --------------------------------------------------------------------------- */

static bool float_dtype(burnc_dtype_t dt)
{
    return dt == BURNC_DTYPE_F32 || dt == BURNC_DTYPE_F64 || dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16;
}

bool cpu_gemm_handles(const ir_record *rec)
{
    return rec->op == IR_OP_MATMUL && rec->n_in == 2 && float_dtype(rec->compute) && rec->dtype == rec->compute &&
           rec->in[0].dtype == rec->compute && rec->in[1].dtype == rec->compute && rec->out_rank >= 2 &&
           rec->out_rank <= BURNC_MAX_RANK && rec->in[0].view.rank == rec->out_rank &&
           rec->in[1].view.rank == rec->out_rank;
}

static void narrow_out(void *dst, burnc_dtype_t dt, const float *src, int64_t n)
{
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = dt == BURNC_DTYPE_F16 ? burnc_f32_to_f16(src[i]) : burnc_f32_to_bf16(src[i]);
}

/* BURNC_AUTOTUNE_RECORD: the product as a burnc-tune workload (its blocking key is bucketed
 * by M, N and K; layouts other than plain are tuned by the real launches). */
static void record_workload(const gemm *g)
{
    const char *rec = getenv("BURNC_AUTOTUNE_RECORD");
    if (!rec || !*rec || g->M * g->N * g->K < SMALL_WORK)
        return;
    char line[96];
    snprintf(line, sizeof line, "matmul:%lldx%lldx%lld:%s", (long long)g->M, (long long)g->K, (long long)g->N,
             ir_dtype_name(g->dt));
    at_record_line(line);
}

burnc_status_t cpu_gemm_run(cpu_threads *pool, const ir_record *rec, rt_buffer *const *bufs,
                            void (*epi)(void *ctx, int64_t first, int64_t count), void *epi_ctx)
{
    const ir_view *va = &rec->in[0].view, *vb = &rec->in[1].view;
    int r = rec->out_rank;
    gemm g = {.dt = rec->compute, .rb = r - 2, .M = rec->out_shape[r - 2], .N = rec->out_shape[r - 1],
              .K = va->shape[r - 1], .batches = 1};
    int64_t es = (int64_t)ir_dtype_size(g.dt);
    bool ok = va->shape[r - 2] == g.M && vb->shape[r - 2] == g.K && vb->shape[r - 1] == g.N &&
              ir_view_fits(va, es, bufs[0]->size) && ir_view_fits(vb, es, bufs[1]->size);
    for (int d = 0; d < g.rb; d++) {
        ok = ok && va->shape[d] == rec->out_shape[d] && vb->shape[d] == rec->out_shape[d];
        g.bshape[d] = rec->out_shape[d];
        g.batches *= rec->out_shape[d];
        g.a_bst[d] = va->strides[d];
        g.b_bst[d] = vb->strides[d];
    }
    if (!ok || (size_t)(g.batches * g.M * g.N * es) > bufs[2]->size)
        return rt_fail(BURNC_ERR_INTERNAL, "cpu: matmul: operand shapes or views do not fit their buffers");
    g.a = bufs[0]->host, g.b = bufs[1]->host;
    g.a_off = va->offset, g.b_off = vb->offset;
    g.a_rs = va->strides[r - 2], g.a_cs = va->strides[r - 1];
    g.b_rs = vb->strides[r - 2], g.b_cs = vb->strides[r - 1];
    int bits = g.dt == BURNC_DTYPE_F64 ? 64 : 32;
    g.esz = bits / 8;
    call_once(&family_once, family_init);
    record_workload(&g);
    if (g.M * g.N * g.K < SMALL_WORK)
        g.k = portable(bits);
    else
        g.k = uk_get(bits, choose_uk(bits, pool));
    g.bl = g.k.lanes > 1 ? choose_blocking(&g, pool) : blocking_for(&g.k, 0);
    bool narrow = g.dt == BURNC_DTYPE_F16 || g.dt == BURNC_DTYPE_BF16;
    int64_t n_out = g.batches * g.M * g.N;
    g.c = narrow ? buffer(n_out * 4) : bufs[2]->host;
    if (!narrow)
        g.epi = epi, g.epi_ctx = epi_ctx;
    if (!g.c || !gemm_exec(&g, pool)) {
        if (narrow)
            free(g.c);
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "cpu: matmul: out of memory for packed panels");
    }
    if (narrow) {
        narrow_out(bufs[2]->host, g.dt, (const float *)g.c, n_out);
        free(g.c);
        if (epi) /* C is final only once narrowed */
            epi(epi_ctx, 0, n_out);
    }
    return BURNC_OK;
}
