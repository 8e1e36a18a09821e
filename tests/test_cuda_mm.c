/* burnc_matmul on cuda devices (runtime/cuda/gemm.c, codegen/ptx_gemm.c): the SIMT kernel's PTX
 * for every tile variant, dtype and read mode, assembled by ptxas for sm_90 and searched for
 * contractible float ops; the same kernel built for the host (cg_ptx_gemm_spec.host: a thread
 * per GPU thread, a pthread barrier for bar.sync) and checked bitwise against the fma chain for
 * every tile, layout, batch, f64, K = 0 and epilogues (both run without a GPU); and on cuda:0,
 * results bitwise equal to the cpu
 * device's (the same fma chain) and within dtype- and K-derived bounds of an f64 host product,
 * for odd sizes, transposed, sliced and strided operands, batches and broadcast batches, every
 * dtype, every tile forced, fused epilogues against unfused runs, and errors.
 *
 * GPU tests skip with the reason when cuda:0 cannot open; bitwise checks skip when cpu cannot. */
#include <dlfcn.h>
#include <pthread.h>
#include <regex.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen/cg.h"
#include "codegen/ptx_gemm.h"
#include "common.h"
#include "cuda/cu.h"
#include "cuda/gemm.h"
#include "kernel.h"

/* ---- PTX, without a GPU ---- */

static const cg_llvm_api *llvm_api(void)
{
    static const cg_llvm_api *api;
    if (api)
        return api;
    const char *path = getenv("BURNC_LLVM_MODULE");
    if (!path || !*path)
        cr_skip("BURNC_LLVM_MODULE is not set: this build has no LLVM 19, so no PTX generator");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(h, "cannot open the LLVM module %s: %s", path, dlerror());
    api = dlsym(h, "burnc_llvm_api");
    cr_assert(api && api->abi == CG_LLVM_ABI && api->compile_ptx_gemm, "%s has no compile_ptx_gemm", path);
    return api;
}

static const char *find_ptxas(void)
{
    static char found[4096];
    const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda", NULL};
    for (int i = 0; homes[i] || i < 2; i++) {
        if (!homes[i])
            continue;
        snprintf(found, sizeof found, "%s/bin/ptxas", homes[i]);
        if (access(found, X_OK) == 0)
            return found;
    }
    return NULL;
}

static bool matches(const char *text, const char *re)
{
    regex_t r;
    cr_assert_eq(regcomp(&r, re, REG_EXTENDED | REG_NOSUB | REG_NEWLINE), 0);
    bool m = regexec(&r, text, 0, NULL, 0) == 0;
    regfree(&r);
    return m;
}

/* ptxas -arch=sm_90 on ptx; false with its output in log. */
static bool ptxas_ok(const char *ptx, char *log, size_t cap)
{
    char dir[] = "/tmp/burnc-mm-XXXXXX";
    cr_assert(mkdtemp(dir));
    char src[128], cmd[4600];
    snprintf(src, sizeof src, "%s/k.ptx", dir);
    FILE *f = fopen(src, "w");
    cr_assert(f);
    fputs(ptx, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' -arch=sm_90 -v -o %s/k.cubin %s > %s/log 2>&1", find_ptxas(), dir, src, dir);
    int rc = system(cmd);
    snprintf(cmd, sizeof cmd, "%s/log", dir);
    log[0] = '\0';
    if ((f = fopen(cmd, "r"))) {
        size_t n = fread(log, 1, cap - 1, f);
        log[n] = '\0';
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    return rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

/* Generates, checks and (with ptxas) assembles one spec; prints ptxas' register line. */
static void check_spec(const cg_ptx_gemm_spec *s, const char *what)
{
    char *ptx = NULL, err[1024] = "";
    size_t size = 0;
    cr_assert(llvm_api()->compile_ptx_gemm(s, &ptx, &size, err, sizeof err), "%s: %s", what, err);
    cr_assert(ptx && size == strlen(ptx), "%s: PTX size", what);
    cr_assert(strstr(ptx, ".entry " CG_GEMM_ENTRY), "%s: no entry", what);
    /* the chain is fma.rn only; plain add/mul could be contracted by ptxas */
    cr_assert(!matches(ptx, "[[:space:]](add|sub|mul)\\.f(32|64)[[:space:]]"), "%s: a contractible float op", what);
    cr_assert(matches(ptx, "fma\\.rn\\.f(32|64)"), "%s: no fma.rn", what);
    cr_assert(!strstr(ptx, ".ftz") && !strstr(ptx, ".approx"), "%s: .ftz or .approx", what);
    char dep[256];
    cr_assert(bt_grid_dependency_ok(ptx, s->sm, dep, sizeof dep), "%s: %s", what, dep);
    if (find_ptxas()) {
        static char log[65536];
        cr_assert(ptxas_ok(ptx, log, sizeof log), "ptxas rejects %s:\n%s", what, log);
        const char *regs = strstr(log, "Used ");
        const char *spill = strstr(log, "bytes spill stores");
        while (spill && spill > log && spill[-1] != ',')
            spill--;
        /* spills cost speed, not correctness: reported for the reader, not failed */
        int rn = regs ? (int)strcspn(regs, ",\n") : 0, sn = spill ? (int)strcspn(spill, "\n") : 0;
        printf("%-36s %7zu bytes PTX, %.*s%s%.*s\n", what, size, rn, regs ? regs : "", spill ? ", " : "", sn,
               spill ? spill : "");
    }
    free(ptx);
}

static cg_ptx_gemm_spec spec_of(int t, burnc_dtype_t dt, int am, int bm)
{
    return cg_ptx_gemm_tile_spec(t, 90, dt, am, bm);
}

Test(cuda_mm, ptx_every_tile_f32)
{
    if (!find_ptxas())
        printf("no ptxas: the PTX is checked but not assembled\n");
    for (int t = 0; t < CG_PTX_GEMM_N_TILES; t++) {
        cg_ptx_gemm_spec s = spec_of(t, BURNC_DTYPE_F32, CG_GEMM_VEC_K, CG_GEMM_VEC_MN);
        cr_assert(cg_ptx_gemm_shape_ok(&s), "tile %s", CG_PTX_GEMM_TILES[t].name);
        char what[64];
        snprintf(what, sizeof what, "f32 %s", CG_PTX_GEMM_TILES[t].name);
        check_spec(&s, what);
    }
    BT_LEAK_CHECK();
}

/* cp.async goes where cg_ptx_gemm_spec.async_mn says and nowhere else: f32 operands read along
 * m/n on sm_80 and up, with a wait before the barriers. */
Test(cuda_mm, ptx_async_copies_only_along_mn)
{
    static const struct {
        int sm, am, bm, copies; /* 16-byte copies expected in the PTX (0: none, no wait) */
        burnc_dtype_t dt;
    } cases[] = {
        {90, CG_GEMM_VEC_MN, CG_GEMM_VEC_MN, 1, BURNC_DTYPE_F32}, {80, CG_GEMM_VEC_K, CG_GEMM_VEC_MN, 1, BURNC_DTYPE_F32},
        {90, CG_GEMM_VEC_K, CG_GEMM_VEC_K, 0, BURNC_DTYPE_F32},   {75, CG_GEMM_VEC_MN, CG_GEMM_VEC_MN, 0, BURNC_DTYPE_F32},
        {90, CG_GEMM_VEC_MN, CG_GEMM_VEC_MN, 0, BURNC_DTYPE_F64}, {90, CG_GEMM_VEC_MN, CG_GEMM_VEC_MN, 0, BURNC_DTYPE_BF16},
    };
    int t = 9;
    cr_assert(CG_PTX_GEMM_TILES[t].async_mn, "tile %d is the cp.async tile", t);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cg_ptx_gemm_spec s = cg_ptx_gemm_tile_spec(t, cases[i].sm, cases[i].dt, cases[i].am, cases[i].bm);
        char *ptx = NULL, err[1024] = "";
        size_t size = 0;
        cr_assert(llvm_api()->compile_ptx_gemm(&s, &ptx, &size, err, sizeof err), "case %zu: %s", i, err);
        bool copies = strstr(ptx, "cp.async.cg.shared.global") != NULL, waits = strstr(ptx, "cp.async.wait_all") != NULL;
        cr_assert_eq(copies, cases[i].copies != 0, "case %zu: cp.async %s", i, copies ? "present" : "missing");
        cr_assert_eq(waits, copies, "case %zu: a copy without its wait, or the reverse", i);
        cr_assert(!strstr(ptx, "cp.async.ca"), "case %zu: a 4-byte copy", i);
        char dep[256];
        cr_assert(bt_grid_dependency_ok(ptx, cases[i].sm, dep, sizeof dep), "case %zu: %s", i, dep);
        free(ptx);
    }
    /* the same tile without the flag stages through registers */
    cg_ptx_gemm_spec s = cg_ptx_gemm_tile_spec(t, 90, BURNC_DTYPE_F32, CG_GEMM_VEC_MN, CG_GEMM_VEC_MN);
    s.async_mn = false;
    char *ptx = NULL, err[1024] = "";
    size_t size = 0;
    cr_assert(llvm_api()->compile_ptx_gemm(&s, &ptx, &size, err, sizeof err), "%s", err);
    cr_assert(!strstr(ptx, "cp.async"), "cp.async without async_mn");
    free(ptx);
}

Test(cuda_mm, ptx_dtypes_and_modes)
{
    static const burnc_dtype_t dts[4] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16};
    static const int modes[4][2] = {{CG_GEMM_VEC_K, CG_GEMM_VEC_MN},
                                    {CG_GEMM_VEC_MN, CG_GEMM_VEC_K},
                                    {CG_GEMM_SCALAR_K, CG_GEMM_SCALAR_MN},
                                    {CG_GEMM_SCALAR_MN, CG_GEMM_SCALAR_K}};
    for (int d = 0; d < 4; d++)
        for (int m = 0; m < 4; m++) {
            if (d > 0 && m > 1)
                continue; /* the scalar paths do not depend on the dtype beyond the loads */
            cg_ptx_gemm_spec s = spec_of(d == 1 ? 4 : 0, dts[d], modes[m][0], modes[m][1]);
            char what[64];
            snprintf(what, sizeof what, "%s modes %d/%d", burnc_dtype_name(dts[d]), modes[m][0], modes[m][1]);
            check_spec(&s, what);
        }
    BT_LEAK_CHECK();
}

Test(cuda_mm, ptx_epilogue_bias_gelu)
{
    kir_kernel k;
    kir_init(&k, 2, 2);
    snprintf(k.name, sizeof k.name, "fused_add_gelu");
    k.inputs[0] = (kir_slot){.dtype = BURNC_DTYPE_F32, .stride = {KIR_STRIDE_ANY, KIR_STRIDE_UNIT}};
    k.inputs[1] = (kir_slot){.dtype = BURNC_DTYPE_F32, .stride = {KIR_STRIDE_ZERO, KIR_STRIDE_UNIT}};
    k.outputs[0] = (kir_slot){.dtype = BURNC_DTYPE_F32, .stride = {KIR_STRIDE_ANY, KIR_STRIDE_UNIT}};
    k.n_inputs = 2, k.n_outputs = 1;
    int32_t x = kir_emit(&k, KIR_LOAD, KIR_F32, 0, -1, -1), b = kir_emit(&k, KIR_LOAD, KIR_F32, 1, -1, -1);
    int32_t sum = kir_emit(&k, KIR_ADD, KIR_F32, x, b, -1);
    int32_t y = kir_unary_op(&k, IR_OP_GELU, KIR_F32, sum, NULL);
    k.stores[k.n_stores++] = (kir_store){.slot = 0, .value = y};
    char why[256];
    cr_assert(kir_valid(&k, why, sizeof why), "%s", why);
    cr_assert(cg_ptx_gemm_epilogue_ok(&k, 0));
    cr_assert(!cg_ptx_gemm_epilogue_ok(&k, 2), "a slot that does not exist");
    cg_ptx_gemm_spec s = spec_of(0, BURNC_DTYPE_F32, CG_GEMM_VEC_K, CG_GEMM_VEC_MN);
    s.epi = &k, s.epi_c_slot = 0;
    check_spec(&s, "f32 128x128x8 + bias, gelu");
    s.dt = BURNC_DTYPE_BF16;
    k.inputs[0].dtype = BURNC_DTYPE_BF16;
    check_spec(&s, "bf16 128x128x8 + bias, gelu");
    kir_free(&k);
    BT_LEAK_CHECK();
}

/* The tile heuristic (no GPU): 128x128 (16x8 a thread; 8x8 where that is not valid, as for f64;
 * pipelined when both operands are read along k, copied by cp.async when both are read along
 * m/n) where its blocks fill the SMs, or come
 * within a few of it; 64x64 at 8x4 where that makes two blocks an SM (a 1024-wide layer's
 * weight gradient, 1024 x 1024 x 4096); then 64x128, 128x64, 64x64 at 4x4 where they fill the
 * SMs; and the small tile for a matrix of a few blocks. */
Test(cuda_mm, heuristic_fills_the_sms)
{
    cuda_device cd = {.sms = 132, .cc = 90};
    bool valid[CG_PTX_GEMM_N_TILES];
    for (int t = 0; t < CG_PTX_GEMM_N_TILES; t++)
        valid[t] = true;
    static const struct {
        int64_t m, n, batch;
        int tile;
    } cases[] = {{4096, 1024, 1, 7}, {1024, 1024, 1, 9}, {1536, 1408, 1, 7}, {512, 1024, 1, 4},
                 {64, 64, 1, 5},     {1024, 1024, 2, 7}, {1024, 4096, 1, 7}, {128, 8192, 1, 9}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cuda_mm_problem p = {.dt = BURNC_DTYPE_F32, .m = cases[i].m, .n = cases[i].n, .k = 4096, .batch = cases[i].batch};
        int t = cuda_mm_heuristic(&cd, &p, valid);
        cr_assert_eq(t, cases[i].tile, "%lld x %lld x%lld: tile %d (%s), expected %d", (long long)p.m, (long long)p.n,
                     (long long)p.batch, t, CG_PTX_GEMM_TILES[t].name, cases[i].tile);
    }
    cuda_mm_problem p = {.dt = BURNC_DTYPE_F32, .m = 1024, .n = 1024, .k = 4096, .batch = 1};
    valid[9] = false; /* the next ones in order */
    cr_assert_eq(cuda_mm_heuristic(&cd, &p, valid), 3);
    valid[3] = false;
    cr_assert_eq(cuda_mm_heuristic(&cd, &p, valid), 2);
    p.m = 4096, p.a_ks = p.b_ks = 1; /* x @ W^T: both along k */
    cr_assert_eq(cuda_mm_heuristic(&cd, &p, valid), 8);
    p = (cuda_mm_problem){.dt = BURNC_DTYPE_F32, .m = 1024, .n = 1024, .k = 1024, .batch = 4, .a_rs = 1, .b_cs = 1};
    cr_assert_eq(cuda_mm_heuristic(&cd, &p, valid), 10); /* both along m/n: cp.async copies */
    valid[10] = false;
    cr_assert_eq(cuda_mm_heuristic(&cd, &p, valid), 7);
    valid[8] = false;
    cr_assert_eq(cuda_mm_heuristic(&cd, &p, valid), 7);
    valid[7] = false; /* 16x8 a thread is not valid for f64 */
    cr_assert_eq(cuda_mm_heuristic(&cd, &p, valid), 0);
}

Test(cuda_mm, ptx_rejects_bad_specs)
{
    char *ptx = NULL, err[512] = "";
    size_t size = 0;
    cg_ptx_gemm_spec s = spec_of(0, BURNC_DTYPE_F32, 0, 0);
    s.tm = 3;
    cr_assert(!llvm_api()->compile_ptx_gemm(&s, &ptx, &size, err, sizeof err));
    cr_assert(strstr(err, "not supported") && ptx == NULL, "%s", err);
    s = spec_of(0, BURNC_DTYPE_I32, 0, 0);
    cr_assert(!llvm_api()->compile_ptx_gemm(&s, &ptx, &size, err, sizeof err));
    cr_assert(strstr(err, "float"), "%s", err);
    s = spec_of(0, BURNC_DTYPE_F32, 0, 0);
    s.sm = 61;
    cr_assert(!llvm_api()->compile_ptx_gemm(&s, &ptx, &size, err, sizeof err));
    cr_assert(strstr(err, "below 7.0"), "%s", err);
    BT_LEAK_CHECK();
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* n values of dtype dt (full mantissas, in [-1, 1)) as raw bytes, and as doubles in d. */
static void *random_data(burnc_dtype_t dt, int64_t n, uint64_t seed, double *d)
{
    size_t es = burnc_dtype_size(dt);
    unsigned char *p = malloc((size_t)(n ? n : 1) * es);
    cr_assert(p);
    uint64_t s = seed * 0x9e3779b97f4a7c15u + 11;
    for (int64_t i = 0; i < n; i++) {
        double v = (double)(rng(&s) >> 11) * 0x1p-52 - 1;
        switch (dt) {
        case BURNC_DTYPE_F64: ((double *)p)[i] = v; break;
        case BURNC_DTYPE_F16: ((uint16_t *)p)[i] = burnc_f32_to_f16((float)v); break;
        case BURNC_DTYPE_BF16: ((uint16_t *)p)[i] = burnc_f32_to_bf16((float)v); break;
        default: ((float *)p)[i] = (float)v; break;
        }
        d[i] = bt_load(p, dt, i);
    }
    return p;
}

/* ---- The kernel's logic on the host (spec.host: one GPU thread per call) ---- */

typedef struct host_kernel {
    cg_cpu_kernel obj;
    void (*entry)(uint64_t *words);
    int threads, shared;
} host_kernel;

static void host_kernel_load(host_kernel *h, const cg_ptx_gemm_spec *s)
{
    char *obj = NULL, err[1024] = "";
    size_t size = 0;
    cr_assert(llvm_api()->compile_ptx_gemm(s, &obj, &size, err, sizeof err), "host kernel: %s", err);
    cr_assert(cg_object_load(obj, size, &h->obj, err, sizeof err), "loading the host kernel: %s", err);
    free(obj);
    h->entry = (void (*)(uint64_t *))(void (*)(void))h->obj.rows;
    h->threads = cg_ptx_gemm_threads(s);
    h->shared = cg_ptx_gemm_shared_bytes(s);
}

typedef struct sim_thread {
    host_kernel *h;
    uint64_t words[CG_PTX_MAX_PARAM_WORDS];
} sim_thread;

static void sim_barrier(void *arg) { pthread_barrier_wait(arg); }
static void *sim_run(void *arg)
{
    sim_thread *t = arg;
    t->h->entry(t->words);
    return NULL;
}

/* Runs the grid block by block, each block as h->threads threads; words holds the launch's
 * parameters up to n_words (the host words are filled here). */
static void host_launch(host_kernel *h, const uint64_t *words, int n_words, int64_t gx, int64_t gy, int64_t gz)
{
    sim_thread *th = calloc((size_t)h->threads, sizeof *th);
    pthread_t *id = calloc((size_t)h->threads, sizeof *id);
    void *smem = aligned_alloc(64, (size_t)(h->shared + 63) / 64 * 64);
    cr_assert(th && id && smem);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)h->threads);
    for (int64_t z = 0; z < gz; z++)
        for (int64_t y = 0; y < gy; y++)
            for (int64_t x = 0; x < gx; x++) {
                memset(smem, 0xa5, (size_t)h->shared); /* stale shared memory must not matter */
                for (int t = 0; t < h->threads; t++) {
                    th[t].h = h;
                    memcpy(th[t].words, words, (size_t)n_words * sizeof *words);
                    uint64_t *hw = th[t].words + n_words;
                    hw[CG_GEMM_HOST_TID] = (uint64_t)t, hw[CG_GEMM_HOST_CTAID_X] = (uint64_t)x;
                    hw[CG_GEMM_HOST_CTAID_Y] = (uint64_t)y, hw[CG_GEMM_HOST_CTAID_Z] = (uint64_t)z;
                    hw[CG_GEMM_HOST_BARRIER] = (uint64_t)(uintptr_t)sim_barrier;
                    hw[CG_GEMM_HOST_BARRIER_ARG] = (uint64_t)(uintptr_t)&bar;
                    hw[CG_GEMM_HOST_SMEM] = (uint64_t)(uintptr_t)smem;
                    cr_assert_eq(pthread_create(&id[t], NULL, sim_run, &th[t]), 0);
                }
                for (int t = 0; t < h->threads; t++)
                    pthread_join(id[t], NULL);
            }
    pthread_barrier_destroy(&bar);
    free(smem);
    free(id);
    free(th);
}

/* C[b] = A[b] B[b] of dtype dt through the host kernel for tile t, A and B in the given
 * layouts (0 row-major, 1 transposed, 2 every other element), against the fma chain. With
 * epi, out = C * 0.5 + bias[n] (an epilogue over [batch * M, N]) is checked instead, and C too
 * when store_c. */
static void host_case(int t, burnc_dtype_t dt, int64_t M, int64_t N, int64_t K, int64_t B, int la, int lb, bool epi,
                      bool store_c)
{
    bool d = dt == BURNC_DTYPE_F64;
    int64_t v = cg_ptx_gemm_vec(dt);
    int64_t a_rs = la == 0 ? K : la == 1 ? 1 : 2 * K + 1, a_ks = la == 0 ? 1 : la == 1 ? M : 2;
    int64_t b_ks = lb == 0 ? N : lb == 1 ? 1 : 2 * N + 3, b_cs = lb == 0 ? 1 : lb == 1 ? K : 2;
    int64_t a_bs = la == 2 ? M * (2 * K + 1) : M * K, b_bs = lb == 2 ? K * (2 * N + 3) : K * N;
    /* the runtime's read modes (gemm.c, mode_of) */
    int am = la == 0 ? (K % v == 0 ? CG_GEMM_VEC_K : CG_GEMM_SCALAR_K)
           : la == 1 ? (M % v == 0 ? CG_GEMM_VEC_MN : CG_GEMM_SCALAR_MN) : CG_GEMM_SCALAR_K;
    int bm = lb == 0 ? (N % v == 0 ? CG_GEMM_VEC_MN : CG_GEMM_SCALAR_MN)
           : lb == 1 ? (K % v == 0 ? CG_GEMM_VEC_K : CG_GEMM_SCALAR_K) : CG_GEMM_SCALAR_MN;
    kir_kernel k;
    cg_ptx_gemm_spec s = spec_of(t, dt, am, bm);
    s.host = true;
    if (epi) {
        kir_init(&k, 2, 2);
        snprintf(k.name, sizeof k.name, "fused_mul_add");
        k.inputs[0] = (kir_slot){.dtype = dt, .stride = {KIR_STRIDE_ANY, KIR_STRIDE_UNIT}};
        k.inputs[1] = (kir_slot){.dtype = BURNC_DTYPE_F32, .stride = {KIR_STRIDE_ZERO, KIR_STRIDE_UNIT}};
        k.outputs[0] = (kir_slot){.dtype = BURNC_DTYPE_F32, .stride = {KIR_STRIDE_ANY, KIR_STRIDE_UNIT}};
        k.n_inputs = 2, k.n_outputs = 1;
        int32_t x = kir_emit(&k, KIR_LOAD, d ? KIR_F64 : KIR_F32, 0, -1, -1);
        if (d)
            x = kir_emit(&k, KIR_CONVERT, KIR_F32, x, -1, -1);
        int32_t bias = kir_emit(&k, KIR_LOAD, KIR_F32, 1, -1, -1);
        int32_t y = kir_emit(&k, KIR_MUL, KIR_F32, x, kir_const_f(&k, KIR_F32, 0.5), -1);
        k.stores[k.n_stores++] = (kir_store){.slot = 0, .value = kir_emit(&k, KIR_ADD, KIR_F32, y, bias, -1)};
        s.epi = &k, s.epi_c_slot = 0;
    }
    host_kernel h;
    host_kernel_load(&h, &s);
    size_t es = burnc_dtype_size(dt);
    double *va = malloc(sizeof *va * (size_t)(B * a_bs + 8)), *vb = malloc(sizeof *vb * (size_t)(B * b_bs + 8));
    double *vbias = malloc(sizeof *vbias * (size_t)(N + 1));
    cr_assert(va && vb && vbias);
    char *A = random_data(dt, B * a_bs + 8, 21, va), *Bm = random_data(dt, B * b_bs + 8, 22, vb);
    float *bias = random_data(BURNC_DTYPE_F32, N + 1, 23, vbias);
    char *C = malloc((size_t)(B * M * N + 1) * es);
    float *out = malloc(sizeof *out * (size_t)(B * M * N + 1));
    cr_assert(C && out);
    memset(C, 0xff, (size_t)(B * M * N + 1) * es); /* NaNs: an element never written shows */
    memset(out, 0xff, sizeof *out * (size_t)(B * M * N + 1));
    uint64_t w[CG_PTX_MAX_PARAM_WORDS] = {0};
    w[CG_GEMM_W_A] = (uintptr_t)A, w[CG_GEMM_W_B] = (uintptr_t)Bm, w[CG_GEMM_W_C] = (uintptr_t)C;
    w[CG_GEMM_W_M] = (uint64_t)M, w[CG_GEMM_W_N] = (uint64_t)N, w[CG_GEMM_W_K] = (uint64_t)K;
    w[CG_GEMM_W_A_BS] = (uint64_t)a_bs, w[CG_GEMM_W_A_RS] = (uint64_t)a_rs, w[CG_GEMM_W_A_KS] = (uint64_t)a_ks;
    w[CG_GEMM_W_B_BS] = (uint64_t)b_bs, w[CG_GEMM_W_B_KS] = (uint64_t)b_ks, w[CG_GEMM_W_B_CS] = (uint64_t)b_cs;
    w[CG_GEMM_W_C_BS] = (uint64_t)(M * N);
    w[CG_GEMM_W_FLAGS] = (!epi || store_c ? CG_GEMM_F_STORE_C : 0) | (N % v == 0 ? CG_GEMM_F_C_VEC : 0);
    int n_words = CG_GEMM_W_EPI;
    if (epi) {
        cg_ptx_layout l = cg_ptx_params_layout(&k);
        uint64_t *e = w + CG_GEMM_W_EPI;
        w[CG_GEMM_W_QLAST] = 1;
        e[l.in_addr + 1] = (uintptr_t)bias, e[l.out_addr] = (uintptr_t)out;
        e[l.extents] = (uint64_t)(B * M), e[l.extents + 1] = (uint64_t)N;
        e[l.in_stride] = (uint64_t)N, e[l.in_stride + 1] = 1, e[l.in_stride + 3] = 1;
        e[l.out_stride] = (uint64_t)N, e[l.out_stride + 1] = 1;
        n_words += l.n_words;
    }
    const cg_ptx_gemm_tile *x = &CG_PTX_GEMM_TILES[t];
    host_launch(&h, w, n_words, (N + x->bn - 1) / x->bn, (M + x->bm - 1) / x->bm, B);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                /* the chain in f64 or f32 (halves widened exactly), rounded once to dt */
                double wd = 0;
                float wf = 0.0f;
                for (int64_t kk = 0; kk < K; kk++) {
                    int64_t ia = b * a_bs + i * a_rs + kk * a_ks, ib = b * b_bs + kk * b_ks + j * b_cs;
                    if (d)
                        wd = fma(va[ia], vb[ib], wd);
                    else
                        wf = fmaf((float)va[ia], (float)vb[ib], wf);
                }
                unsigned char want[8];
                uint16_t half = dt == BURNC_DTYPE_F16 ? burnc_f32_to_f16(wf) : burnc_f32_to_bf16(wf);
                memcpy(want, d ? (void *)&wd : es == 4 ? (void *)&wf : (void *)&half, es);
                int64_t at = (b * M + i) * N + j;
                if (!epi || store_c)
                    cr_assert(memcmp(C + (size_t)at * es, want, es) == 0,
                              "tile %s %s %lldx%lldx%lld batch %lld layouts %d/%d: C[%lld][%lld][%lld] = %.17g, "
                              "the fma chain gives %.17g", x->name, burnc_dtype_name(dt), (long long)M, (long long)N,
                              (long long)K, (long long)B, la, lb, (long long)b, (long long)i, (long long)j,
                              bt_load(C, dt, at), bt_load(want, dt, 0));
                if (epi) {
                    float e = (float)bt_load(want, dt, 0) * 0.5f + bias[j];
                    cr_assert(memcmp(&out[at], &e, sizeof e) == 0, "tile %s epilogue [%lld][%lld][%lld] = %.9g, want %.9g",
                              x->name, (long long)b, (long long)i, (long long)j, (double)out[at], (double)e);
                }
            }
    if (epi)
        kir_free(&k);
    cg_object_release(&h.obj);
    free(A), free(Bm), free(C), free(bias), free(out), free(va), free(vb), free(vbias);
}

Test(cuda_mm, host_run_every_tile_and_layout)
{
    for (int t = 0; t < CG_PTX_GEMM_N_TILES; t++) {
        const cg_ptx_gemm_tile *x = &CG_PTX_GEMM_TILES[t];
        host_case(t, BURNC_DTYPE_F32, x->bm + 1, x->bn + 3, 2 * x->bk + 3, 1, 0, 0, false, false);
        host_case(t, BURNC_DTYPE_F32, x->bm, x->bn + 4, 4 * x->bk, 2, t % 3, (t + 1) % 3, false, false);
        /* one k-tile, a part of one, none (a pipelined loop's first fragments are its last) */
        host_case(t, BURNC_DTYPE_F32, x->bm - 1, 9, x->bk, 1, 1, 0, false, false);
        host_case(t, BURNC_DTYPE_F32, 5, x->bn + 1, 1, 1, 0, 1, false, false);
        host_case(t, BURNC_DTYPE_F32, 3, 7, 0, 1, 0, 0, false, false);
    }
    BT_LEAK_CHECK();
}

Test(cuda_mm, host_run_odd_sizes_f64_and_epilogue)
{
    host_case(5, BURNC_DTYPE_F32, 1, 1, 1, 1, 0, 0, false, false);
    host_case(5, BURNC_DTYPE_F32, 7, 13, 5, 2, 1, 2, false, false);
    host_case(5, BURNC_DTYPE_F32, 33, 17, 0, 1, 0, 0, false, false); /* K = 0: zeros */
    host_case(4, BURNC_DTYPE_F64, 65, 66, 34, 2, 0, 1, false, false);
    host_case(2, BURNC_DTYPE_F64, 130, 70, 18, 1, 1, 0, false, false);
    host_case(0, BURNC_DTYPE_F32, 129, 131, 20, 1, 0, 0, true, false);
    host_case(5, BURNC_DTYPE_F32, 40, 36, 24, 3, 2, 1, true, true);
    host_case(4, BURNC_DTYPE_F64, 64, 68, 16, 2, 0, 0, true, true);
    host_case(0, BURNC_DTYPE_BF16, 129, 132, 36, 1, 0, 0, true, true);
    /* the slab of C staged for the epilogue: 32 rows (16x8 a thread), 64 rows (more than the
     * k-tiles' buffers) */
    host_case(7, BURNC_DTYPE_F32, 129, 131, 20, 1, 0, 0, true, false);
    host_case(3, BURNC_DTYPE_F32, 70, 135, 40, 2, 1, 0, true, true);
    /* pipelined: the slab after the k-loop's last reads (of the idle buffer) */
    host_case(8, BURNC_DTYPE_F32, 129, 131, 20, 1, 0, 0, true, false);
    host_case(9, BURNC_DTYPE_F64, 65, 70, 33, 2, 1, 1, true, true);
    host_case(5, BURNC_DTYPE_F16, 35, 41, 19, 2, 1, 0, false, false);
    host_case(4, BURNC_DTYPE_F16, 64, 68, 32, 1, 1, 1, false, false);
    BT_LEAK_CHECK();
}

/* ---- On cuda:0 ---- */

static burnc_device_t *open_gpu(void)
{
    burnc_device_t *dev = burnc_device_open("cuda:0");
    if (!dev && burnc_error_code() == BURNC_ERR_UNAVAILABLE)
        cr_skip_test("cuda:0 is not available: %s", burnc_error_message());
    cr_assert_not_null(dev, "cuda:0: %s", burnc_error_message());
    /* the SIMT engine under test: tensor cores (f16/bf16, f32 with BURNC_MATMUL_TF32=1) sum in
     * another order; every_dtype turns them back on for its second pass */
    cuda_test_gemm_set_mma(dev, false);
    return dev;
}

static burnc_device_t *open_cpu(void)
{
    burnc_device_t *dev = burnc_device_open("cpu");
    if (!dev)
        cr_skip_test("cpu is not available to compare with: %s", burnc_error_message());
    return dev;
}

/* How an operand is laid out in memory before the view matmul sees. */
typedef enum layout { DENSE, TRANSPOSED, SLICED, STRIDED } layout;

/* A [rows, cols] view (batch axes in front: shape[0..rank-3]) over fresh memory of the given
 * layout whose logical values are vals (row-major). */
static burnc_tensor_t *make_view(burnc_device_t *dev, burnc_dtype_t dt, int rank, const int64_t *shape,
                                 const double *vals, layout lay, uint64_t seed)
{
    (void)seed;
    int64_t batch = 1;
    for (int d = 0; d < rank - 2; d++)
        batch *= shape[d];
    int64_t r = shape[rank - 2], c = shape[rank - 1];
    int64_t pr = lay == TRANSPOSED ? c : r, pc = lay == TRANSPOSED ? r : lay == SLICED ? c + 3 : lay == STRIDED ? 2 * c : c;
    size_t es = burnc_dtype_size(dt);
    unsigned char *mem = calloc((size_t)(batch * pr * pc > 0 ? batch * pr * pc : 1), es);
    cr_assert(mem);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++) {
                int64_t at = b * pr * pc + (lay == TRANSPOSED ? j * pc + i : lay == SLICED ? i * pc + j + 1
                                                                        : lay == STRIDED ? i * pc + 2 * j
                                                                                         : i * pc + j);
                double v = vals[(b * r + i) * c + j];
                switch (dt) {
                case BURNC_DTYPE_F64: ((double *)mem)[at] = v; break;
                case BURNC_DTYPE_F16: ((uint16_t *)mem)[at] = burnc_f32_to_f16((float)v); break;
                case BURNC_DTYPE_BF16: ((uint16_t *)mem)[at] = burnc_f32_to_bf16((float)v); break;
                default: ((float *)mem)[at] = (float)v; break;
                }
            }
    int64_t ps[BURNC_MAX_RANK];
    memcpy(ps, shape, sizeof *ps * (size_t)rank);
    ps[rank - 2] = pr, ps[rank - 1] = pc;
    burnc_tensor_t *t = BT_NOT_NULL(burnc_tensor_from_data(dev, dt, rank, ps, mem));
    free(mem);
    burnc_tensor_t *v = t;
    if (lay == TRANSPOSED)
        v = burnc_transpose(t, rank - 2, rank - 1);
    else if (lay == SLICED)
        v = burnc_slice(t, rank - 1, 1, c + 1, 1);
    else if (lay == STRIDED)
        v = burnc_slice(t, rank - 1, 0, 2 * c, 2);
    if (v != t)
        burnc_tensor_release(t);
    return BT_NOT_NULL(v);
}

typedef struct mm_case {
    burnc_dtype_t dt;
    int ra, rb;                       /* ranks */
    int64_t sa[BURNC_MAX_RANK], sb[BURNC_MAX_RANK];
    layout la, lb;
} mm_case;

static int64_t numel(int r, const int64_t *s)
{
    int64_t n = 1;
    for (int d = 0; d < r; d++)
        n *= s[d];
    return n;
}

/* The product on dev as raw bytes (malloc'ed), its element count in *n. */
static void *product(burnc_device_t *dev, const mm_case *c, const double *va, const double *vb, int64_t *n)
{
    burnc_scope_begin();
    burnc_tensor_t *a = make_view(dev, c->dt, c->ra, c->sa, va, c->la, 1);
    burnc_tensor_t *b = make_view(dev, c->dt, c->rb, c->sb, vb, c->lb, 2);
    burnc_tensor_t *y = BT_NOT_NULL(burnc_matmul(a, b));
    *n = burnc_tensor_numel(y);
    size_t bytes = (size_t)*n * burnc_dtype_size(c->dt);
    void *out = malloc(bytes ? bytes : 1);
    cr_assert(out);
    BT_ASSERT_OK(burnc_tensor_read(y, out, bytes));
    burnc_scope_end();
    return out;
}

/* Checks the product of c on the GPU: bitwise against cpu (when cpu is given), within bounds
 * of an f64 host product (broadcast batches of rank-3 operands against rank-2 or rank-4 ones
 * included). f16/bf16 on tensor cores are summed in the hardware's order: the bound is then
 * K * 2^-23 * sum |a b| (include/burnc.h). */
static void check_case(burnc_device_t *gpu, burnc_device_t *cpu, const mm_case *c, const char *what)
{
    int64_t na = numel(c->ra, c->sa), nb = numel(c->rb, c->sb);
    double *va = malloc(sizeof *va * (size_t)(na ? na : 1)), *vb = malloc(sizeof *vb * (size_t)(nb ? nb : 1));
    cr_assert(va && vb);
    free(random_data(c->dt, na, 3, va));
    free(random_data(c->dt, nb, 4, vb));
    int64_t n = 0, n2 = 0;
    void *got = product(gpu, c, va, vb, &n);
    if (cpu) {
        void *want = product(cpu, c, va, vb, &n2);
        cr_assert_eq(n, n2);
        size_t es = burnc_dtype_size(c->dt);
        for (int64_t i = 0; i < n; i++)
            cr_assert(memcmp((char *)got + (size_t)i * es, (char *)want + (size_t)i * es, es) == 0,
                      "%s: element %lld: cuda %.17g, cpu %.17g (not the same fma chain)", what, (long long)i,
                      bt_load(got, c->dt, i), bt_load(want, c->dt, i));
        free(want);
    }
    /* f64 host product: batch axes broadcast numpy-style over the ranks' common suffix */
    int64_t M = c->sa[c->ra - 2], K = c->sa[c->ra - 1], N = c->sb[c->rb - 1];
    int ro = c->ra > c->rb ? c->ra : c->rb;
    int64_t bshape[BURNC_MAX_RANK], nbt = 1;
    for (int d = 0; d < ro - 2; d++) {
        int da = d - (ro - c->ra), db = d - (ro - c->rb);
        int64_t xa = da >= 0 ? c->sa[da] : 1, xb = db >= 0 ? c->sb[db] : 1;
        bshape[d] = xa > xb ? xa : xb;
        nbt *= bshape[d];
    }
    cr_assert_eq(n, nbt * M * N, "%s: %lld elements, expected %lld", what, (long long)n, (long long)(nbt * M * N));
    double u = c->dt == BURNC_DTYPE_F64 ? 0x1p-53 : c->dt == BURNC_DTYPE_F32 ? 0x1p-24 : 0x1p-22;
    double out_u = c->dt == BURNC_DTYPE_F16 ? 0x1p-11 : c->dt == BURNC_DTYPE_BF16 ? 0x1p-8 : u;
    for (int64_t t = 0; t < nbt; t++) {
        int64_t ta = 0, tb = 0, ma = 1, mb = 1, rest = t;
        for (int d = ro - 3; d >= 0; d--) {
            int64_t i = rest % bshape[d];
            rest /= bshape[d];
            int da = d - (ro - c->ra), db = d - (ro - c->rb);
            if (da >= 0) {
                ta += (c->sa[da] == 1 ? 0 : i) * ma;
                ma *= c->sa[da];
            }
            if (db >= 0) {
                tb += (c->sb[db] == 1 ? 0 : i) * mb;
                mb *= c->sb[db];
            }
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    double p = va[(ta * M + i) * K + k] * vb[(tb * K + k) * N + j];
                    s += p, mag += fabs(p);
                }
                double g = bt_load(got, c->dt, (t * M + i) * N + j);
                /* both the chain and this f64 sum (for f64 operands) err by up to K u sum |a b| */
                double tol = 2.0 * (double)(K + 1) * u * mag + out_u * fabs(s) + 1e-300;
                cr_assert(fabs(g - s) <= tol, "%s: [%lld][%lld][%lld] = %.17g, f64 product %.17g (tolerance %.3g)",
                          what, (long long)t, (long long)i, (long long)j, g, s, tol);
            }
    }
    free(got);
    free(va);
    free(vb);
}

static mm_case plain(burnc_dtype_t dt, int64_t m, int64_t k, int64_t n, layout la, layout lb)
{
    return (mm_case){.dt = dt, .ra = 2, .rb = 2, .sa = {m, k}, .sb = {k, n}, .la = la, .lb = lb};
}

Test(cuda_mm, odd_sizes_f32_bitwise_cpu)
{
    burnc_device_t *gpu = open_gpu(), *cpu = open_cpu();
    static const int64_t sizes[][3] = {{1, 1, 1}, {7, 5, 13}, {129, 257, 65}, {64, 1, 64}, {1, 300, 77},
                                       {33, 17, 1}, {256, 128, 256}, {300, 0, 5}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        char what[64];
        snprintf(what, sizeof what, "f32 %lldx%lldx%lld", (long long)sizes[i][0], (long long)sizes[i][1],
                 (long long)sizes[i][2]);
        mm_case c = plain(BURNC_DTYPE_F32, sizes[i][0], sizes[i][1], sizes[i][2], DENSE, DENSE);
        check_case(gpu, cpu, &c, what);
    }
    burnc_device_release(cpu);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

Test(cuda_mm, layouts_transposed_sliced_strided)
{
    burnc_device_t *gpu = open_gpu(), *cpu = open_cpu();
    static const char *names[4] = {"dense", "transposed", "sliced", "strided"};
    for (int la = 0; la < 4; la++)
        for (int lb = 0; lb < 4; lb++) {
            char what[96];
            snprintf(what, sizeof what, "f32 130x67x96 A %s B %s", names[la], names[lb]);
            mm_case c = plain(BURNC_DTYPE_F32, 130, 67, 96, (layout)la, (layout)lb);
            check_case(gpu, cpu, &c, what);
            snprintf(what, sizeof what, "f32 128x64x128 A %s B %s", names[la], names[lb]);
            c = plain(BURNC_DTYPE_F32, 128, 64, 128, (layout)la, (layout)lb);
            check_case(gpu, cpu, &c, what);
        }
    burnc_device_release(cpu);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

Test(cuda_mm, batched_and_broadcast)
{
    burnc_device_t *gpu = open_gpu(), *cpu = open_cpu();
    mm_case c = {.dt = BURNC_DTYPE_F32, .ra = 3, .rb = 3, .sa = {5, 33, 20}, .sb = {5, 20, 41}};
    check_case(gpu, cpu, &c, "f32 batch 5");
    c = (mm_case){.dt = BURNC_DTYPE_F32, .ra = 3, .rb = 2, .sa = {4, 64, 32}, .sb = {32, 64}};
    check_case(gpu, cpu, &c, "f32 batch 4 x shared B");
    c = (mm_case){.dt = BURNC_DTYPE_F32, .ra = 2, .rb = 3, .sa = {17, 9}, .sb = {3, 9, 31}, .lb = TRANSPOSED};
    check_case(gpu, cpu, &c, "f32 shared A x batch 3 of transposed B");
    c = (mm_case){.dt = BURNC_DTYPE_F32, .ra = 4, .rb = 3, .sa = {2, 1, 19, 8}, .sb = {3, 8, 23}};
    check_case(gpu, cpu, &c, "f32 [2,1] x [3] batches (outer loop)");
    c = (mm_case){.dt = BURNC_DTYPE_F64, .ra = 4, .rb = 4, .sa = {2, 3, 16, 12}, .sb = {2, 3, 12, 8}, .la = SLICED};
    check_case(gpu, cpu, &c, "f64 [2,3] batches, sliced A");
    burnc_device_release(cpu);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

Test(cuda_mm, every_dtype)
{
    burnc_device_t *gpu = open_gpu(), *cpu = open_cpu();
    static const burnc_dtype_t dts[4] = {BURNC_DTYPE_F32, BURNC_DTYPE_F64, BURNC_DTYPE_F16, BURNC_DTYPE_BF16};
    /* pass 0: the SIMT chain only, bitwise the cpu's for every dtype; pass 1: as configured
     * (f16/bf16 may go to tensor cores: bounds only) */
    for (int pass = 0; pass < 2; pass++)
    for (int d = 0; d < 4; d++)
        for (int l = 0; l < 2; l++) {
            cuda_test_gemm_set_mma(gpu, pass == 1);
            burnc_device_t *bits = pass == 0 || dts[d] == BURNC_DTYPE_F32 || dts[d] == BURNC_DTYPE_F64 ? cpu : NULL;
            char what[96];
            snprintf(what, sizeof what, "%s 97x130x71 %s pass %d", burnc_dtype_name(dts[d]), l ? "transposed A" : "dense",
                     pass);
            mm_case c = plain(dts[d], 97, 130, 71, l ? TRANSPOSED : DENSE, DENSE);
            check_case(gpu, bits, &c, what);
            snprintf(what, sizeof what, "%s 128x256x128 %s pass %d", burnc_dtype_name(dts[d]), l ? "transposed B" : "dense",
                     pass);
            c = plain(dts[d], 128, 256, 128, DENSE, l ? TRANSPOSED : DENSE);
            check_case(gpu, bits, &c, what);
        }
    cuda_test_gemm_set_mma(gpu, true);
    burnc_device_release(cpu);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

Test(cuda_mm, every_tile_forced)
{
    burnc_device_t *gpu = open_gpu(), *cpu = open_cpu();
    for (int t = 0; t < CG_PTX_GEMM_N_TILES; t++) {
        cr_assert(cuda_test_gemm_force_tile(gpu, t), "tile %d", t);
        char what[96];
        snprintf(what, sizeof what, "f32 %s 200x300x150", CG_PTX_GEMM_TILES[t].name);
        mm_case c = plain(BURNC_DTYPE_F32, 200, 300, 150, DENSE, DENSE);
        check_case(gpu, cpu, &c, what);
        /* A read along m as well (a weight gradient's layout): both operands by cp.async
         * where the tile copies so, zeros past every edge */
        snprintf(what, sizeof what, "f32 %s 196x300x150 transposed A", CG_PTX_GEMM_TILES[t].name);
        c = plain(BURNC_DTYPE_F32, 196, 300, 150, TRANSPOSED, DENSE);
        check_case(gpu, cpu, &c, what);
        snprintf(what, sizeof what, "f64 %s 64x40x72 transposed B", CG_PTX_GEMM_TILES[t].name);
        c = plain(BURNC_DTYPE_F64, 64, 40, 72, DENSE, TRANSPOSED);
        check_case(gpu, cpu, &c, what);
    }
    cr_assert(!cuda_test_gemm_force_tile(gpu, CG_PTX_GEMM_N_TILES));
    cr_assert(cuda_test_gemm_force_tile(gpu, -1));
    burnc_device_release(cpu);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

/* ---- Epilogues ---- */

typedef enum epi_kind { EPI_BIAS_GELU, EPI_RESIDUAL, EPI_SCALE_CAST, EPI_TRANSPOSED_READ } epi_kind;

/* The epilogue chain of kind e after A@B on dev; the result's bytes (malloc'ed). */
/* dt: the matmul's dtype (the f32 data cast to it) */
static void *epilogue_run(burnc_device_t *dev, epi_kind e, burnc_dtype_t dt, int64_t m, int64_t k, int64_t n,
                          size_t *bytes)
{
    double *va = malloc(sizeof *va * (size_t)(m * k)), *vb = malloc(sizeof *vb * (size_t)(k * n)),
           *vr = malloc(sizeof *vr * (size_t)(m * n));
    void *pa = random_data(BURNC_DTYPE_F32, m * k, 5, va), *pb = random_data(BURNC_DTYPE_F32, k * n, 6, vb),
         *pr = random_data(BURNC_DTYPE_F32, m * n, 7, vr);
    burnc_scope_begin();
    const int64_t sa[2] = {m, k}, sb[2] = {k, n}, sr[2] = {m, n}, sbias[1] = {n};
    burnc_tensor_t *a = BT_NOT_NULL(burnc_cast(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, sa, pa), dt));
    burnc_tensor_t *b = BT_NOT_NULL(burnc_cast(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, sb, pb), dt));
    burnc_tensor_t *mm = BT_NOT_NULL(burnc_matmul(a, b)), *y = NULL;
    switch (e) {
    case EPI_BIAS_GELU:
        y = burnc_gelu(burnc_add(mm, burnc_cast(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 1, sbias, pr), dt)));
        break;
    case EPI_RESIDUAL: y = burnc_add(mm, BT_NOT_NULL(burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, sr, pr))); break;
    case EPI_SCALE_CAST: y = burnc_cast(burnc_mul_scalar(mm, 0.375), BURNC_DTYPE_F16); break;
    case EPI_TRANSPOSED_READ: y = burnc_add(mm, burnc_transpose(mm, 0, 1)); break;
    }
    BT_NOT_NULL(y);
    *bytes = (size_t)burnc_tensor_numel(y) * burnc_dtype_size(burnc_tensor_dtype(y));
    void *out = malloc(*bytes);
    cr_assert(out);
    BT_ASSERT_OK(burnc_tensor_read(y, out, *bytes));
    burnc_scope_end();
    free(pa), free(pb), free(pr), free(va), free(vb), free(vr);
    return out;
}

static void check_epilogue_dt(epi_kind e, burnc_dtype_t dt, int64_t m, int64_t k, int64_t n, bool expect_fused,
                              const char *what)
{
    burnc_device_t *gpu = open_gpu(), *cpu = open_cpu();
    int builds0, fused0, builds1, fused1;
    cuda_test_gemm_set_epilogues(gpu, CUDA_EPI_ALWAYS); /* whatever their cost */
    cuda_test_gemm_counts(gpu, &builds0, &fused0);
    size_t nf, nu, nc;
    void *fused = epilogue_run(gpu, e, dt, m, k, n, &nf);
    cuda_test_gemm_counts(gpu, &builds1, &fused1);
    if (expect_fused)
        cr_assert(fused1 > fused0, "%s: the epilogue was not fused into the matmul", what);
    else
        cr_assert_eq(fused1, fused0, "%s: an epilogue that reads C elsewhere was fused", what);
    cuda_test_gemm_set_epilogues(gpu, CUDA_EPI_NEVER);
    void *apart = epilogue_run(gpu, e, dt, m, k, n, &nu);
    cuda_test_gemm_set_epilogues(gpu, CUDA_EPI_BY_COST); /* the default again */
    void *host = epilogue_run(cpu, e, dt, m, k, n, &nc);
    cr_assert(nf == nu && nf == nc);
    cr_assert(memcmp(fused, apart, nf) == 0, "%s: fused and unfused epilogues differ", what);
    if (dt == BURNC_DTYPE_F32) /* f16/bf16 products run on tensor cores, in their own order */
        cr_assert(memcmp(fused, host, nf) == 0, "%s: cuda and cpu differ", what);
    free(fused), free(apart), free(host);
    burnc_device_release(cpu);
    burnc_device_release(gpu);
}

static void check_epilogue(epi_kind e, int64_t m, int64_t k, int64_t n, bool expect_fused, const char *what)
{
    check_epilogue_dt(e, BURNC_DTYPE_F32, m, k, n, expect_fused, what);
}

/* A bf16 product runs on tensor cores, which fuse no epilogue: it must run apart, so that the
 * result is the same with fusion on and off (the SIMT kernel would round differently). */
Test(cuda_mm, epilogue_of_a_tensor_core_matmul_runs_apart)
{
    check_epilogue_dt(EPI_BIAS_GELU, BURNC_DTYPE_BF16, 256, 128, 256, false, "bf16 bias + gelu 256x128x256");
    BT_LEAK_CHECK();
}

Test(cuda_mm, epilogue_bias_gelu_fused_equals_unfused)
{
    check_epilogue(EPI_BIAS_GELU, 129, 65, 257, true, "bias + gelu 129x65x257");
    check_epilogue(EPI_BIAS_GELU, 256, 128, 256, true, "bias + gelu 256x128x256");
    BT_LEAK_CHECK();
}

/* By default an epilogue runs in the matmul's stores when it is cheap (a residual add) and apart
 * when it is not (bias + gelu, about 100 instructions an element); the bits are the same. */
Test(cuda_mm, epilogue_fused_by_cost)
{
    burnc_device_t *gpu = open_gpu();
    int builds, f0, f1, f2;
    size_t n;
    cuda_test_gemm_counts(gpu, &builds, &f0);
    free(epilogue_run(gpu, EPI_BIAS_GELU, BURNC_DTYPE_F32, 128, 64, 128, &n));
    cuda_test_gemm_counts(gpu, &builds, &f1);
    cr_assert_eq(f1, f0, "bias + gelu ran in the matmul's stores by default");
    free(epilogue_run(gpu, EPI_RESIDUAL, BURNC_DTYPE_F32, 128, 64, 128, &n));
    free(epilogue_run(gpu, EPI_SCALE_CAST, BURNC_DTYPE_F32, 128, 64, 128, &n));
    cuda_test_gemm_counts(gpu, &builds, &f2);
    cr_assert_eq(f2, f1 + 2, "a residual add and a scale + cast were not fused by default (%d of 2)", f2 - f1);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

Test(cuda_mm, epilogue_residual_and_scale_cast)
{
    check_epilogue(EPI_RESIDUAL, 100, 30, 70, true, "residual add 100x30x70");
    check_epilogue(EPI_SCALE_CAST, 64, 48, 96, true, "scale + cast to f16 64x48x96");
    BT_LEAK_CHECK();
}

Test(cuda_mm, epilogue_reading_c_elsewhere_runs_apart)
{
    check_epilogue(EPI_TRANSPOSED_READ, 48, 20, 48, false, "C + C^T 48x20x48");
    BT_LEAK_CHECK();
}

/* ---- Errors ---- */

Test(cuda_mm, shape_mismatch_names_matmul)
{
    burnc_device_t *gpu = open_gpu();
    const int64_t sa[2] = {3, 4}, sb[2] = {5, 2};
    float a[12] = {0}, b[10] = {0};
    burnc_tensor_t *ta = bt_f32(gpu, 2, sa, a), *tb = bt_f32(gpu, 2, sb, b);
    BT_ASSERT_FAILS(burnc_matmul(ta, tb), BURNC_ERR_SHAPE, "matmul");
    BT_ASSERT_MSG_HAS("[3,4]");
    burnc_tensor_release(ta);
    burnc_tensor_release(tb);
    bt_expect_usable(gpu);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}

Test(cuda_mm, second_run_builds_nothing)
{
    burnc_device_t *gpu = open_gpu();
    mm_case c = plain(BURNC_DTYPE_F32, 70, 40, 90, DENSE, DENSE);
    double va[70 * 40], vb[40 * 90];
    free(random_data(BURNC_DTYPE_F32, 70 * 40, 1, va));
    free(random_data(BURNC_DTYPE_F32, 40 * 90, 2, vb));
    int64_t n;
    free(product(gpu, &c, va, vb, &n));
    int b0, f0, b1, f1;
    cuda_test_gemm_counts(gpu, &b0, &f0);
    free(product(gpu, &c, va, vb, &n));
    cuda_test_gemm_counts(gpu, &b1, &f1);
    cr_assert_eq(b1, b0, "the same problem built %d more kernels", b1 - b0);
    burnc_device_release(gpu);
    BT_LEAK_CHECK();
}
