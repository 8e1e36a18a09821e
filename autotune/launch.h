/* What every backend's tuning of a compiled kernel launch shares (autotune/launch.c): the
 * launch's rows and row length, its key, its line for BURNC_AUTOTUNE_RECORD, private operands
 * to time candidates on, and the decision with or without timing.
 *
 * Private operands are never the user's data: each slot gets a copy of what the launch's layout
 * reaches, filled with finite values (no candidate meets a NaN slow path), and the offsets are
 * moved to match. The backend says where the copy lives (host memory, a device buffer). */
#ifndef BURNC_AUTOTUNE_LAUNCH_H
#define BURNC_AUTOTUNE_LAUNCH_H

#include <stddef.h>

#include "autotune.h"
#include "burnc_config.h"
#include "kernel.h"

#ifdef BURNC_LLVM_VERSION
#define AT_LLVM_VERSION_ BURNC_LLVM_VERSION
#else
#define AT_LLVM_VERSION_ "none"
#endif
/* "llvm <version> | burnc <version>": how the fingerprint of code compiled through LLVM ends,
 * so that no decision made by another build is used. */
#define AT_LLVM_BURNC "llvm " AT_LLVM_VERSION_ " | burnc " BURNC_VERSION

/* Whether k reduces (stages, or axes past its outer ones): the "reduce" family. */
bool at_launch_is_reduce(const kir_kernel *k);
/* The product of the outer extents (rows) and of the others (row length). */
void at_launch_rows(const kir_kernel *k, const int64_t *ext, int64_t *rows, int64_t *len);
/* The key "k<hash> r<rows> l<len>", rows and length in buckets. */
void at_launch_key(char *out, size_t cap, uint64_t hash, int64_t rows, int64_t len);
/* BURNC_AUTOTUNE_RECORD: the launch as "<backend>:<kir_encode line>" (burnc-tune --file). */
void at_launch_record(const char *backend, const kir_kernel *k, const kir_args *a);

/* The element span [lo, hi] that a slot at offset off with strides st reaches over ext. */
void at_launch_span(const kir_kernel *k, const int64_t *ext, int64_t off, const int64_t *st, int64_t *lo,
                    int64_t *hi);

/* A launch to time candidates on: the kernel, its structure hash, the launch's arguments over
 * the user's buffers, and (at_launch_private) the same over private buffers. */
typedef struct at_launch {
    const kir_kernel *ir;
    uint64_t key;
    const kir_args *user;
    kir_args args;
    int64_t in_off[KIR_MAX_INPUTS], out_off[KIR_MAX_OUTPUTS];
} at_launch;

/* Takes a filled host copy of slot i (an output when out) of bytes bytes, 64-byte aligned, and
 * owns it from then on, also when it fails (false). */
typedef bool (*at_put_fn)(void *ctx, bool out, int i, void *host, size_t bytes);
/* Private operands for l: every slot through put, l->args = *l->user with its offsets moved to
 * match. False when memory or put fails (slots put so far stay put). */
bool at_launch_private(at_launch *l, at_put_fn put, void *ctx);

/* How a backend times candidates: init makes its private operands (false: none, so no timing;
 * free is called all the same), time runs one candidate on them, free releases them. */
typedef struct at_bench {
    bool (*init)(void *user);
    at_time_fn time;
    void (*free)(void *user);
} at_bench;

/* at_decide for q, timing through b on a miss when may_tune and the mode is on. A failure of
 * the private operands leaves the caller's last error as it was and gives the untimed answer. */
int at_launch_decide(const at_query *q, bool may_tune, const at_bench *b, void *user, at_outcome *how);

#endif
