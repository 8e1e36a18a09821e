/* Creation ops recorded lazily: full, arange, eye, rand, randn. */
#include <math.h>
#include <string.h>

#include "rt.h"

static ir_record *begin_source(const char *op, rt_device *dev, ir_op kind, burnc_dtype_t *dt, int rank,
                               const int64_t *shape)
{
    if (!dev) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: device is NULL", op);
        return NULL;
    }
    if (rt_check_dtype(op, dev, dt) != BURNC_OK || rt_check_shape(op, rank, shape, *dt) != BURNC_OK)
        return NULL;
    ir_record *r = rt_record_begin(dev, kind, 0);
    if (!r)
        return NULL;
    r->dtype = r->compute = *dt;
    r->out_rank = rank;
    if (rank)
        memcpy(r->out_shape, shape, (size_t)rank * sizeof *shape);
    return r;
}

/* A new tensor made on an autodiff handle carries it (autodiff/tape.c). */
static burnc_tensor_t *in_context(burnc_device_t *handle, burnc_tensor_t *t)
{
    if (t && handle->base)
        rt_tensor_set_ctx(t, handle);
    return t;
}

static burnc_tensor_t *full(const char *op, burnc_device_t *handle, burnc_dtype_t dt, int rank, const int64_t *shape,
                            double value)
{
    rt_device *dev = rt_dev(handle);
    ir_record *r = begin_source(op, dev, IR_OP_FULL, &dt, rank, shape);
    if (!r)
        return NULL;
    r->scalar[0] = ir_scalar_to_dtype(value, dt);
    return in_context(handle, rt_record_commit(dev, r));
}

burnc_tensor_t *burnc_full(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape, double value)
{
    RT_PUBLIC(full("burnc_full", dev, dtype, rank, shape, value));
}

burnc_tensor_t *burnc_zeros(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape)
{
    RT_PUBLIC(full("burnc_zeros", dev, dtype, rank, shape, 0));
}

burnc_tensor_t *burnc_ones(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape)
{
    RT_PUBLIC(full("burnc_ones", dev, dtype, rank, shape, 1));
}

static burnc_tensor_t *arange(burnc_device_t *handle, burnc_dtype_t dt, double start, double stop, double step)
{
    rt_device *dev = rt_dev(handle);
    const char *op = "burnc_arange";
    if (!isfinite(start) || !isfinite(stop) || !isfinite(step) || step == 0) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "%s: start %g, stop %g, step %g (finite, step not 0)", op, start, stop,
                step);
        return NULL;
    }
    if (dt == BURNC_DTYPE_DEFAULT && dev)
        dt = start == trunc(start) && stop == trunc(stop) && step == trunc(step) ? dev->int_dtype : dev->float_dtype;
    double n = ceil((stop - start) / step);
    if (!(n < 0x1p62)) {
        rt_fail(BURNC_ERR_OVERFLOW, "%s: %g elements are too many", op, n);
        return NULL;
    }
    int64_t count = n > 0 ? (int64_t)n : 0;
    ir_record *r = begin_source(op, dev, IR_OP_ARANGE, &dt, 1, &count);
    if (!r)
        return NULL;
    r->scalar[0] = start;
    r->scalar[1] = step;
    return in_context(handle, rt_record_commit(dev, r));
}

burnc_tensor_t *burnc_arange(burnc_device_t *dev, burnc_dtype_t dtype, double start, double stop, double step)
{
    RT_PUBLIC(arange(dev, dtype, start, stop, step));
}

burnc_tensor_t *burnc_eye(burnc_device_t *handle, burnc_dtype_t dtype, int64_t n, int64_t m)
{
    int64_t shape[2] = {n, m};
    rt_device *dev = rt_dev(handle);
    ir_record *r = begin_source("burnc_eye", dev, IR_OP_EYE, &dtype, 2, shape);
    if (!r)
        return NULL;
    RT_PUBLIC(in_context(handle, rt_record_commit(dev, r)));
}

static burnc_tensor_t *draw(const char *op, ir_op kind, burnc_device_t *handle, burnc_dtype_t dt, int rank,
                              const int64_t *shape)
{
    rt_device *dev = rt_dev(handle);
    if (dev && rt_check_dtype(op, dev, &dt) == BURNC_OK && !ir_dtype_is_float(dt)) {
        rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "%s: needs a float dtype, got %s", op, ir_dtype_name(dt));
        return NULL;
    }
    ir_record *r = begin_source(op, dev, kind, &dt, rank, shape);
    if (!r)
        return NULL;
    /* The counter offset is fixed now, under the stream lock, so values never depend on when
     * or where the work runs. */
    r->rng_key = dev->seed;
    r->rng_offset = dev->rng_counter;
    dev->rng_counter += (uint64_t)ir_numel(rank, shape);
    return in_context(handle, rt_record_commit(dev, r));
}

burnc_tensor_t *burnc_rand(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape)
{
    RT_PUBLIC(draw("burnc_rand", IR_OP_RAND, dev, dtype, rank, shape));
}

burnc_tensor_t *burnc_randn(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape)
{
    RT_PUBLIC(draw("burnc_randn", IR_OP_RANDN, dev, dtype, rank, shape));
}
