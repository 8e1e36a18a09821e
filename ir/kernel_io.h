/* Kernel IR as text, so that a launch can be written down and replayed in another process:
 * BURNC_AUTOTUNE_RECORD appends the launches a program meets to a file, and `burnc-tune --file`
 * rebuilds each kernel and its launch layout to tune it ahead of the next run.
 *
 * The text is one line without spaces: "kir1:" followed by lowercase hex of a little-endian
 * serialization of the kernel (rank, n_outer, slots, stages, stores, in_place, instructions,
 * name) and of the launch layout below. It is stable across processes and machines of either
 * endianness. kir_decode accepts only what kir_encode writes: anything else (truncated, bad hex,
 * counts out of range, trailing bytes, a kernel kir_valid refuses) fails with a reason and
 * leaves nothing allocated. */
#ifndef BURNC_KERNEL_IO_H
#define BURNC_KERNEL_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel.h"

/* The values of one launch that describe its layout (kir_args without the buffers). */
typedef struct kir_layout {
    int64_t extents[BURNC_MAX_RANK];
    int64_t in_offsets[KIR_MAX_INPUTS], in_strides[KIR_MAX_INPUTS * BURNC_MAX_RANK];
    int64_t out_offsets[KIR_MAX_OUTPUTS], out_strides[KIR_MAX_OUTPUTS * BURNC_MAX_RANK];
    int n_scalars;
    kir_scalar scalars[64];
} kir_layout;

/* A malloc'ed line (no newline) for the kernel and its layout (strides use k->rank entries per
 * slot: in_strides[s * k->rank + d]); NULL when out of memory or the kernel is not valid. */
char *kir_encode(const kir_kernel *k, const kir_layout *l);
/* Parses a line written by kir_encode into *k (initialized here; kir_free it) and *l. False
 * with a reason in why (NUL-terminated, at most cap bytes) and *k left empty otherwise. */
bool kir_decode(const char *text, kir_kernel *k, kir_layout *l, char *why, size_t cap);

#endif
