/* nn internals shared by its files (not installed). nn is written over the public API; from the
 * runtime it takes only the last-error setter (rt_fail, rt_shape_str), the log, and the scope
 * controls (RT_PUBLIC, rt_scope_suspend) that make its results behave like any op's. */
#ifndef BURNC_NN_INTERNAL_H
#define BURNC_NN_INTERNAL_H

#include "burnc_nn.h"
#include "rt.h"

/* The tensor in slot i, borrowed (valid until the slot is replaced). i must be in range. */
burnc_tensor_t *nn_params_at(const burnc_params_t *p, int i);
/* Puts a value computed from slot i (an optimizer's update) in its place, unchecked: on an
 * autodiff device it becomes a leaf requiring grad again. Takes over t's reference (NULL: the
 * pending error). */
burnc_status_t nn_params_update(burnc_params_t *p, int i, burnc_tensor_t *t);
/* Removes the slots from `first` on (undoing a layer's partial init). */
void nn_params_truncate(burnc_params_t *p, int first);

#endif
