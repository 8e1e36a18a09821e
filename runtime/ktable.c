/* The backends' tables of compiled kernels (rt.h, rt_ktable). */
#include <stdlib.h>

#include "rt.h"

rt_ktable_node *rt_ktable_chain(const rt_ktable *t, uint64_t key)
{
    return t->cap ? t->slots[key & (uint64_t)(t->cap - 1)] : NULL;
}

static void link(rt_ktable_node **slots, int cap, rt_ktable_node *n)
{
    rt_ktable_node **head = &slots[n->key & (uint64_t)(cap - 1)];
    n->next = *head;
    *head = n;
}

bool rt_ktable_insert(rt_ktable *t, rt_ktable_node *n)
{
    if (t->n >= t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        rt_ktable_node **slots = calloc((size_t)cap, sizeof *slots);
        if (!slots)
            return false;
        for (int i = 0; i < t->cap; i++)
            for (rt_ktable_node *e = t->slots[i], *next; e; e = next) {
                next = e->next;
                link(slots, cap, e);
            }
        free(t->slots);
        t->slots = slots;
        t->cap = cap;
    }
    link(t->slots, t->cap, n);
    t->n++;
    return true;
}

void rt_ktable_clear(rt_ktable *t, void (*drop)(rt_ktable_node *n, void *user), void *user)
{
    for (int i = 0; i < t->cap; i++)
        for (rt_ktable_node *e = t->slots[i], *next; e; e = next) {
            next = e->next;
            drop(e, user);
        }
    free(t->slots);
    *t = (rt_ktable){0};
}
