/* A small open-addressing map from storage addresses to integers: which record writes a
 * storage, which operands share one. Sized once for the batch; never grows. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static size_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    return (size_t)x;
}

bool fus_pmap_init(fus_pmap *m, int n)
{
    size_t cap = 16;
    while (cap < (size_t)(n > 0 ? n : 0) * 2)
        cap *= 2;
    m->mask = cap - 1;
    if (cap <= FUS_PMAP_SMALL) {
        m->keys = m->small_keys;
        m->vals = m->small_vals;
        memset(m->keys, 0, cap * sizeof *m->keys);
        return true;
    }
    m->keys = calloc(cap, sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    return m->keys && m->vals;
}

void fus_pmap_free(fus_pmap *m)
{
    if (m->keys != m->small_keys) {
        free(m->keys);
        free(m->vals);
    }
    m->keys = NULL;
    m->vals = NULL;
}

void fus_pmap_put(fus_pmap *m, const struct rt_storage *k, int v)
{
    size_t i = ptr_hash(k) & m->mask;
    while (m->keys[i] && m->keys[i] != k)
        i = (i + 1) & m->mask;
    m->keys[i] = k;
    m->vals[i] = v;
}

int fus_pmap_get(const fus_pmap *m, const struct rt_storage *k)
{
    if (!k)
        return -1;
    for (size_t i = ptr_hash(k) & m->mask; m->keys[i]; i = (i + 1) & m->mask)
        if (m->keys[i] == k)
            return m->vals[i];
    return -1;
}
