/* What the generators of the burnc-llvm module share: errors into a caller's buffer, the host's
 * and the GPU's target machines (llvm_cpu.c and llvm_ptx.c define them), and the last steps of
 * every compile (llvm_emit.c). Internal to the module. */
#ifndef BURNC_LLVM_HOST_H
#define BURNC_LLVM_HOST_H

#include <llvm-c/TargetMachine.h>
#include <stdbool.h>
#include <stddef.h>

/* Formats into err (when err and cap) and returns false. */
bool cg_failf(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The emitted buffer mb (taken: always disposed) as malloc'd text in *out, NUL-terminated;
 * *size (if not NULL) without the terminators the buffer may count, unless keep_nul (objects).
 * what names the caller in the out-of-memory message. */
bool cg_buffer_text(LLVMMemoryBufferRef mb, bool keep_nul, char **out, size_t *size, const char *what, char *err,
                    size_t cap);
/* A target machine for the host (x86-64 only; LLVM's X86 target initialized once), or NULL
 * with the reason in err. The caller disposes it. */
LLVMTargetMachineRef cg_host_tm(char *err, size_t cap);
/* The host's target triple, once cg_host_tm succeeded. */
const char *cg_host_triple(void);

#define CG_NVPTX_TRIPLE "nvptx64-nvidia-cuda"
/* An NVPTX target machine for the newest target LLVM 19 knows at or below sm (a newer GPU JITs
 * older PTX), or for sm_90a when arch_a, with the C API's default options: no contraction
 * outside llvm.fma, IEEE division and square root, no .ftz. NULL with err ("<what>: ...") when
 * this LLVM has no NVPTX target. The caller disposes it. */
LLVMTargetMachineRef cg_nvptx_tm(int sm, bool arch_a, const char *what, char *err, size_t cap);
/* The start of every GPU entry for sm >= 90, built at b's position (nothing below 90):
 * griddepcontrol.wait, which holds the block until the kernels before it on the stream have
 * finished and their writes are visible. The runtime may then launch it with programmatic
 * stream serialization (runtime/cuda/profile.c): its launch is processed while the kernel
 * before it drains, not after. Without that attribute the wait returns at once. No entry
 * calls griddepcontrol.launch_dependents: a dependent launched at a block's start made the
 * deep MLP's step 25% slower on the H200, its matmuls' blocks resident early and waiting
 * (scripts/gpu/NOTES.md); without it a dependent starts as the last block exits. */
void cg_ptx_grid_dependency(LLVMContextRef ctx, LLVMBuilderRef b, int sm);
/* Verifies mod, runs the pass pipeline `passes` ("default<O3>") and emits mod for tm into *out
 * (as cg_buffer_text: an object when object, else assembly text). Messages start with what.
 * The module is left to the caller. */
bool cg_emit_module(LLVMModuleRef mod, LLVMTargetMachineRef tm, const char *passes, bool object, const char *what,
                    char **out, size_t *size, char *err, size_t cap);

#endif
