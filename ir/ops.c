/* Tables generated from ops.def. */
#include "ir.h"

static const struct {
    const char *name;
    int arity;
    ir_class cls;
} op_table[IR_OP_COUNT] = {
#define X(e, nm, ar, c) [IR_OP_##e] = {.name = nm, .arity = ar, .cls = IR_CLASS_##c},
#include "ops.def"
#undef X
};

const char *ir_op_name(ir_op op) { return (unsigned)op < IR_OP_COUNT ? op_table[op].name : "invalid"; }
ir_class ir_op_class(ir_op op) { return op_table[op].cls; }
int ir_op_arity(ir_op op) { return op_table[op].arity; }
