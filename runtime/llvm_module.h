/* The LLVM code generator, a shared module (burnc-llvm.so) that every backend compiling through
 * LLVM (cpu for the host, cuda for PTX) reaches through one table. It is opened with dlopen on
 * the first compile only, once per process, so a process that never compiles never maps
 * libLLVM (DESIGN.md). Thread-safe. */
#ifndef BURNC_RT_LLVM_MODULE_H
#define BURNC_RT_LLVM_MODULE_H

#include <stdbool.h>
#include <stddef.h>

#include "codegen/cg.h"

/* The module's table, loading it on first use; NULL with the last error set when it cannot be
 * loaded. */
const cg_llvm_api *rt_llvm_api(void);
/* Whether the module has been loaded into this process (for tests and logs). */
bool rt_llvm_loaded(void);
/* Whether the module's file is there (without loading it); false with the reason. */
bool rt_llvm_module_find(char *why, size_t why_cap);
bool rt_llvm_module_available(void);

#endif
