/* Scopes: per-thread lists of the handles created inside them. */
#include <stdlib.h>
#include <string.h>

#include "rt.h"

typedef struct scope {
    burnc_tensor_t **items; /* first, until more are registered */
    size_t n, cap;
    struct scope *outer;
    burnc_tensor_t *first[32]; /* a loop body's handles: one allocation a scope */
} scope;

/* The thread's innermost scope and suspension depth, in one thread-local variable: each costs
 * a call to reach in a shared library, and every recorded op registers its handle. */
static _Thread_local struct {
    scope *current;
    int suspended;
} tls;

void burnc_scope_begin(void)
{
    scope *s = malloc(sizeof *s);
    if (!s) {
        /* Without memory for a scope the handles stay with the caller: degrade, do not crash. */
        rt_log("runtime", "burnc_scope_begin: out of memory; handles in this scope belong to the caller");
        return;
    }
    s->items = s->first;
    s->n = 0;
    s->cap = sizeof s->first / sizeof *s->first;
    s->outer = tls.current;
    tls.current = s;
}

void burnc_scope_end(void)
{
    scope *s = tls.current;
    if (!s)
        return;
    tls.current = s->outer;
    for (size_t i = 0; i < s->n; i++) {
        burnc_tensor_t *t = s->items[i];
        if (!t)
            continue;
        t->scoped = false;
        rt_tensor_unref(t);
    }
    if (s->items != s->first)
        free(s->items);
    free(s);
}

void rt_scope_register(burnc_tensor_t *t)
{
    scope *s = tls.current;
    if (!s || tls.suspended)
        return;
    if (s->n == s->cap) {
        size_t cap = 2 * s->cap;
        burnc_tensor_t **items = s->items == s->first ? malloc(cap * sizeof *items)
                                                      : realloc(s->items, cap * sizeof *items);
        if (!items)
            return; /* the caller keeps this handle */
        if (s->items == s->first)
            memcpy(items, s->first, sizeof s->first);
        s->items = items;
        s->cap = cap;
    }
    s->items[s->n++] = t;
    t->scoped = true;
}

burnc_tensor_t *burnc_tensor_keep(burnc_tensor_t *t)
{
    if (!t || !t->scoped)
        return t;
    /* The scope's reference becomes the caller's. */
    t->scoped = false;
    for (scope *s = tls.current; s; s = s->outer)
        for (size_t i = s->n; i-- > 0;)
            if (s->items[i] == t) {
                s->items[i] = NULL;
                return t;
            }
    return t;
}

void rt_scope_suspend(void) { tls.suspended++; }
void rt_scope_resume(void) { tls.suspended--; }
