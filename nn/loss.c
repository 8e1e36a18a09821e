/* Losses, as compositions the backward pass and fusion see through. */
#include "nn.h"

static burnc_tensor_t *cross_entropy(burnc_tensor_t *logits, burnc_tensor_t *labels)
{
    const char *op = "burnc_cross_entropy";
    char a[160], b[160];
    int rl = burnc_tensor_rank(logits), ry = burnc_tensor_rank(labels);
    const int64_t *sl = burnc_tensor_shape(logits), *sy = burnc_tensor_shape(labels);
    if (rl != 2 || ry != 1 || sl[0] != sy[0]) {
        rt_fail(BURNC_ERR_SHAPE, "%s: logits %s and labels %s (want [N,C] and [N])", op,
                rt_shape_str(a, sizeof a, rl, sl), rt_shape_str(b, sizeof b, ry, sy));
        return NULL;
    }
    burnc_dtype_t dy = burnc_tensor_dtype(labels);
    if (dy != BURNC_DTYPE_I32 && dy != BURNC_DTYPE_I64) {
        rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "%s: labels of %s (want i32 or i64)", op, burnc_dtype_name(dy));
        return NULL;
    }
    burnc_tensor_t *ls = burnc_log_softmax(logits, 1);
    burnc_tensor_t *col = burnc_reshape(labels, 2, (int64_t[]){sy[0], 1});
    burnc_tensor_t *picked = burnc_gather(ls, 1, col);
    burnc_tensor_t *mean = burnc_mean(picked, 0, NULL, false);
    burnc_tensor_t *loss = burnc_neg(mean);
    burnc_tensor_release(mean);
    burnc_tensor_release(picked);
    burnc_tensor_release(col);
    burnc_tensor_release(ls);
    return loss;
}

burnc_tensor_t *burnc_cross_entropy(burnc_tensor_t *logits, burnc_tensor_t *labels)
{
    if (!logits || !labels)
        return NULL;
    RT_PUBLIC(cross_entropy(logits, labels));
}

static burnc_tensor_t *mse(burnc_tensor_t *pred, burnc_tensor_t *target)
{
    burnc_tensor_t *d = burnc_sub(pred, target);
    burnc_tensor_t *sq = burnc_mul(d, d);
    burnc_tensor_t *loss = burnc_mean(sq, 0, NULL, false);
    burnc_tensor_release(sq);
    burnc_tensor_release(d);
    return loss;
}

burnc_tensor_t *burnc_mse_loss(burnc_tensor_t *pred, burnc_tensor_t *target)
{
    if (!pred || !target)
        return NULL;
    RT_PUBLIC(mse(pred, target));
}
