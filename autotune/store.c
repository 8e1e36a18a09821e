/* The autotune store: see store.h.
 *
 * One SQLite connection per store, serialized by the store's lock: a connection holds one
 * transaction at a time, so one thread's BEGIN ... COMMIT must not interleave with another
 * thread's statements. Processes, and several stores on one file, meet in SQLite's WAL locks. */
#define _GNU_SOURCE
#include "store.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "codegen/kcache.h"
#include "rt.h"

enum {
    AT_SCHEMA = 1,          /* PRAGMA user_version */
    AT_APP_ID = 0x4275544e, /* PRAGMA application_id ("BuTN"): the file is ours */
    AT_BUSY_MS = 5000,      /* how long a statement waits for another connection's lock */
    AT_BUSY_TRIES = 3,      /* BEGIN IMMEDIATE attempts, each after a full wait */
    AT_DAMAGED = -1,        /* not an SQLite code: the database is not a usable store */
};
#define AT_FILE "autotune.sqlite"
#define AT_FORMAT "burnc-autotune"
#define AT_COLUMNS "fingerprint, family, key, config, set_checksum, best_ms, heuristic_ms, created"

/* WITHOUT ROWID: records are only ever found by their primary key. */
static const char schema_sql[] =
    "CREATE TABLE autotune (fingerprint TEXT NOT NULL, family TEXT NOT NULL, key TEXT NOT NULL,"
    " config TEXT NOT NULL, set_checksum INTEGER NOT NULL, best_ms REAL NOT NULL,"
    " heuristic_ms REAL NOT NULL, created INTEGER NOT NULL,"
    " PRIMARY KEY (fingerprint, family, key)) WITHOUT ROWID;"
    "PRAGMA user_version = 1; PRAGMA application_id = 1114985550;";
_Static_assert(AT_SCHEMA == 1 && AT_APP_ID == 1114985550, "schema_sql spells these out");

struct at_store {
    mtx_t lock;
    sqlite3 *db;
    sqlite3_stmt *get, *put; /* the hot statements, prepared once */
    bool read_only;
    char *path;
};

/* ---- Files and directories --------------------------------------------------------------- */

static char *parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
}

/* Moves a damaged database and its WAL files to <path>.damaged-<unix time>, kept for a
 * post-mortem; returns the new name (malloc'ed), or NULL with errno. `opened` is the file this
 * process found damaged: when another process has replaced it already, nothing is moved. (A
 * race between this check and the rename can still move a fresh store aside: that only costs
 * a retune.) */
static char *quarantine(const char *path, const struct stat *opened)
{
    struct stat now;
    if (stat(path, &now) != 0 || now.st_ino != opened->st_ino || now.st_dev != opened->st_dev)
        return strdup("(moved by another process)");
    char *moved = NULL;
    if (asprintf(&moved, "%s.damaged-%lld", path, (long long)time(NULL)) < 0)
        return NULL;
    if (rename(path, moved) != 0) {
        free(moved);
        return NULL;
    }
    static const char *const companions[] = {"-wal", "-shm"};
    for (int i = 0; i < 2; i++) {
        char *from = NULL, *to = NULL;
        if (asprintf(&from, "%s%s", path, companions[i]) >= 0 && asprintf(&to, "%s%s", moved, companions[i]) >= 0)
            rename(from, to); /* ENOENT is the usual case */
        free(from);
        free(to);
    }
    return moved;
}

/* file:<path>?immutable=1 with the path percent-encoded, as SQLite's URI names want. */
static char *immutable_uri(const char *path)
{
    char *u = malloc(3 * strlen(path) + 32);
    if (!u)
        return NULL;
    char *p = stpcpy(u, "file:");
    for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
        bool plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                     strchr("/-_.~", *c);
        p += plain ? sprintf(p, "%c", *c) : sprintf(p, "%%%02X", *c);
    }
    strcpy(p, "?immutable=1");
    return u;
}

/* ---- SQLite helpers ---------------------------------------------------------------------- */

static burnc_status_t db_fail(const at_store *s, const char *fn, int rc)
{
    if (rc == SQLITE_NOMEM)
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "%s: out of memory in SQLite (%s)", fn, s->path);
    return rt_fail(BURNC_ERR_UNAVAILABLE, "%s: %s (%s)", fn, sqlite3_errmsg(s->db), s->path);
}

/* BEGIN IMMEDIATE takes the write lock up front: a transaction that reads first and upgrades
 * later gets SQLITE_BUSY without waiting when another process committed in between, and its
 * write would be lost. */
static int begin_write(sqlite3 *db)
{
    int rc = SQLITE_BUSY;
    for (int i = 0; i < AT_BUSY_TRIES && rc == SQLITE_BUSY; i++)
        rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    return rc;
}

/* COMMIT when rc is SQLITE_OK, else ROLLBACK, with the failure reported before the rollback
 * can replace SQLite's message. */
static burnc_status_t end_write(at_store *s, const char *fn, int rc)
{
    if (rc == SQLITE_OK && (rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL)) == SQLITE_OK)
        return BURNC_OK;
    burnc_status_t st = db_fail(s, fn, rc);
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

/* SQLite answers SQLITE_BUSY at once, without the busy handler, where waiting could deadlock,
 * as when two connections that both read a new file both switch it to WAL: one steps back and
 * tries again, for about the busy timeout. */
static int exec_stepping_back(sqlite3 *db, const char *sql)
{
    int rc;
    for (int i = 0; (rc = sqlite3_exec(db, sql, NULL, NULL, NULL)) == SQLITE_BUSY && i < AT_BUSY_MS / 10; i++)
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    return rc;
}

/* The first column of the first row of sql as text ("" without one). */
static int query_text(sqlite3 *db, const char *sql, char *out, size_t cap)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    const unsigned char *text = rc == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
    snprintf(out, cap, "%s", text ? (const char *)text : "");
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Keeps the text of the first failure while it is SQLite's last message (a ROLLBACK replaces
 * it), and turns the errors that mean "this file is not a database" into AT_DAMAGED. */
static int note(sqlite3 *db, int rc, char *why, size_t cap)
{
    if (rc == SQLITE_OK || rc == AT_DAMAGED)
        return rc;
    if (!why[0])
        snprintf(why, cap, "%s", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    return rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT ? AT_DAMAGED : rc;
}

/* Sets up a new connection and checks that the database is a store of ours, creating the
 * schema in an empty one. SQLITE_OK, an SQLite error or AT_DAMAGED, with `why`. */
static int db_check(at_store *s, char *why, size_t cap)
{
    sqlite3 *db = s->db;
    char version[32] = "", app[32] = "", objects[32] = "", check[256] = "";
    int rc = SQLITE_OK;
    if (!s->read_only) {
        rc = exec_stepping_back(db, "PRAGMA journal_mode=WAL");
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = begin_write(db); /* of two processes creating the schema, one does */
    }
    if (rc == SQLITE_OK)
        rc = query_text(db, "PRAGMA user_version", version, sizeof version);
    if (rc == SQLITE_OK)
        rc = query_text(db, "PRAGMA application_id", app, sizeof app);
    if (rc == SQLITE_OK)
        rc = query_text(db, "SELECT count(*) FROM sqlite_master", objects, sizeof objects);
    bool empty = !strcmp(version, "0") && !strcmp(app, "0") && !strcmp(objects, "0");
    if (rc == SQLITE_OK && empty && !s->read_only) {
        rc = sqlite3_exec(db, schema_sql, NULL, NULL, NULL);
    } else if (rc == SQLITE_OK && (empty || atoll(version) != AT_SCHEMA || atoll(app) != AT_APP_ID)) {
        snprintf(why, cap, "schema version %s, application id %s: not a burnc autotune store", version, app);
        rc = AT_DAMAGED;
    }
    rc = note(db, rc, why, cap);
    if (!sqlite3_get_autocommit(db)) {
        if (rc == SQLITE_OK)
            rc = note(db, sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), why, cap);
        if (rc != SQLITE_OK)
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK)
        rc = note(db, query_text(db, "PRAGMA quick_check(1)", check, sizeof check), why, cap);
    if (rc == SQLITE_OK && strcmp(check, "ok") != 0) {
        for (char *c = check; (c = strchr(c, '\n'));) /* kept to one line in the warning */
            *c = ' ';
        snprintf(why, cap, "integrity check: %s", check);
        rc = AT_DAMAGED;
    }
    /* Preparing the statements also checks the table's columns. */
    if (rc == SQLITE_OK) {
        rc = sqlite3_prepare_v2(db,
                                "SELECT " AT_COLUMNS " FROM autotune"
                                " WHERE fingerprint = ?1 AND family = ?2 AND key = ?3 AND set_checksum = ?4",
                                -1, &s->get, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO autotune (" AT_COLUMNS ") VALUES (?,?,?,?,?,?,?,?)", -1,
                                    &s->put, NULL);
        if (rc == SQLITE_ERROR) { /* no such table or column */
            snprintf(why, cap, "unknown schema: %s", sqlite3_errmsg(db));
            rc = AT_DAMAGED;
        }
    }
    return note(db, rc, why, cap);
}

/* Connects to s->path and checks it; `opened` gets the file's identity for quarantine. */
static int db_open(at_store *s, bool immutable, struct stat *opened, char *why, size_t cap)
{
    why[0] = '\0';
    int flags = SQLITE_OPEN_NOMUTEX; /* the store's lock serializes */
    flags |= s->read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    char *uri = immutable ? immutable_uri(s->path) : NULL;
    if (immutable && !uri)
        return SQLITE_NOMEM;
    int rc = sqlite3_open_v2(uri ? uri : s->path, &s->db, flags | (uri ? SQLITE_OPEN_URI : 0), NULL);
    free(uri);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(s->db, AT_BUSY_MS);
        if (stat(s->path, opened) != 0)
            memset(opened, 0, sizeof *opened);
        rc = db_check(s, why, cap);
    }
    return note(s->db, rc, why, cap);
}

static void db_close(at_store *s)
{
    sqlite3_finalize(s->get);
    sqlite3_finalize(s->put);
    sqlite3_close(s->db);
    s->get = s->put = NULL;
    s->db = NULL;
}

/* ---- Opening and closing ----------------------------------------------------------------- */

static burnc_status_t open_fail(at_store *s, burnc_status_t st)
{
    at_store_close(s);
    return st;
}

burnc_status_t at_store_open(const char *path, bool read_only, at_store **out)
{
    if (!out || (path && !*path))
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "at_store_open: %s", out ? "empty path" : "NULL out");
    *out = NULL;
    at_store *s = calloc(1, sizeof *s);
    if (!s || mtx_init(&s->lock, mtx_plain) != thrd_success) {
        free(s);
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "at_store_open: out of memory");
    }
    char why[512] = "";
    char *dir = path ? parent_dir(path) : kc_cache_dir(why, sizeof why);
    s->path = !dir ? NULL : path ? strdup(path) : kc_path_join(dir, AT_FILE);
    if (!s->path) {
        bool oom = dir || path;
        free(dir);
        return open_fail(s, rt_fail(oom ? BURNC_ERR_OUT_OF_MEMORY : BURNC_ERR_UNAVAILABLE, "at_store_open: %s",
                                    oom ? "out of memory" : why));
    }
    if (!read_only)
        kc_make_dirs(dir);
    bool dir_writable = false, trusted = kc_dir_trusted(dir, &dir_writable, why, sizeof why);
    free(dir);
    if (!trusted)
        return open_fail(s, rt_fail(BURNC_ERR_UNAVAILABLE, "at_store_open: cannot use the store's directory: %s", why));

    struct stat st;
    bool exists = stat(s->path, &st) == 0;
    if (exists && !S_ISREG(st.st_mode))
        return open_fail(s, rt_fail(BURNC_ERR_UNAVAILABLE, "at_store_open: %s is not a regular file", s->path));
    /* By the mode bit, as for the directory. */
    bool file_writable = !exists || ((st.st_mode & S_IWUSR) && access(s->path, W_OK) == 0);
    s->read_only = read_only || !dir_writable || !file_writable;
    if (s->read_only && !exists)
        return open_fail(s, rt_fail(BURNC_ERR_UNAVAILABLE,
                                    "at_store_open: %s does not exist and the store is read-only (%s)", s->path,
                                    read_only ? "as asked" : "its directory is not writable"));

    /* WAL readers share a -shm file beside the database; where it cannot be created, the file
     * is read as immutable, without locks: nobody can write it there. (Records still in a
     * -wal file copied along would be missed; closing the last connection merges them.) */
    struct stat opened;
    int rc = db_open(s, s->read_only && !dir_writable, &opened, why, sizeof why);
    if (rc == AT_DAMAGED && !s->read_only) {
        db_close(s);
        char *moved = quarantine(s->path, &opened);
        if (!moved)
            return open_fail(s, rt_fail(BURNC_ERR_UNAVAILABLE,
                                        "at_store_open: %s is damaged (%s) and cannot be moved aside: %s", s->path,
                                        why, strerror(errno)));
        /* Tuned decisions were lost: say so even with BURNC_LOG off, the way kcache reports
         * its refusals (through the log when it is on, else one line on stderr). */
        if (rt_log_enabled("autotune"))
            rt_log("autotune", "store %s is damaged (%s): moved to %s, starting empty", s->path, why, moved);
        else
            fprintf(stderr, "burnc: warning: autotune store %s is damaged (%s): moved to %s, starting empty\n", s->path,
                    why, moved);
        free(moved);
        rc = db_open(s, false, &opened, why, sizeof why);
    }
    if (rc == AT_DAMAGED)
        return open_fail(s, rt_fail(BURNC_ERR_UNAVAILABLE, "at_store_open: %s is damaged (%s)%s", s->path, why,
                                    s->read_only ? " and read-only: not used" : " even after moving it aside"));
    if (rc != SQLITE_OK)
        return open_fail(s, rt_fail(rc == SQLITE_NOMEM ? BURNC_ERR_OUT_OF_MEMORY : BURNC_ERR_UNAVAILABLE,
                                    "at_store_open: %s (%s)", why, s->path));
    *out = s;
    return BURNC_OK;
}

void at_store_close(at_store *s)
{
    if (!s)
        return;
    db_close(s);
    mtx_destroy(&s->lock);
    free(s->path);
    free(s);
}

bool at_store_read_only(const at_store *s) { return !s || s->read_only; }

const char *at_store_path(const at_store *s) { return s ? s->path : NULL; }

/* ---- Records ----------------------------------------------------------------------------- */

static void copy_text(char *dst, size_t cap, const void *src)
{
    snprintf(dst, cap, "%s", src ? (const char *)src : "");
}

/* A row of AT_COLUMNS. */
static void read_row(sqlite3_stmt *st, at_record *r)
{
    memset(r, 0, sizeof *r);
    copy_text(r->fingerprint, sizeof r->fingerprint, sqlite3_column_text(st, 0));
    copy_text(r->family, sizeof r->family, sqlite3_column_text(st, 1));
    copy_text(r->key, sizeof r->key, sqlite3_column_text(st, 2));
    copy_text(r->config, sizeof r->config, sqlite3_column_text(st, 3));
    r->set_checksum = (uint64_t)sqlite3_column_int64(st, 4);
    r->best_ms = sqlite3_column_double(st, 5);
    r->heuristic_ms = sqlite3_column_double(st, 6);
    r->created = sqlite3_column_int64(st, 7);
}

burnc_status_t at_store_get(at_store *s, const char *fingerprint, const char *family, const char *key,
                            uint64_t set_checksum, at_record *out, bool *found)
{
    if (found)
        *found = false;
    if (!s || !fingerprint || !family || !key || !out || !found)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "at_store_get: NULL argument");
    mtx_lock(&s->lock);
    sqlite3_bind_text(s->get, 1, fingerprint, -1, SQLITE_STATIC);
    sqlite3_bind_text(s->get, 2, family, -1, SQLITE_STATIC);
    sqlite3_bind_text(s->get, 3, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s->get, 4, (sqlite3_int64)set_checksum);
    int rc = sqlite3_step(s->get);
    if (rc == SQLITE_ROW) {
        read_row(s->get, out);
        *found = true;
    }
    burnc_status_t st = rc == SQLITE_ROW || rc == SQLITE_DONE ? BURNC_OK : db_fail(s, "at_store_get", rc);
    sqlite3_reset(s->get);
    sqlite3_clear_bindings(s->get);
    mtx_unlock(&s->lock);
    return st;
}

/* What put can store: terminated strings (they come in fixed arrays) and finite times (SQLite
 * would turn a NaN into NULL, read back as 0). */
static bool record_valid(const at_record *r, char *why, size_t cap)
{
    const char *bad = strnlen(r->fingerprint, sizeof r->fingerprint) == sizeof r->fingerprint ? "fingerprint"
                      : strnlen(r->family, sizeof r->family) == sizeof r->family               ? "family"
                      : strnlen(r->key, sizeof r->key) == sizeof r->key                        ? "key"
                      : strnlen(r->config, sizeof r->config) == sizeof r->config               ? "config"
                                                                                               : NULL;
    if (bad)
        snprintf(why, cap, "the %s is not NUL-terminated", bad);
    else if (!isfinite(r->best_ms) || !isfinite(r->heuristic_ms))
        snprintf(why, cap, "times must be finite (best_ms %g, heuristic_ms %g)", r->best_ms, r->heuristic_ms);
    return !bad && isfinite(r->best_ms) && isfinite(r->heuristic_ms);
}

/* One INSERT OR REPLACE, inside the caller's transaction. */
static int put_one(at_store *s, const at_record *r)
{
    sqlite3_stmt *st = s->put;
    sqlite3_bind_text(st, 1, r->fingerprint, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->family, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, r->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, r->config, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)r->set_checksum);
    sqlite3_bind_double(st, 6, r->best_ms);
    sqlite3_bind_double(st, 7, r->heuristic_ms);
    sqlite3_bind_int64(st, 8, r->created);
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static burnc_status_t refuse_read_only(const at_store *s, const char *fn)
{
    return rt_fail(BURNC_ERR_UNAVAILABLE, "%s: the store %s is read-only", fn, s->path);
}

burnc_status_t at_store_put(at_store *s, const at_record *r)
{
    char why[128];
    if (!s || !r)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "at_store_put: NULL argument");
    if (s->read_only)
        return refuse_read_only(s, "at_store_put");
    if (!record_valid(r, why, sizeof why))
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "at_store_put: %s", why);
    mtx_lock(&s->lock);
    int rc = begin_write(s->db);
    burnc_status_t st = end_write(s, "at_store_put", rc == SQLITE_OK ? put_one(s, r) : rc);
    mtx_unlock(&s->lock);
    return st;
}

/* The records are copied out before fn runs, so fn runs without the lock and may use the
 * store itself (a store holds one decision per tuned kernel shape: few records). */
burnc_status_t at_store_foreach(at_store *s, const char *fingerprint, int (*fn)(void *user, const at_record *r),
                                void *user, int *n)
{
    if (n)
        *n = 0;
    if (!s || !fn)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "at_store_foreach: NULL argument");
    at_record *recs = NULL;
    size_t count = 0, cap = 0;
    sqlite3_stmt *st = NULL;
    mtx_lock(&s->lock);
    const char *sql = fingerprint ? "SELECT " AT_COLUMNS " FROM autotune WHERE fingerprint = ?1 ORDER BY family, key"
                                  : "SELECT " AT_COLUMNS " FROM autotune ORDER BY family, key, fingerprint";
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK && fingerprint)
        sqlite3_bind_text(st, 1, fingerprint, -1, SQLITE_STATIC);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            at_record *grown = realloc(recs, (cap = cap ? 2 * cap : 16) * sizeof *recs);
            if (!grown) {
                rc = SQLITE_NOMEM;
                break;
            }
            recs = grown;
        }
        read_row(st, &recs[count++]);
        rc = SQLITE_OK;
    }
    burnc_status_t status = rc == SQLITE_DONE ? BURNC_OK : db_fail(s, "at_store_foreach", rc);
    sqlite3_finalize(st);
    mtx_unlock(&s->lock);
    for (size_t i = 0; status == BURNC_OK && i < count; i++) {
        if (n)
            (*n)++;
        if (fn(user, &recs[i]) != 0)
            break;
    }
    free(recs);
    return status;
}

burnc_status_t at_store_clear(at_store *s, const char *fingerprint, int *n)
{
    if (n)
        *n = 0;
    if (!s)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "at_store_clear: NULL store");
    if (s->read_only)
        return refuse_read_only(s, "at_store_clear");
    sqlite3_stmt *st = NULL;
    mtx_lock(&s->lock);
    int rc = begin_write(s->db);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(s->db, fingerprint ? "DELETE FROM autotune WHERE fingerprint = ?1"
                                                   : "DELETE FROM autotune", -1, &st, NULL);
    if (rc == SQLITE_OK && fingerprint)
        sqlite3_bind_text(st, 1, fingerprint, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_DONE)
        rc = SQLITE_OK;
    int changed = rc == SQLITE_OK ? sqlite3_changes(s->db) : 0;
    sqlite3_finalize(st);
    burnc_status_t status = end_write(s, "at_store_clear", rc);
    mtx_unlock(&s->lock);
    if (status == BURNC_OK && n)
        *n = changed;
    return status;
}

/* ---- Export and import ------------------------------------------------------------------- */

static void put_escaped(FILE *f, const char *text, char end)
{
    for (const char *c = text; *c; c++) {
        if (*c == '\\' || *c == '\t' || *c == '\n')
            fputc('\\', f);
        fputc(*c == '\t' ? 't' : *c == '\n' ? 'n' : *c, f);
    }
    fputc(end, f);
}

static int export_one(void *file, const at_record *r)
{
    put_escaped(file, r->family, '\t');
    put_escaped(file, r->key, '\t');
    put_escaped(file, r->config, '\t');
    /* %.17g reads back as the same double. */
    fprintf(file, "%016llx\t%.17g\t%.17g\t%lld\n", (unsigned long long)r->set_checksum, r->best_ms, r->heuristic_ms,
            (long long)r->created);
    return ferror((FILE *)file);
}

burnc_status_t at_store_export(at_store *s, const char *fingerprint, const char *file, int *n)
{
    if (n)
        *n = 0;
    if (!s || !fingerprint || !file)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "at_store_export: NULL argument");
    FILE *f = fopen(file, "w");
    if (!f)
        return rt_fail(BURNC_ERR_EXECUTION, "at_store_export: cannot write %s: %s", file, strerror(errno));
    fprintf(f, AT_FORMAT " 1\t");
    put_escaped(f, fingerprint, '\n');
    int count = 0;
    burnc_status_t st = at_store_foreach(s, fingerprint, export_one, f, &count);
    bool failed = ferror(f) != 0;
    if ((fclose(f) != 0 || failed) && st == BURNC_OK)
        st = rt_fail(BURNC_ERR_EXECUTION, "at_store_export: cannot write %s: %s", file, strerror(errno));
    if (st == BURNC_OK && n)
        *n = count;
    return st;
}

/* Splits line at its tabs into at most max fields; returns how many there are. */
static int split(char *line, char **fields, int max)
{
    int k = 0;
    for (char *p = line;; p++) {
        if (k < max)
            fields[k] = p;
        k++;
        if (!(p = strchr(p, '\t')))
            return k;
        *p = '\0';
    }
}

/* Unescapes src into dst; false on an escape export does not write, or when it does not fit. */
static bool text_field(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (const char *c = src; *c; c++, n++) {
        if (n + 1 >= cap || (*c == '\\' && c[1] != '\\' && c[1] != 't' && c[1] != 'n'))
            return false;
        dst[n] = *c != '\\' ? *c : *++c == 't' ? '\t' : *c == 'n' ? '\n' : '\\';
    }
    dst[n] = '\0';
    return true;
}

/* One record line into r; the reason when it is malformed. */
static const char *parse_record(char *line, at_record *r)
{
    char *f[7], *end;
    if (split(line, f, 7) != 7)
        return "expected 7 tab-separated fields";
    if (!text_field(r->family, sizeof r->family, f[0]))
        return "bad family (an unknown escape, or longer than 63 bytes)";
    if (!text_field(r->key, sizeof r->key, f[1]))
        return "bad key (an unknown escape, or longer than 511 bytes)";
    if (!text_field(r->config, sizeof r->config, f[2]))
        return "bad config (an unknown escape, or longer than 127 bytes)";
    if (strlen(f[3]) != 16 || strspn(f[3], "0123456789abcdefABCDEF") != 16)
        return "bad set checksum (expected 16 hex digits)";
    r->set_checksum = strtoull(f[3], NULL, 16);
    r->best_ms = strtod(f[4], &end);
    if (end == f[4] || *end || !isfinite(r->best_ms))
        return "bad best time (expected a finite number)";
    r->heuristic_ms = strtod(f[5], &end);
    if (end == f[5] || *end || !isfinite(r->heuristic_ms))
        return "bad heuristic time (expected a finite number)";
    errno = 0;
    r->created = strtoll(f[6], &end, 10);
    if (end == f[6] || *end || errno)
        return "bad creation time (expected an integer)";
    return NULL;
}

/* The header line; the reason when it is malformed, "" when it is a foreign file refused
 * (the error is then set). */
static const char *parse_header(char *line, const char *file, const char *fingerprint, bool force)
{
    char *f[2], file_fp[AT_TEXT_MAX];
    if (split(line, f, 2) != 2 || strncmp(f[0], AT_FORMAT " ", strlen(AT_FORMAT " ")) != 0)
        return "not a burnc autotune export (expected '" AT_FORMAT " 1<TAB>fingerprint')";
    if (strcmp(f[0], AT_FORMAT " 1") != 0)
        return "an export format this burnc does not read (it reads version 1)";
    if (!text_field(file_fp, sizeof file_fp, f[1]))
        return "bad fingerprint (an unknown escape, or too long)";
    if (strcmp(file_fp, fingerprint) != 0 && !force) {
        rt_fail(BURNC_ERR_INVALID_ARGUMENT,
                "at_store_import: %s was made on fingerprint '%s', not on this one, '%s' (force imports it anyway)",
                file, file_fp, fingerprint);
        return "";
    }
    return NULL;
}

/* The whole file into recs, before the store is touched: an import is all or nothing. */
static burnc_status_t read_export(FILE *f, const char *file, const char *fingerprint, bool force, at_record **recs,
                                  size_t *count)
{
    char *line = NULL;
    size_t line_cap = 0, cap = 0;
    const char *bad = NULL;
    int no = 0;
    ssize_t len;
    while (!bad && (len = getline(&line, &line_cap, f)) >= 0) {
        no++;
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        if ((size_t)len != strlen(line)) {
            bad = "a NUL byte";
        } else if (no == 1) {
            bad = parse_header(line, file, fingerprint, force);
        } else {
            at_record *grown = *count < cap ? *recs : reallocarray(*recs, cap = cap ? 2 * cap : 64, sizeof **recs);
            if (!grown) {
                free(line);
                return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "at_store_import: out of memory");
            }
            *recs = grown;
            at_record *r = &(*recs)[*count];
            memset(r, 0, sizeof *r);
            snprintf(r->fingerprint, sizeof r->fingerprint, "%s", fingerprint);
            if (!(bad = parse_record(line, r)))
                (*count)++;
        }
    }
    free(line);
    if (bad && !*bad)
        return BURNC_ERR_INVALID_ARGUMENT; /* refused by parse_header, which said why */
    if (!bad && ferror(f))
        return rt_fail(BURNC_ERR_EXECUTION, "at_store_import: cannot read %s: %s", file, strerror(errno));
    if (!bad && no == 0)
        bad = "an empty file", no = 1;
    return bad ? rt_fail(BURNC_ERR_INVALID_ARGUMENT, "at_store_import: %s:%d: %s; nothing imported", file, no, bad)
               : BURNC_OK;
}

burnc_status_t at_store_import(at_store *s, const char *fingerprint, const char *file, bool force, int *n)
{
    if (n)
        *n = 0;
    if (!s || !fingerprint || !file)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "at_store_import: NULL argument");
    if (strlen(fingerprint) >= AT_TEXT_MAX)
        return rt_fail(BURNC_ERR_INVALID_ARGUMENT, "at_store_import: the fingerprint is longer than %d bytes",
                       AT_TEXT_MAX - 1);
    if (s->read_only)
        return refuse_read_only(s, "at_store_import");
    FILE *f = fopen(file, "r");
    if (!f)
        return rt_fail(BURNC_ERR_EXECUTION, "at_store_import: cannot read %s: %s", file, strerror(errno));
    at_record *recs = NULL;
    size_t count = 0;
    burnc_status_t st = read_export(f, file, fingerprint, force, &recs, &count);
    fclose(f);
    if (st == BURNC_OK) {
        mtx_lock(&s->lock);
        int rc = begin_write(s->db);
        for (size_t i = 0; i < count && rc == SQLITE_OK; i++)
            rc = put_one(s, &recs[i]);
        st = end_write(s, "at_store_import", rc);
        mtx_unlock(&s->lock);
    }
    free(recs);
    if (st == BURNC_OK && n)
        *n = (int)count;
    return st;
}
