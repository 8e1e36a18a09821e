/* Parameter initialisers: affine maps of the device's Philox draws, so a seed fixes them. */
#include <math.h>

#include "nn.h"

static burnc_tensor_t *affine(burnc_tensor_t *r, double scale, double shift)
{
    burnc_tensor_t *s = burnc_mul_scalar(r, scale);
    burnc_tensor_t *y = burnc_add_scalar(s, shift);
    burnc_tensor_release(s);
    burnc_tensor_release(r);
    return y;
}

static burnc_tensor_t *uniform(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape, double lo,
                               double hi)
{
    return affine(burnc_rand(dev, dtype, rank, shape), hi - lo, lo);
}

burnc_tensor_t *burnc_init_uniform(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape,
                                   double lo, double hi)
{
    if (!(lo <= hi) || !isfinite(lo) || !isfinite(hi)) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_init_uniform: bounds [%g, %g)", lo, hi);
        return NULL;
    }
    RT_PUBLIC(uniform(dev, dtype, rank, shape, lo, hi));
}

burnc_tensor_t *burnc_init_normal(burnc_device_t *dev, burnc_dtype_t dtype, int rank, const int64_t *shape,
                                  double mean, double std)
{
    if (!(std >= 0) || !isfinite(std) || !isfinite(mean)) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_init_normal: mean %g, std %g", mean, std);
        return NULL;
    }
    RT_PUBLIC(affine(burnc_randn(dev, dtype, rank, shape), std, mean));
}

burnc_tensor_t *burnc_init_kaiming_uniform(burnc_device_t *dev, burnc_dtype_t dtype, int rank,
                                           const int64_t *shape, int64_t fan_in, double gain)
{
    if (fan_in < 1 || !isfinite(gain)) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_init_kaiming_uniform: fan_in %lld, gain %g", (long long)fan_in,
                gain);
        return NULL;
    }
    double b = fabs(gain) * sqrt(3.0 / (double)fan_in);
    RT_PUBLIC(uniform(dev, dtype, rank, shape, -b, b));
}

burnc_tensor_t *burnc_init_xavier_uniform(burnc_device_t *dev, burnc_dtype_t dtype, int rank,
                                          const int64_t *shape, int64_t fan_in, int64_t fan_out, double gain)
{
    if (fan_in < 1 || fan_out < 1 || !isfinite(gain)) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_init_xavier_uniform: fan_in %lld, fan_out %lld, gain %g",
                (long long)fan_in, (long long)fan_out, gain);
        return NULL;
    }
    double b = fabs(gain) * sqrt(6.0 / (double)(fan_in + fan_out));
    RT_PUBLIC(uniform(dev, dtype, rank, shape, -b, b));
}
