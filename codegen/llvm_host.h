/* What the two generators of the burnc-llvm module share (llvm_cpu.c defines it; llvm_gemm.c
 * uses it): errors into a caller's buffer and the host's target machine. Internal to the
 * module. */
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

#endif
