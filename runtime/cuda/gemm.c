/* burnc_matmul on cuda devices (mma.h says how the two engines share the work).
 *
 * Float matmul records become cuda_mm_problems: the batch axes are cut into an inner group
 * whose strides are linear (one launch, gridDim.z) and outer indices looped over on the host.
 * Each problem goes first to the tensor-core engine (cuda_mma_matmul), else to the SIMT kernel
 * of codegen/ptx_gemm.c: bitwise the cpu device's fma chain (include/burnc.h). Integer
 * matmuls keep the host path of backend.c (ref's kernel through staging).
 *
 * Epilogues: a matmul is held (not enqueued) until the next launch shows whether fusion made
 * that kernel its epilogue (rt.h, launch_kernel's flag); if the kernel fits (element-wise over
 * C's elements, reading C at its own flat positions through one slot, the last axis whole rows
 * of C, no operand written) it runs inside the matmul's store: one kernel, C written once
 * with the epilogue applied (C itself not at all when an epilogue output takes its buffer).
 * Everything else that uses the stream first releases the held matmul unfused
 * (cuda_gemm_flush), so the stream's order is the order the runtime asked for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autotune.h"
#include "burnc_config.h"
#include "codegen/kcache.h"
#include "cu.h"
#include "gemm.h"
#include "mma.h"

#ifdef BURNC_LLVM_VERSION
#define COMPILER_ID "llvm-" BURNC_LLVM_VERSION
#else
#define COMPILER_ID "llvm-19"
#endif

enum { MAX_GRID_YZ = 65535, DEFAULT_SHARED = 48 << 10 };

/* The epilogue of a problem: the kernel and this launch's values (mma.h leaves it to us). */
typedef struct cuda_mm_epilogue {
    const kir_kernel *k;
    int c_slot;
    kir_args args;              /* extents, offsets, strides, scalars */
    CUdeviceptr in[KIR_MAX_INPUTS], out[KIR_MAX_OUTPUTS];
    int64_t batch0, qlast;
    bool store_c;
} cuda_mm_epilogue;

typedef struct gemm_kernel {
    uint64_t key;
    cg_ptx_gemm_spec spec; /* epi NULL: the copy below */
    kir_kernel epi;        /* n_insts 0 and no insts: none */
    bool has_epi;
    CUmodule mod;
    CUfunction fn;
    struct gemm_kernel *next;
} gemm_kernel;

/* A float matmul record, copied: the flush that launched it frees the record. */
typedef struct held_mm {
    burnc_dtype_t dt;
    int rank;
    int64_t shape[BURNC_MAX_RANK]; /* C's */
    int64_t k;
    ir_view va, vb;
    CUdeviceptr a, b, c;
} held_mm;

/* Which epilogues run in the SIMT matmul's stores. By cost: at most EPI_MAX_COST instructions
 * an element. The stores are the tail of a kernel whose blocks all finish together at 8 warps
 * an SM, where arithmetic costs more than in a pass of its own over the whole GPU: at 4096^3
 * f32 on the H200, with the matmul's vector stores, bias (1 instruction) 3.08 ms fused
 * against 3.03-3.06 apart, bias + relu 3.07 against 3.06, bias + gelu 3.18 against 3.09 and
 * bias + sigmoid 3.49 against 3.20 (apart: the matmul, then one fused element-wise kernel). */
enum { EPI_MAX_COST = 8 };

typedef struct cuda_gemm_state {
    mtx_t lock; /* recursive: a release may free pool buffers, which flushes again */
    gemm_kernel *kernels;
    kc_lazy disk;
    bool held;
    held_mm h;
    int forced_tile; /* tests: 1 + the tile every launch uses */
    int epilogues;    /* CUDA_EPI_BY_COST, or for tests CUDA_EPI_NEVER / CUDA_EPI_ALWAYS (when they fit) */
    bool no_mma;      /* tests: never offer problems to the tensor-core engine */
    int builds, fused;
} cuda_gemm_state;

/* Made at open (cuda_gemm_init); NULL only when that ran out of memory. */
static cuda_gemm_state *state(rt_device *dev) { return cuda_dev(dev)->gemm; }

burnc_status_t cuda_gemm_init(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    if (cd->gemm)
        return BURNC_OK;
    cuda_gemm_state *g = calloc(1, sizeof *g);
    if (!g)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_device_open: %s: out of memory", dev->spec);
    mtx_init(&g->lock, mtx_plain | mtx_recursive);
    /* BURNC_CUDA_MM_TILE=N: every SIMT launch uses tile N (for measuring each one) */
    const char *tile = getenv("BURNC_CUDA_MM_TILE");
    if (tile && *tile >= '0' && *tile <= '9' && atoi(tile) < CG_PTX_GEMM_N_TILES)
        g->forced_tile = atoi(tile) + 1;
    cd->gemm = g;
    return BURNC_OK;
}

void cuda_gemm_free(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    cuda_gemm_state *g = cd->gemm;
    if (!g)
        return;
    for (gemm_kernel *k = g->kernels, *next; k; k = next) {
        next = k->next;
        if (k->mod && !atomic_load(&cd->lost))
            cd->cu->ModuleUnload(k->mod);
        kir_free(&k->epi);
        free(k);
    }
    kc_lazy_close(&g->disk);
    mtx_destroy(&g->lock);
    free(g);
    cd->gemm = NULL;
}

static bool float_dt(burnc_dtype_t dt)
{
    return dt == BURNC_DTYPE_F32 || dt == BURNC_DTYPE_F64 || dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16;
}

bool cuda_gemm_handles(const ir_record *rec)
{
    return rec->op == IR_OP_MATMUL && rec->n_in == 2 && float_dt(rec->compute) && rec->dtype == rec->compute &&
           rec->in[0].dtype == rec->compute && rec->in[1].dtype == rec->compute && rec->out_rank >= 2 &&
           rec->out_rank <= BURNC_MAX_RANK && rec->in[0].view.rank == rec->out_rank &&
           rec->in[1].view.rank == rec->out_rank;
}

/* ---- Kernels ---- */

static uint64_t spec_hash(const cg_ptx_gemm_spec *s)
{
    int64_t w[14] = {s->sm,         s->dt, s->bm, s->bn, s->bk, s->tm, s->tn, s->a_mode, s->b_mode, s->min_blocks,
                     s->epi ? s->epi_c_slot : -1, s->pipe, s->async_mn, s->snake};
    return kc_hash(w, sizeof w, s->epi ? kir_hash(s->epi) : 0x67656d6d);
}

static bool same_spec(const gemm_kernel *e, const cg_ptx_gemm_spec *s, uint64_t key)
{
    if (e->key != key || e->spec.dt != s->dt || e->spec.bm != s->bm || e->spec.bn != s->bn || e->spec.bk != s->bk ||
        e->spec.tm != s->tm || e->spec.tn != s->tn || e->spec.a_mode != s->a_mode || e->spec.b_mode != s->b_mode ||
        e->spec.min_blocks != s->min_blocks || e->spec.pipe != s->pipe || e->spec.async_mn != s->async_mn ||
        e->spec.snake != s->snake ||
        e->has_epi != (s->epi != NULL))
        return false;
    if (!s->epi)
        return true;
    /* a hash collision must not run another epilogue: compare what the generator reads */
    const kir_kernel *a = &e->epi, *b = s->epi;
    return e->spec.epi_c_slot == s->epi_c_slot && a->rank == b->rank && a->n_inputs == b->n_inputs &&
           a->n_outputs == b->n_outputs && a->n_scalars == b->n_scalars && a->n_stores == b->n_stores &&
           a->n_insts == b->n_insts && memcmp(a->inputs, b->inputs, sizeof a->inputs) == 0 &&
           memcmp(a->outputs, b->outputs, sizeof a->outputs) == 0 &&
           memcmp(a->stores, b->stores, sizeof a->stores) == 0 &&
           (a->n_insts == 0 || memcmp(a->insts, b->insts, (size_t)a->n_insts * sizeof *a->insts) == 0);
}

/* The PTX of s: the disk cache (may be NULL), else the LLVM module (stored). */
static burnc_status_t ptx_of(rt_device *dev, kc_cache *disk, const cg_ptx_gemm_spec *s, uint64_t ptx_key, char **ptx)
{
    void *cached = NULL;
    size_t size = 0;
    if (disk && kc_get(disk, ptx_key, &cached, &size)) {
        if (size > 0 && ((char *)cached)[size - 1] == '\0') {
            *ptx = cached;
            return BURNC_OK;
        }
        free(cached);
    }
    const cg_llvm_api *api = rt_llvm_api();
    if (!api) {
        char why[400];
        snprintf(why, sizeof why, "%s", burnc_error_message());
        return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_matmul: %s: no code generator: %s", dev->spec, why);
    }
    char err[1024] = "";
    if (!api->compile_ptx_gemm || !api->compile_ptx_gemm(s, ptx, &size, err, sizeof err))
        return rt_fail(BURNC_ERR_COMPILE, "burnc_matmul: %s: generating the matmul kernel failed: %s", dev->spec,
                       api->compile_ptx_gemm ? err : "the module has no compile_ptx_gemm");
    if (disk)
        kc_put(disk, ptx_key, *ptx, strlen(*ptx) + 1);
    return BURNC_OK;
}

/* The compiled kernel for s: memory, then the disk cache (cubin, else PTX), then LLVM. Called
 * with g->lock. */
static burnc_status_t kernel_of(rt_device *dev, cuda_gemm_state *g, const cg_ptx_gemm_spec *s, gemm_kernel **out)
{
    cuda_device *cd = cuda_dev(dev);
    uint64_t key = spec_hash(s);
    for (gemm_kernel *e = g->kernels; e; e = e->next)
        if (same_spec(e, s, key)) {
            *out = e;
            return BURNC_OK;
        }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    gemm_kernel *nk = calloc(1, sizeof *nk);
    if (!nk)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_matmul: %s: out of memory for a kernel", dev->spec);
    nk->key = key;
    nk->spec = *s;
    nk->spec.epi = NULL;
    if (s->epi) {
        nk->has_epi = true;
        nk->epi = *s->epi;
        nk->epi.insts = NULL;
        nk->epi.cap_insts = nk->epi.n_insts;
        if (s->epi->n_insts > 0 && !(nk->epi.insts = malloc((size_t)s->epi->n_insts * sizeof *nk->epi.insts))) {
            free(nk);
            return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_matmul: %s: out of memory for a kernel", dev->spec);
        }
        if (s->epi->n_insts > 0)
            memcpy(nk->epi.insts, s->epi->insts, (size_t)s->epi->n_insts * sizeof *nk->epi.insts);
    }
    char ptx_target[64], cubin_target[96];
    snprintf(ptx_target, sizeof ptx_target, "cuda-ptx-gemm sm_%d", cd->cc);
    snprintf(cubin_target, sizeof cubin_target, "cuda-cubin-gemm sm_%d driver %d", cd->cc, cd->driver_version);
    uint64_t ptx_key = kc_key(key, ptx_target, COMPILER_ID), cubin_key = kc_key(key, cubin_target, COMPILER_ID);
    burnc_status_t st = BURNC_OK;
    void *image = NULL;
    size_t size = 0;
    const char *how = "cubin from the disk cache";
    kc_cache *disk = kc_lazy_open(&g->disk);
    bool loaded = disk && kc_get(disk, cubin_key, &image, &size) &&
                  cd->cu->ModuleLoadData(&nk->mod, image) == CUDA_SUCCESS;
    free(image);
    if (!loaded) {
        char *ptx = NULL;
        void *cubin = NULL;
        how = "PTX linked by the driver";
        nk->mod = NULL;
        st = ptx_of(dev, disk, s, ptx_key, &ptx);
        if (st == BURNC_OK)
            st = cuda_module_from_ptx(dev, ptx, &nk->mod, &cubin, &size);
        if (st == BURNC_OK && cubin && disk)
            kc_put(disk, cubin_key, cubin, size);
        free(cubin);
        free(ptx);
    }
    if (st == BURNC_OK)
        st = cuda_check(dev, cd->cu->ModuleGetFunction(&nk->fn, nk->mod, CG_GEMM_ENTRY), "burnc_matmul: cuModuleGetFunction");
    int shared = cg_ptx_gemm_shared_bytes(s);
    if (st == BURNC_OK && shared > DEFAULT_SHARED)
        st = cuda_check(dev, cd->cu->FuncSetAttribute(nk->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
                        "burnc_matmul: cuFuncSetAttribute");
    if (st != BURNC_OK) {
        if (nk->mod && !atomic_load(&cd->lost))
            cd->cu->ModuleUnload(nk->mod);
        kir_free(&nk->epi);
        free(nk);
        return st;
    }
    g->builds++;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rt_log("codegen", "%s: matmul kernel %s %dx%dx%d t%dx%d modes %d/%d%s%s: %s in %.2f ms", dev->spec,
           ir_dtype_name(s->dt), s->bm, s->bn, s->bk, s->tm, s->tn, s->a_mode, s->b_mode, s->epi ? ", epilogue " : "",
           s->epi ? s->epi->name : "", how, (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    nk->next = g->kernels;
    g->kernels = nk;
    *out = nk;
    return BURNC_OK;
}

/* ---- Problems ---- */

/* How an operand is read (CG_GEMM_*): vectors along the unit stride when every other stride,
 * the address and the extent along it are multiples of the vector. rs: stride along m (A) or
 * n (B); ks: along k; mn: M or N. */
static int mode_of(const cuda_mm_problem *p, burnc_dtype_t dt, bool is_b)
{
    int64_t v = cg_ptx_gemm_vec(dt), mn = is_b ? p->n : p->m, rs = is_b ? p->b_cs : p->a_rs, ks = is_b ? p->b_ks : p->a_ks;
    int64_t bs = is_b ? p->b_bs : p->a_bs;
    CUdeviceptr addr = is_b ? p->b : p->a;
    bool aligned = addr % (uint64_t)(v * (int64_t)ir_dtype_size(dt)) == 0 && bs % v == 0;
    if (ks == 1 && aligned && p->k % v == 0 && rs % v == 0)
        return CG_GEMM_VEC_K;
    if (rs == 1 && aligned && mn % v == 0 && ks % v == 0)
        return CG_GEMM_VEC_MN;
    return (ks < 0 ? -ks : ks) <= (rs < 0 ? -rs : rs) ? CG_GEMM_SCALAR_K : CG_GEMM_SCALAR_MN;
}

static bool tile_valid(const cuda_device *cd, burnc_dtype_t dt, int t)
{
    cg_ptx_gemm_spec s = cg_ptx_gemm_tile_spec(t, cd->cc, dt, CG_GEMM_SCALAR_K, CG_GEMM_SCALAR_K);
    return cg_ptx_gemm_shape_ok(&s) && cg_ptx_gemm_shared_bytes(&s) <= (cd->max_shared_optin > DEFAULT_SHARED
                                                                           ? cd->max_shared_optin
                                                                           : DEFAULT_SHARED);
}

/* Enqueues the SIMT kernel for p with tile t. */
static burnc_status_t simt_run(rt_device *dev, cuda_gemm_state *g, const cuda_mm_problem *p, int t)
{
    cuda_device *cd = cuda_dev(dev);
    const cuda_mm_epilogue *e = p->epilogue;
    cg_ptx_gemm_spec s = cg_ptx_gemm_tile_spec(t, cd->cc, p->dt, mode_of(p, p->dt, false), mode_of(p, p->dt, true));
    s.epi = e ? e->k : NULL, s.epi_c_slot = e ? e->c_slot : 0;
    int64_t gx = (p->n + s.bn - 1) / s.bn, gy = (p->m + s.bm - 1) / s.bm;
    if (gy > MAX_GRID_YZ || gx > INT32_MAX || p->batch > MAX_GRID_YZ)
        return rt_fail(BURNC_ERR_EXECUTION, "burnc_matmul: %s: %lld x %lld x %lld batches is too large a grid",
                       dev->spec, (long long)p->m, (long long)p->n, (long long)p->batch);
    gemm_kernel *k = NULL;
    RT_TRY(kernel_of(dev, g, &s, &k));
    uint64_t w[CG_PTX_MAX_PARAM_WORDS + CG_GEMM_W_EPI] = {0};
    w[CG_GEMM_W_A] = p->a, w[CG_GEMM_W_B] = p->b, w[CG_GEMM_W_C] = p->c;
    w[CG_GEMM_W_M] = (uint64_t)p->m, w[CG_GEMM_W_N] = (uint64_t)p->n, w[CG_GEMM_W_K] = (uint64_t)p->k;
    w[CG_GEMM_W_A_BS] = (uint64_t)p->a_bs, w[CG_GEMM_W_A_RS] = (uint64_t)p->a_rs, w[CG_GEMM_W_A_KS] = (uint64_t)p->a_ks;
    w[CG_GEMM_W_B_BS] = (uint64_t)p->b_bs, w[CG_GEMM_W_B_KS] = (uint64_t)p->b_ks, w[CG_GEMM_W_B_CS] = (uint64_t)p->b_cs;
    w[CG_GEMM_W_C_BS] = (uint64_t)p->c_bs;
    w[CG_GEMM_W_FLAGS] = (!e || e->store_c ? CG_GEMM_F_STORE_C : 0) |
                         (p->n % cg_ptx_gemm_vec(p->dt) == 0 ? CG_GEMM_F_C_VEC : 0);
    size_t n_words = CG_GEMM_W_EPI;
    if (e) {
        const kir_kernel *ek = e->k;
        cg_ptx_layout l = cg_ptx_params_layout(ek);
        uint64_t *ew = w + CG_GEMM_W_EPI;
        w[CG_GEMM_W_BATCH0] = (uint64_t)e->batch0, w[CG_GEMM_W_QLAST] = (uint64_t)e->qlast;
        for (int i = 0; i < ek->n_inputs; i++) {
            ew[l.in_addr + i] = e->in[i];
            ew[l.in_off + i] = (uint64_t)e->args.in_offsets[i];
            for (int d = 0; d < ek->rank; d++)
                ew[l.in_stride + i * ek->rank + d] = (uint64_t)e->args.in_strides[i * ek->rank + d];
        }
        for (int o = 0; o < ek->n_outputs; o++) {
            ew[l.out_addr + o] = e->out[o];
            ew[l.out_off + o] = (uint64_t)e->args.out_offsets[o];
            for (int d = 0; d < ek->rank; d++)
                ew[l.out_stride + o * ek->rank + d] = (uint64_t)e->args.out_strides[o * ek->rank + d];
        }
        for (int d = 0; d < ek->rank; d++)
            ew[l.extents + d] = (uint64_t)e->args.extents[d];
        if (ek->n_scalars)
            memcpy(ew + l.scalars, e->args.scalars, (size_t)ek->n_scalars * sizeof *ew);
        n_words += (size_t)l.n_words;
    }
    size_t bytes = n_words * sizeof *w;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, w, CU_LAUNCH_PARAM_BUFFER_SIZE, &bytes, CU_LAUNCH_PARAM_END};
    char name[192] = "";
    if (cd->profile)
        snprintf(name, sizeof name, "matmul %s %lldx%lldx%lld x%lld, tile %d%s%s", burnc_dtype_name(p->dt),
                 (long long)p->m, (long long)p->n, (long long)p->k, (long long)p->batch, t, e ? ", epilogue " : "",
                 e ? e->k->name : "");
    mtx_lock(&cd->lock);
    burnc_status_t st = cuda_batch_submit_locked(dev);
    if (st == BURNC_OK)
        st = cuda_launch_fn(dev, k->fn, (uint32_t[3]){(uint32_t)gx, (uint32_t)gy, (uint32_t)p->batch},
                         (uint32_t[3]){(uint32_t)cg_ptx_gemm_threads(&s), 1, 1}, (uint32_t)cg_ptx_gemm_shared_bytes(&s),
                         NULL, extra, "burnc_matmul: cuLaunchKernel", name);
    mtx_unlock(&cd->lock);
    return st;
}

/* One problem: the tensor-core engine if it takes it, else the SIMT kernel with the tile
 * autotune (or a test) chose. */
static burnc_status_t run_problem(rt_device *dev, cuda_gemm_state *g, const cuda_mm_problem *p)
{
    cuda_device *cd = cuda_dev(dev);
    if (p->batch == 0 || p->m == 0 || p->n == 0)
        return BURNC_OK;
    bool taken = false;
    if (!g->no_mma)
        RT_TRY(cuda_mma_matmul(dev, p, atomic_load(&cd->tf32), &taken));
    if (taken)
        return BURNC_OK;
    bool valid[CG_PTX_GEMM_N_TILES];
    for (int t = 0; t < CG_PTX_GEMM_N_TILES; t++)
        valid[t] = tile_valid(cd, p->dt, t);
    int t = g->forced_tile - 1;
    if (t < 0 || !valid[t])
        t = cuda_mm_choose_tile(dev, p, valid);
    return simt_run(dev, g, p, t);
}

/* Runs held matmul h (with epilogue e, or none): the batch axes cut into linear groups. */
static burnc_status_t run_held(rt_device *dev, cuda_gemm_state *g, const held_mm *h, cuda_mm_epilogue *e)
{
    RT_TRY(cuda_enter(dev, "burnc_matmul")); /* the calling thread's context, or a lost device */
    int r = h->rank, rb = r - 2;
    int64_t es = (int64_t)ir_dtype_size(h->dt);
    cuda_mm_problem p = {.dt = h->dt, .m = h->shape[r - 2], .n = h->shape[r - 1], .k = h->k, .batch = 1,
                         .a_rs = h->va.strides[r - 2], .a_ks = h->va.strides[r - 1], .b_ks = h->vb.strides[r - 2],
                         .b_cs = h->vb.strides[r - 1], .epilogue = e};
    p.c_bs = p.m * p.n;
    /* the inner group: the last batch axes whose A and B strides continue each other's */
    int inner = rb;
    int64_t ib = 1, a_bs = 0, b_bs = 0;
    while (inner > 0) {
        int d = inner - 1;
        int64_t n = h->shape[d];
        if (n != 1) {
            if (ib > 1 && (h->va.strides[d] != a_bs * ib || h->vb.strides[d] != b_bs * ib))
                break;
            if (ib == 1)
                a_bs = h->va.strides[d], b_bs = h->vb.strides[d];
        }
        ib *= n;
        inner = d;
    }
    int64_t outer = 1;
    for (int d = 0; d < inner; d++)
        outer *= h->shape[d];
    p.a_bs = a_bs, p.b_bs = b_bs;
    for (int64_t o = 0; o < outer; o++) {
        int64_t oa = h->va.offset, ob = h->vb.offset, t = o;
        for (int d = inner - 1; d >= 0; d--) {
            oa += (t % h->shape[d]) * h->va.strides[d];
            ob += (t % h->shape[d]) * h->vb.strides[d];
            t /= h->shape[d];
        }
        for (int64_t b0 = 0; b0 < ib; b0 += MAX_GRID_YZ) {
            p.batch = ib - b0 < MAX_GRID_YZ ? ib - b0 : MAX_GRID_YZ;
            p.a = h->a + (CUdeviceptr)((oa + b0 * a_bs) * es);
            p.b = h->b + (CUdeviceptr)((ob + b0 * b_bs) * es);
            p.c = h->c + (CUdeviceptr)((o * ib + b0) * p.c_bs * es);
            if (e)
                e->batch0 = o * ib + b0;
            RT_TRY(run_problem(dev, g, &p));
        }
    }
    return BURNC_OK;
}

/* Releases the held matmul unfused; failures also go to the device's pending error (the
 * caller may be a free that cannot report). Called with g->lock. */
static burnc_status_t release_locked(rt_device *dev, cuda_gemm_state *g)
{
    if (!g->held)
        return BURNC_OK;
    g->held = false;
    burnc_status_t s = run_held(dev, g, &g->h, NULL);
    if (s != BURNC_OK)
        rt_device_set_error(dev, s, burnc_error_message());
    return s;
}

burnc_status_t cuda_gemm_flush(rt_device *dev)
{
    cuda_gemm_state *g = cuda_dev(dev)->gemm;
    if (!g)
        return BURNC_OK;
    mtx_lock(&g->lock);
    burnc_status_t s = release_locked(dev, g);
    mtx_unlock(&g->lock);
    return s;
}

burnc_status_t cuda_gemm_launch(rt_device *dev, const ir_record *rec, rt_buffer *const *bufs)
{
    cuda_gemm_state *g = state(dev);
    if (!g)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_matmul: %s: out of memory", dev->spec);
    const ir_view *va = &rec->in[0].view, *vb = &rec->in[1].view;
    int r = rec->out_rank;
    int64_t es = (int64_t)ir_dtype_size(rec->compute), numel = 1;
    bool ok = va->shape[r - 2] == rec->out_shape[r - 2] && vb->shape[r - 2] == va->shape[r - 1] &&
              vb->shape[r - 1] == rec->out_shape[r - 1] && ir_view_fits(va, es, bufs[0]->size) &&
              ir_view_fits(vb, es, bufs[1]->size);
    for (int d = 0; d < r; d++) {
        numel *= rec->out_shape[d];
        if (d < r - 2)
            ok = ok && va->shape[d] == rec->out_shape[d] && vb->shape[d] == rec->out_shape[d];
    }
    if (!ok || (size_t)(numel * es) > bufs[2]->size)
        return rt_fail(BURNC_ERR_INTERNAL, "burnc_matmul: %s: operand shapes or views do not fit their buffers",
                       dev->spec);
    mtx_lock(&g->lock);
    burnc_status_t s = release_locked(dev, g);
    if (s == BURNC_OK) {
        held_mm *h = &g->h;
        *h = (held_mm){.dt = rec->compute, .rank = r, .k = va->shape[r - 1], .va = *va, .vb = *vb,
                       .a = cuda_ptr(bufs[0]), .b = cuda_ptr(bufs[1]), .c = cuda_ptr(bufs[2])};
        memcpy(h->shape, rec->out_shape, sizeof h->shape);
        g->held = true; /* until the next launch shows whether it is the epilogue */
    }
    mtx_unlock(&g->lock);
    return s;
}

/* Whether kernel k over args (buffers ins/outs) fits as the epilogue of h (the file's head
 * says what that means); fills e. */
static bool fits(const held_mm *h, const kir_kernel *k, const kir_args *args, rt_buffer *const *ins,
                 rt_buffer *const *outs, cuda_mm_epilogue *e)
{
    int r = h->rank;
    int64_t n = h->shape[r - 1], numel = 1, cnt = 1;
    if (k->rank < 1 || k->rank > BURNC_MAX_RANK)
        return false;
    for (int d = 0; d < r; d++)
        numel *= h->shape[d];
    for (int d = 0; d < k->rank; d++)
        cnt *= args->extents[d];
    if (cnt != numel || numel == 0 || k->n_stores == 0 || args->extents[k->rank - 1] % n != 0)
        return false;
    int c_slot = -1;
    int64_t stride[BURNC_MAX_RANK], m = 1;
    for (int d = k->rank - 1; d >= 0; d--) {
        stride[d] = m;
        m *= args->extents[d];
    }
    *e = (cuda_mm_epilogue){.k = k, .args = *args, .store_c = true, .qlast = args->extents[k->rank - 1] / n};
    for (int b = 0; b < k->n_inputs + k->n_outputs; b++) {
        bool out = b >= k->n_inputs;
        int s = out ? b - k->n_inputs : b;
        CUdeviceptr p = cuda_ptr(out ? outs[s] : ins[s]);
        *(out ? &e->out[s] : &e->in[s]) = p;
        if (out && (p == h->a || p == h->b))
            return false;
        if (p != h->c)
            continue;
        const int64_t *st = (out ? args->out_strides : args->in_strides) + (size_t)s * (size_t)k->rank;
        if ((out ? args->out_offsets : args->in_offsets)[s] != 0)
            return false;
        for (int d = 0; d < k->rank; d++)
            if (args->extents[d] > 1 && st[d] != stride[d])
                return false;
        if (out) {
            e->store_c = false; /* written at the same positions: the epilogue's value wins */
        } else {
            if (c_slot >= 0 || k->inputs[s].dtype != h->dt)
                return false;
            c_slot = s;
        }
    }
    e->c_slot = c_slot;
    return c_slot >= 0 && cg_ptx_gemm_epilogue_ok(k, c_slot);
}

/* An epilogue's arithmetic: its instructions other than loads, constants, arguments and
 * indices. */
static int epilogue_cost(const kir_kernel *k)
{
    int n = 0;
    for (int i = 0; i < k->n_insts; i++) {
        kir_opcode op = k->insts[i].op;
        n += op != KIR_LOAD && op != KIR_CONST && op != KIR_ARG && op != KIR_INDEX && op != KIR_EXTENT &&
             op != KIR_ROW_LEN;
    }
    return n;
}

burnc_status_t cuda_gemm_kernel_launched(rt_device *dev, const kir_kernel *k, const kir_args *args,
                                         rt_buffer *const *ins, rt_buffer *const *outs, bool epilogue, bool *fused)
{
    *fused = false;
    cuda_gemm_state *g = cuda_dev(dev)->gemm;
    if (!g)
        return BURNC_OK;
    mtx_lock(&g->lock);
    burnc_status_t s = BURNC_OK;
    cuda_mm_epilogue e;
    bool mma = g->held && !g->no_mma && cuda_mma_dtype_ok(dev, g->h.dt, atomic_load(&cuda_dev(dev)->tf32));
    int cost = g->held && epilogue ? epilogue_cost(k) : 0;
    bool cheap = g->epilogues == CUDA_EPI_ALWAYS || (g->epilogues == CUDA_EPI_BY_COST && cost <= EPI_MAX_COST);
    if (g->held && epilogue && cheap && !mma && fits(&g->h, k, args, ins, outs, &e)) {
        g->held = false;
        s = run_held(dev, g, &g->h, &e);
        if (s == BURNC_OK) {
            *fused = true;
            g->fused++;
            rt_log("fusion", "%s runs as the epilogue of the matmul before it, in its stores", k->name);
        }
    } else {
        if (g->held && epilogue && !cheap && !mma && g->epilogues == CUDA_EPI_BY_COST)
            rt_log("fusion", "%s, the matmul's epilogue, runs apart: %d instructions an element cost more in the "
                   "matmul's stores than in a kernel of their own", k->name, cost);
        else if (g->held && epilogue && g->epilogues != CUDA_EPI_NEVER)
            rt_log("fusion", "%s, the matmul's epilogue, runs apart: %s", k->name,
                   mma ? "the matmul runs on tensor cores, which fuse no epilogue"
                       : "it does not read the product at the positions it writes, writes an operand, or is not "
                         "element-wise");
        s = release_locked(dev, g);
    }
    mtx_unlock(&g->lock);
    return s;
}

/* ---- Autotune's timing and the test hooks ---- */

static bool timing_prepare(cuda_mm_timing *t)
{
    cuda_device *cd = cuda_dev(t->dev);
    t->tried = true;
    bool ok = rt_pool_alloc(t->dev, t->a_bytes, &t->buf[0]) == BURNC_OK &&
              rt_pool_alloc(t->dev, t->b_bytes, &t->buf[1]) == BURNC_OK &&
              rt_pool_alloc(t->dev, t->c_bytes, &t->buf[2]) == BURNC_OK &&
              cd->cu->EventCreate(&t->ev[0], CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
              cd->cu->EventCreate(&t->ev[1], CU_EVENT_DEFAULT) == CUDA_SUCCESS;
    if (ok) {
        mtx_lock(&cd->lock);
        ok = cuda_batch_submit_locked(t->dev) == BURNC_OK &&
             cd->cu->MemsetD8Async(cuda_ptr(t->buf[0]), 0, t->buf[0]->size, cd->stream) == CUDA_SUCCESS &&
             cd->cu->MemsetD8Async(cuda_ptr(t->buf[1]), 0, t->buf[1]->size, cd->stream) == CUDA_SUCCESS;
        mtx_unlock(&cd->lock);
    }
    if (ok)
        t->p.a = cuda_ptr(t->buf[0]), t->p.b = cuda_ptr(t->buf[1]), t->p.c = cuda_ptr(t->buf[2]);
    return ok;
}

/* One timed run of candidate c: a warm-up (and the compile), then the mean of three. */
static double time_candidate(void *user, int c)
{
    cuda_mm_timing *t = user;
    cuda_device *cd = cuda_dev(t->dev);
    if ((!t->tried && !timing_prepare(t)) || !t->p.a || t->run(t, c) != BURNC_OK)
        return -1;
    mtx_lock(&cd->lock);
    bool ok = cd->cu->EventRecord(t->ev[0], cd->stream) == CUDA_SUCCESS;
    mtx_unlock(&cd->lock);
    for (int i = 0; i < 3 && ok; i++)
        ok = t->run(t, c) == BURNC_OK;
    float ms = 0;
    mtx_lock(&cd->lock);
    ok = ok && cd->cu->EventRecord(t->ev[1], cd->stream) == CUDA_SUCCESS;
    mtx_unlock(&cd->lock);
    if (!ok || cd->cu->EventSynchronize(t->ev[1]) != CUDA_SUCCESS ||
        cd->cu->EventElapsedTime(&ms, t->ev[0], t->ev[1]) != CUDA_SUCCESS)
        return -1;
    return (double)ms / 3;
}

int cuda_mm_timed_decide(cuda_mm_timing *t, const at_query *q, at_outcome *how)
{
    cuda_device *cd = cuda_dev(t->dev);
    t->p.a = t->p.b = t->p.c = 0;
    rt_error_state saved;
    rt_error_save(&saved);
    int c = at_decide(q, time_candidate, t, how);
    for (int i = 0; i < 2; i++)
        if (t->ev[i])
            cd->cu->EventDestroy(t->ev[i]);
    for (int i = 0; i < 3; i++)
        if (t->buf[i])
            rt_pool_free(t->dev, t->buf[i]);
    rt_error_restore(&saved); /* a candidate that failed to time is only dropped */
    return c;
}

static burnc_status_t simt_candidate(cuda_mm_timing *t, int c) { return simt_run(t->dev, state(t->dev), &t->p, c); }

/* p's shape, dense in its layouts, without its epilogue. */
int cuda_mm_tune(rt_device *dev, const cuda_mm_problem *p0, const at_query *q, at_outcome *how)
{
    cuda_mm_timing t = {.dev = dev, .p = *p0, .run = simt_candidate};
    cuda_mm_problem *p = &t.p;
    size_t es = ir_dtype_size(p0->dt);
    bool at = p0->a_rs == 1 && p0->a_ks != 1, bt = p0->b_ks == 1 && p0->b_cs != 1;
    p->epilogue = NULL;
    p->batch = 1;
    p->a_rs = at ? 1 : p->k, p->a_ks = at ? p->m : 1;
    p->b_ks = bt ? 1 : p->n, p->b_cs = bt ? p->k : 1;
    p->a_bs = p->b_bs = 0, p->c_bs = p->m * p->n;
    t.a_bytes = (size_t)(p->m * p->k) * es, t.b_bytes = (size_t)(p->k * p->n) * es, t.c_bytes = (size_t)(p->m * p->n) * es;
    return cuda_mm_timed_decide(&t, q, how);
}

bool cuda_test_gemm_force_tile(rt_device *dev, int t)
{
    if (t < -1 || t >= CG_PTX_GEMM_N_TILES || !state(dev))
        return false;
    if (t >= 0 && !tile_valid(cuda_dev(dev), BURNC_DTYPE_F32, t))
        return false;
    state(dev)->forced_tile = t + 1;
    return true;
}

void cuda_test_gemm_set_epilogues(rt_device *dev, int mode)
{
    if (state(dev))
        state(dev)->epilogues = mode;
}

void cuda_test_gemm_set_mma(rt_device *dev, bool on)
{
    if (state(dev))
        state(dev)->no_mma = !on;
}

void cuda_test_gemm_counts(rt_device *dev, int *builds, int *fused)
{
    cuda_gemm_state *g = state(dev);
    *builds = g ? g->builds : 0;
    *fused = g ? g->fused : 0;
}
