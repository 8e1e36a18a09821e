/* Loads a relocatable x86-64 ELF object made by the LLVM module (compile_cpu) into this process,
 * without LLVM: the disk cache's way of running a kernel compiled by an earlier process.
 *
 * The bytes come from a file, so nothing in them is trusted: every header, offset, size, index
 * and string is checked against the buffer before use, every relocation is checked to land
 * inside the section it patches, and a failure says why. (The cache's checksum catches random
 * damage first; these checks are what stands between a crafted or truncated file and a crash.)
 *
 * Layout: one anonymous mapping, so every reference between sections is within +-2 GB:
 *   [executable sections | call trampolines] [read-only sections | GOT] [writable sections]
 * External symbols (fmod, fmodf, memset, ...) come from dlsym(RTLD_DEFAULT); calls reach them
 * through a trampoline (jmp *[rip]; .quad addr) beside the code, and GOT-relative references
 * through a GOT slot beside the read-only data. After relocation the regions get their final
 * protections: r-x, r--, rw-. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "codegen/cg.h"

enum {
    MAX_SECTIONS = 4096,
    MAX_ALIGN = 4096,
    TRAMPOLINE_SIZE = 16,
};
#define MAX_IMAGE ((uint64_t)256 << 20) /* far beyond any kernel; keeps every offset in range */

typedef struct obj_image {
    void *base;
    size_t size;
} obj_image;

/* What one load needs while it works. */
typedef struct loader {
    const unsigned char *data;
    size_t size;
    Elf64_Ehdr eh;
    Elf64_Shdr *sh;
    int symtab; /* section index of SHT_SYMTAB */
    Elf64_Xword n_syms;
    const char *strtab; /* symbol names, NUL-terminated at its end */
    Elf64_Xword strtab_size;
    uint64_t *sec_addr; /* where each loaded section lives, 0 if not loaded */
    int32_t *got_slot;  /* per symbol: GOT index or -1 */
    int32_t *plt_slot;  /* per symbol: trampoline index or -1 */
    uint32_t n_got, n_plt;
    unsigned char *base;
    size_t map_size, exec_size, ro_end;
    uint64_t got_off, plt_off;
    char *err;
    size_t cap;
} loader;

static bool failf(loader *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool failf(loader *l, const char *fmt, ...)
{
    if (l->err && l->cap) {
        int n = snprintf(l->err, l->cap, "object: ");
        va_list ap;
        va_start(ap, fmt);
        if (n > 0 && (size_t)n < l->cap)
            vsnprintf(l->err + n, l->cap - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* [off, off + len) lies inside the buffer. */
static bool in_file(const loader *l, uint64_t off, uint64_t len)
{
    uint64_t end;
    return !__builtin_add_overflow(off, len, &end) && end <= l->size;
}

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

/* ---- Headers ----------------------------------------------------------------------------- */

static bool check_header(loader *l)
{
    if (l->size < sizeof l->eh)
        return failf(l, "%zu bytes, shorter than an ELF header", l->size);
    memcpy(&l->eh, l->data, sizeof l->eh);
    const Elf64_Ehdr *e = &l->eh;
    if (memcmp(e->e_ident, ELFMAG, SELFMAG) != 0)
        return failf(l, "not an ELF file (bad magic)");
    if (e->e_ident[EI_CLASS] != ELFCLASS64 || e->e_ident[EI_DATA] != ELFDATA2LSB)
        return failf(l, "not a little-endian ELF64 file (class %d, data %d)", e->e_ident[EI_CLASS],
                     e->e_ident[EI_DATA]);
    if (e->e_ident[EI_VERSION] != EV_CURRENT || e->e_version != EV_CURRENT)
        return failf(l, "ELF version %d", e->e_ident[EI_VERSION]);
    if (e->e_type != ET_REL)
        return failf(l, "ELF type %d is not a relocatable object", e->e_type);
    if (e->e_machine != EM_X86_64)
        return failf(l, "machine %d is not x86-64", e->e_machine);
    if (e->e_shentsize != sizeof(Elf64_Shdr) || e->e_shnum == 0 || e->e_shnum > MAX_SECTIONS)
        return failf(l, "%d section headers of %d bytes", e->e_shnum, e->e_shentsize);
    if (!in_file(l, e->e_shoff, (uint64_t)e->e_shnum * sizeof(Elf64_Shdr)))
        return failf(l, "section headers at %llu run past the end (%zu bytes)", (unsigned long long)e->e_shoff,
                     l->size);
    if (e->e_shstrndx >= e->e_shnum)
        return failf(l, "section name table %d of %d", e->e_shstrndx, e->e_shnum);
    return true;
}

static bool loadable(const Elf64_Shdr *s)
{
    return (s->sh_flags & SHF_ALLOC) && (s->sh_type == SHT_PROGBITS || s->sh_type == SHT_NOBITS);
}

static bool check_sections(loader *l)
{
    int n = l->eh.e_shnum;
    l->sh = malloc((size_t)n * sizeof *l->sh);
    l->sec_addr = calloc((size_t)n, sizeof *l->sec_addr);
    if (!l->sh || !l->sec_addr)
        return failf(l, "out of memory for %d sections", n);
    memcpy(l->sh, l->data + l->eh.e_shoff, (size_t)n * sizeof *l->sh);
    l->symtab = -1;
    for (int i = 1; i < n; i++) {
        const Elf64_Shdr *s = &l->sh[i];
        if (s->sh_type != SHT_NOBITS && !in_file(l, s->sh_offset, s->sh_size))
            return failf(l, "section %d (%llu bytes at %llu) runs past the end (%zu bytes)", i,
                         (unsigned long long)s->sh_size, (unsigned long long)s->sh_offset, l->size);
        if (s->sh_flags & SHF_ALLOC) {
            if (s->sh_type == SHT_INIT_ARRAY || s->sh_type == SHT_FINI_ARRAY || s->sh_type == SHT_PREINIT_ARRAY)
                return failf(l, "section %d holds constructors, which kernels never have", i);
            if (s->sh_flags & SHF_TLS)
                return failf(l, "section %d is thread-local storage", i);
            if (loadable(s) && (s->sh_addralign > MAX_ALIGN || (s->sh_addralign & (s->sh_addralign - 1))))
                return failf(l, "section %d has alignment %llu", i, (unsigned long long)s->sh_addralign);
            if (loadable(s) && s->sh_size > MAX_IMAGE)
                return failf(l, "section %d is %llu bytes", i, (unsigned long long)s->sh_size);
        }
        if (s->sh_type == SHT_SYMTAB) {
            if (l->symtab >= 0)
                return failf(l, "two symbol tables");
            l->symtab = i;
        }
        if (s->sh_type == SHT_REL)
            return failf(l, "section %d has REL relocations (x86-64 objects use RELA)", i);
    }
    if (l->symtab < 0)
        return failf(l, "no symbol table");
    const Elf64_Shdr *st = &l->sh[l->symtab];
    if (st->sh_entsize != sizeof(Elf64_Sym) || st->sh_size % sizeof(Elf64_Sym) != 0)
        return failf(l, "symbol table entries of %llu bytes", (unsigned long long)st->sh_entsize);
    if (st->sh_link == 0 || st->sh_link >= (Elf64_Word)n || l->sh[st->sh_link].sh_type != SHT_STRTAB)
        return failf(l, "symbol table names in section %u, not a string table", st->sh_link);
    const Elf64_Shdr *str = &l->sh[st->sh_link];
    if (str->sh_size == 0 || l->data[str->sh_offset + str->sh_size - 1] != '\0')
        return failf(l, "symbol names do not end with a NUL");
    l->n_syms = st->sh_size / sizeof(Elf64_Sym);
    l->strtab = (const char *)l->data + str->sh_offset;
    l->strtab_size = str->sh_size;
    return true;
}

static Elf64_Sym symbol(const loader *l, Elf64_Xword i)
{
    Elf64_Sym s;
    memcpy(&s, l->data + l->sh[l->symtab].sh_offset + i * sizeof s, sizeof s);
    return s;
}

static const char *sym_name(const loader *l, const Elf64_Sym *s)
{
    return s->st_name < l->strtab_size ? l->strtab + s->st_name : NULL;
}

/* ---- Relocations: the pass that counts GOT slots and trampolines ------------------------- */

/* Calls each relocation of each RELA section that patches a loaded section. */
typedef bool (*rela_fn)(loader *l, const Elf64_Shdr *target, int target_index, const Elf64_Rela *r);

static bool for_each_rela(loader *l, rela_fn fn)
{
    for (int i = 1; i < l->eh.e_shnum; i++) {
        const Elf64_Shdr *rs = &l->sh[i];
        if (rs->sh_type != SHT_RELA)
            continue;
        if (rs->sh_info == 0 || rs->sh_info >= l->eh.e_shnum)
            return failf(l, "relocation section %d patches section %u", i, rs->sh_info);
        const Elf64_Shdr *target = &l->sh[rs->sh_info];
        if (!loadable(target))
            continue; /* .eh_frame, debug info: not loaded, nothing to patch */
        if (rs->sh_link != (Elf64_Word)l->symtab)
            return failf(l, "relocation section %d uses symbol table %u", i, rs->sh_link);
        if (rs->sh_entsize != sizeof(Elf64_Rela) || rs->sh_size % sizeof(Elf64_Rela) != 0)
            return failf(l, "relocation section %d has entries of %llu bytes", i, (unsigned long long)rs->sh_entsize);
        for (Elf64_Xword j = 0; j < rs->sh_size / sizeof(Elf64_Rela); j++) {
            Elf64_Rela r;
            memcpy(&r, l->data + rs->sh_offset + j * sizeof r, sizeof r);
            if (ELF64_R_SYM(r.r_info) >= l->n_syms)
                return failf(l, "relocation %llu of section %d names symbol %llu of %llu", (unsigned long long)j, i,
                             (unsigned long long)ELF64_R_SYM(r.r_info), (unsigned long long)l->n_syms);
            if (!fn(l, target, (int)rs->sh_info, &r))
                return false;
        }
    }
    return true;
}

static bool is_got_type(uint32_t t)
{
    return t == R_X86_64_GOTPCREL || t == R_X86_64_GOTPCRELX || t == R_X86_64_REX_GOTPCRELX;
}

static bool count_slots(loader *l, const Elf64_Shdr *target, int ti, const Elf64_Rela *r)
{
    (void)target;
    (void)ti;
    uint32_t sym = (uint32_t)ELF64_R_SYM(r->r_info), type = (uint32_t)ELF64_R_TYPE(r->r_info);
    Elf64_Sym s = symbol(l, sym);
    if (is_got_type(type) && l->got_slot[sym] < 0)
        l->got_slot[sym] = (int32_t)l->n_got++;
    if ((type == R_X86_64_PLT32 || type == R_X86_64_PC32) && s.st_shndx == SHN_UNDEF && l->plt_slot[sym] < 0)
        l->plt_slot[sym] = (int32_t)l->n_plt++;
    return true;
}

/* ---- Layout ------------------------------------------------------------------------------ */

/* Places the loaded sections of one kind at offsets from `at`; returns the end. */
static bool place(loader *l, int kind, uint64_t *at)
{
    for (int i = 1; i < l->eh.e_shnum; i++) {
        const Elf64_Shdr *s = &l->sh[i];
        if (!loadable(s))
            continue;
        int k = (s->sh_flags & SHF_EXECINSTR) ? 0 : (s->sh_flags & SHF_WRITE) ? 2 : 1;
        if (k != kind)
            continue;
        uint64_t a = s->sh_addralign ? s->sh_addralign : 1;
        *at = align_up(*at, a);
        l->sec_addr[i] = *at; /* an offset until the mapping exists */
        *at += s->sh_size;
        if (*at > MAX_IMAGE)
            return failf(l, "the sections add up to more than %llu bytes", (unsigned long long)MAX_IMAGE);
    }
    return true;
}

static bool layout_and_map(loader *l)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t at = 0;
    if (!place(l, 0, &at))
        return false;
    l->plt_off = align_up(at, TRAMPOLINE_SIZE);
    at = l->plt_off + (uint64_t)l->n_plt * TRAMPOLINE_SIZE;
    l->exec_size = align_up(at, page);
    at = l->exec_size;
    if (!place(l, 1, &at))
        return false;
    l->got_off = align_up(at, 8);
    at = l->got_off + (uint64_t)l->n_got * 8;
    l->ro_end = align_up(at, page);
    at = l->ro_end;
    if (!place(l, 2, &at))
        return false;
    l->map_size = align_up(at > 0 ? at : 1, page);
    void *p = mmap(NULL, l->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return failf(l, "cannot map %zu bytes", l->map_size);
    l->base = p;
    for (int i = 1; i < l->eh.e_shnum; i++) {
        const Elf64_Shdr *s = &l->sh[i];
        if (!loadable(s))
            continue;
        if (s->sh_type == SHT_PROGBITS)
            memcpy(l->base + l->sec_addr[i], l->data + s->sh_offset, s->sh_size);
        l->sec_addr[i] += (uint64_t)(uintptr_t)l->base;
    }
    return true;
}

/* ---- Symbols ----------------------------------------------------------------------------- */

static bool sym_value(loader *l, uint32_t index, uint64_t *out)
{
    Elf64_Sym s = symbol(l, index);
    if (s.st_shndx == SHN_UNDEF) {
        const char *name = sym_name(l, &s);
        if (!name || !*name)
            return failf(l, "relocation against an undefined symbol without a name");
        void *addr = dlsym(RTLD_DEFAULT, name);
        if (!addr)
            return failf(l, "unresolved external symbol %s", name);
        *out = (uint64_t)(uintptr_t)addr;
        return true;
    }
    if (s.st_shndx == SHN_ABS) {
        *out = s.st_value;
        return true;
    }
    if (s.st_shndx >= SHN_LORESERVE || s.st_shndx >= l->eh.e_shnum)
        return failf(l, "symbol %u in section %u", index, s.st_shndx);
    if (!l->sec_addr[s.st_shndx])
        return failf(l, "symbol %u is in section %u, which is not loaded", index, s.st_shndx);
    if (s.st_value > l->sh[s.st_shndx].sh_size)
        return failf(l, "symbol %u lies past the end of its section", index);
    *out = l->sec_addr[s.st_shndx] + s.st_value;
    return true;
}

/* ---- Applying relocations ---------------------------------------------------------------- */

static bool put32(loader *l, unsigned char *p, int64_t v, bool is_signed, uint32_t type)
{
    if (is_signed ? (v < INT32_MIN || v > INT32_MAX) : (v < 0 || v > (int64_t)UINT32_MAX))
        return failf(l, "relocation type %u does not reach its target (%lld)", type, (long long)v);
    uint32_t u = (uint32_t)(uint64_t)v;
    memcpy(p, &u, sizeof u);
    return true;
}

static uint64_t trampoline(loader *l, uint32_t sym, uint64_t dest)
{
    unsigned char *t = l->base + l->plt_off + (uint64_t)l->plt_slot[sym] * TRAMPOLINE_SIZE;
    static const unsigned char jmp[6] = {0xff, 0x25, 0, 0, 0, 0}; /* jmp *0(%rip) */
    memcpy(t, jmp, sizeof jmp);
    memcpy(t + 6, &dest, sizeof dest);
    memset(t + 14, 0xcc, TRAMPOLINE_SIZE - 14);
    return (uint64_t)(uintptr_t)t;
}

static bool apply(loader *l, const Elf64_Shdr *target, int ti, const Elf64_Rela *r)
{
    uint32_t sym = (uint32_t)ELF64_R_SYM(r->r_info), type = (uint32_t)ELF64_R_TYPE(r->r_info);
    if (type == R_X86_64_NONE)
        return true;
    int width =
        (type == R_X86_64_64 || type == R_X86_64_PC64 || type == R_X86_64_GOTOFF64 || type == R_X86_64_GOTPC64) ? 8 : 4;
    if (r->r_offset > target->sh_size || target->sh_size - r->r_offset < (uint64_t)width)
        return failf(l, "relocation at %llu patches past the end of section %d", (unsigned long long)r->r_offset, ti);
    if (target->sh_type == SHT_NOBITS)
        return failf(l, "relocation patches section %d, which has no contents", ti);
    uint64_t S = 0;
    if (!sym_value(l, sym, &S))
        return false;
    uint64_t P = l->sec_addr[ti] + r->r_offset, A = (uint64_t)r->r_addend;
    uint64_t got = (uint64_t)(uintptr_t)l->base + l->got_off;
    unsigned char *p = l->base + (P - (uint64_t)(uintptr_t)l->base);
    switch (type) {
    case R_X86_64_64: {
        uint64_t v = S + A;
        memcpy(p, &v, sizeof v);
        return true;
    }
    case R_X86_64_PC64:
    case R_X86_64_GOTOFF64:
    case R_X86_64_GOTPC64: {
        uint64_t v = type == R_X86_64_PC64 ? S + A - P : type == R_X86_64_GOTOFF64 ? S + A - got : got + A - P;
        memcpy(p, &v, sizeof v);
        return true;
    }
    case R_X86_64_PC32:
    case R_X86_64_PLT32:
        if (l->plt_slot[sym] >= 0)
            S = trampoline(l, sym, S); /* an external function: call it through its trampoline */
        return put32(l, p, (int64_t)(S + A - P), true, type);
    case R_X86_64_GOTPCREL:
    case R_X86_64_GOTPCRELX:
    case R_X86_64_REX_GOTPCRELX: {
        uint64_t slot = got + (uint64_t)l->got_slot[sym] * 8;
        memcpy(l->base + (slot - (uint64_t)(uintptr_t)l->base), &S, sizeof S);
        return put32(l, p, (int64_t)(slot + A - P), true, type);
    }
    case R_X86_64_GOTPC32: return put32(l, p, (int64_t)(got + A - P), true, type);
    case R_X86_64_32: return put32(l, p, (int64_t)(S + A), false, type);
    case R_X86_64_32S: return put32(l, p, (int64_t)(S + A), true, type);
    default: return failf(l, "relocation type %u is not supported", type);
    }
}

/* ---- The kernel's functions -------------------------------------------------------------- */

/* The address of a global function defined in an executable section, or NULL. */
static void *find_function(loader *l, const char *name)
{
    for (Elf64_Xword i = 1; i < l->n_syms; i++) {
        Elf64_Sym s = symbol(l, i);
        const char *n = sym_name(l, &s);
        if (!n || strcmp(n, name) != 0 || ELF64_ST_BIND(s.st_info) != STB_GLOBAL ||
            ELF64_ST_TYPE(s.st_info) != STT_FUNC)
            continue;
        if (s.st_shndx == SHN_UNDEF || s.st_shndx >= l->eh.e_shnum || !l->sec_addr[s.st_shndx] ||
            !(l->sh[s.st_shndx].sh_flags & SHF_EXECINSTR) || s.st_value >= l->sh[s.st_shndx].sh_size)
            return NULL;
        return (void *)(uintptr_t)(l->sec_addr[s.st_shndx] + s.st_value);
    }
    return NULL;
}

static bool protect(loader *l)
{
    if (mprotect(l->base, l->exec_size, PROT_READ | PROT_EXEC) != 0 ||
        (l->ro_end > l->exec_size && mprotect(l->base + l->exec_size, l->ro_end - l->exec_size, PROT_READ) != 0))
        return failf(l, "mprotect failed");
    return true;
}

static bool load(loader *l, cg_cpu_kernel *out)
{
    if (!check_header(l) || !check_sections(l))
        return false;
    l->got_slot = malloc((size_t)l->n_syms * sizeof *l->got_slot + 1);
    l->plt_slot = malloc((size_t)l->n_syms * sizeof *l->plt_slot + 1);
    if (!l->got_slot || !l->plt_slot)
        return failf(l, "out of memory for %llu symbols", (unsigned long long)l->n_syms);
    memset(l->got_slot, 0xff, (size_t)l->n_syms * sizeof *l->got_slot);
    memset(l->plt_slot, 0xff, (size_t)l->n_syms * sizeof *l->plt_slot);
    if (!for_each_rela(l, count_slots) || !layout_and_map(l) || !for_each_rela(l, apply))
        return false;
    void *rows = find_function(l, CG_SYM_ROWS);
    if (!rows)
        return failf(l, "no function %s", CG_SYM_ROWS);
    if (!protect(l))
        return false;
    out->rows = (__typeof__(out->rows))rows;
    out->leaves = (__typeof__(out->leaves))find_function(l, CG_SYM_LEAVES);
    out->finish = (__typeof__(out->finish))find_function(l, CG_SYM_FINISH);
    return true;
}

bool cg_object_load(const void *obj, size_t size, cg_cpu_kernel *out, char *err, size_t err_cap)
{
    if (!out)
        return false;
    memset(out, 0, sizeof *out);
    loader l = {.data = obj, .size = obj ? size : 0, .err = err, .cap = err_cap};
    obj_image *img = malloc(sizeof *img);
    bool ok = img && load(&l, out);
    if (!img)
        failf(&l, "out of memory");
    free(l.sh);
    free(l.sec_addr);
    free(l.got_slot);
    free(l.plt_slot);
    if (!ok) {
        if (l.base)
            munmap(l.base, l.map_size);
        free(img);
        memset(out, 0, sizeof *out);
        return false;
    }
    img->base = l.base;
    img->size = l.map_size;
    out->impl = img;
    return true;
}

void cg_object_release(cg_cpu_kernel *k)
{
    if (!k || !k->impl)
        return;
    obj_image *img = k->impl;
    munmap(img->base, img->size);
    free(img);
    memset(k, 0, sizeof *k);
}
