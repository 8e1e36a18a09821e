/* burnc-demo: a few tensor programs on the default device (BURNC_DEVICE, else the best one
 * available). Exits with status 1 on any error. */
#include <burnc.h>
#include <stdio.h>

static int fail(const char *what)
{
    fprintf(stderr, "burnc-demo: %s: %s (%s)\n", what, burnc_error_message(), burnc_status_name(burnc_error_code()));
    return 1;
}

static void print_matrix(const char *title, const float *v, int rows, int cols)
{
    printf("%s\n", title);
    for (int r = 0; r < rows; r++) {
        printf("  [");
        for (int c = 0; c < cols; c++)
            printf("%s%9.5f", c ? ", " : "", (double)v[r * cols + c]);
        printf("]\n");
    }
}

int main(void)
{
    burnc_device_t *dev = burnc_device_open(NULL);
    if (!dev)
        return fail("opening the default device");
    printf("burnc %s on %s (%s)\n\n", burnc_version(), burnc_device_name(dev), burnc_device_spec(dev));

    const int64_t shape_x[2] = {2, 3}, shape_w[2] = {3, 2};
    const float x_data[6] = {1, 2, 3, 4, 5, 6};
    const float w_data[6] = {0.5f, -1, 0.25f, 0, -0.5f, 2};
    burnc_tensor_t *x = burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, shape_x, x_data);
    burnc_tensor_t *w = burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, shape_w, w_data);
    if (!x || !w)
        return fail("creating the inputs");

    /* Everything recorded inside the scope is released at its end except the kept results;
     * nothing runs until a result is read. */
    burnc_scope_begin();
    burnc_tensor_t *probs = burnc_tensor_keep(burnc_softmax(x, 1));                  /* [2,3] */
    burnc_tensor_t *y = burnc_tensor_keep(burnc_matmul(x, w));                       /* [2,2] */
    burnc_tensor_t *act = burnc_tensor_keep(burnc_gelu(burnc_add_scalar(y, -1.0)));  /* [2,2] */
    burnc_tensor_t *col_mean = burnc_tensor_keep(burnc_mean(x, 1, (int[]){0}, false)); /* [3] */
    burnc_tensor_t *total = burnc_tensor_keep(burnc_sum(burnc_mul(x, x), 0, NULL, false)); /* [] */
    burnc_scope_end();
    if (!probs || !y || !act || !col_mean || !total)
        return fail("recording");

    float p[6], yv[4], av[4], cm[3], tot;
    if (burnc_tensor_read(probs, p, sizeof p) || burnc_tensor_read(y, yv, sizeof yv) ||
        burnc_tensor_read(act, av, sizeof av) || burnc_tensor_read(col_mean, cm, sizeof cm) ||
        burnc_tensor_read(total, &tot, sizeof tot))
        return fail("running");

    print_matrix("x =", x_data, 2, 3);
    print_matrix("softmax(x, axis 1) =", p, 2, 3);
    print_matrix("x @ w =", yv, 2, 2);
    print_matrix("gelu(x @ w - 1) =", av, 2, 2);
    print_matrix("mean(x, axis 0) =", cm, 1, 3);
    printf("sum(x * x) = %g\n", (double)tot);

    /* Check a few values against what they must be. */
    const float y_want[4] = {-0.5f, 5, 0.25f, 8};
    for (int i = 0; i < 4; i++)
        if (yv[i] != y_want[i]) {
            fprintf(stderr, "burnc-demo: (x @ w)[%d] is %g, expected %g\n", i, (double)yv[i], (double)y_want[i]);
            return 1;
        }
    if (tot != 91.0f || cm[0] != 2.5f || cm[2] != 4.5f) {
        fprintf(stderr, "burnc-demo: wrong reduction results\n");
        return 1;
    }
    /* Each softmax row sums to 1. */
    for (int r = 0; r < 2; r++) {
        float s = p[3 * r] + p[3 * r + 1] + p[3 * r + 2];
        if (s < 0.9999f || s > 1.0001f) {
            fprintf(stderr, "burnc-demo: softmax row %d sums to %g\n", r, (double)s);
            return 1;
        }
    }

    burnc_tensor_release(total);
    burnc_tensor_release(col_mean);
    burnc_tensor_release(act);
    burnc_tensor_release(y);
    burnc_tensor_release(probs);
    burnc_tensor_release(w);
    burnc_tensor_release(x);
    if (burnc_device_sync(dev) != BURNC_OK)
        return fail("sync");
    burnc_device_release(dev);
    return 0;
}
