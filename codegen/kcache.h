/* The disk kernel cache (DESIGN.md, "Caches and environment").
 *
 * Compiled kernels (relocatable objects from compile_cpu, later PTX or SPIR-V) are kept as one
 * file per key under <cache dir>/kernels/, where the cache dir is $BURNC_CACHE_DIR, else
 * $XDG_CACHE_HOME/burnc, else ~/.cache/burnc. Cached native code gets executed, so:
 *  - a directory that is not owned by the user, or that the group or others may write, is
 *    refused: kc_open logs a warning and returns NULL (the cache is off, nothing fails);
 *  - every entry carries a header (magic, format version, its key, payload size, checksums):
 *    a damaged, truncated or foreign entry is never returned; kc_get removes it and misses,
 *    so the caller compiles again and kc_put rewrites it;
 *  - entries are written to a temporary name and renamed, so readers (other threads, other
 *    processes) see a whole entry or none.
 * The size of all entries is capped (BURNC_CACHE_MAX_MB, default 256 MB): a kc_put that goes
 * over the cap removes the least recently used entries (kc_get marks an entry used by setting
 * its modification time). A directory the user cannot write (a shipped, pre-warmed store) is
 * used read-only: hits work, kc_put does nothing.
 *
 * Keys: kc_key mixes the kernel's structure hash with a description of the target and the
 * compiler. For CPU kernels, use kc_host_fingerprint() (CPUID, no LLVM) and the LLVM version
 * the module was built against, so that a process with a warm cache finds its kernels without
 * loading LLVM.
 *
 * All functions are thread-safe; one kc_cache may be shared by every thread. */
#ifndef BURNC_KCACHE_H
#define BURNC_KCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kc_cache kc_cache;

/* All-zero means defaults. */
typedef struct kc_options {
    const char *dir;    /* NULL: from the environment (see above) */
    uint64_t max_bytes; /* 0: BURNC_CACHE_MAX_MB megabytes, else 256 MB */
} kc_options;

/* Opens the kernel cache, creating missing directories with mode 0700. Returns NULL when the
 * cache cannot be used (no home directory, a refused directory, out of memory); the reason is
 * logged and written to why (may be NULL). opt may be NULL. */
kc_cache *kc_open(const kc_options *opt, char *why, size_t why_cap);
void kc_close(kc_cache *c);

/* The cache a backend opens on its first miss in memory, once: kc_open with the default
 * options, NULL when refused (kc_open logs why). Not locked: the owner serializes the calls. */
typedef struct kc_lazy {
    kc_cache *cache;
    bool tried;
} kc_lazy;
kc_cache *kc_lazy_open(kc_lazy *l);
void kc_lazy_close(kc_lazy *l);

/* The directory holding the entries, and whether kc_put is disabled. */
const char *kc_dir(const kc_cache *c);
bool kc_read_only(const kc_cache *c);

/* The entry for key: true with a malloc'ed copy of its payload (*data, *size; the caller
 * frees it), or false on a miss. A damaged or foreign entry is removed and misses. */
bool kc_get(kc_cache *c, uint64_t key, void **data, size_t *size);

/* Stores the payload under key (replacing any entry), then evicts least recently used
 * entries while the cache is over its cap. False when nothing was stored: read-only, larger
 * than the cap, or an I/O error (logged). */
bool kc_put(kc_cache *c, uint64_t key, const void *data, size_t size);

/* The cache directory: $BURNC_CACHE_DIR, else $XDG_CACHE_HOME/burnc, else ~/.cache/burnc
 * (malloc'ed), or NULL with a reason. Shared with the autotune store. */
char *kc_cache_dir(char *why, size_t why_cap);
/* a "/" b, malloc'ed (NULL when out of memory). */
char *kc_path_join(const char *a, const char *b);
/* mkdir -p; the levels it creates get mode 0700. False when a level could not be made. */
bool kc_make_dirs(const char *path);
/* Whether a directory may hold what burnc runs or obeys: this user's, writable by nobody else
 * (else false with the reason); *writable by the owner's mode bit (for root too). */
bool kc_dir_trusted(const char *path, bool *writable, char *why, size_t why_cap);

/* A 64-bit hash of bytes (stable across processes and machines). */
uint64_t kc_hash(const void *data, size_t size, uint64_t seed);

/* The cache key of a kernel: its kir_hash, the target (e.g. kc_host_fingerprint()) and the
 * compiler (e.g. "llvm-19.1.7"), with burnc's version, the entry format and a hash of the code
 * generator's sources (made by codegen/meson.build), so that objects written by another
 * version of the lowering are never found. */
uint64_t kc_key(uint64_t kernel_hash, const char *target, const char *compiler);

/* The host CPU as CPUID describes it (vendor, family/model/stepping, feature words, enabled
 * register state): what decides which instructions compiled code may use. No LLVM needed. */
const char *kc_host_fingerprint(void);

#endif
