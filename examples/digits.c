/* Trains a small MLP (64-128-10, ReLU, Adam, cross-entropy) on the handwritten digits data set
 * that Debian's python3-sklearn ships (1797 8x8 images with pixel values 0..16, one CSV row per
 * image: 64 pixels, then the label), on a fixed train/test split, printing the loss per epoch
 * and the test accuracy. The same program runs on any device:
 *
 *     burnc-digits [DEVICE] [CSV]       (DEVICE: "cpu", "cuda:0", ...; default: the default
 *                                        device; CSV: default $BURNC_DIGITS_CSV, else digits.csv)
 *
 * The build decompresses the data set into its build folder as digits.csv. Exits 0 when the
 * test accuracy reaches 95%, 2 when it does not, 1 on an error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <burnc_nn.h>

enum { DIGITS_N = 1797, DIGITS_PIXELS = 64, DIGITS_CLASSES = 10, DIGITS_TEST = 360, DIGITS_HIDDEN = 128,
       DIGITS_BATCH = 64 };

typedef struct digits_result {
    double accuracy;    /* on the test images */
    double first_loss;  /* mean training loss of the first and last epochs */
    double last_loss;
    int epochs;
} digits_result;

typedef struct digits_data {
    float x[DIGITS_N][DIGITS_PIXELS];
    int64_t y[DIGITS_N];
} digits_data;

static int digits_load(const char *path, digits_data *d)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "digits: cannot open %s (set BURNC_DIGITS_CSV or pass the CSV's path)\n", path);
        return 1;
    }
    int row = 0, ok = 1;
    for (; row < DIGITS_N && ok; row++) {
        for (int c = 0; c <= DIGITS_PIXELS && ok; c++) {
            int v;
            ok = fscanf(f, c ? ",%d" : "%d", &v) == 1 && v >= 0 && v <= (c < DIGITS_PIXELS ? 16 : 9);
            if (ok && c < DIGITS_PIXELS)
                d->x[row][c] = (float)v / 16.0f;
            else if (ok)
                d->y[row] = v;
        }
    }
    fclose(f);
    if (!ok) {
        fprintf(stderr, "digits: %s: row %d is not 64 pixels in 0..16 and a label in 0..9\n", path, row);
        return 1;
    }
    return 0;
}

/* A fixed permutation from a fixed seed (splitmix64 driving Fisher-Yates). */
static void digits_shuffle(int *idx, int n, uint64_t *state)
{
    for (int i = n - 1; i > 0; i--) {
        uint64_t z = (*state += 0x9e3779b97f4a7c15u);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        z ^= z >> 31;
        int j = (int)(z % (uint64_t)(i + 1)), t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}

typedef struct digits_model {
    burnc_params_t *params;
    burnc_linear_t l1, l2;
} digits_model;

static burnc_tensor_t *digits_forward(const digits_model *m, burnc_tensor_t *x)
{
    return burnc_linear_forward(&m->l2, burnc_relu(burnc_linear_forward(&m->l1, x)));
}

/* One epoch over the shuffled training rows in full batches; the mean loss, or -1. */
static double digits_epoch(digits_model *m, burnc_optim_t *opt, burnc_device_t *dev, const digits_data *d,
                           const int *train, int ntrain)
{
    static float xb[DIGITS_BATCH][DIGITS_PIXELS];
    int64_t yb[DIGITS_BATCH];
    double sum = 0;
    int batches = ntrain / DIGITS_BATCH; /* full batches only: every step has the same shapes */
    for (int b = 0; b < batches; b++) {
        for (int i = 0; i < DIGITS_BATCH; i++) {
            int r = train[b * DIGITS_BATCH + i];
            memcpy(xb[i], d->x[r], sizeof xb[i]);
            yb[i] = d->y[r];
        }
        /* the forward pass in a scope that keeps only the loss: the intermediates the backward
         * pass needs are held by the tape, the others need never be written to memory */
        burnc_scope_begin();
        const int64_t shape[2] = {DIGITS_BATCH, DIGITS_PIXELS};
        burnc_tensor_t *x = burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, shape, xb);
        burnc_tensor_t *y = burnc_tensor_from_data(dev, BURNC_DTYPE_I64, 1, (int64_t[]){DIGITS_BATCH}, yb);
        burnc_tensor_t *loss = burnc_tensor_keep(burnc_cross_entropy(digits_forward(m, x), y));
        burnc_scope_end();
        burnc_grads_t *g = loss ? burnc_backward(loss) : NULL;
        float l = -1;
        burnc_status_t s = g ? burnc_optim_step(opt, m->params, g) : burnc_error_code();
        if (s == BURNC_OK)
            s = burnc_tensor_read(loss, &l, sizeof l);
        burnc_grads_release(g);
        burnc_tensor_release(loss);
        if (s != BURNC_OK) {
            fprintf(stderr, "digits: training step: %s\n", burnc_error_message());
            return -1;
        }
        sum += l;
    }
    return sum / batches;
}

/* The share of test rows whose largest logit is the label, or -1. */
static double digits_accuracy(const digits_model *m, burnc_device_t *dev, const digits_data *d, const int *test,
                              int ntest)
{
    float *xt = malloc((size_t)ntest * DIGITS_PIXELS * sizeof *xt);
    int64_t *pred = malloc((size_t)ntest * sizeof *pred);
    double acc = -1;
    if (!xt || !pred)
        goto out;
    for (int i = 0; i < ntest; i++)
        memcpy(xt + (size_t)i * DIGITS_PIXELS, d->x[test[i]], DIGITS_PIXELS * sizeof *xt);
    burnc_no_grad_begin();
    burnc_scope_begin();
    burnc_tensor_t *x = burnc_tensor_from_data(dev, BURNC_DTYPE_F32, 2, (int64_t[]){ntest, DIGITS_PIXELS}, xt);
    burnc_tensor_t *p = burnc_argmax(digits_forward(m, x), 1, false);
    burnc_status_t s = p ? burnc_tensor_read(p, pred, (size_t)ntest * sizeof *pred) : burnc_error_code();
    burnc_scope_end();
    burnc_no_grad_end();
    if (s != BURNC_OK) {
        fprintf(stderr, "digits: evaluation: %s\n", burnc_error_message());
        goto out;
    }
    int right = 0;
    for (int i = 0; i < ntest; i++)
        right += pred[i] == d->y[test[i]];
    acc = (double)right / ntest;
out:
    free(xt);
    free(pred);
    return acc;
}

/* Trains on device `spec` for `epochs` epochs; 0 and *out filled, or 1 after printing why. */
static int digits_train(const char *spec, const char *csv, int epochs, bool verbose, digits_result *out)
{
    digits_data *d = malloc(sizeof *d);
    int idx[DIGITS_N], rc = 1;
    burnc_device_t *base = NULL, *dev = NULL;
    burnc_optim_t *opt = NULL;
    digits_model m = {0};
    if (!d || digits_load(csv, d))
        goto out;
    /* the split: a fixed shuffle, the last 360 rows for testing */
    for (int i = 0; i < DIGITS_N; i++)
        idx[i] = i;
    uint64_t state = 20261129;
    digits_shuffle(idx, DIGITS_N, &state);
    const int ntrain = DIGITS_N - DIGITS_TEST;
    const int *test = idx + ntrain;

    if (!(base = burnc_device_open(spec)) || !(dev = burnc_device_autodiff(base)))
        goto fail;
    burnc_device_seed(dev, 1);
    if (!(m.params = burnc_params_new()) ||
        burnc_linear_init(&m.l1, m.params, dev, "fc1", DIGITS_PIXELS, DIGITS_HIDDEN, NULL) != BURNC_OK ||
        burnc_linear_init(&m.l2, m.params, dev, "fc2", DIGITS_HIDDEN, DIGITS_CLASSES, NULL) != BURNC_OK ||
        !(opt = burnc_optim_adam(3e-3, 0.9, 0.999, 1e-8, 0)))
        goto fail;
    if (verbose)
        printf("digits: %d train / %d test images, MLP 64-%d-10 (%lld parameters) on %s\n", ntrain, DIGITS_TEST,
               DIGITS_HIDDEN, (long long)burnc_params_numel(m.params), burnc_device_name(dev));
    for (int e = 0; e < epochs; e++) {
        digits_shuffle(idx, ntrain, &state);
        double loss = digits_epoch(&m, opt, dev, d, idx, ntrain);
        if (loss < 0)
            goto out;
        if (e == 0)
            out->first_loss = loss;
        out->last_loss = loss;
        if (verbose)
            printf("epoch %2d  loss %.4f\n", e + 1, loss);
    }
    out->epochs = epochs;
    if ((out->accuracy = digits_accuracy(&m, dev, d, test, DIGITS_TEST)) < 0)
        goto out;
    if (verbose)
        printf("test accuracy %.2f%% (%d of %d)\n", 100 * out->accuracy, (int)(out->accuracy * DIGITS_TEST + 0.5),
               DIGITS_TEST);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "digits: %s\n", burnc_error_message());
out:
    burnc_optim_release(opt);
    burnc_params_release(m.params);
    burnc_device_release(dev);
    burnc_device_release(base);
    free(d);
    return rc;
}

#ifndef DIGITS_NO_MAIN
int main(int argc, char **argv)
{
    const char *spec = argc > 1 ? argv[1] : NULL;
    const char *csv = argc > 2 ? argv[2] : getenv("BURNC_DIGITS_CSV");
    digits_result r = {0};
    if (digits_train(spec, csv ? csv : "digits.csv", 30, true, &r))
        return 1;
    if (r.accuracy < 0.95) {
        fprintf(stderr, "digits: test accuracy %.2f%% is below 95%%\n", 100 * r.accuracy);
        return 2;
    }
    return 0;
}
#endif
