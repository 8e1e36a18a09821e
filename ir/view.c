/* Views: shape, strides and offset over a storage. */
#include "ir.h"

int64_t ir_numel(int rank, const int64_t *shape)
{
    /* a zero anywhere wins: partial products of the other dimensions may exceed 2^63 */
    for (int d = 0; d < rank; d++)
        if (shape[d] == 0)
            return 0;
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    return n;
}

void ir_view_dense(ir_view *v, int rank, const int64_t *shape)
{
    v->rank = rank;
    v->offset = 0;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; d--) {
        v->shape[d] = shape[d];
        v->strides[d] = stride;
        /* an empty tensor's strides are never used to address anything: saturate them */
        if (__builtin_mul_overflow(stride, shape[d] > 0 ? shape[d] : 1, &stride))
            stride = INT64_MAX;
    }
}

bool ir_view_is_dense(const ir_view *v)
{
    int64_t stride = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        if (v->shape[d] == 0)
            return true;
        if (v->shape[d] != 1 && v->strides[d] != stride)
            return false;
        stride *= v->shape[d];
    }
    return true;
}

bool ir_view_fits(const ir_view *v, int64_t es, size_t size)
{
    int64_t lo = v->offset, hi = v->offset;
    for (int d = 0; d < v->rank; d++) {
        if (v->shape[d] == 0)
            return true;
        int64_t span;
        if (v->shape[d] < 0 || __builtin_mul_overflow(v->shape[d] - 1, v->strides[d], &span) ||
            __builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi))
            return false;
    }
    return lo >= 0 && hi < INT64_MAX / es && (uint64_t)((hi + 1) * es) <= size;
}
