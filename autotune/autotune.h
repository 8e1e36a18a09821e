/* Autotune (DESIGN.md, steps 4 and 5): which candidate of a kernel family runs a given launch.
 *
 * A family (e.g. "cpu.elementwise") declares its candidates by stable names ("w16 t65536 s0").
 * A query names the hardware (the fingerprint: device model, ISA or driver features, core
 * count, LLVM and burnc versions), the family and a key (the kernel's structure, its shape
 * rounded into buckets, dtypes and layout), plus the candidates valid for the exact shape and
 * the heuristic choice. at_decide answers from memory, then from the persistent store
 * (autotune/store.h), else by the mode:
 *   BURNC_AUTOTUNE=off     the heuristic, always (the store is not even opened);
 *   BURNC_AUTOTUNE=cached  (default) stored decisions, the heuristic on a miss: no launch ever
 *                          pays for tuning, so first-call latency stays that of a compile;
 *   BURNC_AUTOTUNE=on      a miss is tuned on the spot: every valid candidate is timed through
 *                          the caller's callback (which runs it on private buffers), a warm-up
 *                          then up to AT_SAMPLES samples, medians compared; candidates slower
 *                          than AT_DROP times the best so far are dropped after one sample; a
 *                          key stops sampling when its budget (BURNC_AUTOTUNE_BUDGET_MS, default
 *                          2000) is spent. The heuristic stays unless the best candidate is
 *                          AT_MARGIN faster. The choice is kept in memory and in the store.
 * BURNC_AUTOTUNE_BUCKETS=pow2 (default) rounds each extent up to a power of two; =exact keeps
 * shapes as they are. BURNC_AUTOTUNE_RECORD=FILE appends every launch line handed to
 * at_record_line (once per distinct line per process), for `burnc-tune --file FILE`.
 *
 * Thread-safe. A remembered decision costs one hash lookup under a lock (well under 1 us). */
#ifndef BURNC_AUTOTUNE_H
#define BURNC_AUTOTUNE_H

#include <stdbool.h>
#include <stdint.h>

#include "store.h"

typedef enum at_mode { AT_MODE_OFF, AT_MODE_CACHED, AT_MODE_ON } at_mode;
typedef enum at_buckets { AT_BUCKETS_POW2, AT_BUCKETS_EXACT } at_buckets;

enum { AT_MAX_CANDIDATES = 64, AT_SAMPLES = 5 };
#define AT_DROP 1.5 /* a candidate this much slower than the best after one sample is dropped */
#define AT_MARGIN 1.05 /* the heuristic stays unless a candidate is this much faster: closer
                          than that is this kind of machine's noise, not a gain */

/* The mode: an override set with at_set_mode, else BURNC_AUTOTUNE (read once). */
at_mode at_get_mode(void);
/* Overrides the mode for the process (-1: back to the environment's). */
void at_set_mode(int mode);
const char *at_mode_name(at_mode m);
/* Parses "off", "cached" or "on"; false for anything else. */
bool at_parse_mode(const char *s, at_mode *out);

at_buckets at_get_buckets(void);
/* n rounded into its bucket: the next power of two (0 and 1 stay), or n itself. */
int64_t at_bucket(int64_t n, at_buckets b);

typedef struct at_family {
    const char *name;
    int n;                    /* candidates, at most AT_MAX_CANDIDATES */
    const char *const *names; /* their stable names */
} at_family;

/* A checksum of the family's name and candidate names: a stored decision made against another
 * candidate set is stale. */
uint64_t at_family_checksum(const at_family *f);

typedef struct at_query {
    const char *fingerprint;
    const at_family *family;
    const char *key;
    int heuristic;      /* the candidate to use without a decision (valid) */
    const bool *valid;  /* [family->n]: valid for the exact shape; NULL: all */
} at_query;

/* One timed run of candidate c, in ms; negative when it cannot run (it is then dropped). */
typedef double (*at_time_fn)(void *user, int c);

typedef struct at_outcome {
    int choice;
    bool tuned;          /* timed just now */
    bool stored;         /* from the store or written to it */
    double best_ms, heuristic_ms; /* when tuned (heuristic_ms 0 when it was not valid) */
    int timed;           /* candidates timed at least once */
} at_outcome;

/* The candidate for q (see above). time may be NULL when the caller cannot time (then a miss
 * gives the heuristic whatever the mode). out may be NULL. */
int at_decide(const at_query *q, at_time_fn time, void *user, at_outcome *out);
/* Forgets the decisions remembered in memory (the store keeps its own). */
void at_forget(void);
/* Calls fn for every decision at_decide makes that is not answered from memory (NULL: none);
 * burnc-tune lists what it tuned with it. One observer per process. */
void at_set_observer(void (*fn)(void *user, const at_query *q, const at_outcome *o), void *user);

/* The process's store, opened on first use (NULL with the last error set when it cannot be;
 * never opened in mode off by at_decide). */
at_store *at_shared_store(void);
/* Closes the shared store (the next use reopens it): for tests and burnc-tune --clear. */
void at_close_shared_store(void);

/* BURNC_AUTOTUNE_RECORD: appends line (no newline) to the file, once per distinct line. */
void at_record_line(const char *line);

#endif
