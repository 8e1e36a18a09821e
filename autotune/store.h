/* The autotune store (DESIGN.md, step 4): tuned decisions kept in memory by the caller and
 * persistently here, in an SQLite database `autotune.sqlite` in the cache directory
 * (BURNC_CACHE_DIR, else $XDG_CACHE_HOME/burnc, else ~/.cache/burnc).
 *
 * - WAL journal mode and a busy timeout, so several processes (and threads, each with its own
 *   connection or through the store's lock) read and write it at once without losing entries.
 * - A database the user cannot write (a shipped, pre-warmed store; a read-only file or
 *   directory) opens read-only: gets work, puts fail with BURNC_ERR_UNAVAILABLE and change
 *   nothing.
 * - A damaged database (not SQLite, a failed integrity check, an unknown schema) is renamed to
 *   `autotune.sqlite.damaged-<unix time>` with a warning through rt_log("autotune", ...) and an
 *   empty one is created in its place.
 * - Every record carries the checksum of its family's candidate set: a get with another
 *   checksum misses (the set changed, the decision is stale) and a later put replaces it.
 *
 * One record per (fingerprint, family, key). All functions are thread-safe. */
#ifndef BURNC_AT_STORE_H
#define BURNC_AT_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "burnc.h"

enum { AT_TEXT_MAX = 512 };

typedef struct at_store at_store;

typedef struct at_record {
    char fingerprint[AT_TEXT_MAX]; /* the hardware and software it was tuned on */
    char family[64];               /* kernel family: "cpu.elementwise", "cpu.rows", ... */
    char key[AT_TEXT_MAX];         /* structure, bucketed shape, dtypes, layout (at_key text) */
    char config[128];              /* the chosen candidate's name, e.g. "w16 task65536 stream1" */
    uint64_t set_checksum;         /* checksum of the family's candidate set */
    double best_ms;                /* the chosen candidate's median time */
    double heuristic_ms;           /* the heuristic's median time (0: not measured) */
    int64_t created;               /* unix time of the tuning */
} at_record;

/* Opens (creating if needed, with the directory's mode 0700) the store at `path`; NULL means
 * <cache dir>/autotune.sqlite. read_only forces read-only use. On failure returns a status with
 * the message set (rt_fail) and *out = NULL. */
burnc_status_t at_store_open(const char *path, bool read_only, at_store **out);
void at_store_close(at_store *s);
bool at_store_read_only(const at_store *s);
const char *at_store_path(const at_store *s);

/* The record for (fingerprint, family, key) whose set checksum is set_checksum: *found says
 * whether there is one (a record with another checksum is not found). */
burnc_status_t at_store_get(at_store *s, const char *fingerprint, const char *family, const char *key,
                            uint64_t set_checksum, at_record *out, bool *found);
/* Inserts or replaces the record with r's (fingerprint, family, key). */
burnc_status_t at_store_put(at_store *s, const at_record *r);
/* Calls fn for every record of `fingerprint` (NULL: all), ordered by family then key; stops
 * early when fn returns nonzero. *n (may be NULL) gets the number of records visited. */
burnc_status_t at_store_foreach(at_store *s, const char *fingerprint, int (*fn)(void *user, const at_record *r),
                                void *user, int *n);
/* Removes every record of `fingerprint` (NULL: all); *n (may be NULL) gets how many. */
burnc_status_t at_store_clear(at_store *s, const char *fingerprint, int *n);

/* Writes the records of `fingerprint` to `file` in a text format that at_store_import reads
 * (a header line naming the format and the fingerprint, then one record per line, fields
 * tab-separated with tabs, newlines and backslashes escaped). */
burnc_status_t at_store_export(at_store *s, const char *fingerprint, const char *file, int *n);
/* Reads a file written by at_store_export into the store. A file made on another fingerprint
 * than `fingerprint` is refused with BURNC_ERR_INVALID_ARGUMENT naming both, unless force (then
 * its records are stored under `fingerprint`). A malformed file is refused with the line
 * number, and nothing is imported. *n (may be NULL) gets the number of records imported. */
burnc_status_t at_store_import(at_store *s, const char *fingerprint, const char *file, bool force, int *n);

#endif
