/* The reference kernels as a service for other host backends: the cpu device runs the records
 * that fusion leaves opaque (matmul, cat, pad, index ops) with the oracle's own loops, so they
 * agree with ref bit for bit. */
#include "ref.h"

burnc_status_t rt_ref_run_record(const ir_record *rec, rt_buffer *const *bufs)
{
    ref_kernel_fn run = ref_kernel_for(rec->op);
    if (!run)
        return rt_fail(BURNC_ERR_INTERNAL, "ref: no kernel for op %d", (int)rec->op);
    return run(rec, bufs);
}
