/* The tensor-core matmul engine (mma.h): takes f16/bf16 problems (and f32 ones when TF32 is
 * allowed) whose operands it can copy in 16-byte pieces, picks a tile variant, and launches
 * the kernel codegen/ptx_mma.c generates for it. Kernels are kept per device in memory, and as
 * PTX and cubin in the disk kernel cache (the cubin key names the driver that assembled it). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>

#include "burnc_config.h"
#include "codegen/kcache.h"
#include "codegen/ptx_mma.h"
#include "runtime/cuda/gemm.h"

#ifdef BURNC_LLVM_VERSION
#define COMPILER_ID "llvm-" BURNC_LLVM_VERSION
#else
#define COMPILER_ID "llvm-19"
#endif

enum { MAX_KERNELS = 96, DEFAULT_SMEM = 48 * 1024, MAX_GRID_YZ = 65535 };

typedef struct mma_kernel {
    char key[96]; /* describe()'s text of the spec */
    CUmodule module;
    CUfunction fn;
    CUfunction transpose; /* warpgroup tf32 modules: CG_MMA_TRANSPOSE_ENTRY, else NULL */
} mma_kernel;

typedef struct cuda_mma_cache {
    mtx_t lock; /* the table and the disk cache's opening; compiles run outside it */
    int n;
    mma_kernel k[MAX_KERNELS];
    kc_lazy disk;
    atomic_int forced; /* test hook: -1, or the tile every problem uses */
    atomic_int builds;
} cuda_mma_cache;

static cuda_mma_cache *cache_of(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    mtx_lock(&cd->lock);
    if (!cd->mma && (cd->mma = calloc(1, sizeof *cd->mma)) != NULL) {
        mtx_init(&cd->mma->lock, mtx_plain);
        atomic_init(&cd->mma->forced, -1);
    }
    cuda_mma_cache *c = cd->mma;
    mtx_unlock(&cd->lock);
    return c;
}

void cuda_mma_free(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    cuda_mma_cache *c = cd->mma;
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        if (!atomic_load(&cd->lost)) /* a lost context takes its modules with it */
            cd->cu->ModuleUnload(c->k[i].module);
    kc_lazy_close(&c->disk);
    mtx_destroy(&c->lock);
    free(c);
    cd->mma = NULL;
}

bool cuda_test_mma_force_tile(rt_device *dev, int v)
{
    cuda_mma_cache *c = cache_of(dev);
    if (!c || v < -1 || v >= CG_MMA_N_TILES)
        return false;
    atomic_store(&c->forced, v);
    return true;
}

int cuda_test_mma_builds(rt_device *dev)
{
    cuda_mma_cache *c = cache_of(dev);
    return c ? atomic_load(&c->builds) : 0;
}

/* The generator's revision leads the text, which keys the disk cache too: PTX or a cubin
 * cached by an older generator is never loaded for a newer one. */
enum { GENERATOR_REV = 3 };
static void describe(const cg_mma_spec *s, char *out, size_t cap)
{
    static const char *types[] = {"f16", "bf16", "tf32"};
    snprintf(out, cap, "mma r%d %s sm_%d %dx%dx%d w%dx%d s%d c%d p%d a%s b%s%s", GENERATOR_REV, types[s->type], s->sm,
             s->bm, s->bn, s->bk, s->wm, s->wn, s->stages, s->min_blocks, s->pipe, s->a_mmajor ? "m" : "k",
             s->b_kmajor ? "k" : "n", s->wg ? " wg" : "");
}

/* ---- Building a kernel ---- */

static kc_cache *disk_of(cuda_mma_cache *c)
{
    mtx_lock(&c->lock);
    kc_cache *d = kc_lazy_open(&c->disk);
    mtx_unlock(&c->lock);
    return d;
}

static burnc_status_t generate(rt_device *dev, const cg_mma_spec *s, const char *name, char **ptx)
{
    const cg_llvm_api *api = rt_llvm_api();
    if (!api) {
        char why[400]; /* the last error is the format's destination: copy it first */
        snprintf(why, sizeof why, "%s", burnc_error_message());
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_matmul: %s: %s: no code generator: %s", dev->spec, name, why);
    }
    char err[512] = "";
    size_t size = 0;
    if (!api->compile_mma_ptx || !api->compile_mma_ptx(s, ptx, &size, err, sizeof err))
        return rt_fail(BURNC_ERR_COMPILE, "burnc_matmul: %s: generating PTX for %s failed: %s", dev->spec, name,
                       api->compile_mma_ptx ? err : "the code generator has no tensor-core matmul");
    return BURNC_OK;
}

/* The module of s: a cached cubin, else cached or generated PTX through the driver's linker. */
static burnc_status_t build(rt_device *dev, cuda_mma_cache *c, const cg_mma_spec *s, const char *name,
                            mma_kernel *out)
{
    cuda_device *cd = cuda_dev(dev);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char ptx_target[64], cubin_target[96];
    snprintf(ptx_target, sizeof ptx_target, "cuda-mma-ptx sm_%d", cd->cc);
    snprintf(cubin_target, sizeof cubin_target, "cuda-mma-cubin sm_%d driver %d", cd->cc, cd->driver_version);
    uint64_t h = kc_hash(name, strlen(name), 0x6d6d61);
    uint64_t ptx_key = kc_key(h, ptx_target, COMPILER_ID), cubin_key = kc_key(h, cubin_target, COMPILER_ID);
    kc_cache *disk = disk_of(c);
    const char *how = "cubin from the disk cache";
    void *image = NULL;
    size_t size = 0;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (disk && kc_get(disk, cubin_key, &image, &size)) {
        r = cd->cu->ModuleLoadData(&out->module, image);
        free(image);
    }
    if (r != CUDA_SUCCESS) {
        char *ptx = NULL;
        how = "PTX from the disk cache";
        if (disk && kc_get(disk, ptx_key, &image, &size)) {
            if (size > 0 && ((char *)image)[size - 1] == '\0')
                ptx = image;
            else
                free(image);
        }
        if (!ptx) {
            how = "PTX from LLVM";
            RT_TRY(generate(dev, s, name, &ptx));
            if (disk)
                kc_put(disk, ptx_key, ptx, strlen(ptx) + 1);
        }
        void *cubin = NULL;
        size_t cubin_size = 0;
        burnc_status_t st = cuda_module_from_ptx(dev, ptx, &out->module, &cubin, &cubin_size);
        free(ptx);
        if (st == BURNC_OK && cubin && disk)
            kc_put(disk, cubin_key, cubin, cubin_size);
        free(cubin);
        RT_TRY(st);
    }
    uint32_t smem = cg_mma_smem_bytes(s);
    burnc_status_t st = cuda_check(dev, cd->cu->ModuleGetFunction(&out->fn, out->module, CG_MMA_ENTRY),
                                   "burnc_matmul: cuModuleGetFunction");
    if (st == BURNC_OK && s->wg && s->type == CG_MMA_TF32)
        st = cuda_check(dev, cd->cu->ModuleGetFunction(&out->transpose, out->module, CG_MMA_TRANSPOSE_ENTRY),
                        "burnc_matmul: cuModuleGetFunction (transpose)");
    if (st == BURNC_OK && smem > DEFAULT_SMEM)
        st = cuda_check(dev, cd->cu->FuncSetAttribute(out->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem),
                        "burnc_matmul: cuFuncSetAttribute (dynamic shared memory)");
    if (st != BURNC_OK) {
        cd->cu->ModuleUnload(out->module);
        return st;
    }
    atomic_fetch_add(&c->builds, 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rt_log("codegen", "%s: %s in %.2f ms", name, how,
           (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    return BURNC_OK;
}

static burnc_status_t kernel_of(rt_device *dev, const cg_mma_spec *s, mma_kernel *fn)
{
    cuda_mma_cache *c = cache_of(dev);
    if (!c)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_matmul: %s: out of memory for the kernel table", dev->spec);
    char name[96];
    describe(s, name, sizeof name);
    mtx_lock(&c->lock);
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->k[i].key, name) == 0) {
            *fn = c->k[i];
            mtx_unlock(&c->lock);
            return BURNC_OK;
        }
    mtx_unlock(&c->lock);
    mma_kernel k = {.module = NULL};
    snprintf(k.key, sizeof k.key, "%s", name);
    RT_TRY(build(dev, c, s, name, &k));
    mtx_lock(&c->lock);
    int found = -1;
    for (int i = 0; i < c->n && found < 0; i++)
        if (strcmp(c->k[i].key, name) == 0)
            found = i; /* another thread built it first */
    bool keep = found < 0 && c->n < MAX_KERNELS;
    if (keep)
        c->k[found = c->n++] = k;
    if (found >= 0)
        *fn = c->k[found];
    mtx_unlock(&c->lock);
    if (!keep)
        cuda_dev(dev)->cu->ModuleUnload(k.module);
    if (found < 0)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_matmul: %s: more than %d tensor-core kernels", dev->spec,
                       MAX_KERNELS);
    return BURNC_OK;
}

/* ---- Taking a problem ---- */

/* How an operand is stored: contiguous along its k (kmaj) or its other axis, with ld the
 * stride between stored rows. False when neither axis has unit stride, or rows are not 16-byte
 * aligned (SIMT runs those). An axis of extent 1 counts as contiguous. */
static bool layout(int64_t rows, int64_t k, int64_t rs, int64_t ks, bool *kmaj, int64_t *ld)
{
    if (ks == 1)
        *kmaj = true, *ld = rows == 1 ? 0 : rs;
    else if (rs == 1)
        *kmaj = false, *ld = k == 1 ? 0 : ks;
    else if (k == 1 || rows == 1) /* one stored row or column: its stride never moves */
        *kmaj = k == 1, *ld = k == 1 ? rs : ks;
    else
        return false;
    return *ld >= 0;
}

/* mma.sync's tile, on sm_90 too where the warpgroup kernel cannot run a problem. */
static int sync_tile(const cuda_device *cd, const cuda_mm_problem *p)
{
    /* 64 x 64 tiles where 128 x 128 ones would leave SMs idle */
    return p->batch * ((p->m + 127) / 128) * ((p->n + 127) / 128) < cd->sms ? 2 : 4;
}

/* The tile without a decision: the warpgroup kernel's on sm_90, mma.sync's elsewhere. */
static int heuristic(const cuda_device *cd, const cuda_mm_problem *p)
{
    int sms = cd->sms;
    int64_t tiles = p->batch * ((p->m + 127) / 128) * ((p->n + 127) / 128);
    int64_t wide = p->batch * ((p->m + 127) / 128) * ((p->n + 255) / 256);
    /* sm_90: 128 x 256 tiles run at about 1.5 times the rate of 128 x 128 ones (ptx_mma.h),
     * so they win down to half a wave; below, 128 x 128, then one warpgroup's 64 x 128 (two
     * blocks per SM) for the smallest problems */
    if (cd->cc == 90)
        return 2 * wide >= sms ? 8 : 2 * tiles >= sms ? 9 : 11;
    /* 64 x 64 warp tiles read shared memory least per mma; tile 4's blocks of 4 such warps run
     * two per SM, so one block's barrier and copies hide behind the other's mma. Fewer
     * 128 x 128 tiles than SMs leaves SMs idle: 64 x 64 ones. For f16/bf16 with enough work,
     * tile 5 (128 x 256 x 64): on the H200 it measured 338 and 361 TFLOP/s at 4096^3 and 8192^3
     * against tile 4's 324 and 357 and tile 1's 311 and 330 (bf16), before sm_90 took wgmma. */
    if (p->dt != BURNC_DTYPE_F32 && wide >= sms)
        return 5;
    return sync_tile(cd, p);
}

static burnc_status_t zero_c(rt_device *dev, const cuda_mm_problem *p, int esz)
{
    cuda_device *cd = cuda_dev(dev);
    size_t bytes = (size_t)((p->batch - 1) * p->c_bs + p->m * p->n) * (size_t)esz;
    mtx_lock(&cd->lock);
    burnc_status_t s = cuda_batch_submit_locked(dev);
    if (s == BURNC_OK)
        s = cuda_check(dev, cd->cu->MemsetD8Async(p->c, 0, bytes, cd->stream), "burnc_matmul: cuMemsetD8Async");
    mtx_unlock(&cd->lock);
    return s;
}

bool cuda_mma_dtype_ok(rt_device *dev, burnc_dtype_t dt, bool allow_tf32)
{
    return cuda_dev(dev)->cc >= 80 &&
           (dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16 || (dt == BURNC_DTYPE_F32 && allow_tf32));
}

/* A tf32 operand for the warpgroup kernel, which reads k-contiguous ones only: the one stored
 * as `rows` rows of `cols` (k) elements at ld apart, batch stride bs, is copied transposed into
 * a pool buffer with rows of cols rounded up to 4 elements (16 bytes). */
typedef struct transposed {
    CUdeviceptr src;
    int64_t rows, cols, ld, bs, batch; /* the source */
    rt_buffer *buf;                    /* the copy */
    int64_t t_ld, t_bs;                /* its strides */
} transposed;

static burnc_status_t transposed_alloc(rt_device *dev, transposed *t)
{
    int64_t nb = t->bs == 0 ? 1 : t->batch;
    t->t_ld = (t->rows + 3) / 4 * 4, t->t_bs = t->bs == 0 ? 0 : t->cols * t->t_ld;
    return rt_pool_alloc(dev, (size_t)(nb * t->cols * t->t_ld) * 4, &t->buf);
}

static void transposed_free(rt_device *dev, transposed *t)
{
    if (t->buf)
        rt_pool_free(dev, t->buf);
    t->buf = NULL;
}

/* The caller holds the device's lock. */
static burnc_status_t transposed_launch(rt_device *dev, CUfunction fn, const transposed *t)
{
    uint64_t w[CG_MMA_T_N_PARAMS] = {t->src, cuda_ptr(t->buf), (uint64_t)t->rows, (uint64_t)t->cols,
                                      (uint64_t)t->ld, (uint64_t)t->bs, (uint64_t)t->t_ld, (uint64_t)t->t_bs};
    void *params[CG_MMA_T_N_PARAMS];
    for (int i = 0; i < CG_MMA_T_N_PARAMS; i++)
        params[i] = &w[i];
    uint32_t grid[3] = {(uint32_t)((t->cols + 31) / 32), (uint32_t)((t->rows + 31) / 32),
                        (uint32_t)(t->bs == 0 ? 1 : t->batch)};
    return cuda_launch_fn(dev, fn, grid, (uint32_t[3]){32, 8, 1}, 0, params, NULL,
                          "burnc_matmul: cuLaunchKernel (tf32 transpose)",
                          cuda_dev(dev)->profile ? "matmul tf32 operand transpose" : "");
}

/* The tensor map of one operand of the warpgroup kernel: `outer` rows of `inner` contiguous
 * elements, ld apart, nb batches bs apart (0: one, shared), read in boxes of box0 x box1
 * elements into the 128-byte swizzle, zeros past the edges. False when the driver refuses it
 * (the engine then runs mma.sync). */
static bool tensor_map(cuda_device *cd, CUtensorMap *map, int type, CUdeviceptr base, int64_t inner, int64_t outer,
                       int64_t ld, int64_t bs, int64_t batch, int box0, int box1)
{
    enum { DT_F16 = 6, DT_F32 = 7, DT_BF16 = 9, SWIZZLE_128B = 3, L2_256B = 3 };
    if (inner > INT32_MAX || outer > INT32_MAX) /* the kernel's box coordinates are 32-bit */
        return false;
    int esz = type == CG_MMA_TF32 ? 4 : 2;
    uint64_t row = ld > 0 ? (uint64_t)ld * esz : ((uint64_t)inner * esz + 15) / 16 * 16;
    uint64_t nb = bs == 0 ? 1 : (uint64_t)batch;
    uint64_t dims[3] = {(uint64_t)inner, (uint64_t)outer, nb};
    uint64_t strides[2] = {row, bs == 0 || batch == 1 ? row * (uint64_t)outer : (uint64_t)bs * esz};
    uint32_t box[3] = {(uint32_t)box0, (uint32_t)box1, 1}, one[3] = {1, 1, 1};
    int dt = type == CG_MMA_F16 ? DT_F16 : type == CG_MMA_BF16 ? DT_BF16 : DT_F32;
    return cd->cu->TensorMapEncodeTiled(map, dt, 3, (void *)(uintptr_t)base, dims, strides, box, one, 0, SWIZZLE_128B,
                                        L2_256B, 0) == CUDA_SUCCESS;
}

/* Takes the device's lock to launch (and once to create the kernel table): the caller must
 * not hold it. */
static int choose_tile(rt_device *dev, const cuda_mm_problem *p, int type, bool a_kmaj, bool b_kmaj);

/* The engine with tile variant `tile` (-1: choose_tile's). */
static burnc_status_t run(rt_device *dev, const cuda_mm_problem *p, bool allow_tf32, int tile, bool *taken)
{
    *taken = false;
    cuda_device *cd = cuda_dev(dev);
    int type = p->dt == BURNC_DTYPE_F16 ? CG_MMA_F16 : p->dt == BURNC_DTYPE_BF16 ? CG_MMA_BF16 : CG_MMA_TF32;
    if (p->epilogue || !cuda_mma_dtype_ok(dev, p->dt, allow_tf32))
        return BURNC_OK;
    if (p->batch < 0 || p->m < 0 || p->n < 0 || p->k < 0 || p->a_bs < 0 || p->b_bs < 0 || p->c_bs < 0)
        return BURNC_OK;
    bool a_kmaj, b_kmaj;
    int64_t a_ld, b_ld;
    if (!layout(p->m, p->k, p->a_rs, p->a_ks, &a_kmaj, &a_ld) || !layout(p->n, p->k, p->b_cs, p->b_ks, &b_kmaj, &b_ld))
        return BURNC_OK;
    int esz = type == CG_MMA_TF32 ? 4 : 2, per = 16 / esz;
    if (a_ld % per || b_ld % per || p->a_bs % per || p->b_bs % per || p->a % 16 || p->b % 16 || p->c % esz)
        return BURNC_OK;
    if (tile < 0)
        tile = choose_tile(dev, p, type, a_kmaj, b_kmaj);
    bool wg = CG_MMA_TILES[tile].wg;
    /* a tf32 operand stored the other way round is transposed first for the warpgroup kernel,
     * within the transpose's grid (rows / 32 blocks along y) */
    transposed tr[2] = {{.src = p->a, .rows = p->k, .cols = p->m, .ld = a_ld, .bs = p->a_bs, .batch = p->batch},
                        {.src = p->b, .rows = p->k, .cols = p->n, .ld = b_ld, .bs = p->b_bs, .batch = p->batch}};
    bool need[2] = {wg && type == CG_MMA_TF32 && !a_kmaj, wg && type == CG_MMA_TF32 && !b_kmaj};
    if ((need[0] || need[1]) && (p->k + 31) / 32 > MAX_GRID_YZ)
        tile = sync_tile(cd, p), wg = need[0] = need[1] = false;
    cg_mma_spec s = cg_mma_variant(cd->cc, type, tile, !a_kmaj && !need[0], b_kmaj || need[1]);
    if (cg_mma_smem_bytes(&s) > (uint32_t)cd->max_shared_optin)
        s = cg_mma_variant(cd->cc, type, tile = 2, !a_kmaj, b_kmaj), wg = need[0] = need[1] = false;
    int64_t gx = (p->n + s.bn - 1) / s.bn, gy = (p->m + s.bm - 1) / s.bm;
    if (gx > INT32_MAX || gy > MAX_GRID_YZ || p->batch > MAX_GRID_YZ || cg_mma_smem_bytes(&s) > (uint32_t)cd->max_shared_optin)
        return BURNC_OK;
    *taken = true;
    if (p->batch == 0 || p->m == 0 || p->n == 0)
        return BURNC_OK;
    RT_TRY(cuda_enter(dev, "burnc_matmul"));
    if (p->k == 0)
        return zero_c(dev, p, esz);
    /* what the kernel reads: each operand, or its transposed copy */
    struct operand {
        CUdeviceptr ptr;
        int64_t ld, bs;
    } op[2] = {{p->a, a_ld, p->a_bs}, {p->b, b_ld, p->b_bs}};
    burnc_status_t st = BURNC_OK;
    for (int i = 0; i < 2; i++)
        if (st == BURNC_OK && need[i] && (st = transposed_alloc(dev, &tr[i])) == BURNC_OK)
            op[i] = (struct operand){cuda_ptr(tr[i].buf), tr[i].t_ld, tr[i].t_bs};
    CUtensorMap maps[2];
    if (st == BURNC_OK && wg) {
        bool ak = !s.a_mmajor, bk = s.b_kmajor;
        bool ok = tensor_map(cd, &maps[0], type, op[0].ptr, ak ? p->k : p->m, ak ? p->m : p->k, op[0].ld, op[0].bs,
                             p->batch, ak ? s.bk : 64, ak ? s.bm : s.bk) &&
                  tensor_map(cd, &maps[1], type, op[1].ptr, bk ? p->k : p->n, bk ? p->n : p->k, op[1].ld, op[1].bs,
                             p->batch, bk ? s.bk : 64, bk ? s.bn : s.bk);
        if (!ok) { /* strides the copy engine cannot take: mma.sync reads the operands as they are */
            for (int i = 0; i < 2; i++)
                transposed_free(dev, &tr[i]), need[i] = false;
            s = cg_mma_variant(cd->cc, type, tile = sync_tile(cd, p), !a_kmaj, b_kmaj);
            op[0] = (struct operand){p->a, a_ld, p->a_bs}, op[1] = (struct operand){p->b, b_ld, p->b_bs};
            gx = (p->n + s.bn - 1) / s.bn, gy = (p->m + s.bm - 1) / s.bm;
        }
    }
    mma_kernel k = {.module = NULL};
    if (st == BURNC_OK)
        st = kernel_of(dev, &s, &k);
    uint64_t w[CG_MMA_N_PARAMS] = {op[0].ptr, op[1].ptr, p->c, (uint64_t)p->m, (uint64_t)p->n, (uint64_t)p->k,
                                   (uint64_t)op[0].bs, (uint64_t)op[0].ld, (uint64_t)op[1].bs, (uint64_t)op[1].ld,
                                   (uint64_t)p->c_bs};
    char name[192] = "";
    if (cd->profile)
        snprintf(name, sizeof name, "matmul %s %lldx%lldx%lld x%lld, tensor cores, tile %d", burnc_dtype_name(p->dt),
                 (long long)p->m, (long long)p->n, (long long)p->k, (long long)p->batch, tile);
    void *params[CG_MMA_N_PARAMS + 2];
    for (int i = 0; i < CG_MMA_N_PARAMS; i++)
        params[i] = &w[i];
    params[CG_MMA_N_PARAMS] = &maps[0], params[CG_MMA_N_PARAMS + 1] = &maps[1];
    if (st == BURNC_OK) {
        mtx_lock(&cd->lock);
        st = cuda_batch_submit_locked(dev);
        for (int i = 0; i < 2; i++)
            if (st == BURNC_OK && need[i])
                st = transposed_launch(dev, k.transpose, &tr[i]);
        if (st == BURNC_OK)
            st = cuda_launch_fn(dev, k.fn, (uint32_t[3]){(uint32_t)gx, (uint32_t)gy, (uint32_t)p->batch},
                                (uint32_t[3]){(uint32_t)cg_mma_threads(&s), 1, 1}, cg_mma_smem_bytes(&s), params, NULL,
                                "burnc_matmul: cuLaunchKernel (tensor cores)", name);
        mtx_unlock(&cd->lock);
    }
    /* the pool hands a buffer out again only to work queued after this on the same stream */
    for (int i = 0; i < 2; i++)
        transposed_free(dev, &tr[i]);
    return st;
}

/* ---- Autotune: family "cuda.mma" -------------------------------------------------------------
 * Which tile variant runs a tensor-core problem. The candidates of one device are one kind of
 * kernel (the warpgroup tiles on sm_90, the mma.sync ones elsewhere): each sums every output's
 * k-steps in the same order with the same instruction shape along k, so a decision does not
 * move a result. Key: the type, M, N and K in buckets, the batch count in buckets, and which
 * axis of each operand is contiguous. Tuning (BURNC_AUTOTUNE=on, a miss) times the valid tiles
 * on private zero-filled buffers of the problem's shape. */

static char tile_text[CG_MMA_N_TILES][48];
static const char *tile_names[CG_MMA_N_TILES];
static once_flag names_once = ONCE_FLAG_INIT;
static void names_init(void)
{
    for (int t = 0; t < CG_MMA_N_TILES; t++) {
        const cg_mma_tile *x = &CG_MMA_TILES[t];
        snprintf(tile_text[t], sizeof tile_text[t], "%s%dx%dx%d w%dx%d s%d c%d%s", x->wg ? "wg " : "", x->bm, x->bn,
                 x->bk, x->wm, x->wn, x->stages, x->min_blocks, x->pipe ? " p" : "");
        tile_names[t] = tile_text[t];
    }
}
static at_family fam_mma = {"cuda.mma", CG_MMA_N_TILES, tile_names};

static burnc_status_t mma_candidate(cuda_mm_timing *t, int c)
{
    bool taken = false;
    burnc_status_t st = run(t->dev, &t->p, true, c, &taken);
    return st == BURNC_OK && !taken ? BURNC_ERR_UNAVAILABLE : st;
}

/* The decision for q, timing the candidates on a miss with dense operands stored like p's. */
static int tune(rt_device *dev, const cuda_mm_problem *p0, bool a_kmaj, bool b_kmaj, const at_query *q)
{
    cuda_mm_timing t = {.dev = dev, .p = *p0, .run = mma_candidate};
    cuda_mm_problem *p = &t.p;
    int64_t es = p->dt == BURNC_DTYPE_F32 ? 4 : 2, m = p->m, n = p->n, k = p->k;
    int64_t lda = ((a_kmaj ? k : m) + 7) / 8 * 8, ldb = ((b_kmaj ? k : n) + 7) / 8 * 8; /* 16-byte rows */
    p->batch = 1, p->a_bs = p->b_bs = 0, p->c_bs = m * n;
    p->a_rs = a_kmaj ? lda : 1, p->a_ks = a_kmaj ? 1 : lda;
    p->b_cs = b_kmaj ? ldb : 1, p->b_ks = b_kmaj ? 1 : ldb;
    t.a_bytes = (size_t)((a_kmaj ? m : k) * lda * es), t.b_bytes = (size_t)((b_kmaj ? n : k) * ldb * es);
    t.c_bytes = (size_t)(m * n * es);
    return cuda_mm_timed_decide(&t, q, NULL);
}

static int choose_tile(rt_device *dev, const cuda_mm_problem *p, int type, bool a_kmaj, bool b_kmaj)
{
    cuda_mma_cache *c = cache_of(dev);
    cuda_device *cd = cuda_dev(dev);
    int forced = c ? atomic_load(&c->forced) : -1;
    const char *env = getenv("BURNC_CUDA_MMA_TILE");
    if (forced < 0 && env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        forced = !*end && v >= 0 && v < CG_MMA_N_TILES ? (int)v : -1;
    }
    if (forced >= 0 && cg_mma_tile_ok(cd->cc, forced))
        return forced;
    int h = heuristic(cd, p);
    bool valid[CG_MMA_N_TILES];
    for (int t = 0; t < CG_MMA_N_TILES; t++) {
        cg_mma_spec s = cg_mma_variant(cd->cc, type, t, !a_kmaj, b_kmaj);
        valid[t] = CG_MMA_TILES[t].wg == (cd->cc == 90) && cg_mma_tile_ok(cd->cc, t) &&
                   cg_mma_smem_bytes(&s) <= (uint32_t)cd->max_shared_optin;
    }
    if (!valid[h])
        return h;
    const char *rec = getenv("BURNC_AUTOTUNE_RECORD");
    if (rec && *rec && p->batch == 1) { /* burnc-tune's workload syntax, as gemm.c's */
        char line[96];
        snprintf(line, sizeof line, "matmul:%lldx%lldx%lld:%s", (long long)p->m, (long long)p->k, (long long)p->n,
                 burnc_dtype_name(p->dt));
        at_record_line(line);
    }
    call_once(&names_once, names_init);
    static const char *types[] = {"f16", "bf16", "tf32"};
    at_buckets bk = at_get_buckets();
    char key[160];
    snprintf(key, sizeof key, "%s m%lld n%lld k%lld b%lld a%c b%c", types[type], (long long)at_bucket(p->m, bk),
             (long long)at_bucket(p->n, bk), (long long)at_bucket(p->k, bk), (long long)at_bucket(p->batch, bk),
             a_kmaj ? 'k' : 'm', b_kmaj ? 'k' : 'n');
    at_query q = {.fingerprint = cuda_tune_fingerprint(dev), .family = &fam_mma, .key = key, .heuristic = h,
                  .valid = valid};
    int t = at_get_mode() == AT_MODE_ON ? tune(dev, p, a_kmaj, b_kmaj, &q) : at_decide(&q, NULL, NULL, NULL);
    return t >= 0 && t < CG_MMA_N_TILES && valid[t] ? t : h;
}

burnc_status_t cuda_mma_matmul(rt_device *dev, const cuda_mm_problem *p, bool allow_tf32, bool *taken)
{
    return run(dev, p, allow_tf32, -1, taken);
}
