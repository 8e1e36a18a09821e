/* What the backends' tuning of kernel launches shares. See launch.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_io.h"
#include "launch.h"
#include "rt.h"

bool at_launch_is_reduce(const kir_kernel *k) { return k->n_stages > 0 || k->n_outer < k->rank; }

void at_launch_rows(const kir_kernel *k, const int64_t *ext, int64_t *rows, int64_t *len)
{
    *rows = *len = 1;
    for (int d = 0; d < k->rank; d++)
        *(d < k->n_outer ? rows : len) *= ext[d];
}

/* v in decimal at p (as %lld); returns the end. */
static char *put_dec(char *p, int64_t v)
{
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    char tmp[20];
    int n = 0;
    do
        tmp[n++] = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *p++ = '-';
    while (n > 0)
        *p++ = tmp[--n];
    return p;
}

/* Written by hand: every launch builds its key, and snprintf cost more than the lookup. */
void at_launch_key(char *out, size_t cap, uint64_t hash, int64_t rows, int64_t len)
{
    at_buckets bk = at_get_buckets();
    char key[64], *p = key; /* "k" 16 " r" 20 " l" 20 */
    *p++ = 'k';
    for (int i = 15; i >= 0; i--)
        *p++ = "0123456789abcdef"[hash >> (4 * i) & 15];
    *p++ = ' ';
    *p++ = 'r';
    p = put_dec(p, at_bucket(rows, bk));
    *p++ = ' ';
    *p++ = 'l';
    p = put_dec(p, at_bucket(len, bk));
    if (cap == 0)
        return;
    size_t n = (size_t)(p - key) < cap ? (size_t)(p - key) : cap - 1; /* truncated as snprintf does */
    memcpy(out, key, n);
    out[n] = '\0';
}

void at_launch_record(const char *backend, const kir_kernel *k, const kir_args *a)
{
    const char *rec = getenv("BURNC_AUTOTUNE_RECORD");
    if (!rec || !*rec)
        return;
    kir_layout l = {.n_scalars = k->n_scalars};
    memcpy(l.extents, a->extents, (size_t)k->rank * sizeof *l.extents);
    memcpy(l.in_offsets, a->in_offsets, (size_t)k->n_inputs * sizeof *l.in_offsets);
    memcpy(l.in_strides, a->in_strides, (size_t)(k->n_inputs * k->rank) * sizeof *l.in_strides);
    memcpy(l.out_offsets, a->out_offsets, (size_t)k->n_outputs * sizeof *l.out_offsets);
    memcpy(l.out_strides, a->out_strides, (size_t)(k->n_outputs * k->rank) * sizeof *l.out_strides);
    if (k->n_scalars > 0 && k->n_scalars <= 64)
        memcpy(l.scalars, a->scalars, (size_t)k->n_scalars * sizeof *l.scalars);
    char *text = kir_encode(k, &l);
    size_t n = text ? strlen(text) + strlen(backend) + 2 : 0;
    char *line = text ? malloc(n) : NULL;
    if (line) {
        snprintf(line, n, "%s:%s", backend, text);
        at_record_line(line);
    }
    free(line);
    free(text);
}

void at_launch_span(const kir_kernel *k, const int64_t *ext, int64_t off, const int64_t *st, int64_t *lo,
                    int64_t *hi)
{
    *lo = *hi = off;
    for (int d = 0; d < k->rank; d++) {
        if (ext[d] == 0) {
            *lo = *hi = off;
            return;
        }
        int64_t reach = (ext[d] - 1) * st[d];
        *(reach < 0 ? lo : hi) += reach;
    }
}

/* Finite values in [-2, 2) (integers in [-100, 100)), so no candidate meets NaN slow paths. */
static void fill(void *p, burnc_dtype_t dt, int64_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15u + 1;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double v = (double)(s >> 11) * 0x1p-53 * 4 - 2;
        switch (dt) {
        case BURNC_DTYPE_F32: ((float *)p)[i] = (float)v; break;
        case BURNC_DTYPE_F64: ((double *)p)[i] = v; break;
        case BURNC_DTYPE_F16: ((uint16_t *)p)[i] = burnc_f32_to_f16((float)v); break;
        case BURNC_DTYPE_BF16: ((uint16_t *)p)[i] = burnc_f32_to_bf16((float)v); break;
        case BURNC_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)(s % 200) - 100; break;
        case BURNC_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)(s % 200) - 100; break;
        case BURNC_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)s; break;
        default: ((uint8_t *)p)[i] = (uint8_t)(s & 1); break;
        }
    }
}

bool at_launch_private(at_launch *l, at_put_fn put, void *ctx)
{
    const kir_kernel *k = l->ir;
    const kir_args *a = l->user;
    l->args = *a;
    l->args.in_offsets = l->in_off;
    l->args.out_offsets = l->out_off;
    for (int s = 0; s < k->n_inputs + k->n_outputs; s++) {
        bool out = s >= k->n_inputs;
        int i = out ? s - k->n_inputs : s;
        burnc_dtype_t dt = out ? k->outputs[i].dtype : k->inputs[i].dtype;
        int64_t off = out ? a->out_offsets[i] : a->in_offsets[i], lo, hi;
        at_launch_span(k, a->extents, off, (out ? a->out_strides : a->in_strides) + (size_t)i * (size_t)k->rank,
                       &lo, &hi);
        size_t bytes = (size_t)(hi - lo + 1) * burnc_dtype_size(dt);
        void *host = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!host)
            return false;
        fill(host, dt, hi - lo + 1, (uint64_t)s);
        if (!put(ctx, out, i, host, bytes))
            return false;
        (out ? l->out_off : l->in_off)[i] = off - lo;
    }
    return true;
}

int at_launch_decide(const at_query *q, bool may_tune, const at_bench *b, void *user, at_outcome *how)
{
    bool timing = may_tune && at_get_mode() == AT_MODE_ON;
    if (timing) {
        /* no room for private operands is the tuning's problem, not the launch's */
        rt_error_state saved;
        rt_error_save(&saved);
        if (!b->init(user)) {
            b->free(user);
            rt_error_restore(&saved);
            timing = false;
        }
    }
    int c = at_decide(q, timing ? b->time : NULL, timing ? user : NULL, how);
    if (timing)
        b->free(user);
    return c;
}
