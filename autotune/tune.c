/* Autotune decisions: modes, buckets, the memory map, the store, and the timing loop. See
 * autotune.h. */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "autotune.h"
#include "codegen/kcache.h"
#include "rt.h"

/* ---- Modes and buckets ---- */

static once_flag env_once = ONCE_FLAG_INIT;
static at_mode env_mode = AT_MODE_CACHED;
static at_buckets env_buckets = AT_BUCKETS_POW2;
static double env_budget_ms = 2000;
static atomic_int mode_override = -1;

bool at_parse_mode(const char *s, at_mode *out)
{
    static const char *const names[] = {"off", "cached", "on"};
    for (int m = 0; s && m < 3; m++)
        if (strcmp(s, names[m]) == 0) {
            *out = (at_mode)m;
            return true;
        }
    return false;
}

const char *at_mode_name(at_mode m) { return m == AT_MODE_OFF ? "off" : m == AT_MODE_ON ? "on" : "cached"; }

static void read_env(void)
{
    const char *m = getenv("BURNC_AUTOTUNE");
    if (m && *m && !at_parse_mode(m, &env_mode))
        fprintf(stderr, "burnc: warning: BURNC_AUTOTUNE=%s is not off, cached or on: using cached\n", m);
    const char *b = getenv("BURNC_AUTOTUNE_BUCKETS");
    if (b && strcmp(b, "exact") == 0)
        env_buckets = AT_BUCKETS_EXACT;
    else if (b && *b && strcmp(b, "pow2") != 0)
        fprintf(stderr, "burnc: warning: BURNC_AUTOTUNE_BUCKETS=%s is not pow2 or exact: using pow2\n", b);
    const char *t = getenv("BURNC_AUTOTUNE_BUDGET_MS");
    if (t && *t) {
        char *end;
        double v = strtod(t, &end);
        if (*end || !(v > 0))
            fprintf(stderr, "burnc: warning: BURNC_AUTOTUNE_BUDGET_MS=%s is not a positive number\n", t);
        else
            env_budget_ms = v;
    }
}

at_mode at_get_mode(void)
{
    int o = atomic_load(&mode_override);
    if (o >= 0)
        return (at_mode)o;
    call_once(&env_once, read_env);
    return env_mode;
}

void at_set_mode(int mode) { atomic_store(&mode_override, mode >= AT_MODE_OFF && mode <= AT_MODE_ON ? mode : -1); }

at_buckets at_get_buckets(void)
{
    call_once(&env_once, read_env);
    return env_buckets;
}

int64_t at_bucket(int64_t n, at_buckets b)
{
    if (b == AT_BUCKETS_EXACT || n <= 1)
        return n;
    int64_t p = 1;
    while (p < n && p < (INT64_C(1) << 62))
        p <<= 1;
    return p;
}

/* ---- Checksums ---- */

static uint64_t fnv(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * UINT64_C(0x100000001b3);
    return (h ^ 0xff) * UINT64_C(0x100000001b3); /* a separator, so "ab","c" differs from "a","bc" */
}

uint64_t at_family_checksum(const at_family *f)
{
    uint64_t h = fnv(UINT64_C(0xcbf29ce484222325), f->name);
    for (int c = 0; c < f->n; c++)
        h = fnv(h, f->names[c]);
    return h;
}

/* ---- Decisions remembered in memory: (fingerprint, family, key) -> candidate ---- */

typedef struct slot {
    uint64_t h;
    char *id; /* fingerprint \x1f family \x1f key */
    int choice;
} slot;

static struct {
    mtx_t lock;
    slot *s;
    size_t cap, n;
} mem;
static once_flag mem_once = ONCE_FLAG_INIT;
static void mem_init(void) { mtx_init(&mem.lock, mtx_plain); }

/* The map's hash of an id or line of n bytes: kc_hash, 8 bytes a step (ids are over a hundred
 * bytes and hashed at every launch, where a multiply per byte cost more than the rest of a
 * lookup). */
static uint64_t map_hash(const char *s, size_t n) { return kc_hash(s, n, 0); }

/* The id in buf when it fits in cap bytes (a launch's usually does), else in a fresh
 * allocation; NULL: out of memory. */
static char *make_id(const at_query *q, char *buf, size_t cap, uint64_t *h)
{
    const char *part[3] = {q->fingerprint, q->family->name, q->key};
    size_t len[3], n = 0;
    for (int i = 0; i < 3; i++)
        n += (len[i] = strlen(part[i])) + 1;
    char *id = n <= cap ? buf : malloc(n);
    if (!id)
        return NULL;
    /* fingerprint \x1f family \x1f key, copied rather than formatted (every launch) */
    for (size_t i = 0, at = 0; i < 3; i++) {
        memcpy(id + at, part[i], len[i]);
        at += len[i];
        id[at++] = i < 2 ? '\x1f' : '\0';
    }
    *h = map_hash(id, n - 1);
    return id;
}

static int mem_find(const char *id, uint64_t h) /* under the lock; -1: none */
{
    for (size_t i = h & (mem.cap - 1); mem.cap && mem.s[i].id; i = (i + 1) & (mem.cap - 1))
        if (mem.s[i].h == h && strcmp(mem.s[i].id, id) == 0)
            return mem.s[i].choice;
    return -1;
}

static void mem_put(char *id, uint64_t h, int choice) /* under the lock; takes id */
{
    for (size_t i = h & (mem.cap - 1); mem.cap && mem.s[i].id; i = (i + 1) & (mem.cap - 1))
        if (mem.s[i].h == h && strcmp(mem.s[i].id, id) == 0) {
            mem.s[i].choice = choice;
            free(id);
            return;
        }
    if (2 * (mem.n + 1) > mem.cap) {
        size_t cap = mem.cap ? 2 * mem.cap : 256;
        slot *s = calloc(cap, sizeof *s);
        if (!s) {
            free(id);
            return; /* not remembered: the next launch asks again */
        }
        for (size_t i = 0; i < mem.cap; i++)
            if (mem.s[i].id) {
                size_t j = mem.s[i].h & (cap - 1);
                while (s[j].id)
                    j = (j + 1) & (cap - 1);
                s[j] = mem.s[i];
            }
        free(mem.s);
        mem.s = s;
        mem.cap = cap;
    }
    size_t i = h & (mem.cap - 1);
    while (mem.s[i].id)
        i = (i + 1) & (mem.cap - 1);
    mem.s[i] = (slot){h, id, choice};
    mem.n++;
}

void at_forget(void)
{
    call_once(&mem_once, mem_init);
    mtx_lock(&mem.lock);
    for (size_t i = 0; i < mem.cap; i++)
        free(mem.s[i].id);
    free(mem.s);
    mem.s = NULL;
    mem.cap = mem.n = 0;
    mtx_unlock(&mem.lock);
}

/* ---- The shared store ---- */

static mtx_t store_lock;
static once_flag store_once = ONCE_FLAG_INIT;
static at_store *store;
static bool store_failed; /* do not retry on every launch */
static void store_init(void) { mtx_init(&store_lock, mtx_plain); }

at_store *at_shared_store(void)
{
    call_once(&store_once, store_init);
    mtx_lock(&store_lock);
    if (!store && !store_failed && at_store_open(NULL, false, &store) != BURNC_OK) {
        store_failed = true;
        rt_log("autotune", "no persistent store: %s", burnc_error_message());
    }
    at_store *s = store;
    mtx_unlock(&store_lock);
    if (!s)
        rt_fail(BURNC_ERR_UNAVAILABLE, "autotune: no persistent store");
    return s;
}

void at_close_shared_store(void)
{
    call_once(&store_once, store_init);
    mtx_lock(&store_lock);
    at_store_close(store);
    store = NULL;
    store_failed = false;
    mtx_unlock(&store_lock);
}

/* ---- Tuning ---- */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct cand_times {
    double t[AT_SAMPLES];
    int n;
    bool dropped;
} cand_times;

static double median_of(const cand_times *c)
{
    double t[AT_SAMPLES];
    memcpy(t, c->t, (size_t)c->n * sizeof *t);
    qsort(t, (size_t)c->n, sizeof *t, cmp_double);
    return c->n % 2 ? t[c->n / 2] : (t[c->n / 2 - 1] + t[c->n / 2]) / 2;
}

/* Times the valid candidates: a warm-up run each, then rounds of one sample per surviving
 * candidate (rounds interleave candidates, so a slow moment of the machine hits them all),
 * dropping those slower than AT_DROP times the best median so far. */
static int tune(const at_query *q, at_time_fn time, void *user, at_outcome *o)
{
    const at_family *f = q->family;
    cand_times ct[AT_MAX_CANDIDATES] = {0};
    double t0 = now_ms();
    int alive = 0;
    for (int c = 0; c < f->n; c++) {
        ct[c].dropped = (q->valid && !q->valid[c]) || time(user, c) < 0; /* warm-up (compiles) */
        alive += !ct[c].dropped;
    }
    for (int round = 0; round < AT_SAMPLES && alive; round++) {
        double best = -1;
        for (int c = 0; c < f->n; c++) {
            if (ct[c].dropped)
                continue;
            double t = time(user, c);
            if (t < 0) {
                ct[c].dropped = true;
                ct[c].n = 0;
                alive--;
                continue;
            }
            ct[c].t[ct[c].n++] = t;
            double m = median_of(&ct[c]);
            best = best < 0 || m < best ? m : best;
        }
        for (int c = 0; c < f->n && round == 0; c++)
            if (!ct[c].dropped && c != q->heuristic && median_of(&ct[c]) > AT_DROP * best) {
                ct[c].dropped = true;
                alive--;
            }
        if (now_ms() - t0 > env_budget_ms)
            break;
    }
    int choice = -1;
    double best = 0;
    for (int c = 0; c < f->n; c++) {
        o->timed += ct[c].n > 0;
        if (ct[c].n == 0)
            continue;
        double m = median_of(&ct[c]);
        if (choice < 0 || m < best)
            choice = c, best = m;
    }
    o->heuristic_ms = ct[q->heuristic].n ? median_of(&ct[q->heuristic]) : 0;
    if (o->heuristic_ms > 0 && best * AT_MARGIN > o->heuristic_ms) {
        choice = q->heuristic;
        best = o->heuristic_ms;
    }
    o->best_ms = best;
    return choice;
}

static int index_of(const at_family *f, const char *name)
{
    for (int c = 0; c < f->n; c++)
        if (strcmp(f->names[c], name) == 0)
            return c;
    return -1;
}

static void (*observer)(void *, const at_query *, const at_outcome *);
static void *observer_user;

void at_set_observer(void (*fn)(void *user, const at_query *q, const at_outcome *o), void *user)
{
    observer = fn;
    observer_user = user;
}

int at_decide(const at_query *q, at_time_fn time, void *user, at_outcome *out)
{
    at_outcome o = {.choice = q->heuristic};
    at_mode mode = at_get_mode();
    if (mode == AT_MODE_OFF) {
        if (out)
            *out = o;
        return o.choice;
    }
    call_once(&mem_once, mem_init);
    uint64_t h = 0;
    /* on the stack: a remembered decision (every launch after the first) allocates nothing */
    char buf[256];
    char *id = make_id(q, buf, sizeof buf, &h);
    if (!id) {
        if (out)
            *out = o;
        return o.choice;
    }
    mtx_lock(&mem.lock);
    int c = mem_find(id, h);
    mtx_unlock(&mem.lock);
    if (c >= 0) {
        if (id != buf)
            free(id);
        o.choice = c;
        if (out)
            *out = o;
        return c;
    }
    uint64_t sum = at_family_checksum(q->family);
    at_store *s = at_shared_store();
    at_record r;
    bool found = false;
    rt_error_state err;
    rt_error_save(&err); /* a store problem is logged, never the caller's error */
    if (s && at_store_get(s, q->fingerprint, q->family->name, q->key, sum, &r, &found) == BURNC_OK && found &&
        (c = index_of(q->family, r.config)) >= 0 && (!q->valid || q->valid[c])) {
        o.choice = c;
        o.stored = true;
    } else if (mode == AT_MODE_ON && time) {
        c = tune(q, time, user, &o);
        if (c >= 0) {
            o.choice = c;
            o.tuned = true;
            r = (at_record){.set_checksum = sum, .best_ms = o.best_ms, .heuristic_ms = o.heuristic_ms,
                            .created = (int64_t)(now_ms() / 1e3)};
            snprintf(r.fingerprint, sizeof r.fingerprint, "%s", q->fingerprint);
            snprintf(r.family, sizeof r.family, "%s", q->family->name);
            snprintf(r.key, sizeof r.key, "%s", q->key);
            snprintf(r.config, sizeof r.config, "%s", q->family->names[c]);
            o.stored = s && at_store_put(s, &r) == BURNC_OK;
            rt_log("autotune", "%s %s: %s, %.3f ms (heuristic %s, %.3f ms), %d candidates timed%s", q->family->name,
                   q->key, r.config, o.best_ms, q->family->names[q->heuristic], o.heuristic_ms, o.timed,
                   o.stored ? "" : ", not stored");
        }
    }
    rt_error_restore(&err);
    if (id == buf) { /* the map keeps its own copy */
        size_t n = strlen(buf) + 1;
        if ((id = malloc(n)))
            memcpy(id, buf, n);
    }
    if (id) { /* out of memory: not remembered, the next launch asks again */
        mtx_lock(&mem.lock);
        mem_put(id, h, o.choice);
        mtx_unlock(&mem.lock);
    }
    if (observer)
        observer(observer_user, q, &o);
    if (out)
        *out = o;
    return o.choice;
}

BURNC_API burnc_status_t burnc_autotune_set_mode(const char *mode)
{
    at_mode m;
    if (!mode) {
        at_set_mode(-1);
        return BURNC_OK;
    }
    if (!at_parse_mode(mode, &m))
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_autotune_set_mode: \"%s\" is not off, cached or on", mode);
    at_set_mode((int)m);
    return BURNC_OK;
}

/* ---- BURNC_AUTOTUNE_RECORD ---- */

void at_record_line(const char *line)
{
    const char *path = getenv("BURNC_AUTOTUNE_RECORD");
    if (!path || !*path || !line)
        return;
    /* once per distinct line: lines share the decisions' map (ids of decisions hold \x1f, lines
     * do not, so they never meet) */
    call_once(&mem_once, mem_init);
    uint64_t h = map_hash(line, strlen(line));
    char *id = strdup(line);
    mtx_lock(&mem.lock);
    bool first = id && mem_find(line, h) < 0;
    if (first)
        mem_put(id, h, 0);
    mtx_unlock(&mem.lock);
    if (!first) {
        free(id);
        return;
    }
    /* One write(2) of the whole line on an O_APPEND descriptor: lines of several processes
     * recording into one file do not interleave. */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        rt_log("autotune", "cannot record to %s", path);
        return;
    }
    size_t n = strlen(line);
    char *buf = malloc(n + 1);
    if (buf) {
        memcpy(buf, line, n);
        buf[n] = '\n';
        if (write(fd, buf, n + 1) != (ssize_t)(n + 1))
            rt_log("autotune", "short write to %s", path);
        free(buf);
    }
    close(fd);
}
