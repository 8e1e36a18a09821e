/* Private to runtime/ref: the reference kernels that ref.c launches. */
#ifndef BURNC_REF_H
#define BURNC_REF_H

#include "rt.h"

/* Runs one record synchronously: bufs[k] is the buffer of input k (k < rec->n_in) and
 * bufs[rec->n_in] the output's. Returns BURNC_OK or a status set through rt_fail. */
typedef burnc_status_t (*ref_kernel_fn)(const ir_record *rec, rt_buffer *const *bufs);

/* The kernel that runs op's class; NULL for a value outside the op table. */
ref_kernel_fn ref_kernel_for(ir_op op);

#endif
