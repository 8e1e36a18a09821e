/* The plan as Graphviz DOT: each kernel a cluster of its records (stored values drawn with a
 * double border), each opaque record a box, values recomputed where they are read dashed,
 * edges from producer to consumer, and the batch's inputs from outside as notes. For people (BURNC_LOG=fusion, bug reports), so it favours a
 * readable layout over completeness. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusion.h"

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...)
{
    while (!b->oom) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->oom = true;
        } else if ((size_t)w < b->cap - b->n) {
            b->n += (size_t)w;
            return;
        } else {
            size_t cap = (b->cap + (size_t)w + 1) * 2;
            char *p = realloc(b->p, cap);
            if (!p)
                b->oom = true;
            else
                b->p = p, b->cap = cap;
        }
    }
}

/* DOT strings are double-quoted: the few characters that need it are escaped. */
static void put_quoted(sbuf *b, const char *s)
{
    put(b, "\"");
    for (; *s; s++)
        put(b, *s == '"' || *s == '\\' ? "\\%c" : "%c", *s);
    put(b, "\"");
}

typedef struct by_storage {
    const struct rt_storage *st;
    int rec;
} by_storage;

static int cmp_storage(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const by_storage *)a)->st, y = (uintptr_t)((const by_storage *)b)->st;
    return (x > y) - (x < y);
}

/* Index of the record of the batch that writes st, or -1. */
static int producer_of(const by_storage *idx, int n, const struct rt_storage *st)
{
    by_storage key = {st, 0};
    const by_storage *hit = bsearch(&key, idx, (size_t)n, sizeof *idx, cmp_storage);
    return hit ? hit->rec : -1;
}

static void put_label(sbuf *b, const ir_record *r, int i)
{
    char shape[160];
    size_t n = 0;
    shape[0] = '\0';
    for (int d = 0; d < r->out_rank && n < sizeof shape; d++)
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", d ? "," : "", (long long)r->out_shape[d]);
    char label[256];
    snprintf(label, sizeof label, "#%d %s %s [%s]", i, ir_op_name(r->op), ir_dtype_name(r->dtype), shape);
    put(b, "label=");
    put_quoted(b, label);
}

static bool stored(const fus_group *g, const ir_record *r)
{
    if (g->opaque)
        return true;
    for (int o = 0; o < g->kernel.n_outputs; o++)
        if (g->out_storage[o] == r->out)
            return true;
    return false;
}

static void put_group(sbuf *b, const fus_group *g, int gi, ir_record *const *recs, int n)
{
    if (g->opaque) {
        int i = g->recs[0];
        put(b, "  r%d [shape=box, style=filled, fillcolor=lightgrey, ", i);
        put_label(b, recs[i], i);
        put(b, "];\n");
        return;
    }
    char label[256];
    snprintf(label, sizeof label, "kernel %d: %s (key %016llx)\\ncut: %s", gi, g->kernel.name,
             (unsigned long long)g->key, g->why_cut);
    put(b, "  subgraph cluster_%d {\n    style=rounded;\n    label=", gi);
    put_quoted(b, label);
    put(b, ";\n");
    for (int j = 0; j < g->n_recs; j++) {
        int i = g->recs[j];
        if (i < 0 || i >= n)
            continue;
        put(b, "    r%d [shape=ellipse, peripheries=%d, ", i, stored(g, recs[i]) ? 2 : 1);
        put_label(b, recs[i], i);
        put(b, "];\n");
    }
    put(b, "  }\n");
}

/* Which records to draw: 2 for the plan's, 1 for values a kernel recomputes where it reads
 * them (no group holds them), 0 for dropped ones. */
static char *shown_records(const fus_plan *p, ir_record *const *recs, int n, const by_storage *idx)
{
    char *shown = calloc((size_t)(n ? n : 1), 1);
    if (!shown)
        return NULL;
    for (int gi = 0; gi < p->n_groups; gi++)
        for (int j = 0; j < p->groups[gi].n_recs; j++)
            if (p->groups[gi].recs[j] >= 0 && p->groups[gi].recs[j] < n)
                shown[p->groups[gi].recs[j]] = 2;
    for (int i = n - 1; i >= 0; i--)
        for (int k = 0; shown[i] && k < recs[i]->n_in; k++) {
            int pr = producer_of(idx, n, recs[i]->in[k].storage);
            if (pr >= 0 && pr < i && !shown[pr])
                shown[pr] = 1;
        }
    return shown;
}

/* Edges into every record drawn; inputs from outside the batch become one note each. */
static void put_edges(sbuf *b, ir_record *const *recs, int n, const by_storage *idx, const char *shown)
{
    const struct rt_storage **ext = NULL;
    int n_ext = 0, cap_ext = 0;
    for (int i = 0; i < n; i++) {
        if (shown[i] == 1) {
            put(b, "  r%d [shape=ellipse, style=dashed, ", i);
            put_label(b, recs[i], i);
            put(b, "];\n");
        }
        for (int k = 0; shown[i] && k < recs[i]->n_in; k++) {
            const struct rt_storage *st = recs[i]->in[k].storage;
            int pr = producer_of(idx, n, st);
            if (pr >= 0 && pr < i) {
                put(b, "  r%d -> r%d%s;\n", pr, i, shown[pr] == 1 ? " [style=dashed]" : "");
                continue;
            }
            int e = 0;
            while (e < n_ext && ext[e] != st)
                e++;
            if (e == n_ext) {
                if (n_ext == cap_ext) {
                    int cap = cap_ext ? 2 * cap_ext : 16;
                    const struct rt_storage **q = realloc(ext, (size_t)cap * sizeof *q);
                    if (!q) {
                        b->oom = true;
                        break;
                    }
                    ext = q;
                    cap_ext = cap;
                }
                ext[n_ext++] = st;
                put(b, "  in%d [shape=note, label=\"input %d\"];\n", e, e);
            }
            put(b, "  in%d -> r%d;\n", e, i);
        }
    }
    free(ext);
}

char *fus_plan_dot(const fus_plan *p, ir_record *const *recs, int n)
{
    if (!p || n < 0 || (n > 0 && !recs))
        return NULL;
    sbuf b = {.p = malloc(1024), .cap = 1024};
    by_storage *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
    if (!b.p || !idx) {
        free(b.p);
        free(idx);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        idx[i] = (by_storage){recs[i]->out, i};
    qsort(idx, (size_t)n, sizeof *idx, cmp_storage);
    char *shown = shown_records(p, recs, n, idx);
    if (!shown)
        b.oom = true;
    put(&b, "digraph burnc_plan {\n  node [fontname=\"monospace\"];\n");
    for (int gi = 0; gi < p->n_groups; gi++)
        put_group(&b, &p->groups[gi], gi, recs, n);
    if (shown)
        put_edges(&b, recs, n, idx, shown);
    put(&b, "}\n");
    free(shown);
    free(idx);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
