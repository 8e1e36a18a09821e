/* Kernel IR as text: see kernel_io.h.
 *
 * After "kir1:" come two lowercase hex digits per byte of this serialization. Integers are
 * little-endian of the stated width, written a byte at a time from the values (never from the
 * structs' memory: neither padding nor the host's byte order can leak in); iN are two's
 * complement. The prefix is the version: a change of layout gets a new one.
 *
 *   kernel   u8 rank, u8 n_outer, u8 n_scalars
 *            u8 n_inputs,  per input:  u8 dtype, u8 stride class[rank]
 *            u8 n_outputs, per output: u8 dtype, u8 stride class[rank], u8 in_place
 *            u8 n_stages,  per stage:  u8 combiner, i32 value
 *            u8 n_stores,  per store:  i32 slot, i32 value, u8 row (0 or 1)
 *            u32 n_insts,  per inst:   u8 op, u8 type, i32 a, i32 b, i32 c, u64 imm (bits)
 *            u8 name length (< 64), the name's bytes (no NUL)
 *   layout   i64 extents[rank]
 *            per input:  i64 offset, i64 strides[rank]
 *            per output: i64 offset, i64 strides[rank]
 *            u8 n_scalars (<= 64), u64 scalars[n_scalars] (bits)
 *
 * That is every field kir_hash covers (stride classes beyond the rank and in_place beyond the
 * outputs are not structure and decode as 0), plus the name. The counts are bounded as the
 * structs are; n_insts by KIR_IO_MAX_INSTS. The decoder takes nothing else: a bool that is not
 * 0 or 1, a NUL in the name, uppercase hex or a trailing byte all fail, so a line has one
 * meaning and one spelling. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_io.h"

enum { KIR_IO_MAX_INSTS = 1 << 20, KIR_IO_MAX_SCALARS = 64, KIR_IO_INST_BYTES = 22 };

static const char PREFIX[] = "kir1:";
#define PREFIX_LEN (sizeof PREFIX - 1)

/* ---- Writing ----------------------------------------------------------------------------- */

/* Runs twice: first without a buffer to count the bytes, then to write them. */
typedef struct writer {
    char *p; /* NULL: count only */
    size_t n; /* bytes so far */
} writer;

static void put(writer *w, uint64_t v, int width)
{
    static const char HEX[] = "0123456789abcdef";
    for (int i = 0; i < width; i++, w->n++)
        if (w->p) {
            unsigned b = (unsigned)(v >> (8 * i)) & 0xffu;
            w->p[PREFIX_LEN + 2 * w->n] = HEX[b >> 4];
            w->p[PREFIX_LEN + 2 * w->n + 1] = HEX[b & 0xf];
        }
}

static void put_slots(writer *w, const kir_kernel *k, const kir_slot *slots, int n, bool outputs)
{
    put(w, (uint64_t)n, 1);
    for (int s = 0; s < n; s++) {
        put(w, (uint64_t)slots[s].dtype, 1);
        for (int d = 0; d < k->rank; d++)
            put(w, slots[s].stride[d], 1);
        if (outputs)
            put(w, k->in_place[s], 1);
    }
}

static void put_layout(writer *w, const int64_t *offsets, const int64_t *strides, int n, int rank)
{
    for (int s = 0; s < n; s++) {
        put(w, (uint64_t)offsets[s], 8);
        for (int d = 0; d < rank; d++)
            put(w, (uint64_t)strides[s * rank + d], 8);
    }
}

static void put_all(writer *w, const kir_kernel *k, const kir_layout *l, size_t name_len)
{
    put(w, (uint64_t)k->rank, 1);
    put(w, (uint64_t)k->n_outer, 1);
    put(w, (uint64_t)k->n_scalars, 1);
    put_slots(w, k, k->inputs, k->n_inputs, false);
    put_slots(w, k, k->outputs, k->n_outputs, true);
    put(w, (uint64_t)k->n_stages, 1);
    for (int s = 0; s < k->n_stages; s++) {
        put(w, k->stages[s].combiner, 1);
        put(w, (uint64_t)(int64_t)k->stages[s].value, 4);
    }
    put(w, (uint64_t)k->n_stores, 1);
    for (int s = 0; s < k->n_stores; s++) {
        put(w, (uint64_t)(int64_t)k->stores[s].slot, 4);
        put(w, (uint64_t)(int64_t)k->stores[s].value, 4);
        put(w, k->stores[s].row ? 1 : 0, 1);
    }
    put(w, (uint64_t)k->n_insts, 4);
    for (int i = 0; i < k->n_insts; i++) {
        const kir_inst *in = &k->insts[i];
        put(w, in->op, 1);
        put(w, in->type, 1);
        put(w, (uint64_t)(int64_t)in->a, 4);
        put(w, (uint64_t)(int64_t)in->b, 4);
        put(w, (uint64_t)(int64_t)in->c, 4);
        put(w, in->imm.u, 8);
    }
    put(w, name_len, 1);
    for (size_t i = 0; i < name_len; i++)
        put(w, (unsigned char)k->name[i], 1);
    for (int d = 0; d < k->rank; d++)
        put(w, (uint64_t)l->extents[d], 8);
    put_layout(w, l->in_offsets, l->in_strides, k->n_inputs, k->rank);
    put_layout(w, l->out_offsets, l->out_strides, k->n_outputs, k->rank);
    put(w, (uint64_t)l->n_scalars, 1);
    for (int s = 0; s < l->n_scalars; s++)
        put(w, l->scalars[s].u, 8);
}

char *kir_encode(const kir_kernel *k, const kir_layout *l)
{
    /* A kernel or layout the decoder would refuse is not written at all. */
    if (!k || !l || !kir_valid(k, NULL, 0) || k->n_scalars > KIR_IO_MAX_SCALARS ||
        k->n_insts > KIR_IO_MAX_INSTS || l->n_scalars < 0 || l->n_scalars > KIR_IO_MAX_SCALARS)
        return NULL;
    size_t name_len = strnlen(k->name, sizeof k->name - 1); /* an unterminated name is cut */
    writer w = {NULL, 0};
    put_all(&w, k, l, name_len);
    size_t len = PREFIX_LEN + 2 * w.n;
    char *text = malloc(len + 1);
    if (!text)
        return NULL;
    memcpy(text, PREFIX, PREFIX_LEN);
    w = (writer){text, 0};
    put_all(&w, k, l, name_len);
    text[len] = '\0';
    return text;
}

/* ---- Reading ----------------------------------------------------------------------------- */

typedef struct reader {
    const char *hex; /* the digits after the prefix, already checked */
    size_t n, pos;   /* in bytes */
    bool ok;         /* false after the first error, which is in why */
    char *why;
    size_t cap;
} reader;

static void rd_fail(reader *r, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rd_fail(reader *r, size_t at, const char *fmt, ...)
{
    if (!r->ok)
        return; /* keep the first reason */
    r->ok = false;
    if (!r->why || !r->cap)
        return;
    int w = snprintf(r->why, r->cap, "kir_decode: byte %zu: ", at);
    if (w < 0 || (size_t)w >= r->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why + w, r->cap - (size_t)w, fmt, ap);
    va_end(ap);
}

static unsigned hex_val(char c) { return c <= '9' ? (unsigned)(c - '0') : (unsigned)(c - 'a' + 10); }

/* An unsigned integer of `width` bytes; 0 once anything failed. */
static uint64_t get(reader *r, int width, const char *what)
{
    if (!r->ok)
        return 0;
    if (r->n - r->pos < (size_t)width) {
        rd_fail(r, r->pos, "truncated in %s (%d bytes needed, %zu left)", what, width, r->n - r->pos);
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < width; i++, r->pos++) {
        const char *h = r->hex + 2 * r->pos;
        v |= (uint64_t)(hex_val(h[0]) << 4 | hex_val(h[1])) << (8 * i);
    }
    return v;
}

/* Two's complement, without relying on how the compiler converts out-of-range values. */
static int64_t as_i64(uint64_t u) { return u <= INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1; }
static int32_t get_i32(reader *r, const char *what)
{
    uint64_t u = get(r, 4, what);
    return (int32_t)(u & 0x80000000u ? (int64_t)u - (INT64_C(1) << 32) : (int64_t)u);
}

/* A count of `width` bytes, at most max. */
static int get_count(reader *r, int width, int max, const char *what)
{
    size_t at = r->pos;
    uint64_t v = get(r, width, what);
    if (v > (uint64_t)max) {
        rd_fail(r, at, "%s %llu exceeds %d", what, (unsigned long long)v, max);
        return 0;
    }
    return (int)v;
}

static bool get_bool(reader *r, const char *what)
{
    size_t at = r->pos;
    uint64_t v = get(r, 1, what);
    if (v > 1)
        rd_fail(r, at, "%s is %llu, not 0 or 1", what, (unsigned long long)v);
    return v == 1;
}

static void get_slots(reader *r, kir_kernel *k, kir_slot *slots, int n, bool outputs)
{
    for (int s = 0; s < n && r->ok; s++) {
        slots[s].dtype = (burnc_dtype_t)get(r, 1, "slot dtype");
        for (int d = 0; d < k->rank; d++)
            slots[s].stride[d] = (uint8_t)get(r, 1, "stride class");
        if (outputs)
            k->in_place[s] = (uint8_t)get(r, 1, "in_place");
    }
}

static void get_layout(reader *r, int64_t *offsets, int64_t *strides, int n, int rank)
{
    for (int s = 0; s < n && r->ok; s++) {
        offsets[s] = as_i64(get(r, 8, "offset"));
        for (int d = 0; d < rank; d++)
            strides[s * rank + d] = as_i64(get(r, 8, "stride"));
    }
}

static void get_insts(reader *r, kir_kernel *k)
{
    size_t at = r->pos;
    int n = get_count(r, 4, KIR_IO_MAX_INSTS, "instruction count");
    /* checked before allocating, so that a damaged count cannot ask for a large array */
    if (r->ok && (r->n - r->pos) / KIR_IO_INST_BYTES < (size_t)n)
        rd_fail(r, at, "%d instructions need %zu bytes, %zu left", n, (size_t)n * KIR_IO_INST_BYTES,
                r->n - r->pos);
    for (int i = 0; i < n && r->ok; i++) {
        kir_opcode op = (kir_opcode)get(r, 1, "opcode");
        kir_type type = (kir_type)get(r, 1, "type");
        int32_t a = get_i32(r, "operand"), b = get_i32(r, "operand"), c = get_i32(r, "operand");
        uint64_t imm = get(r, 8, "immediate");
        /* through kir_emit, so the array and cap_insts are as building left them */
        int32_t j = kir_emit(k, op, type, a, b, c);
        if (j < 0)
            rd_fail(r, r->pos, "out of memory at instruction %d", i);
        else
            k->insts[j].imm.u = imm;
    }
}

static void get_kernel(reader *r, kir_kernel *k, kir_layout *l)
{
    int rank = get_count(r, 1, BURNC_MAX_RANK, "rank");
    int n_outer = (int)get(r, 1, "outer axis count");
    kir_init(k, rank, n_outer);
    k->n_scalars = get_count(r, 1, KIR_IO_MAX_SCALARS, "scalar count");
    k->n_inputs = get_count(r, 1, KIR_MAX_INPUTS, "input count");
    get_slots(r, k, k->inputs, k->n_inputs, false);
    k->n_outputs = get_count(r, 1, KIR_MAX_OUTPUTS, "output count");
    get_slots(r, k, k->outputs, k->n_outputs, true);
    k->n_stages = get_count(r, 1, KIR_MAX_STAGES, "stage count");
    for (int s = 0; s < k->n_stages && r->ok; s++) {
        k->stages[s].combiner = (uint8_t)get(r, 1, "combiner");
        k->stages[s].value = get_i32(r, "stage value");
    }
    k->n_stores = get_count(r, 1, KIR_MAX_OUTPUTS, "store count");
    for (int s = 0; s < k->n_stores && r->ok; s++) {
        k->stores[s].slot = get_i32(r, "store slot");
        k->stores[s].value = get_i32(r, "store value");
        k->stores[s].row = get_bool(r, "store row flag");
    }
    get_insts(r, k);
    int name_len = get_count(r, 1, (int)sizeof k->name - 1, "name length");
    for (int i = 0; i < name_len && r->ok; i++) {
        size_t at = r->pos;
        if (!(k->name[i] = (char)get(r, 1, "name")))
            rd_fail(r, at, "NUL in the name");
    }
    for (int d = 0; d < rank && r->ok; d++)
        l->extents[d] = as_i64(get(r, 8, "extent"));
    get_layout(r, l->in_offsets, l->in_strides, k->n_inputs, rank);
    get_layout(r, l->out_offsets, l->out_strides, k->n_outputs, rank);
    l->n_scalars = get_count(r, 1, KIR_IO_MAX_SCALARS, "layout scalar count");
    for (int s = 0; s < l->n_scalars && r->ok; s++)
        l->scalars[s].u = get(r, 8, "scalar");
    if (r->ok && r->pos != r->n)
        rd_fail(r, r->pos, "%zu trailing bytes", r->n - r->pos);
}

/* The text's own faults: prefix, length, digits. */
static bool check_text(const char *text, char *why, size_t cap)
{
    const char *err = NULL;
    size_t len = text ? strlen(text) : 0, bad = 0;
    if (!text)
        err = "no text";
    else if (strncmp(text, PREFIX, PREFIX_LEN) != 0)
        err = "it does not start with \"kir1:\"";
    else if ((len - PREFIX_LEN) % 2)
        err = "an odd number of hex digits";
    for (bad = PREFIX_LEN; !err && bad < len; bad++)
        if (!((text[bad] >= '0' && text[bad] <= '9') || (text[bad] >= 'a' && text[bad] <= 'f')))
            err = "a character that is not a lowercase hex digit";
    if (!err)
        return true;
    if (why && cap) {
        if (bad > PREFIX_LEN)
            snprintf(why, cap, "kir_decode: character %zu: %s", bad - 1, err);
        else
            snprintf(why, cap, "kir_decode: %s", err);
    }
    return false;
}

bool kir_decode(const char *text, kir_kernel *k, kir_layout *l, char *why, size_t cap)
{
    kir_init(k, 0, 0);
    memset(l, 0, sizeof *l);
    if (why && cap)
        why[0] = '\0';
    if (!check_text(text, why, cap))
        return false;
    reader r = {text + PREFIX_LEN, (strlen(text) - PREFIX_LEN) / 2, 0, true, why, cap};
    get_kernel(&r, k, l);
    char reason[200];
    if (r.ok && !kir_valid(k, reason, sizeof reason)) {
        r.ok = false;
        if (why && cap)
            snprintf(why, cap, "kir_decode: invalid kernel: %s", reason);
    }
    if (r.ok)
        return true;
    kir_free(k);
    kir_init(k, 0, 0);
    memset(l, 0, sizeof *l);
    return false;
}
