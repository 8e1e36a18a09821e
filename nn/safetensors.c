/* safetensors files: an 8-byte little-endian header length, a JSON header, packed tensor bytes.
 * The reader trusts nothing in the file: every length, offset and shape is checked before use,
 * so a damaged file gives an error naming what is wrong, never a crash. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

/* Tensor data is written and read as the host's bytes: safetensors is little-endian. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

#define ST_HEADER_MAX (100u << 20) /* the reference implementation's limit */
#define ST_NAME_MAX 255

static const struct {
    const char *name;
    burnc_dtype_t dtype;
} st_dtypes[] = {
    {"F64", BURNC_DTYPE_F64}, {"F32", BURNC_DTYPE_F32}, {"F16", BURNC_DTYPE_F16}, {"BF16", BURNC_DTYPE_BF16},
    {"I64", BURNC_DTYPE_I64}, {"I32", BURNC_DTYPE_I32}, {"U8", BURNC_DTYPE_U8},   {"BOOL", BURNC_DTYPE_BOOL},
};

static const char *st_dtype_name(burnc_dtype_t dt)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof *st_dtypes; i++)
        if (st_dtypes[i].dtype == dt)
            return st_dtypes[i].name;
    return NULL;
}

/* ---- Writing ----------------------------------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void putf(sbuf *b, const char *fmt, long long v)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, fmt, v);
    put(b, tmp, (size_t)n);
}

static void put_json_string(sbuf *b, const char *s)
{
    put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(b, e, 2);
        } else if (c < 0x20) {
            putf(b, "\\u%04llx", c);
        } else {
            put(b, s, 1);
        }
    }
    put(b, "\"", 1);
}

/* The JSON header of p (padded with spaces to make the data start 8-byte aligned). */
static burnc_status_t build_header(const burnc_params_t *p, sbuf *h)
{
    uint64_t off = 0;
    put(h, "{", 1);
    for (int i = 0; i < burnc_params_count(p); i++) {
        burnc_tensor_t *t = nn_params_at(p, i);
        const char *dn = st_dtype_name(burnc_tensor_dtype(t));
        if (!dn)
            return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_safetensors_save: \"%s\" has dtype %s",
                           burnc_params_name(p, i), burnc_dtype_name(burnc_tensor_dtype(t)));
        uint64_t bytes = (uint64_t)burnc_tensor_numel(t) * burnc_dtype_size(burnc_tensor_dtype(t));
        if (i)
            put(h, ",", 1);
        put_json_string(h, burnc_params_name(p, i));
        put(h, ":{\"dtype\":\"", 11);
        put(h, dn, strlen(dn));
        put(h, "\",\"shape\":[", 11);
        for (int d = 0; d < burnc_tensor_rank(t); d++)
            putf(h, d ? ",%lld" : "%lld", (long long)burnc_tensor_shape(t)[d]);
        putf(h, "],\"data_offsets\":[%lld,", (long long)off);
        putf(h, "%lld]}", (long long)(off + bytes));
        off += bytes;
    }
    put(h, "}", 1);
    while (!h->oom && h->n % 8)
        put(h, " ", 1);
    return h->oom ? rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_safetensors_save: out of memory for the header")
                  : BURNC_OK;
}

static burnc_status_t write_all(FILE *f, const char *path, const void *data, size_t n)
{
    if (n && fwrite(data, 1, n, f) != n)
        return rt_fail(BURNC_ERR_EXECUTION, "burnc_safetensors_save: cannot write %s: %s", path, strerror(errno));
    return BURNC_OK;
}

static burnc_status_t write_file(const burnc_params_t *p, const char *path, FILE *f, const sbuf *h)
{
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)h->n >> (8 * i));
    RT_TRY(write_all(f, path, len, 8));
    RT_TRY(write_all(f, path, h->s, h->n));
    for (int i = 0; i < burnc_params_count(p); i++) {
        burnc_tensor_t *t = nn_params_at(p, i);
        size_t bytes = (size_t)burnc_tensor_numel(t) * burnc_dtype_size(burnc_tensor_dtype(t));
        void *host = malloc(bytes ? bytes : 1);
        if (!host)
            return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_safetensors_save: %zu bytes for \"%s\"", bytes,
                           burnc_params_name(p, i));
        burnc_status_t s = burnc_tensor_read(t, host, bytes);
        if (s == BURNC_OK)
            s = write_all(f, path, host, bytes);
        free(host);
        RT_TRY(s);
    }
    return BURNC_OK;
}

burnc_status_t burnc_safetensors_save(const burnc_params_t *p, const char *path)
{
    if (!p || !path)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_safetensors_save: NULL %s", !p ? "set" : "path");
    sbuf h = {0};
    burnc_status_t s = build_header(p, &h);
    if (s != BURNC_OK) {
        free(h.s);
        return s;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(h.s);
        return rt_fail(BURNC_ERR_EXECUTION, "burnc_safetensors_save: cannot open %s: %s", path, strerror(errno));
    }
    s = write_file(p, path, f, &h);
    free(h.s);
    if (fclose(f) != 0 && s == BURNC_OK)
        s = rt_fail(BURNC_ERR_EXECUTION, "burnc_safetensors_save: cannot write %s: %s", path, strerror(errno));
    if (s != BURNC_OK)
        remove(path);
    return s;
}

/* ---- Reading: a small JSON parser for the header ----------------------------------------- */

typedef struct jp {
    const char *s, *end;
    const char *path;
} jp;

static burnc_status_t damaged(const jp *j, const char *what)
{
    return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_safetensors_load: %s is damaged: %s", j->path, what);
}

static void ws(jp *j)
{
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r'))
        j->s++;
}

static bool eat(jp *j, char c)
{
    ws(j);
    if (j->s < j->end && *j->s == c) {
        j->s++;
        return true;
    }
    return false;
}

static int hex4(const char *s)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A JSON string into out (NUL-terminated, at most cap - 1 bytes; out NULL: skipped). */
static burnc_status_t jstring(jp *j, char *out, size_t cap)
{
    if (!eat(j, '"'))
        return damaged(j, "a string was expected in the header");
    size_t n = 0;
    while (j->s < j->end && *j->s != '"') {
        char tmp[4];
        size_t k = 1;
        unsigned char c = (unsigned char)*j->s++;
        tmp[0] = (char)c;
        if (c < 0x20)
            return damaged(j, "a control character inside a header string");
        if (c == '\\') {
            if (j->s >= j->end)
                break;
            char e = *j->s++;
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e && simple) {
                static const char map[] = "\"\\/\b\f\n\r\t";
                tmp[0] = map[simple - "\"\\/bfnrt"];
            } else if (e == 'u' && j->end - j->s >= 4 && hex4(j->s) >= 0) {
                unsigned cp = (unsigned)hex4(j->s);
                j->s += 4;
                if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->s >= 6 && j->s[0] == '\\' && j->s[1] == 'u' &&
                    hex4(j->s + 2) >= 0xdc00 && hex4(j->s + 2) < 0xe000) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + ((unsigned)hex4(j->s + 2) - 0xdc00);
                    j->s += 6;
                }
                if (cp == 0)
                    return damaged(j, "a NUL character inside a header string");
                k = utf8(tmp, cp);
            } else {
                return damaged(j, "a bad escape inside a header string");
            }
        }
        if (out && n + k >= cap)
            return damaged(j, "a name longer than 255 bytes");
        if (out)
            memcpy(out + n, tmp, k);
        n += k;
    }
    if (!eat(j, '"'))
        return damaged(j, "an unterminated string in the header");
    if (out)
        out[n] = '\0';
    return BURNC_OK;
}

/* A non-negative integer (shapes and offsets). */
static burnc_status_t juint(jp *j, uint64_t *out)
{
    ws(j);
    if (j->s >= j->end || *j->s < '0' || *j->s > '9')
        return damaged(j, "a shape or offset that is not a non-negative integer");
    uint64_t v = 0;
    while (j->s < j->end && *j->s >= '0' && *j->s <= '9') {
        if (v > (UINT64_MAX - 9) / 10)
            return damaged(j, "an integer past 2^64 in the header");
        v = v * 10 + (uint64_t)(*j->s++ - '0');
    }
    if (j->s < j->end && (*j->s == '.' || *j->s == 'e' || *j->s == 'E'))
        return damaged(j, "a shape or offset that is not an integer");
    *out = v;
    return BURNC_OK;
}

static burnc_status_t jskip(jp *j, int depth)
{
    if (depth > 64)
        return damaged(j, "the header nests too deeply");
    ws(j);
    if (j->s >= j->end)
        return damaged(j, "the header ends early");
    char c = *j->s;
    if (c == '"')
        return jstring(j, NULL, 0);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->s++;
        if (eat(j, close))
            return BURNC_OK;
        do {
            if (c == '{') {
                RT_TRY(jstring(j, NULL, 0));
                if (!eat(j, ':'))
                    return damaged(j, "':' expected in the header");
            }
            RT_TRY(jskip(j, depth + 1));
        } while (eat(j, ','));
        return eat(j, close) ? BURNC_OK : damaged(j, "',' or a closing bracket expected in the header");
    }
    const char *start = j->s;
    /* numbers and literals: checked loosely, as their values are never used */
    while (j->s < j->end && *j->s && (strchr("+-.E", *j->s) || (*j->s >= '0' && *j->s <= '9') ||
                                      (*j->s >= 'a' && *j->s <= 'z')))
        j->s++;
    size_t n = (size_t)(j->s - start);
    bool number = n && (start[0] == '-' || (start[0] >= '0' && start[0] <= '9'));
    if (!number && !(n == 4 && !memcmp(start, "true", 4)) && !(n == 5 && !memcmp(start, "false", 5)) &&
        !(n == 4 && !memcmp(start, "null", 4)))
        return damaged(j, "a bad value in the header");
    return BURNC_OK;
}

typedef struct st_entry {
    char name[ST_NAME_MAX + 1];
    burnc_dtype_t dtype;
    int rank;
    int64_t shape[BURNC_MAX_RANK];
    uint64_t begin, end;
} st_entry;

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]} */
static burnc_status_t jentry(jp *j, st_entry *e)
{
    bool have_dtype = false, have_shape = false, have_off = false;
    if (!eat(j, '{'))
        return damaged(j, "a tensor entry is not an object");
    if (eat(j, '}'))
        return damaged(j, "an empty tensor entry");
    do {
        char key[ST_NAME_MAX + 1], dn[16];
        RT_TRY(jstring(j, key, sizeof key));
        if (!eat(j, ':'))
            return damaged(j, "':' expected in a tensor entry");
        if (!strcmp(key, "dtype")) {
            if (jstring(j, dn, sizeof dn) != BURNC_OK)
                return damaged(j, "a dtype that is not a short string");
            have_dtype = false;
            for (size_t i = 0; i < sizeof st_dtypes / sizeof *st_dtypes; i++)
                if (!strcmp(dn, st_dtypes[i].name)) {
                    e->dtype = st_dtypes[i].dtype;
                    have_dtype = true;
                }
            if (!have_dtype)
                return rt_fail(BURNC_ERR_UNSUPPORTED_DTYPE, "burnc_safetensors_load: %s: \"%s\" has dtype %s",
                               j->path, e->name, dn);
        } else if (!strcmp(key, "shape")) {
            if (!eat(j, '['))
                return damaged(j, "a shape that is not an array");
            e->rank = 0;
            if (!eat(j, ']')) {
                do {
                    uint64_t v;
                    RT_TRY(juint(j, &v));
                    if (e->rank == BURNC_MAX_RANK)
                        return damaged(j, "a shape of more than 8 dimensions");
                    if (v > INT64_MAX)
                        return damaged(j, "a dimension past 2^63");
                    e->shape[e->rank++] = (int64_t)v;
                } while (eat(j, ','));
                if (!eat(j, ']'))
                    return damaged(j, "a shape array that does not close");
            }
            have_shape = true;
        } else if (!strcmp(key, "data_offsets")) {
            if (!eat(j, '['))
                return damaged(j, "data_offsets that is not an array");
            RT_TRY(juint(j, &e->begin));
            if (!eat(j, ','))
                return damaged(j, "data_offsets without two entries");
            RT_TRY(juint(j, &e->end));
            if (!eat(j, ']'))
                return damaged(j, "data_offsets without exactly two entries");
            have_off = true;
        } else {
            RT_TRY(jskip(j, 1));
        }
    } while (eat(j, ','));
    if (!eat(j, '}'))
        return damaged(j, "a tensor entry that does not close");
    if (!have_dtype || !have_shape || !have_off)
        return damaged(j, "a tensor entry lacks dtype, shape or data_offsets");
    return BURNC_OK;
}

/* The header into entries (*out, *n), in file order. */
static burnc_status_t parse_header(jp *j, st_entry **out, int *n)
{
    int cap = 0;
    *out = NULL;
    *n = 0;
    if (!eat(j, '{'))
        return damaged(j, "the header is not a JSON object");
    if (eat(j, '}'))
        goto done;
    do {
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            st_entry *p = realloc(*out, (size_t)cap * sizeof *p);
            if (!p)
                return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_safetensors_load: out of memory for the header");
            *out = p;
        }
        st_entry *e = &(*out)[*n];
        memset(e, 0, sizeof *e);
        RT_TRY(jstring(j, e->name, sizeof e->name));
        if (!eat(j, ':'))
            return damaged(j, "':' expected after a name");
        if (!strcmp(e->name, "__metadata__")) {
            RT_TRY(jskip(j, 1));
            continue;
        }
        if (e->name[0] == '\0')
            return damaged(j, "an empty tensor name");
        for (int i = 0; i < *n; i++)
            if (!strcmp((*out)[i].name, e->name)) {
                char why[ST_NAME_MAX + 40];
                snprintf(why, sizeof why, "the name \"%s\" appears twice", e->name);
                return damaged(j, why);
            }
        RT_TRY(jentry(j, e));
        (*n)++;
    } while (eat(j, ','));
    if (!eat(j, '}'))
        return damaged(j, "the header object does not close");
done:
    ws(j);
    if (j->s != j->end)
        return damaged(j, "bytes after the header's JSON object");
    return BURNC_OK;
}

static int by_offset(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    /* an empty tensor sits before a tensor that starts where it does */
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Offsets agree with dtype and shape, and tile the data area exactly (no hole, no overlap). */
static burnc_status_t check_layout(const jp *j, st_entry *e, int n, uint64_t data_bytes)
{
    if (n > 1)
        qsort(e, (size_t)n, sizeof *e, by_offset);
    uint64_t at = 0;
    char why[ST_NAME_MAX + 120];
    for (int i = 0; i < n; i++) {
        uint64_t bytes = burnc_dtype_size(e[i].dtype);
        for (int d = 0; d < e[i].rank; d++)
            if (__builtin_mul_overflow(bytes, (uint64_t)e[i].shape[d], &bytes)) {
                snprintf(why, sizeof why, "\"%s\" has more than 2^64 bytes", e[i].name);
                return damaged(j, why);
            }
        if (e[i].end < e[i].begin || e[i].end - e[i].begin != bytes) {
            snprintf(why, sizeof why, "\"%s\" has offsets [%llu, %llu) for %llu bytes of dtype and shape", e[i].name,
                     (unsigned long long)e[i].begin, (unsigned long long)e[i].end, (unsigned long long)bytes);
            return damaged(j, why);
        }
        if (e[i].begin != at) {
            snprintf(why, sizeof why, "\"%s\" starts at %llu, not at %llu (tensors overlap or leave a hole)",
                     e[i].name, (unsigned long long)e[i].begin, (unsigned long long)at);
            return damaged(j, why);
        }
        at = e[i].end;
    }
    if (at != data_bytes) {
        snprintf(why, sizeof why, "the tensors cover %llu bytes of the %llu after the header", (unsigned long long)at,
                 (unsigned long long)data_bytes);
        return damaged(j, why);
    }
    return BURNC_OK;
}

static burnc_status_t read_file(const char *path, unsigned char **out, size_t *size)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return rt_fail(BURNC_ERR_EXECUTION, "burnc_safetensors_load: cannot open %s: %s", path, strerror(errno));
    burnc_status_t s = BURNC_OK;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        len = ftell(f);
    if (len < 0 || fseek(f, 0, SEEK_SET) != 0) {
        s = rt_fail(BURNC_ERR_EXECUTION, "burnc_safetensors_load: cannot read %s: %s", path, strerror(errno));
    } else if (!(*out = malloc((size_t)len + 1))) {
        s = rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_safetensors_load: %ld bytes for %s", len, path);
    } else if (fread(*out, 1, (size_t)len, f) != (size_t)len) {
        s = rt_fail(BURNC_ERR_EXECUTION, "burnc_safetensors_load: cannot read %s: %s", path,
                    ferror(f) ? strerror(errno) : "it changed while being read");
    }
    fclose(f);
    *size = len > 0 ? (size_t)len : 0;
    return s;
}

/* One tensor from the file's bytes (copied: from_data wants aligned data). */
static burnc_status_t add_tensor(burnc_params_t *p, burnc_device_t *dev, const jp *j, const st_entry *e,
                                 const unsigned char *data)
{
    size_t bytes = (size_t)(e->end - e->begin);
    if (e->dtype == BURNC_DTYPE_BOOL)
        for (size_t k = 0; k < bytes; k++)
            if (data[e->begin + k] > 1) {
                char why[ST_NAME_MAX + 60];
                snprintf(why, sizeof why, "BOOL tensor \"%s\" holds the byte %u", e->name, data[e->begin + k]);
                return damaged(j, why);
            }
    void *copy = malloc(bytes ? bytes : 1);
    if (!copy)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_safetensors_load: %zu bytes for \"%s\"", bytes, e->name);
    memcpy(copy, data + e->begin, bytes);
    burnc_tensor_t *t = burnc_tensor_from_data(dev, e->dtype, e->rank, e->shape, copy);
    free(copy);
    int slot = t ? burnc_params_add(p, e->name, t) : -1;
    burnc_tensor_release(t);
    return slot >= 0 ? BURNC_OK : burnc_error_code();
}

static burnc_status_t load(burnc_params_t *p, burnc_device_t *dev, const char *path)
{
    unsigned char *buf;
    size_t size = 0;
    st_entry *e = NULL;
    int n = 0;
    jp j = {.path = path};
    burnc_status_t s = read_file(path, &buf, &size);
    if (s != BURNC_OK)
        goto out;
    uint64_t hlen = 0;
    for (int i = 0; i < 8 && size >= 8; i++)
        hlen |= (uint64_t)buf[i] << (8 * i);
    if (size < 8) {
        s = damaged(&j, "shorter than the 8-byte header length");
    } else if (hlen > ST_HEADER_MAX || hlen > size - 8) {
        char why[120];
        snprintf(why, sizeof why, "a header of %llu bytes in a file of %zu", (unsigned long long)hlen, size);
        s = damaged(&j, why);
    } else {
        j.s = (const char *)buf + 8;
        j.end = j.s + hlen;
        s = parse_header(&j, &e, &n);
        if (s == BURNC_OK)
            s = check_layout(&j, e, n, size - 8 - hlen);
        for (int i = 0; i < n && s == BURNC_OK; i++)
            s = add_tensor(p, dev, &j, &e[i], buf + 8 + hlen);
    }
out:
    free(e);
    free(buf);
    return s;
}

burnc_params_t *burnc_safetensors_load(burnc_device_t *dev, const char *path)
{
    if (!dev || !path) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT, "burnc_safetensors_load: NULL %s", !dev ? "device" : "path");
        return NULL;
    }
    burnc_params_t *p = burnc_params_new();
    if (!p)
        return NULL;
    rt_scope_suspend();
    burnc_status_t s = load(p, dev, path);
    rt_scope_resume();
    if (s != BURNC_OK) {
        burnc_params_release(p);
        return NULL;
    }
    return p;
}
