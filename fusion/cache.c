/* The plan cache (DESIGN.md, step 3). A training loop flushes the same structure every step
 * with other scalars, storages and RNG offsets; its plan is made once and then only filled in:
 * the kernels, their keys and every launch value the structure fixes are copied, the storages
 * and record constants are taken from the new batch through the sources lower.c recorded.
 * A hit skips partitioning, lowering, validation and hashing.
 *
 * The key is the batch's structure written out as words and compared in full (the hash only
 * finds the candidate), so a hit is never a guess. Shapes, strides and offsets are part of
 * it: a batch whose shapes change still finds its compiled kernels through kir_hash, but is
 * partitioned again. The cache is shared by every device and thread (plans depend on nothing
 * else), holds a bounded number of plans of bounded size and replaces the oldest. */
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "internal.h"

enum {
    CACHE_ENTRIES = 64,
    CACHE_MAX_RECORDS = 1024,         /* larger batches are rare and costly to keep */
    CACHE_ENTRY_BYTES = 512 * 1024,   /* so the cache holds at most 32 MiB */
    KEY_VERSION = 1,                  /* bump when the key's layout or the plans it stands for change */
};

typedef struct entry {
    fus_key key;
    uint64_t hash; /* of the key's words */
    int n_groups;
    fus_group *groups; /* kernels owned; storages cleared */
    fus_group_src *srcs;
} entry;

static struct {
    once_flag once;
    mtx_t lock;
    entry e[CACHE_ENTRIES];
    int next; /* the slot replaced next */
    int last; /* the slot found or filled last */
    uint64_t hits, misses;
} cache = {.once = ONCE_FLAG_INIT};

static void cache_init(void) { mtx_init(&cache.lock, mtx_plain); }

/* ---- Keys -------------------------------------------------------------------------------- */

/* The words push_record writes for r. */
static size_t record_words(const ir_record *r)
{
    size_t n = 8 + (size_t)r->out_rank;
    for (int i = 0; i < r->n_in; i++)
        n += 4 + 2 * (size_t)r->in[i].view.rank;
    return n;
}

/* Room for `extra` more words. */
static bool reserve(fus_key *k, size_t extra)
{
    if (k->cap - k->n >= extra)
        return true;
    size_t cap = k->cap ? 2 * k->cap : 256;
    if (cap < k->n + extra)
        cap = k->n + extra;
    int64_t *p = realloc(k->borrowed ? NULL : k->words, cap * sizeof *p);
    if (!p)
        return false;
    if (k->borrowed)
        memcpy(p, k->words, k->n * sizeof *p);
    k->words = p;
    k->cap = cap;
    k->borrowed = false;
    return true;
}

static bool push(fus_key *k, int64_t w)
{
    if (!reserve(k, 1))
        return false;
    k->words[k->n++] = w;
    return true;
}

/* An operand's storage as the batch sees it: the record that writes it (>= 0), or the order
 * in which storages from outside first appear (< 0). */
static int64_t storage_word(fus_pmap *m, const struct rt_storage *st, int *n_ext)
{
    int v = fus_pmap_get(m, st);
    if (v == -1) {
        v = -2 - (*n_ext)++;
        fus_pmap_put(m, st, v);
    }
    return v;
}

/* Written through a pointer into the room fus_key_make reserved for every record's words: a
 * checked push per word (or a count and check per record) was most of the cost of keying a
 * flush of small ops. */
static void push_record(fus_key *k, const ir_record *r, bool needed, fus_pmap *m, int *n_ext)
{
    int64_t *w = k->words + k->n;
    *w++ = r->op, *w++ = r->flags, *w++ = r->dtype, *w++ = r->compute, *w++ = r->n_in, *w++ = r->out_rank;
    for (int d = 0; d < r->out_rank; d++)
        *w++ = r->out_shape[d];
    *w++ = r->axes, *w++ = needed;
    for (int i = 0; i < r->n_in; i++) {
        const ir_view *v = &r->in[i].view;
        *w++ = storage_word(m, r->in[i].storage, n_ext), *w++ = r->in[i].dtype, *w++ = v->rank, *w++ = v->offset;
        for (int d = 0; d < v->rank; d++)
            *w++ = v->shape[d];
        for (int d = 0; d < v->rank; d++)
            *w++ = v->strides[d];
    }
    k->n = (size_t)(w - k->words);
}

static uint64_t mix(uint64_t h, uint64_t w)
{
    h = (h ^ w) * UINT64_C(0x9E3779B97F4A7C15);
    return h ^ h >> 29;
}

/* Four independent lanes, folded at the end: in one chain every word waited for the previous
 * word's multiply, and that chain was most of the cost of keying a flush of small ops. */
static uint64_t hash_words(const int64_t *w, size_t n)
{
    uint64_t h[4] = {UINT64_C(0x243F6A8885A308D3), UINT64_C(0x13198A2E03707344), UINT64_C(0xA4093822299F31D0),
                     UINT64_C(0x082EFA98EC4E6C89)};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int l = 0; l < 4; l++)
            h[l] = mix(h[l], (uint64_t)w[i + l]);
    for (; i < n; i++)
        h[0] = mix(h[0], (uint64_t)w[i]);
    return mix(mix(mix(h[0], h[1]), h[2]), h[3]);
}

bool fus_key_make(ir_record *const *recs, int n, const bool *needed_outside, const fus_options *opt, fus_key *k,
                  int64_t *buf, size_t buf_cap)
{
    memset(k, 0, sizeof *k);
    if (n > CACHE_MAX_RECORDS)
        return false;
    int n_ops = 0;
    size_t words = 5;
    for (int r = 0; r < n; r++) {
        n_ops += recs[r]->n_in;
        words += record_words(recs[r]);
    }
    if (buf && words <= buf_cap)
        *k = (fus_key){.words = buf, .cap = buf_cap, .borrowed = true};
    fus_pmap m;
    /* room for every word at once: growing by doubling cost a flush of small ops reallocs and
     * copies */
    bool ok = fus_pmap_init(&m, n + n_ops) && reserve(k, words);
    ok = ok && push(k, KEY_VERSION) && push(k, n) && push(k, !opt || opt->fuse) &&
         push(k, opt ? opt->max_insts : 0) && push(k, opt ? opt->max_inputs : 0);
    int n_ext = 0;
    for (int r = 0; ok && r < n; r++) {
        push_record(k, recs[r], !needed_outside || needed_outside[r], &m, &n_ext);
        if (recs[r]->out)
            fus_pmap_put(&m, recs[r]->out, r);
    }
    fus_pmap_free(&m);
    if (!ok)
        fus_key_free(k);
    return ok;
}

void fus_key_free(fus_key *k)
{
    if (!k->borrowed)
        free(k->words);
    memset(k, 0, sizeof *k);
}

/* ---- Plans ------------------------------------------------------------------------------- */

/* A copy of group t whose kernel and record list are its own; storages and record constants
 * come from recs through src (NULL recs: a template, storages cleared). */
static bool copy_group(fus_group *out, const fus_group *t, const fus_group_src *src, ir_record *const *recs)
{
    *out = *t;
    out->recs = NULL;
    out->kernel.insts = NULL;
    out->kernel.n_insts = out->kernel.cap_insts = 0;
    out->recs = malloc((size_t)t->n_recs * sizeof *out->recs);
    if (!out->recs)
        return false;
    memcpy(out->recs, t->recs, (size_t)t->n_recs * sizeof *t->recs);
    if (t->opaque)
        return true;
    if (t->kernel.n_insts > 0) {
        out->kernel.insts = malloc((size_t)t->kernel.n_insts * sizeof *t->kernel.insts);
        if (!out->kernel.insts)
            return false;
        memcpy(out->kernel.insts, t->kernel.insts, (size_t)t->kernel.n_insts * sizeof *t->kernel.insts);
        out->kernel.n_insts = out->kernel.cap_insts = t->kernel.n_insts;
    }
    for (int s = 0; s < t->kernel.n_inputs; s++)
        out->in_storage[s] = recs ? recs[src->in_rec[s]]->in[src->in_k[s]].storage : NULL;
    for (int o = 0; o < t->kernel.n_outputs; o++)
        out->out_storage[o] = recs ? recs[src->out_rec[o]]->out : NULL;
    for (int i = 0; recs && i < t->kernel.n_scalars; i++)
        if (src->args[i].kind != FUS_ARG_FIXED)
            out->scalars[i] = fus_arg_value(recs[src->args[i].rec], &src->args[i]);
    return true;
}

static void free_groups(fus_group *g, int n)
{
    fus_plan p = {.n_groups = n, .groups = g};
    fus_plan_free(&p);
}

static void entry_free(entry *e)
{
    free_groups(e->groups, e->n_groups);
    free(e->srcs);
    fus_key_free(&e->key);
    memset(e, 0, sizeof *e);
}

static bool same_words(const fus_key *a, const fus_key *b)
{
    return a->words && a->n == b->n && memcmp(a->words, b->words, a->n * sizeof *a->words) == 0;
}

/* The entry of key k (under the lock). A loop flushes one structure again and again, so the
 * entry found or filled last is compared first, before k is hashed: hashing the words cost
 * more than comparing them. */
static const entry *find(const fus_key *k)
{
    if (same_words(&cache.e[cache.last].key, k))
        return &cache.e[cache.last];
    uint64_t h = hash_words(k->words, k->n);
    for (int i = 0; i < CACHE_ENTRIES; i++)
        if (cache.e[i].hash == h && same_words(&cache.e[i].key, k))
            return &cache.e[i];
    return NULL;
}

bool fus_cache_lookup(const fus_key *k, ir_record *const *recs, fus_plan *out)
{
    call_once(&cache.once, cache_init);
    mtx_lock(&cache.lock);
    const entry *e = find(k);
    bool ok = e != NULL;
    if (e) {
        cache.last = (int)(e - cache.e);
        /* not zeroed: copy_group overwrites every group it counts in n_groups */
        out->groups = malloc((size_t)(e->n_groups ? e->n_groups : 1) * sizeof *out->groups);
        ok = out->groups != NULL;
        for (int i = 0; ok && i < e->n_groups; i++) {
            out->n_groups = i + 1;
            ok = copy_group(&out->groups[i], &e->groups[i], &e->srcs[i], recs);
        }
        if (!ok) /* out of memory: the caller partitions from scratch */
            fus_plan_free(out);
    }
    if (ok)
        cache.hits++;
    else
        cache.misses++;
    mtx_unlock(&cache.lock);
    return ok;
}

/* What keeping plan p under key k costs. */
static size_t entry_bytes(const fus_key *k, const fus_plan *p)
{
    size_t n = k->n * sizeof *k->words + (size_t)p->n_groups * (sizeof(fus_group) + sizeof(fus_group_src));
    for (int i = 0; i < p->n_groups; i++)
        n += (size_t)p->groups[i].n_recs * sizeof(int) + (size_t)p->groups[i].kernel.n_insts * sizeof(kir_inst);
    return n;
}

void fus_cache_insert(const fus_key *k, const fus_plan *p, const fus_group_src *srcs)
{
    if (entry_bytes(k, p) > CACHE_ENTRY_BYTES)
        return;
    entry fresh = {0};
    fresh.key.words = malloc(k->n * sizeof *k->words);
    fresh.groups = calloc((size_t)(p->n_groups ? p->n_groups : 1), sizeof *fresh.groups);
    fresh.srcs = malloc((size_t)(p->n_groups ? p->n_groups : 1) * sizeof *fresh.srcs);
    bool ok = fresh.key.words && fresh.groups && fresh.srcs;
    if (ok) {
        memcpy(fresh.key.words, k->words, k->n * sizeof *k->words);
        fresh.key.n = fresh.key.cap = k->n;
        fresh.hash = hash_words(k->words, k->n);
        memcpy(fresh.srcs, srcs, (size_t)p->n_groups * sizeof *srcs);
    }
    for (int i = 0; ok && i < p->n_groups; i++) {
        fresh.n_groups = i + 1;
        ok = copy_group(&fresh.groups[i], &p->groups[i], &srcs[i], NULL);
    }
    if (!ok) {
        entry_free(&fresh);
        return;
    }
    call_once(&cache.once, cache_init);
    mtx_lock(&cache.lock);
    if (find(k)) { /* another thread got there first */
        mtx_unlock(&cache.lock);
        entry_free(&fresh);
        return;
    }
    entry old = cache.e[cache.next];
    cache.e[cache.next] = fresh;
    cache.last = cache.next;
    cache.next = (cache.next + 1) % CACHE_ENTRIES;
    mtx_unlock(&cache.lock);
    entry_free(&old);
}

void fus_cache_stats(uint64_t *hits, uint64_t *misses)
{
    call_once(&cache.once, cache_init);
    mtx_lock(&cache.lock);
    *hits = cache.hits;
    *misses = cache.misses;
    mtx_unlock(&cache.lock);
}

void fus_cache_clear(void)
{
    call_once(&cache.once, cache_init);
    mtx_lock(&cache.lock);
    entry old[CACHE_ENTRIES];
    memcpy(old, cache.e, sizeof old);
    memset(cache.e, 0, sizeof cache.e);
    cache.next = 0;
    mtx_unlock(&cache.lock);
    for (int i = 0; i < CACHE_ENTRIES; i++)
        entry_free(&old[i]);
}
