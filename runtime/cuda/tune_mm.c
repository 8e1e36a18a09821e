/* Autotune family "cuda.matmul": which SIMT tile (codegen/ptx_gemm.h, CG_PTX_GEMM_TILES) runs a
 * matmul problem. No tile changes a result: every C element is the same fma chain.
 *
 * Key: dtype, M, N and K in buckets, the batch count in buckets, and the operands' read modes
 * (vector or scalar, along k or along m/n). Tuning (BURNC_AUTOTUNE=on, a miss) times the valid
 * tiles on private zero-filled buffers of the problem's shape (gemm.c). */
#include <stdio.h>
#include <stdlib.h>

#include "cu.h"
#include "gemm.h"

static const char *const tile_names[CG_PTX_GEMM_N_TILES] = {
    CG_PTX_GEMM_TILES[0].name, CG_PTX_GEMM_TILES[1].name, CG_PTX_GEMM_TILES[2].name,
    CG_PTX_GEMM_TILES[3].name, CG_PTX_GEMM_TILES[4].name, CG_PTX_GEMM_TILES[5].name,
    CG_PTX_GEMM_TILES[6].name, CG_PTX_GEMM_TILES[7].name, CG_PTX_GEMM_TILES[8].name,
    CG_PTX_GEMM_TILES[9].name, CG_PTX_GEMM_TILES[10].name,
};
static at_family fam_matmul = {"cuda.matmul", CG_PTX_GEMM_N_TILES, tile_names};

/* 128x128 tiles are the large-square choice, 16x8 a thread (128 fmas per 6 shared vector
 * loads; 46 TFLOP/s at 4096^3 on the H200, 210 us for 4096 x 1024 x 1024) before 8x8 (43,
 * 220 us), which f64 takes; pipelined where both operands are read along k (x @ W^T: 204
 * against 214 us; 198 in snake order), with cp.async copies where both are read along m/n
 * (195 against 198-203 us for 4 x 1024^3). When they would leave SMs idle, smaller ones give more
 * blocks: 64x64 at 8x4, pipelined, where it makes two blocks an SM (1024 x 1024 x 4096, a
 * 1024-wide layer's weight gradient: 234 us against 252 for 64x128 and 270 for 64x64 at 4x4;
 * 214 with its operands copied by cp.async); a wave a few
 * blocks short of the SMs still beats tiles half the size (64x128 there: 128 blocks on the
 * H200's 132 SMs). */
int cuda_mm_heuristic(const cuda_device *cd, const cuda_mm_problem *p, const bool *valid)
{
    static const struct {
        int tile, waves; /* waves: the blocks it needs, in SMs (0: any number) */
    } order[CG_PTX_GEMM_N_TILES] = {{7, 1}, {0, 1}, {9, 2}, {3, 1}, {2, 1}, {4, 1}, {5, 0}, {1, 1}, {6, 1}, {8, 1}, {10, 1}};
    int sms = cd->sms > 0 ? cd->sms : 1;
    bool along_k = p->a_ks == 1 && p->b_ks == 1, along_mn = p->a_rs == 1 && p->b_cs == 1;
    for (int i = 0; i < CG_PTX_GEMM_N_TILES; i++) {
        int t = order[i].tile;
        if (t == 7 && along_k && valid[8])
            t = 8;
        else if (t == 7 && along_mn && valid[10])
            t = 10;
        const cg_ptx_gemm_tile *x = &CG_PTX_GEMM_TILES[t];
        int64_t blocks = (p->m + x->bm - 1) / x->bm * ((p->n + x->bn - 1) / x->bn) * (p->batch > 0 ? p->batch : 1);
        if (valid[t] && blocks * 16 >= (int64_t)sms * 15 * order[i].waves)
            return t;
    }
    for (int t = 0; t < CG_PTX_GEMM_N_TILES; t++)
        if (valid[t])
            return t;
    return 0;
}

static char mode_char(int64_t rs, int64_t ks) { return ks == 1 ? 'k' : rs == 1 ? 'm' : 's'; }

int cuda_mm_choose_tile(rt_device *dev, const cuda_mm_problem *p, const bool *valid)
{
    cuda_device *cd = cuda_dev(dev);
    at_buckets bk = at_get_buckets();
    char key[160];
    snprintf(key, sizeof key, "%s m%lld n%lld k%lld b%lld a%c b%c", ir_dtype_name(p->dt),
             (long long)at_bucket(p->m, bk), (long long)at_bucket(p->n, bk), (long long)at_bucket(p->k, bk),
             (long long)at_bucket(p->batch, bk), mode_char(p->a_rs, p->a_ks), mode_char(p->b_cs, p->b_ks));
    int h = cuda_mm_heuristic(cd, p, valid);
    const char *rec = getenv("BURNC_AUTOTUNE_RECORD");
    if (rec && *rec && p->batch == 1) { /* burnc-tune's workload syntax */
        char line[96];
        snprintf(line, sizeof line, "matmul:%lldx%lldx%lld:%s", (long long)p->m, (long long)p->k, (long long)p->n,
                 ir_dtype_name(p->dt));
        at_record_line(line);
    }
    at_query q = {.fingerprint = cuda_tune_fingerprint(dev), .family = &fam_matmul, .key = key, .heuristic = h,
                  .valid = valid};
    int c = at_get_mode() == AT_MODE_ON ? cuda_mm_tune(dev, p, &q, NULL) : at_decide(&q, NULL, NULL, NULL);
    return c >= 0 && c < CG_PTX_GEMM_N_TILES && valid[c] ? c : h;
}
