/* Parameter sets: named tensors in slots, replaced whole by optimizers and loaders. */
#include <stdlib.h>
#include <string.h>

#include "nn.h"

#define NN_NAME_MAX 255

struct burnc_params {
    int n, cap;
    char **names;
    burnc_tensor_t **t;
};

static bool is_float(burnc_dtype_t dt)
{
    return dt == BURNC_DTYPE_F32 || dt == BURNC_DTYPE_F64 || dt == BURNC_DTYPE_F16 || dt == BURNC_DTYPE_BF16;
}

/* t's values made on `handle` through the host: the way into an autodiff context for a tensor
 * made without one (burnc_tensor_to_device keeps a tensor's own context). */
static burnc_tensor_t *remade_on(burnc_tensor_t *t, burnc_device_t *handle)
{
    size_t bytes = (size_t)burnc_tensor_numel(t) * burnc_dtype_size(burnc_tensor_dtype(t));
    void *host = malloc(bytes ? bytes : 1);
    if (!host) {
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_params: %zu bytes of host memory", bytes);
        return NULL;
    }
    burnc_tensor_t *out = NULL;
    if (burnc_tensor_read(t, host, bytes) == BURNC_OK)
        out = burnc_tensor_from_data(handle, burnc_tensor_dtype(t), burnc_tensor_rank(t), burnc_tensor_shape(t), host);
    free(host);
    return out;
}

/* The reference a slot stores, for a slot living on `handle`: on an autodiff handle a float
 * parameter is a leaf whose gradient backward reports (its values brought into that context if
 * t was made without it); elsewhere a new handle of t's values. Never a retain of the caller's
 * handle (a scope could take that reference back) and never registered in a scope: the set owns
 * it. */
static burnc_tensor_t *slot_ref(burnc_tensor_t *t, burnc_device_t *handle)
{
    bool track = burnc_device_is_autodiff(handle) && is_float(burnc_tensor_dtype(t));
    burnc_device_t *own = burnc_tensor_device(t);
    bool tracked_there = burnc_device_is_autodiff(own);
    burnc_device_release(own);
    rt_scope_suspend();
    burnc_tensor_t *ref;
    if (track && !tracked_there) {
        burnc_tensor_t *copy = remade_on(t, handle);
        ref = copy ? burnc_tensor_require_grad(copy) : NULL;
        burnc_tensor_release(copy);
    } else {
        ref = track ? burnc_tensor_require_grad(t) : burnc_tensor_detach(t);
    }
    rt_scope_resume();
    return ref;
}

/* slot_ref for slot i of p: the slot keeps its tensor's context. */
static burnc_tensor_t *slot_ref_at(const burnc_params_t *p, int i, burnc_tensor_t *t)
{
    burnc_device_t *dev = burnc_tensor_device(p->t[i]);
    burnc_tensor_t *ref = slot_ref(t, dev);
    burnc_device_release(dev);
    return ref;
}

burnc_params_t *burnc_params_new(void)
{
    burnc_params_t *p = calloc(1, sizeof *p);
    if (!p)
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_params_new: out of memory");
    return p;
}

void nn_params_truncate(burnc_params_t *p, int first)
{
    while (p->n > first) {
        p->n--;
        burnc_tensor_release(p->t[p->n]);
        free(p->names[p->n]);
    }
}

void burnc_params_release(burnc_params_t *p)
{
    if (!p)
        return;
    nn_params_truncate(p, 0);
    free(p->names);
    free(p->t);
    free(p);
}

int burnc_params_count(const burnc_params_t *p) { return p ? p->n : 0; }

int burnc_params_find(const burnc_params_t *p, const char *name)
{
    if (!p || !name)
        return -1;
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->names[i], name))
            return i;
    return -1;
}

int burnc_params_add(burnc_params_t *p, const char *name, burnc_tensor_t *t)
{
    if (!p || !name || !t) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_params_add: NULL %s", !p ? "set" : !name ? "name" : "tensor");
        return -1;
    }
    size_t len = strlen(name);
    if (len == 0 || len > NN_NAME_MAX) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_params_add: name of %zu bytes (1..%d)", len, NN_NAME_MAX);
        return -1;
    }
    if (burnc_params_find(p, name) >= 0) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_params_add: the set already has \"%s\"", name);
        return -1;
    }
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        char **names = realloc(p->names, (size_t)cap * sizeof *names);
        if (names)
            p->names = names;
        burnc_tensor_t **ts = names ? realloc(p->t, (size_t)cap * sizeof *ts) : NULL;
        if (!ts) {
            rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_params_add: out of memory for \"%s\"", name);
            return -1;
        }
        p->t = ts;
        p->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) {
        rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_params_add: out of memory for \"%s\"", name);
        return -1;
    }
    burnc_device_t *dev = burnc_tensor_device(t);
    burnc_tensor_t *ref = slot_ref(t, dev);
    burnc_device_release(dev);
    if (!ref) {
        free(copy);
        return -1;
    }
    p->names[p->n] = copy;
    p->t[p->n] = ref;
    return p->n++;
}

const char *burnc_params_name(const burnc_params_t *p, int i)
{
    return p && i >= 0 && i < p->n ? p->names[i] : NULL;
}

burnc_tensor_t *nn_params_at(const burnc_params_t *p, int i) { return p->t[i]; }

burnc_tensor_t *burnc_params_get(const burnc_params_t *p, int i)
{
    if (!p || i < 0 || i >= p->n) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_params_get: slot %d of a set of %d", i, p ? p->n : 0);
        return NULL;
    }
    return burnc_tensor_retain(p->t[i]);
}

/* Replaces slot i by t, taking over the caller's reference. */
static void replace(burnc_params_t *p, int i, burnc_tensor_t *t)
{
    burnc_tensor_release(p->t[i]);
    p->t[i] = t;
}

burnc_status_t nn_params_update(burnc_params_t *p, int i, burnc_tensor_t *t)
{
    burnc_tensor_t *ref = t ? slot_ref_at(p, i, t) : NULL;
    burnc_tensor_release(t);
    if (!ref)
        return burnc_error_code() ? burnc_error_code() : BURNC_ERR_INTERNAL;
    replace(p, i, ref);
    return BURNC_OK;
}

/* t may take slot i's place: same shape, dtype and device. */
static burnc_status_t check_fits(const char *op, const burnc_params_t *p, int i, burnc_tensor_t *t)
{
    burnc_tensor_t *old = p->t[i];
    int rank = burnc_tensor_rank(old);
    char a[160], b[160];
    if (burnc_tensor_rank(t) != rank ||
        memcmp(burnc_tensor_shape(t), burnc_tensor_shape(old), (size_t)rank * sizeof(int64_t)))
        return rt_fail(BURNC_ERR_SHAPE, "%s: \"%s\" has shape %s, given %s", op, p->names[i],
                       rt_shape_str(a, sizeof a, rank, burnc_tensor_shape(old)),
                       rt_shape_str(b, sizeof b, burnc_tensor_rank(t), burnc_tensor_shape(t)));
    if (burnc_tensor_dtype(t) != burnc_tensor_dtype(old))
        return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "%s: \"%s\" is %s, given %s", op, p->names[i],
                       burnc_dtype_name(burnc_tensor_dtype(old)), burnc_dtype_name(burnc_tensor_dtype(t)));
    burnc_device_t *d0 = burnc_tensor_device(old), *d1 = burnc_tensor_device(t);
    bool same = burnc_device_equal(d0, d1);
    burnc_device_release(d0);
    burnc_device_release(d1);
    if (!same)
        return rt_fail(BURNC_ERR_DEVICE_MISMATCH, "%s: \"%s\" lives on another device", op, p->names[i]);
    return BURNC_OK;
}

burnc_status_t burnc_params_set(burnc_params_t *p, int i, burnc_tensor_t *t)
{
    if (!p || !t)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_params_set: NULL %s", !p ? "set" : "tensor");
    if (i < 0 || i >= p->n)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_params_set: slot %d of a set of %d", i, p->n);
    RT_TRY(check_fits("burnc_params_set", p, i, t));
    burnc_tensor_t *ref = slot_ref_at(p, i, t);
    if (!ref)
        return burnc_error_code();
    replace(p, i, ref);
    return BURNC_OK;
}

/* src's tensor for dst's slot i, converted to the slot's dtype and device. */
static burnc_tensor_t *converted(const burnc_params_t *dst, int i, const burnc_params_t *src)
{
    int j = burnc_params_find(src, dst->names[i]);
    if (j < 0) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_params_assign: the source has no \"%s\"", dst->names[i]);
        return NULL;
    }
    burnc_tensor_t *want = dst->t[i], *have = src->t[j];
    int rank = burnc_tensor_rank(want);
    if (burnc_tensor_rank(have) != rank ||
        memcmp(burnc_tensor_shape(have), burnc_tensor_shape(want), (size_t)rank * sizeof(int64_t))) {
        char a[160], b[160];
        rt_fail(BURNC_ERR_SHAPE, "burnc_params_assign: \"%s\" is %s in the model and %s in the source",
                dst->names[i], rt_shape_str(a, sizeof a, rank, burnc_tensor_shape(want)),
                rt_shape_str(b, sizeof b, burnc_tensor_rank(have), burnc_tensor_shape(have)));
        return NULL;
    }
    burnc_device_t *dev = burnc_tensor_device(want);
    burnc_tensor_t *moved = burnc_tensor_to_device(have, dev);
    burnc_device_release(dev);
    burnc_tensor_t *out = moved;
    if (moved && burnc_tensor_dtype(moved) != burnc_tensor_dtype(want)) {
        out = burnc_cast(moved, burnc_tensor_dtype(want));
        burnc_tensor_release(moved);
    }
    return out;
}

burnc_status_t burnc_params_assign(burnc_params_t *dst, const burnc_params_t *src)
{
    if (!dst || !src)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_params_assign: NULL set");
    burnc_tensor_t **next = calloc((size_t)dst->n + 1, sizeof *next);
    if (!next)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_params_assign: out of memory");
    burnc_status_t s = BURNC_OK;
    /* Everything is converted before anything is replaced, so a failure leaves dst as it was. */
    rt_scope_suspend();
    for (int i = 0; i < dst->n && s == BURNC_OK; i++) {
        burnc_tensor_t *t = converted(dst, i, src);
        next[i] = t ? slot_ref_at(dst, i, t) : NULL;
        burnc_tensor_release(t);
        if (!next[i])
            s = burnc_error_code() ? burnc_error_code() : BURNC_ERR_INTERNAL;
    }
    rt_scope_resume();
    for (int i = 0; i < dst->n; i++) {
        if (s == BURNC_OK)
            replace(dst, i, next[i]);
        else
            burnc_tensor_release(next[i]);
    }
    free(next);
    return s;
}

int64_t burnc_params_numel(const burnc_params_t *p)
{
    int64_t n = 0;
    for (int i = 0; p && i < p->n; i++)
        n += burnc_tensor_numel(p->t[i]);
    return n;
}
