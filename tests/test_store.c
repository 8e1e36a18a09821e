/* The autotune store (autotune/store.h): records round trip, stale checksums, order, clearing,
 * several processes and threads writing at once, damaged and read-only databases, untrusted
 * directories, export and import. Every test works in its own temporary directory. */
#define _GNU_SOURCE /* setenv, mkdtemp, nftw */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <threads.h>
#include <unistd.h>

#include "common.h"
#include "store.h"

/* ---- Helpers ----------------------------------------------------------------------------- */

static char tmp_root[64];

/* A fresh private directory, also made the cache directory. */
static const char *fresh_dir(void)
{
    snprintf(tmp_root, sizeof tmp_root, "/tmp/burnc-store-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp_root), "mkdtemp: %s", strerror(errno));
    setenv("BURNC_CACHE_DIR", tmp_root, 1);
    unsetenv("BURNC_LOG");
    return tmp_root;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void remove_dir(const char *dir)
{
    chmod(dir, 0700);
    cr_assert_eq(nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0, "cannot remove %s", dir);
}

static char *join(char *buf, size_t cap, const char *dir, const char *name)
{
    snprintf(buf, cap, "%s/%s", dir, name);
    return buf;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static at_record make_record(const char *fp, const char *family, const char *key, const char *config, uint64_t cs)
{
    at_record r;
    memset(&r, 0, sizeof r);
    snprintf(r.fingerprint, sizeof r.fingerprint, "%s", fp);
    snprintf(r.family, sizeof r.family, "%s", family);
    snprintf(r.key, sizeof r.key, "%s", key);
    snprintf(r.config, sizeof r.config, "%s", config);
    r.set_checksum = cs;
    r.best_ms = 0.125;
    r.heuristic_ms = 0.5;
    r.created = 1700000000;
    return r;
}

static void expect_same(const at_record *a, const at_record *b)
{
    cr_assert_str_eq(a->fingerprint, b->fingerprint);
    cr_assert_str_eq(a->family, b->family);
    cr_assert_str_eq(a->key, b->key);
    cr_assert_str_eq(a->config, b->config);
    cr_assert_eq(a->set_checksum, b->set_checksum, "checksum %llx, expected %llx", (unsigned long long)a->set_checksum,
                 (unsigned long long)b->set_checksum);
    cr_assert_eq(a->best_ms, b->best_ms, "best_ms %.17g, expected %.17g", a->best_ms, b->best_ms);
    cr_assert_eq(a->heuristic_ms, b->heuristic_ms, "heuristic_ms %.17g, expected %.17g", a->heuristic_ms,
                 b->heuristic_ms);
    cr_assert_eq(a->created, b->created);
}

/* The stored record equal to `want`. */
static void expect_stored(at_store *s, const at_record *want)
{
    at_record got;
    bool found = false;
    BT_ASSERT_OK(at_store_get(s, want->fingerprint, want->family, want->key, want->set_checksum, &got, &found));
    cr_assert(found, "record %s/%s/%s missing", want->fingerprint, want->family, want->key);
    expect_same(&got, want);
}

static int visit_none(void *user, const at_record *r)
{
    (void)user, (void)r;
    return 0;
}

static int count_all(at_store *s, const char *fp)
{
    int n = -1;
    BT_ASSERT_OK(at_store_foreach(s, fp, visit_none, NULL, &n));
    return n;
}

static at_store *open_ok(const char *path, bool ro)
{
    at_store *s = NULL;
    BT_ASSERT_OK(at_store_open(path, ro, &s));
    cr_assert_not_null(s);
    return s;
}

/* SQLite's own full integrity check of a store file. */
static void expect_integrity(const char *path)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* Name of the first entry of dir that starts with prefix, or "" */
static void find_entry(const char *dir, const char *prefix, char *out, size_t cap)
{
    out[0] = '\0';
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && !out[0])
            snprintf(out, cap, "%s", e->d_name);
    closedir(d);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* ---- Basics ------------------------------------------------------------------------------ */

Test(store, round_trip_all_fields)
{
    const char *dir = fresh_dir();
    /* The directory is created, mode 0700, when the cache directory does not exist yet. */
    char sub[128], file[160];
    join(sub, sizeof sub, dir, "a/b");
    setenv("BURNC_CACHE_DIR", sub, 1);
    at_store *s = open_ok(NULL, false);
    struct stat st;
    cr_assert_eq(stat(sub, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700, "mode %o", (unsigned)(st.st_mode & 0777));
    cr_assert_str_eq(at_store_path(s), join(file, sizeof file, sub, "autotune.sqlite"));
    cr_assert(!at_store_read_only(s));

    at_record r = make_record("x86_64 GenuineIntel 000906ea", "cpu.elementwise", "add(f32[1024],f32[1024])",
                              "w16 task65536 stream1", UINT64_C(0xfedcba9876543210));
    r.best_ms = 0.12345678912345678;
    r.heuristic_ms = 1e-300;
    r.created = -42;
    BT_ASSERT_OK(at_store_put(s, &r));
    at_store_close(s);

    s = open_ok(NULL, false);
    expect_stored(s, &r);
    at_record got;
    bool found = true;
    BT_ASSERT_OK(at_store_get(s, r.fingerprint, r.family, "other key", r.set_checksum, &got, &found));
    cr_assert(!found);
    BT_ASSERT_OK(at_store_get(s, "other fingerprint", r.family, r.key, r.set_checksum, &got, &found));
    cr_assert(!found);
    at_store_close(s);
    remove_dir(dir);
    BT_LEAK_CHECK();
}

Test(store, invalid_arguments)
{
    const char *dir = fresh_dir();
    BT_ASSERT_STATUS(at_store_open(NULL, false, NULL), BURNC_ERR_INVALID_ARGUMENT, "at_store_open");
    at_store *s = open_ok(NULL, false);
    at_record r = make_record("fp", "fam", "k", "c", 1), got;
    bool found;
    BT_ASSERT_STATUS(at_store_put(NULL, &r), BURNC_ERR_INVALID_ARGUMENT, "at_store_put");
    BT_ASSERT_STATUS(at_store_get(s, NULL, "f", "k", 1, &got, &found), BURNC_ERR_INVALID_ARGUMENT, "at_store_get");
    r.best_ms = NAN;
    BT_ASSERT_STATUS(at_store_put(s, &r), BURNC_ERR_INVALID_ARGUMENT, "finite");
    r.best_ms = 1;
    memset(r.config, 'x', sizeof r.config);
    BT_ASSERT_STATUS(at_store_put(s, &r), BURNC_ERR_INVALID_ARGUMENT, "config");
    BT_ASSERT_STATUS(at_store_export(s, NULL, "/dev/null", NULL), BURNC_ERR_INVALID_ARGUMENT, "at_store_export");
    BT_ASSERT_STATUS(at_store_import(s, "fp", "/nonexistent/file", false, NULL), BURNC_ERR_EXECUTION,
                     "/nonexistent/file");
    cr_assert_eq(count_all(s, NULL), 0);
    at_store_close(s);
    at_store_close(NULL);
    remove_dir(dir);
    BT_LEAK_CHECK();
}

/* A record tuned against another candidate set is stale: it misses, and a put replaces it. */
Test(store, checksum_mismatch_misses_and_put_replaces)
{
    const char *dir = fresh_dir();
    at_store *s = open_ok(NULL, false);
    at_record old = make_record("fp", "cpu.rows", "softmax f32[4096,4096]", "w8", 111);
    BT_ASSERT_OK(at_store_put(s, &old));
    at_record got;
    bool found = true;
    BT_ASSERT_OK(at_store_get(s, "fp", "cpu.rows", old.key, 222, &got, &found));
    cr_assert(!found, "a record with another set checksum was found");
    expect_stored(s, &old);

    at_record fresh = make_record("fp", "cpu.rows", old.key, "w16", 222);
    fresh.best_ms = 0.0625;
    BT_ASSERT_OK(at_store_put(s, &fresh));
    BT_ASSERT_OK(at_store_get(s, "fp", "cpu.rows", old.key, 111, &got, &found));
    cr_assert(!found, "the replaced record is still found");
    expect_stored(s, &fresh);
    cr_assert_eq(count_all(s, NULL), 1, "put did not replace: %d records", count_all(s, NULL));
    at_store_close(s);
    remove_dir(dir);
    BT_LEAK_CHECK();
}

typedef struct visit {
    at_store *s;
    char seen[16][80];
    int n, stop_after;
} visit;

static int visit_fn(void *user, const at_record *r)
{
    visit *v = user;
    snprintf(v->seen[v->n++], sizeof v->seen[0], "%.20s|%.20s|%.20s", r->fingerprint, r->family, r->key);
    /* The callback may use the store: foreach holds no lock while it runs. */
    at_record got;
    bool found = false;
    cr_assert_eq(at_store_get(v->s, r->fingerprint, r->family, r->key, r->set_checksum, &got, &found), BURNC_OK);
    cr_assert(found);
    return v->stop_after && v->n >= v->stop_after;
}

Test(store, foreach_order_and_filter)
{
    const char *dir = fresh_dir();
    at_store *s = open_ok(NULL, false);
    static const char *const rows[][3] = {
        {"fp1", "cpu.rows", "b"}, {"fp2", "cpu.elementwise", "a"}, {"fp1", "cpu.elementwise", "c"},
        {"fp1", "cpu.rows", "a"}, {"fp1", "cpu.elementwise", "a"}, {"fp2", "cpu.rows", "z"},
    };
    for (int i = 0; i < 6; i++) {
        at_record r = make_record(rows[i][0], rows[i][1], rows[i][2], "cfg", (uint64_t)i);
        BT_ASSERT_OK(at_store_put(s, &r));
    }
    visit v = {.s = s};
    int n = -1;
    BT_ASSERT_OK(at_store_foreach(s, "fp1", visit_fn, &v, &n));
    static const char *const want[] = {"fp1|cpu.elementwise|a", "fp1|cpu.elementwise|c", "fp1|cpu.rows|a",
                                       "fp1|cpu.rows|b"};
    cr_assert_eq(n, 4);
    cr_assert_eq(v.n, 4);
    for (int i = 0; i < 4; i++)
        cr_assert_str_eq(v.seen[i], want[i], "record %d", i);

    visit all = {.s = s};
    BT_ASSERT_OK(at_store_foreach(s, NULL, visit_fn, &all, &n));
    cr_assert_eq(n, 6);
    cr_assert_str_eq(all.seen[0], "fp1|cpu.elementwise|a");
    cr_assert_str_eq(all.seen[1], "fp2|cpu.elementwise|a");
    cr_assert_str_eq(all.seen[5], "fp2|cpu.rows|z");

    visit stop = {.s = s, .stop_after = 3};
    BT_ASSERT_OK(at_store_foreach(s, NULL, visit_fn, &stop, &n));
    cr_assert_eq(n, 3, "foreach did not stop: %d visited", n);
    cr_assert_eq(count_all(s, "no such fingerprint"), 0);
    at_store_close(s);
    remove_dir(dir);
    BT_LEAK_CHECK();
}

Test(store, clear)
{
    const char *dir = fresh_dir();
    at_store *s = open_ok(NULL, false);
    for (int i = 0; i < 10; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        at_record r = make_record(i < 7 ? "fp1" : "fp2", "fam", key, "cfg", 1);
        BT_ASSERT_OK(at_store_put(s, &r));
    }
    int n = -1;
    BT_ASSERT_OK(at_store_clear(s, "fp1", &n));
    cr_assert_eq(n, 7);
    cr_assert_eq(count_all(s, "fp1"), 0);
    cr_assert_eq(count_all(s, "fp2"), 3);
    BT_ASSERT_OK(at_store_clear(s, NULL, &n));
    cr_assert_eq(n, 3);
    cr_assert_eq(count_all(s, NULL), 0);
    at_store_close(s);
    remove_dir(dir);
    BT_LEAK_CHECK();
}

/* ---- Concurrency ------------------------------------------------------------------------- */

enum { N_DISTINCT = 500, N_SHARED = 10 };

static at_record writer_record(int writer, int i)
{
    char key[32];
    snprintf(key, sizeof key, "w%d-%d", writer, i);
    at_record r = make_record("fp", "cpu.elementwise", key, "cfg", (uint64_t)i);
    r.best_ms = writer + i / 1000.0;
    return r;
}

/* 500 distinct records, and every 10th put also to one of 10 keys every writer writes.
 * Returns 0, or the number of the first failed put. */
static int write_records(at_store *s, int writer)
{
    for (int i = 0; i < N_DISTINCT; i++) {
        at_record r = writer_record(writer, i);
        if (at_store_put(s, &r) != BURNC_OK)
            return i + 1;
        if (i % 10 == 0) {
            char key[32];
            snprintf(key, sizeof key, "shared-%d", (i / 10) % N_SHARED);
            at_record shared = make_record("fp", "cpu.elementwise", key, writer ? "by one" : "by zero", 7);
            if (at_store_put(s, &shared) != BURNC_OK)
                return i + 1;
        }
    }
    return 0;
}

static void expect_all_written(const char *dir, int writers)
{
    at_store *s = open_ok(NULL, false);
    for (int w = 0; w < writers; w++)
        for (int i = 0; i < N_DISTINCT; i++) {
            at_record r = writer_record(w, i);
            expect_stored(s, &r);
        }
    cr_assert_eq(count_all(s, NULL), writers * N_DISTINCT + N_SHARED);
    at_store_close(s);
    char file[128];
    expect_integrity(join(file, sizeof file, dir, "autotune.sqlite"));
}

/* Two processes create the store at once and write into it at once. */
Test(store, two_processes_write_at_once, .timeout = 300)
{
    const char *dir = fresh_dir();
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t pids[2];
    for (int w = 0; w < 2; w++) {
        pids[w] = fork();
        cr_assert_neq(pids[w], -1);
        if (pids[w] == 0) {
            close(go[1]);
            char c;
            (void)!read(go[0], &c, 1); /* released together when the parent closes the pipe */
            at_store *s = NULL;
            if (at_store_open(NULL, false, &s) != BURNC_OK) {
                fprintf(stderr, "writer %d: %s\n", w, burnc_error_message());
                _exit(100);
            }
            int failed = write_records(s, w);
            if (failed)
                fprintf(stderr, "writer %d: put %d: %s\n", w, failed, burnc_error_message());
            at_store_close(s);
            _exit(failed ? 101 : 0);
        }
    }
    close(go[0]);
    close(go[1]);
    for (int w = 0; w < 2; w++) {
        int status = 0;
        cr_assert_eq(waitpid(pids[w], &status, 0), pids[w]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer %d failed (status %#x)", w, status);
    }
    expect_all_written(dir, 2);
    remove_dir(dir);
    BT_LEAK_CHECK();
}

typedef struct writer {
    at_store *s; /* shared, or NULL: the thread opens its own */
    int id, failed;
    char msg[512];
} writer;

static int writer_thread(void *arg)
{
    writer *w = arg;
    at_store *s = w->s;
    if (!s && at_store_open(NULL, false, &s) != BURNC_OK) {
        w->failed = -1;
    } else {
        w->failed = write_records(s, w->id);
        if (!w->s)
            at_store_close(s);
    }
    if (w->failed)
        snprintf(w->msg, sizeof w->msg, "%s", burnc_error_message());
    return 0;
}

/* Threads 0 and 1 share one store; 2 and 3 open their own. */
Test(store, threads_write_at_once, .timeout = 300)
{
    const char *dir = fresh_dir();
    at_store *shared = open_ok(NULL, false);
    writer w[4];
    thrd_t t[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (writer){.s = i < 2 ? shared : NULL, .id = i};
        cr_assert_eq(thrd_create(&t[i], writer_thread, &w[i]), thrd_success);
    }
    for (int i = 0; i < 4; i++)
        thrd_join(t[i], NULL);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(w[i].failed, 0, "writer %d failed at put %d: %s", i, w[i].failed, w[i].msg);
    at_store_close(shared);
    expect_all_written(dir, 4);
    remove_dir(dir);
    BT_LEAK_CHECK();
}

/* ---- Damaged databases ------------------------------------------------------------------- */

/* Opens the store with stderr captured; returns what was printed. */
static char *open_capturing_stderr(const char *dir, at_store **s)
{
    char errfile[128];
    join(errfile, sizeof errfile, dir, "stderr.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    burnc_status_t st = at_store_open(NULL, false, s);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    cr_assert_eq(st, BURNC_OK, "open failed: %s", burnc_error_message());
    char *text = read_text(errfile);
    unlink(errfile);
    return text;
}

/* The damaged file was moved aside with the content it had, with one warning line; the new
 * store is empty and works. */
static void expect_moved_aside(const char *dir, const void *content, size_t size, const char *why)
{
    at_store *s = NULL;
    char *err = open_capturing_stderr(dir, &s);
    cr_assert(strncmp(err, "burnc: warning:", 15) == 0, "no warning on stderr: \"%s\"", err);
    cr_assert(strstr(err, "damaged") && strstr(err, why), "warning \"%s\" does not say \"%s\"", err, why);
    cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "warning not one line: \"%s\"", err);

    char moved[256], path[512];
    find_entry(dir, "autotune.sqlite.damaged-", moved, sizeof moved);
    cr_assert(moved[0], "no autotune.sqlite.damaged-<time> file");
    cr_assert(strspn(moved + strlen("autotune.sqlite.damaged-"), "0123456789") > 8, "bad name %s", moved);
    join(path, sizeof path, dir, moved);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq((size_t)st.st_size, size);
    if (content) {
        FILE *f = fopen(path, "rb");
        char *buf = malloc(size);
        cr_assert(f && buf && fread(buf, 1, size, f) == size);
        cr_assert(memcmp(buf, content, size) == 0, "the moved file's content changed");
        fclose(f);
        free(buf);
    }
    cr_assert_eq(count_all(s, NULL), 0);
    at_record r = make_record("fp", "fam", "key", "cfg", 3);
    BT_ASSERT_OK(at_store_put(s, &r));
    expect_stored(s, &r);
    at_store_close(s);
}

Test(store, damaged_garbage_moved_aside)
{
    const char *dir = fresh_dir();
    char garbage[8192], file[128];
    for (size_t i = 0; i < sizeof garbage; i++)
        garbage[i] = (char)(i * 7919 + 13);
    write_file(join(file, sizeof file, dir, "autotune.sqlite"), garbage, sizeof garbage);
    expect_moved_aside(dir, garbage, sizeof garbage, "not a database");
    remove_dir(dir);
    BT_LEAK_CHECK();
}

static char logged[1024];

static void log_to_buffer(void *user, const char *topic, const char *message)
{
    (void)user;
    if (strcmp(topic, "autotune") == 0)
        snprintf(logged, sizeof logged, "%s", message);
}

/* With a log callback, the warning goes there instead of stderr. */
Test(store, damaged_warning_through_log)
{
    const char *dir = fresh_dir();
    char file[128];
    write_file(join(file, sizeof file, dir, "autotune.sqlite"), "garbage, not SQLite, not at all", 31);
    logged[0] = '\0';
    burnc_log_set_callback(log_to_buffer, NULL);
    at_store *s = NULL;
    char *err = open_capturing_stderr(dir, &s);
    burnc_log_set_callback(NULL, NULL);
    cr_assert_str_empty(err, "stderr: \"%s\"", err);
    cr_assert(strstr(logged, "damaged") && strstr(logged, "autotune.sqlite.damaged-"), "logged: \"%s\"", logged);
    at_store_close(s);
    remove_dir(dir);
    BT_LEAK_CHECK();
}

/* A valid store cut in half. */
Test(store, damaged_truncated_moved_aside)
{
    const char *dir = fresh_dir();
    at_store *s = open_ok(NULL, false);
    cr_assert_eq(write_records(s, 0), 0);
    at_store_close(s);
    char file[128];
    join(file, sizeof file, dir, "autotune.sqlite");
    struct stat st;
    cr_assert_eq(stat(file, &st), 0);
    cr_assert(st.st_size >= 4 * 4096, "store of %lld bytes: too small to cut", (long long)st.st_size);
    cr_assert_eq(truncate(file, st.st_size / 2), 0);
    expect_moved_aside(dir, NULL, (size_t)(st.st_size / 2), "");
    remove_dir(dir);
    BT_LEAK_CHECK();
}

/* A valid store with one page overwritten: only an integrity check sees it at open. */
Test(store, damaged_page_moved_aside)
{
    const char *dir = fresh_dir();
    at_store *s = open_ok(NULL, false);
    cr_assert_eq(write_records(s, 0), 0);
    at_store_close(s);
    char file[128], junk[4096];
    memset(junk, 0x5a, sizeof junk);
    FILE *f = fopen(join(file, sizeof file, dir, "autotune.sqlite"), "r+b");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    cr_assert(size >= 8 * 4096, "store of %ld bytes: too small", size);
    fseek(f, (size / 4096 / 2) * 4096, SEEK_SET); /* a page in the middle of the table */
    cr_assert_eq(fwrite(junk, 1, sizeof junk, f), sizeof junk);
    cr_assert_eq(fclose(f), 0);
    expect_moved_aside(dir, NULL, (size_t)size, "");
    remove_dir(dir);
    BT_LEAK_CHECK();
}

/* An SQLite database that is not ours (another application's table) is not used either. */
Test(store, foreign_database_moved_aside)
{
    const char *dir = fresh_dir();
    char file[128];
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(join(file, sizeof file, dir, "autotune.sqlite"), &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "CREATE TABLE other (x); INSERT INTO other VALUES (1)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    struct stat st;
    cr_assert_eq(stat(file, &st), 0);
    expect_moved_aside(dir, NULL, (size_t)st.st_size, "not a burnc autotune store");
    remove_dir(dir);
    BT_LEAK_CHECK();
}

/* A damaged store that may not be written is reported, not moved. */
Test(store, damaged_read_only_refused)
{
    const char *dir = fresh_dir();
    char file[128], moved[256];
    write_file(join(file, sizeof file, dir, "autotune.sqlite"), "not a database at all, but long enough", 38);
    at_store *s = (at_store *)1;
    BT_ASSERT_STATUS(at_store_open(NULL, true, &s), BURNC_ERR_UNAVAILABLE, "damaged");
    cr_assert_null(s);
    BT_ASSERT_MSG_HAS(file);
    find_entry(dir, "autotune.sqlite.damaged-", moved, sizeof moved);
    cr_assert(!moved[0], "a read-only store was moved to %s", moved);
    cr_assert(exists(file));
    remove_dir(dir);
    BT_LEAK_CHECK();
}

/* ---- Read-only stores and untrusted directories ------------------------------------------ */

Test(store, read_only_store_answers_gets)
{
    const char *dir = fresh_dir();
    at_store *s = open_ok(NULL, false);
    at_record r = make_record("fp", "cpu.rows", "layer_norm f32[4096,4096]", "w16 rows4", 99);
    BT_ASSERT_OK(at_store_put(s, &r));
    at_store_close(s);
    char file[128], wal[160], shm[160];
    join(file, sizeof file, dir, "autotune.sqlite");
    snprintf(wal, sizeof wal, "%s-wal", file);
    snprintf(shm, sizeof shm, "%s-shm", file);
    cr_assert_eq(chmod(file, 0444), 0);
    cr_assert_eq(chmod(dir, 0500), 0);

    /* Tests run as root, for whom the mode bits deny nothing: the store must go by them. */
    s = open_ok(NULL, false);
    cr_assert(at_store_read_only(s), "a store in a 0500 directory opened writable");
    expect_stored(s, &r);
    at_record other = make_record("fp", "cpu.rows", "other", "w8", 99);
    BT_ASSERT_STATUS(at_store_put(s, &other), BURNC_ERR_UNAVAILABLE, "read-only");
    BT_ASSERT_MSG_HAS("at_store_put");
    int n = -1;
    BT_ASSERT_STATUS(at_store_clear(s, NULL, &n), BURNC_ERR_UNAVAILABLE, "read-only");
    cr_assert_eq(n, 0);
    BT_ASSERT_STATUS(at_store_import(s, "fp", "/dev/null", false, NULL), BURNC_ERR_UNAVAILABLE, "read-only");
    BT_ASSERT_OK(at_store_export(s, "fp", "/dev/null", &n));
    cr_assert_eq(n, 1);
    cr_assert(!exists(wal) && !exists(shm), "a read-only open created files in the read-only directory");
    at_store_close(s);

    /* The file alone read-only, in a writable directory. */
    cr_assert_eq(chmod(dir, 0700), 0);
    s = open_ok(NULL, false);
    cr_assert(at_store_read_only(s), "a 0444 store opened writable");
    expect_stored(s, &r);
    BT_ASSERT_STATUS(at_store_put(s, &other), BURNC_ERR_UNAVAILABLE, "read-only");
    at_store_close(s);

    /* Read-only asked for a writable store; a copy of the store elsewhere. */
    cr_assert_eq(chmod(file, 0600), 0);
    s = open_ok(file, true);
    cr_assert(at_store_read_only(s));
    expect_stored(s, &r);
    BT_ASSERT_STATUS(at_store_put(s, &other), BURNC_ERR_UNAVAILABLE, "read-only");
    at_store_close(s);
    s = open_ok(NULL, false);
    cr_assert(!at_store_read_only(s));
    cr_assert_eq(count_all(s, NULL), 1, "a read-only store's put changed the store");
    at_store_close(s);
    remove_dir(dir);
    BT_LEAK_CHECK();
}

Test(store, read_only_missing_store_refused)
{
    const char *dir = fresh_dir();
    char file[128];
    at_store *s = NULL;
    BT_ASSERT_STATUS(at_store_open(join(file, sizeof file, dir, "none.sqlite"), true, &s), BURNC_ERR_UNAVAILABLE,
                     "does not exist");
    cr_assert_null(s);
    cr_assert(!exists(file), "a read-only open created the file");
    /* An empty, read-only cache directory: no store to read. */
    cr_assert_eq(chmod(dir, 0500), 0);
    BT_ASSERT_STATUS(at_store_open(NULL, false, &s), BURNC_ERR_UNAVAILABLE, "read-only");
    cr_assert_null(s);
    remove_dir(dir);
    BT_LEAK_CHECK();
}

Test(store, untrusted_directory_refused)
{
    const char *dir = fresh_dir();
    cr_assert_eq(chmod(dir, 0777), 0);
    at_store *s = NULL;
    BT_ASSERT_STATUS(at_store_open(NULL, false, &s), BURNC_ERR_UNAVAILABLE, "group or others may write");
    cr_assert_null(s);
    char file[128];
    BT_ASSERT_STATUS(at_store_open(join(file, sizeof file, dir, "x.sqlite"), false, &s), BURNC_ERR_UNAVAILABLE,
                     dir);
    cr_assert(!exists(file), "the store was created in an untrusted directory");
    /* Not this user's directory (only root can give it away). */
    cr_assert_eq(chmod(dir, 0700), 0);
    if (geteuid() == 0) {
        cr_assert_eq(chown(dir, 12345, 12345), 0, "chown: %s", strerror(errno));
        BT_ASSERT_STATUS(at_store_open(NULL, false, &s), BURNC_ERR_UNAVAILABLE, "uid 12345");
        cr_assert_null(s);
        cr_assert_eq(chown(dir, geteuid(), getegid()), 0);
    }
    remove_dir(dir);
    BT_LEAK_CHECK();
}

/* ---- Export and import ------------------------------------------------------------------- */

/* Fields with every character the format escapes. */
static at_record tricky_record(const char *fp, int i)
{
    char key[64], config[64];
    snprintf(key, sizeof key, "key %d\twith\ttabs\nand newline \\ backslash \\t", i);
    snprintf(config, sizeof config, "w%d\\n task\t%d", 1 << (i % 5), i);
    at_record r = make_record(fp, i % 2 ? "cpu.rows" : "cpu.elementwise", key, config,
                              UINT64_C(0x8000000000000000) + (uint64_t)i * 977);
    r.best_ms = 1.0 / (i + 3);
    r.heuristic_ms = i % 3 ? 2.0 / (i + 7) : 0;
    r.created = 1700000000 + i;
    return r;
}

typedef struct collected {
    at_record recs[64];
    int n;
} collected;

static int collect(void *user, const at_record *r)
{
    collected *c = user;
    cr_assert(c->n < 64);
    c->recs[c->n++] = *r;
    return 0;
}

Test(store, export_import_round_trip)
{
    const char *dir = fresh_dir();
    char exported[128], dest[160];
    at_store *a = open_ok(NULL, false);
    for (int i = 0; i < 40; i++) {
        at_record r = tricky_record("host\tA\\1", i);
        BT_ASSERT_OK(at_store_put(a, &r));
    }
    at_record foreign = make_record("host B", "cpu.rows", "not exported", "cfg", 1);
    BT_ASSERT_OK(at_store_put(a, &foreign));
    int n = -1;
    BT_ASSERT_OK(at_store_export(a, "host\tA\\1", join(exported, sizeof exported, dir, "export.txt"), &n));
    cr_assert_eq(n, 40);
    char *text = read_text(exported);
    cr_assert(strncmp(text, "burnc-autotune 1\thost\\tA\\\\1\n", 28) == 0, "header: %.40s", text);

    at_store *b = open_ok(join(dest, sizeof dest, dir, "b/other.sqlite"), false);
    BT_ASSERT_OK(at_store_import(b, "host\tA\\1", exported, false, &n));
    cr_assert_eq(n, 40);
    collected *ca = calloc(1, sizeof *ca), *cb = calloc(1, sizeof *cb);
    BT_ASSERT_OK(at_store_foreach(a, "host\tA\\1", collect, ca, NULL));
    BT_ASSERT_OK(at_store_foreach(b, NULL, collect, cb, NULL));
    cr_assert_eq(ca->n, 40);
    cr_assert_eq(cb->n, 40);
    for (int i = 0; i < 40; i++)
        expect_same(&cb->recs[i], &ca->recs[i]);
    /* Importing again replaces, it does not duplicate. */
    BT_ASSERT_OK(at_store_import(b, "host\tA\\1", exported, false, &n));
    cr_assert_eq(count_all(b, NULL), 40);
    free(ca);
    free(cb);
    at_store_close(a);
    at_store_close(b);
    remove_dir(dir);
    BT_LEAK_CHECK();
}

Test(store, import_foreign_fingerprint)
{
    const char *dir = fresh_dir();
    char exported[128];
    at_store *s = open_ok(NULL, false);
    for (int i = 0; i < 5; i++) {
        at_record r = tricky_record("host-one", i);
        BT_ASSERT_OK(at_store_put(s, &r));
    }
    BT_ASSERT_OK(at_store_export(s, "host-one", join(exported, sizeof exported, dir, "e.txt"), NULL));
    BT_ASSERT_OK(at_store_clear(s, NULL, NULL));

    int n = -1;
    BT_ASSERT_STATUS(at_store_import(s, "host-two", exported, false, &n), BURNC_ERR_INVALID_ARGUMENT, "host-one");
    BT_ASSERT_MSG_HAS("host-two");
    cr_assert_eq(n, 0);
    cr_assert_eq(count_all(s, NULL), 0, "a refused import stored records");

    BT_ASSERT_OK(at_store_import(s, "host-two", exported, true, &n));
    cr_assert_eq(n, 5);
    cr_assert_eq(count_all(s, "host-two"), 5);
    cr_assert_eq(count_all(s, "host-one"), 0);
    at_record r = tricky_record("host-two", 3);
    expect_stored(s, &r);
    at_store_close(s);
    remove_dir(dir);
    BT_LEAK_CHECK();
}

Test(store, import_malformed_refused)
{
    const char *dir = fresh_dir();
    char file[128];
    join(file, sizeof file, dir, "bad.txt");
    at_store *s = open_ok(NULL, false);
    const char *good = "cpu.rows\tk1\tw8\t00000000000000ff\t0.5\t0\t1700000000\n"
                       "cpu.rows\tk2\tw16\t00000000000000ff\t0.25\t1\t1700000001\n";
    static const struct {
        const char *tail, *where;
    } cases[] = {
        {"cpu.rows\tk3\tw8\t00000000000000ff\t0.5\t0\n", ":4:"},               /* six fields */
        {"cpu.rows\tk\\x3\tw8\t00000000000000ff\t0.5\t0\t1\n", ":4:"},         /* bad escape */
        {"cpu.rows\tk3\tw8\t0ff\t0.5\t0\t1\n", ":4:"},                         /* short checksum */
        {"cpu.rows\tk3\tw8\t00000000000000ff\tfast\t0\t1\n", ":4:"},           /* not a number */
        {"cpu.rows\tk3\tw8\t00000000000000ff\tnan\t0\t1\n", ":4:"},            /* not finite */
        {"cpu.rows\tk3\tw8\t00000000000000ff\t0.5\t0\t1x\n", ":4:"},           /* bad integer */
        {"\n", ":4:"},                                                         /* empty line */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char text[1024];
        snprintf(text, sizeof text, "burnc-autotune 1\tfp\n%s%s", good, cases[c].tail);
        write_file(file, text, strlen(text));
        int n = -1;
        BT_ASSERT_STATUS(at_store_import(s, "fp", file, false, &n), BURNC_ERR_INVALID_ARGUMENT, cases[c].where);
        BT_ASSERT_MSG_HAS(file);
        cr_assert_eq(n, 0);
        cr_assert_eq(count_all(s, NULL), 0, "case %zu: a malformed import stored records", c);
    }
    static const char *const bad_headers[] = {"", "burnc-autotune 2\tfp\n", "something else\n", "burnc-autotune 1\n"};
    for (size_t c = 0; c < 4; c++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s", bad_headers[c], good);
        write_file(file, bad_headers[c][0] ? text : "", bad_headers[c][0] ? strlen(text) : 0);
        BT_ASSERT_STATUS(at_store_import(s, "fp", file, false, NULL), BURNC_ERR_INVALID_ARGUMENT, ":1:");
        cr_assert_eq(count_all(s, NULL), 0);
    }
    /* The same lines without the bad one import. */
    char text[1024];
    snprintf(text, sizeof text, "burnc-autotune 1\tfp\n%s", good);
    write_file(file, text, strlen(text));
    int n = -1;
    BT_ASSERT_OK(at_store_import(s, "fp", file, false, &n));
    cr_assert_eq(n, 2);
    at_store_close(s);
    remove_dir(dir);
    BT_LEAK_CHECK();
}
