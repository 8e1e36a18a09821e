/*
 * burnc_nn — layers, losses, initialisers, optimizers and safetensors files over burnc.h.
 *
 * Everything here records ordinary burnc ops, so it is fused and compiled like any other work
 * and runs on every device. Parameters live in a parameter set (burnc_params_t) that owns named
 * tensors; layers are small value structs that name their slots in a set; optimizers replace a
 * set's tensors with updated ones (tensors are values: an update makes a new tensor and releases
 * the old one). A training step on an autodiff device:
 *
 *     #include <burnc_nn.h>
 *
 *     burnc_device_t *cpu = burnc_device_open("cpu");
 *     burnc_device_t *dev = burnc_device_autodiff(cpu);      // new tensors track gradients
 *     burnc_device_seed(dev, 42);                              // initialisation from a seed
 *     burnc_params_t *params = burnc_params_new();
 *     burnc_linear_t l1, l2;
 *     burnc_linear_init(&l1, params, dev, "fc1", 64, 128, NULL);
 *     burnc_linear_init(&l2, params, dev, "fc2", 128, 10, NULL);
 *     burnc_optim_t *opt = burnc_optim_adam(1e-3, 0.9, 0.999, 1e-8, 0);
 *     for (each batch x [B,64] f32, y [B] i64) {
 *         burnc_scope_begin();                                 // the forward pass keeps only its loss:
 *         burnc_tensor_t *logits = burnc_linear_forward(&l2, burnc_relu(burnc_linear_forward(&l1, x)));
 *         burnc_tensor_t *loss = burnc_tensor_keep(burnc_cross_entropy(logits, y));
 *         burnc_scope_end();                                   // what backward needs, the tape holds
 *         burnc_grads_t *grads = burnc_backward(loss);
 *         burnc_optim_step(opt, params, grads);                // one fused kernel per parameter
 *         burnc_grads_release(grads);
 *         float l;
 *         burnc_tensor_read(loss, &l, sizeof l);               // runs the step
 *         burnc_tensor_release(loss);
 *     }
 *     burnc_safetensors_save(params, "mlp.safetensors");      // readable by PyTorch's safetensors
 *
 * Keeping the forward pass's intermediates (a scope around the whole step) makes each of them a
 * tensor the program holds, so it is written to memory: correct, but slower and, with gradient
 * checkpointing, without the memory it saves.
 *
 * Ownership follows burnc.h: a function that returns a handle returns a reference the caller
 * owns; arguments are borrowed. Errors follow burnc.h too: a status (or NULL) plus the thread's
 * last error naming the function and the values; a NULL tensor argument gives NULL without
 * touching the last error, so a chain of calls is checked once at its end. Nothing here is
 * thread safe on the same object (a parameter set or optimizer belongs to one thread at a time).
 */
#ifndef BURNC_NN_H
#define BURNC_NN_H

#include "burnc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Parameter sets ---------------------------------------------------------------------- */

typedef struct burnc_params burnc_params_t;

/* An empty set; NULL when out of memory. */
BURNC_API burnc_params_t *burnc_params_new(void);
/* Releases the set and its references to its tensors; NULL is ignored. */
BURNC_API void burnc_params_release(burnc_params_t *p);
/* Adds `t` under `name` (unique, non-empty, at most 255 bytes); the set keeps its own handle of
 * t's values (no copy; t stays the caller's). On an autodiff device a float tensor is stored as
 * a leaf that requires its gradient (burnc_tensor_require_grad). Returns the new slot's index
 * (slots are numbered in the order they were added), or -1 with BURNC_ERR_INVALID_ARGUMENT
 * (duplicate or bad name, NULL argument) or BURNC_ERR_OUT_OF_MEMORY. */
BURNC_API int burnc_params_add(burnc_params_t *p, const char *name, burnc_tensor_t *t);
BURNC_API int burnc_params_count(const burnc_params_t *p);
/* The slot of `name`, or -1 (last error untouched). */
BURNC_API int burnc_params_find(const burnc_params_t *p, const char *name);
/* The name of slot i (owned by the set), or NULL when i is out of range. */
BURNC_API const char *burnc_params_name(const burnc_params_t *p, int i);
/* A new reference to slot i's current tensor (the leaf, on an autodiff device), or NULL
 * (BURNC_ERR_INVALID_ARGUMENT) when i is out of range. */
BURNC_API burnc_tensor_t *burnc_params_get(const burnc_params_t *p, int i);
/* Puts t's values in slot i (a handle of the set's own; the old one is released). t must have
 * the slot's shape and dtype (BURNC_ERR_SHAPE, BURNC_ERR_UNSUPPORTED_DTYPE) and device
 * (BURNC_ERR_DEVICE_MISMATCH). The slot keeps its context: in a slot of an autodiff handle t
 * becomes a leaf that requires its gradient (copied into that context, through the host, when t
 * was made without autodiff). */
BURNC_API burnc_status_t burnc_params_set(burnc_params_t *p, int i, burnc_tensor_t *t);
/* Copies into each slot of dst the tensor of the same name in src (converted to the slot's dtype
 * and moved to its device and context, as burnc_params_set): loading weights into a model. Every slot of dst must be found in src
 * with the same shape (BURNC_ERR_INVALID_ARGUMENT naming the missing one, BURNC_ERR_SHAPE);
 * names in src that dst lacks are ignored. On failure dst is unchanged. */
BURNC_API burnc_status_t burnc_params_assign(burnc_params_t *dst, const burnc_params_t *src);
/* Total elements over every slot. */
BURNC_API int64_t burnc_params_numel(const burnc_params_t *p);

/* ---- Initialisation ---------------------------------------------------------------------- */
/* Random initialisers draw from the device's Philox stream (burnc_rand): seed the device
 * (burnc_device_seed) for repeatable values. Float dtypes only; DEFAULT is the device's float
 * dtype. fan_in / fan_out must be > 0 (BURNC_ERR_INVALID_ARGUMENT). */

/* Uniform in [lo, hi). */
BURNC_API burnc_tensor_t *burnc_init_uniform(burnc_device_t *dev, burnc_dtype_t dtype, int rank,
                                             const int64_t *shape, double lo, double hi);
/* Normal with the given mean and standard deviation. */
BURNC_API burnc_tensor_t *burnc_init_normal(burnc_device_t *dev, burnc_dtype_t dtype, int rank,
                                            const int64_t *shape, double mean, double std);
/* Kaiming (He) uniform: U(-b, b) with b = gain * sqrt(3 / fan_in); gain sqrt(2) suits ReLU
 * (PyTorch's nn.Linear default amounts to gain 1/sqrt(3): b = 1/sqrt(fan_in)). */
BURNC_API burnc_tensor_t *burnc_init_kaiming_uniform(burnc_device_t *dev, burnc_dtype_t dtype, int rank,
                                                     const int64_t *shape, int64_t fan_in, double gain);
/* Xavier (Glorot) uniform: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)). */
BURNC_API burnc_tensor_t *burnc_init_xavier_uniform(burnc_device_t *dev, burnc_dtype_t dtype, int rank,
                                                    const int64_t *shape, int64_t fan_in, int64_t fan_out,
                                                    double gain);

/* ---- Layers ------------------------------------------------------------------------------ */
/* A layer is a plain value naming its parameters' slots in a set it borrows (the set must
 * outlive its use); it holds no resource and needs no release. Parameter names follow PyTorch
 * ("<name>.weight", "<name>.bias"), so a PyTorch state dict saved as safetensors loads into the
 * same model through burnc_params_assign. */

typedef enum burnc_init_kind {
    BURNC_INIT_KAIMING_UNIFORM = 0, /* gain sqrt(2) (ReLU) */
    BURNC_INIT_XAVIER_UNIFORM = 1,  /* gain 1 */
    BURNC_INIT_ZEROS = 2,
} burnc_init_kind_t;

/* All zero means: weight [out, in] (PyTorch's layout), with a bias, Kaiming uniform weight, zero
 * bias, the device's float dtype. */
typedef struct burnc_linear_config {
    bool no_bias;
    bool weight_in_out;     /* store the weight as [in, out] (x @ W; PyTorch's files hold [out, in]) */
    burnc_init_kind_t init; /* the weight's initialiser; the bias starts at zero */
    burnc_dtype_t dtype;
} burnc_linear_config_t;

typedef struct burnc_linear {
    burnc_params_t *params;
    int weight, bias; /* slots; bias -1 without one */
    bool weight_in_out;
} burnc_linear_t;

/* Adds a Linear layer's parameters to p and describes it in *out. cfg may be NULL. Errors:
 * BURNC_ERR_INVALID_ARGUMENT (in or out < 1, NULL argument, a name already used), creation
 * errors. On failure p is unchanged. */
BURNC_API burnc_status_t burnc_linear_init(burnc_linear_t *out, burnc_params_t *p, burnc_device_t *dev,
                                           const char *name, int64_t in, int64_t out_features,
                                           const burnc_linear_config_t *cfg);
/* y = x @ W^T + b over the last axis of x ([..., in] -> [..., out]). Errors: BURNC_ERR_SHAPE (x
 * does not end in `in` features), BURNC_ERR_INVALID_ARGUMENT (a layer whose slots are not in its
 * set), the ops' own (dtype, device). */
BURNC_API burnc_tensor_t *burnc_linear_forward(const burnc_linear_t *l, burnc_tensor_t *x);

typedef struct burnc_layer_norm {
    burnc_params_t *params;
    int weight, bias; /* slots: [dim] ones and [dim] zeros at first */
    double eps;
} burnc_layer_norm_t;

/* A LayerNorm over the last axis of size dim, affine, eps (<= 0 means 1e-5). Errors as for
 * burnc_linear_init (dim < 1). Forward: burnc_layer_norm_affine over the last axis. */
BURNC_API burnc_status_t burnc_layer_norm_init(burnc_layer_norm_t *out, burnc_params_t *p, burnc_device_t *dev,
                                               const char *name, int64_t dim, double eps, burnc_dtype_t dtype);
BURNC_API burnc_tensor_t *burnc_layer_norm_forward(const burnc_layer_norm_t *l, burnc_tensor_t *x);

typedef struct burnc_embedding {
    burnc_params_t *params;
    int weight; /* slot: [num, dim], standard normal at first (as PyTorch) */
} burnc_embedding_t;

/* A table of num rows of dim features. Errors as for burnc_linear_init (num or dim < 1). */
BURNC_API burnc_status_t burnc_embedding_init(burnc_embedding_t *out, burnc_params_t *p, burnc_device_t *dev,
                                              const char *name, int64_t num, int64_t dim, burnc_dtype_t dtype);
/* Rows of the table for integer indices of any shape: idx [...] -> [..., dim]. An index out of
 * range fails at run time with BURNC_ERR_INDEX (burnc_index_select). */
BURNC_API burnc_tensor_t *burnc_embedding_forward(const burnc_embedding_t *e, burnc_tensor_t *idx);

/* Dropout: in training, each element is zeroed with probability p and the others are scaled by
 * 1 / (1 - p); the mask comes from x's device's Philox stream (seeded by burnc_device_seed), so
 * it is the same fused or not and on every device. Not training, or p == 0: a new handle of x's
 * values (no work). p == 1 gives zeros. p outside [0, 1]: NULL with BURNC_ERR_INVALID_ARGUMENT;
 * integer x: BURNC_ERR_UNSUPPORTED_DTYPE. Gradients flow through the kept elements. */
BURNC_API burnc_tensor_t *burnc_dropout(burnc_tensor_t *x, double p, bool training);

/* Activations by value, for layers chosen at run time (each is the burnc.h op of that name;
 * softmax over the last axis). */
typedef enum burnc_activation {
    BURNC_ACT_NONE = 0, /* identity: a new handle of x's values */
    BURNC_ACT_RELU,
    BURNC_ACT_GELU,
    BURNC_ACT_SILU,
    BURNC_ACT_TANH,
    BURNC_ACT_SIGMOID,
    BURNC_ACT_SOFTMAX,
} burnc_activation_t;
BURNC_API burnc_tensor_t *burnc_activate(burnc_tensor_t *x, burnc_activation_t act);

/* ---- Losses ------------------------------------------------------------------------------ */

/* Mean over the batch of -log softmax(logits)[label]: logits [N, C] float, labels [N] of an
 * integer dtype in 0..C-1 (log_softmax, then gather). A rank-0 tensor of logits' dtype. Errors:
 * BURNC_ERR_SHAPE (ranks or N differ), BURNC_ERR_UNSUPPORTED_DTYPE (labels not integers); a
 * label out of range fails at run time with BURNC_ERR_INDEX. */
BURNC_API burnc_tensor_t *burnc_cross_entropy(burnc_tensor_t *logits, burnc_tensor_t *labels);
/* mean((pred - target)^2) over every element (shapes broadcast); rank 0. */
BURNC_API burnc_tensor_t *burnc_mse_loss(burnc_tensor_t *pred, burnc_tensor_t *target);

/* ---- Optimizers -------------------------------------------------------------------------- */
/* Each step updates every slot of a set as one chain of element-wise ops (fusion turns it into
 * one kernel per parameter that reads the parameter, its gradient and state once and writes the
 * new values once), recorded without gradient tracking; the new tensors replace the old ones
 * (which are released, so their buffers can be reused in place). An optimizer keeps state per
 * slot (momentum, moments) and is bound to the first set it steps: another set, or a set whose
 * slot count changed, is BURNC_ERR_INVALID_ARGUMENT. Formulas are PyTorch's (torch.optim). */

typedef struct burnc_optim burnc_optim_t;

/* SGD: g += weight_decay * p; buf = momentum * buf + g (buf = g at the first step);
 * p -= lr * (nesterov ? g + momentum * buf : buf). momentum 0: p -= lr * g. */
BURNC_API burnc_optim_t *burnc_optim_sgd(double lr, double momentum, double weight_decay, bool nesterov);
/* Adam: g += weight_decay * p (L2); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 * p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). */
BURNC_API burnc_optim_t *burnc_optim_adam(double lr, double beta1, double beta2, double eps, double weight_decay);
/* AdamW: p *= 1 - lr * weight_decay (decoupled), then Adam without the L2 term. */
BURNC_API burnc_optim_t *burnc_optim_adamw(double lr, double beta1, double beta2, double eps, double weight_decay);
/* Hyperparameters out of range (lr < 0, betas outside [0, 1), eps < 0, momentum < 0, nesterov
 * without momentum, NaN) give NULL with BURNC_ERR_INVALID_ARGUMENT. */
BURNC_API void burnc_optim_release(burnc_optim_t *o);
/* Changes the learning rate for later steps (schedules). */
BURNC_API burnc_status_t burnc_optim_set_lr(burnc_optim_t *o, double lr);
/* Steps taken so far. */
BURNC_API int64_t burnc_optim_steps(const burnc_optim_t *o);
/* One step with gradients given as tensors: grads[i] for slot i (NULL: slot i is left as it
 * is), each of its slot's shape (BURNC_ERR_SHAPE) and device. The step count advances once. */
BURNC_API burnc_status_t burnc_optim_step_tensors(burnc_optim_t *o, burnc_params_t *p, burnc_tensor_t *const *grads);
/* One step from a backward pass's gradients (burnc_grad of each slot; slots that are not leaves
 * requiring grad are left as they are). A leaf the loss did not depend on gets a zero gradient
 * (burnc_grad's rule), so momentum and decoupled weight decay still move it, where PyTorch
 * would skip a parameter without a gradient. */
BURNC_API burnc_status_t burnc_optim_step(burnc_optim_t *o, burnc_params_t *p, const burnc_grads_t *grads);

/* ---- safetensors ------------------------------------------------------------------------- */
/* The format of the safetensors project (PyTorch, Hugging Face): an 8-byte little-endian header
 * length N, N bytes of JSON {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
 * ..., "__metadata__": {...}}, then the tensors' row-major little-endian bytes, packed without
 * holes. dtypes F64 F32 F16 BF16 I64 I32 U8 BOOL. */

/* Writes every slot, in slot order (runs the work they depend on), the header padded with spaces
 * to a multiple of 8 bytes. Errors: BURNC_ERR_EXECUTION (the file cannot be written: the message
 * names it and says why), errors of the pending work. A failed save removes the partial file. */
BURNC_API burnc_status_t burnc_safetensors_save(const burnc_params_t *p, const char *path);
/* Reads every tensor of a file into a new set on dev, in the order of their data offsets.
 * Errors: BURNC_ERR_EXECUTION (cannot open or read), BURNC_ERR_INVALID_ARGUMENT for a damaged
 * file (the message says what is wrong: truncated, bad JSON, offsets that overlap, leave holes
 * or do not match dtype and shape, duplicate names), BURNC_ERR_UNSUPPORTED_DTYPE (a dtype
 * burnc lacks, e.g. I16 or F8_E4M3), BURNC_ERR_OUT_OF_MEMORY. */
BURNC_API burnc_params_t *burnc_safetensors_load(burnc_device_t *dev, const char *path);

#ifdef __cplusplus
}
#endif
#endif
