/* Autotune: keys and buckets, the three modes, stale decisions, the CPU families' validity
 * checks, tuning that never touches user data, BURNC_AUTOTUNE_RECORD replayed by burnc-tune,
 * and burnc-tune's store commands and errors. The store itself: test_store.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autotune.h"
#include "common.h"
#include "cpu/cpu.h"
#include "rt.h"

/* A fresh cache directory for the test (the store lives there); removed by cleanup(). */
static char dir[64];

static void fresh_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/burnc-autotune-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    setenv("BURNC_CACHE_DIR", dir, 1);
    at_close_shared_store();
    at_forget();
}

static void cleanup(void)
{
    at_close_shared_store();
    at_forget();
    at_set_mode(-1);
    bt_remove_dir(dir);
}

static int visit(void *user, const at_record *r)
{
    (void)user, (void)r;
    return 0;
}

static bool exists(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- Keys and buckets ---- */

Test(autotune, buckets_round_up_to_powers_of_two)
{
    const int64_t in[] = {0, 1, 2, 3, 4, 5, 1000, 1024, 1025, 16777217};
    const int64_t want[] = {0, 1, 2, 4, 4, 8, 1024, 1024, 2048, 33554432};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        cr_assert_eq(at_bucket(in[i], AT_BUCKETS_POW2), want[i], "bucket(%lld)", (long long)in[i]);
        cr_assert_eq(at_bucket(in[i], AT_BUCKETS_EXACT), in[i]);
    }
}

static const char *const NAMES3[] = {"slow", "fast", "medium"};

Test(autotune, family_checksum_follows_the_candidate_set)
{
    static const char *const other[] = {"slow", "fast", "medium2"};
    at_family a = {"test.fam", 3, NAMES3}, b = {"test.fam", 3, other}, c = {"test.other", 3, NAMES3};
    cr_assert_eq(at_family_checksum(&a), at_family_checksum(&a));
    cr_assert_neq(at_family_checksum(&a), at_family_checksum(&b));
    cr_assert_neq(at_family_checksum(&a), at_family_checksum(&c));
    at_family d = {"test.fam", 2, NAMES3};
    cr_assert_neq(at_family_checksum(&a), at_family_checksum(&d));
}

Test(autotune, modes_parse)
{
    at_mode m;
    cr_assert(at_parse_mode("off", &m) && m == AT_MODE_OFF);
    cr_assert(at_parse_mode("cached", &m) && m == AT_MODE_CACHED);
    cr_assert(at_parse_mode("on", &m) && m == AT_MODE_ON);
    cr_assert(!at_parse_mode("ON", &m) && !at_parse_mode("", &m) && !at_parse_mode(NULL, &m));
    BT_ASSERT_STATUS(burnc_autotune_set_mode("sometimes"), BURNC_ERR_INVALID_ARGUMENT, "sometimes");
    BT_ASSERT_OK(burnc_autotune_set_mode("off"));
    cr_assert_eq(at_get_mode(), AT_MODE_OFF);
    BT_ASSERT_OK(burnc_autotune_set_mode(NULL));
}

/* ---- Decisions with a fake family: candidate 1 is the fastest ---- */

typedef struct fake {
    int calls[3];
    double ms[3];
} fake;

static double fake_time(void *user, int c)
{
    fake *f = user;
    f->calls[c]++;
    return f->ms[c];
}

static at_family fam3 = {"test.fam", 3, NAMES3};

static at_query query(const char *key, const bool *valid)
{
    return (at_query){.fingerprint = "test-hw", .family = &fam3, .key = key, .heuristic = 0, .valid = valid};
}

Test(autotune, mode_on_tunes_stores_and_remembers)
{
    fresh_dir();
    at_set_mode(AT_MODE_ON);
    fake f = {.ms = {3.0, 1.0, 2.0}};
    at_query q = query("k1", NULL);
    at_outcome o;
    cr_assert_eq(at_decide(&q, fake_time, &f, &o), 1);
    cr_assert(o.tuned && o.stored);
    cr_assert_float_eq(o.best_ms, 1.0, 1e-12);
    cr_assert_float_eq(o.heuristic_ms, 3.0, 1e-12);
    cr_assert(f.calls[0] >= 2 && f.calls[1] >= 2 && f.calls[2] >= 2, "each candidate warmed up and timed");
    cr_assert(f.calls[1] <= 1 + AT_SAMPLES);
    /* the slow one was dropped after one sample (3.0 > AT_DROP * 1.0) unless it is the heuristic */
    cr_assert(f.calls[2] == 2, "the medium candidate was sampled %d times", f.calls[2]);
    /* remembered: no more timing */
    fake g = {.ms = {1, 1, 1}};
    cr_assert_eq(at_decide(&q, fake_time, &g, &o), 1);
    cr_assert(!o.tuned && g.calls[0] + g.calls[1] + g.calls[2] == 0);
    /* stored: a fresh process (memory forgotten) in mode cached finds it */
    at_forget();
    at_close_shared_store();
    at_set_mode(AT_MODE_CACHED);
    cr_assert_eq(at_decide(&q, fake_time, &g, &o), 1);
    cr_assert(o.stored && !o.tuned && g.calls[1] == 0);
    cleanup();
    BT_LEAK_CHECK();
}

Test(autotune, mode_cached_uses_the_heuristic_on_a_miss_and_writes_nothing)
{
    fresh_dir();
    at_set_mode(AT_MODE_CACHED);
    fake f = {.ms = {3.0, 1.0, 2.0}};
    at_query q = query("k2", NULL);
    at_outcome o;
    cr_assert_eq(at_decide(&q, fake_time, &f, &o), 0);
    cr_assert(!o.tuned && !o.stored && f.calls[0] + f.calls[1] + f.calls[2] == 0);
    at_store *s = at_shared_store();
    cr_assert_not_null(s);
    int n = -1;
    BT_ASSERT_OK(at_store_foreach(s, NULL, visit, NULL, &n));
    cr_assert_eq(n, 0, "cached mode stored %d decisions", n);
    cleanup();
    BT_LEAK_CHECK();
}

Test(autotune, mode_off_never_opens_the_store)
{
    fresh_dir();
    at_set_mode(AT_MODE_OFF);
    fake f = {.ms = {3.0, 1.0, 2.0}};
    at_query q = query("k3", NULL);
    cr_assert_eq(at_decide(&q, fake_time, &f, NULL), 0);
    cr_assert(!exists("autotune.sqlite"), "mode off created the store");
    cleanup();
    BT_LEAK_CHECK();
}

Test(autotune, invalid_candidates_are_never_timed_or_chosen)
{
    fresh_dir();
    at_set_mode(AT_MODE_ON);
    fake f = {.ms = {3.0, 1.0, 2.0}};
    const bool valid[3] = {true, false, true};
    at_query q = query("k4", valid);
    cr_assert_eq(at_decide(&q, fake_time, &f, NULL), 2);
    cr_assert_eq(f.calls[1], 0);
    /* a candidate that fails to run is dropped */
    fake g = {.ms = {3.0, -1.0, 2.0}};
    at_query q2 = query("k5", NULL);
    cr_assert_eq(at_decide(&q2, fake_time, &g, NULL), 2);
    cleanup();
    BT_LEAK_CHECK();
}

/* A candidate within the noise margin of the heuristic does not replace it. */
Test(autotune, the_heuristic_stays_unless_clearly_beaten)
{
    fresh_dir();
    at_set_mode(AT_MODE_ON);
    fake f = {.ms = {1.0, 0.98, 2.0}};
    at_query q = query("k7", NULL);
    at_outcome o;
    cr_assert_eq(at_decide(&q, fake_time, &f, &o), 0);
    cr_assert(o.tuned && o.stored, "the decision to keep the heuristic is stored too");
    cleanup();
    BT_LEAK_CHECK();
}

Test(autotune, a_changed_candidate_set_makes_stored_decisions_stale)
{
    fresh_dir();
    at_set_mode(AT_MODE_ON);
    fake f = {.ms = {3.0, 1.0, 2.0}};
    at_query q = query("k6", NULL);
    cr_assert_eq(at_decide(&q, fake_time, &f, NULL), 1);
    at_forget();
    static const char *const renamed[] = {"slow", "fast-v2", "medium"};
    at_family changed = {"test.fam", 3, renamed};
    q.family = &changed;
    at_set_mode(AT_MODE_CACHED);
    at_outcome o;
    cr_assert_eq(at_decide(&q, fake_time, &f, &o), 0, "a decision of the old set was used");
    cr_assert(!o.stored);
    cleanup();
    BT_LEAK_CHECK();
}

/* ---- The cpu device ---- */

static burnc_device_t *open_cpu(void)
{
    burnc_device_t *dev = burnc_device_open("cpu");
    if (!dev)
        cr_skip_test("the cpu device is not available: %s", burnc_error_message());
    return dev;
}

/* gelu(x) * 3 + y over n f32 values read back into out. */
static void chain(burnc_device_t *dev, const float *x, const float *y, int64_t n, float *out)
{
    burnc_scope_begin();
    burnc_tensor_t *a = bt_f32(dev, 1, &n, x), *b = bt_f32(dev, 1, &n, y);
    burnc_tensor_t *r = burnc_add(burnc_mul_scalar(burnc_gelu(a), 3.0), b);
    BT_ASSERT_OK(burnc_tensor_read(r, out, (size_t)n * sizeof *out));
    burnc_scope_end();
}

/* Tuning runs candidates on private buffers: the launch's results are the same bits as with
 * autotune off, and its inputs are untouched. */
Test(autotune, tuning_leaves_user_data_and_results_alone)
{
    enum { N = 100003 };
    static float x[N], y[N], x0[N], off[N], on[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 1000) * 0.01f - 5.0f, y[i] = (float)(i % 7);
    memcpy(x0, x, sizeof x);
    fresh_dir();
    burnc_device_t *cpu = open_cpu();
    at_set_mode(AT_MODE_OFF);
    chain(cpu, x, y, N, off);
    at_set_mode(AT_MODE_ON);
    chain(cpu, x, y, N, on);
    cr_assert(memcmp(off, on, sizeof on) == 0, "results differ with autotune on");
    cr_assert(memcmp(x, x0, sizeof x) == 0, "the input changed");
    int n = 0;
    BT_ASSERT_OK(at_store_foreach(at_shared_store(), cpu_tune_fingerprint(), visit, NULL, &n));
    cr_assert(n >= 1, "nothing was tuned");
    burnc_device_release(cpu);
    cleanup();
    BT_LEAK_CHECK();
}

/* ---- burnc-tune ---- */

/* Runs burnc-tune with args (a shell fragment); returns its exit status, output in out. */
static int tune(const char *args, char *out, size_t cap)
{
    const char *exe = getenv("BURNC_TUNE");
    if (!exe)
        cr_skip_test("BURNC_TUNE (the path of burnc-tune) is not set");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", exe, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(autotune, burnc_tune_rejects_bad_workloads_and_options)
{
    fresh_dir();
    static char out[8192];
    cr_assert_eq(tune("softmax:16x16", out, sizeof out), 2);
    cr_assert(strstr(out, "NAME:DIMS:DTYPE"), "%s", out);
    cr_assert_eq(tune("conv:16x16:f32", out, sizeof out), 2);
    cr_assert(strstr(out, "unknown workload 'conv'"), "%s", out);
    cr_assert_eq(tune("sum:16x-2:f32", out, sizeof out), 2);
    cr_assert(strstr(out, "dimension 2"), "%s", out);
    cr_assert_eq(tune("sum:16:i128", out, sizeof out), 2);
    cr_assert(strstr(out, "dtype 'i128'"), "%s", out);
    cr_assert_eq(tune("matmul:16x16:f32", out, sizeof out), 2);
    cr_assert_eq(tune("--frobnicate", out, sizeof out), 2);
    cr_assert_eq(tune("", out, sizeof out), 2);
    cr_assert_eq(tune("--help", out, sizeof out), 0);
    cr_assert(strstr(out, "usage: burnc-tune"));
    cr_assert_eq(tune("--version", out, sizeof out), 0);
    cr_assert(strstr(out, "burnc-tune "));
    cr_assert(!exists("autotune.sqlite"), "a refused command touched the store");
    cleanup();
}

/* A program records its launches; burnc-tune --file tunes them; the next run finds them. */
Test(autotune, recorded_launches_are_tuned_by_burnc_tune_file)
{
    fresh_dir();
    char rec[128];
    snprintf(rec, sizeof rec, "%s/launches.txt", dir);
    setenv("BURNC_AUTOTUNE_RECORD", rec, 1);
    burnc_device_t *cpu = open_cpu();
    at_set_mode(AT_MODE_CACHED);
    enum { N = 5000 };
    static float x[N], y[N], out[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)i * 1e-3f, y[i] = 1.0f;
    chain(cpu, x, y, N, out);
    chain(cpu, x, y, N, out); /* the same launches: recorded once */
    burnc_scope_begin(); /* a matmul is recorded as a workload */
    int64_t sq[2] = {64, 64};
    float prod[64 * 64];
    BT_ASSERT_OK(burnc_tensor_read(burnc_matmul(bt_f32(cpu, 2, sq, x), bt_f32(cpu, 2, sq, y)), prod, sizeof prod));
    burnc_scope_end();
    unsetenv("BURNC_AUTOTUNE_RECORD");
    FILE *f = fopen(rec, "r");
    cr_assert_not_null(f, "nothing recorded");
    char line[65536];
    int lines = 0, matmuls = 0;
    while (fgets(line, sizeof line, f)) {
        if (strcmp(line, "matmul:64x64x64:f32\n") == 0) {
            matmuls++;
            continue;
        }
        cr_assert(strncmp(line, "cpu:kir1:", 9) == 0, "recorded line: %.40s", line);
        lines++;
    }
    fclose(f);
    cr_assert(lines >= 1 && lines <= 3, "%d lines recorded for one chain run twice", lines);
    cr_assert_eq(matmuls, 1, "the matmul was recorded %d times", matmuls);
    /* a comment, a blank line and a workload may sit beside recorded lines */
    f = fopen(rec, "a");
    fprintf(f, "\n# and a workload\nexp:4096:f32\n");
    fclose(f);
    static char outp[16384], args[256];
    snprintf(args, sizeof args, "--file '%s'", rec);
    at_close_shared_store(); /* the child writes the store */
    cr_assert_eq(tune(args, outp, sizeof outp), 0, "%s", outp);
    cr_assert(strstr(outp, "cpu.elementwise"), "%s", outp);
    cr_assert(strstr(outp, "a remembered decision costs"), "%s", outp);
    int n = 0;
    BT_ASSERT_OK(at_store_foreach(at_shared_store(), cpu_tune_fingerprint(), visit, NULL, &n));
    cr_assert(n >= lines, "%d decisions stored for %d recorded launches", n, lines);
    /* a damaged recorded line is refused with its line number */
    f = fopen(rec, "a");
    fprintf(f, "cpu:kir1:zz\n");
    fclose(f);
    cr_assert_eq(tune(args, outp, sizeof outp), 3, "%s", outp);
    cr_assert(strstr(outp, "kir_decode"), "%s", outp);
    burnc_device_release(cpu);
    cleanup();
    BT_LEAK_CHECK();
}

Test(autotune, burnc_tune_list_export_import_clear)
{
    fresh_dir();
    static char out[16384], args[512];
    cr_assert_eq(tune("exp:65536:f32 softmax:64x256:f32", out, sizeof out), 0, "%s", out);
    cr_assert_eq(tune("--list", out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "cpu.reduce") && strstr(out, "cpu.elementwise"), "%s", out);
    char file[128], foreign[128];
    snprintf(file, sizeof file, "%s/decisions.txt", dir);
    snprintf(foreign, sizeof foreign, "%s/foreign.txt", dir);
    snprintf(args, sizeof args, "--export '%s'", file);
    cr_assert_eq(tune(args, out, sizeof out), 0, "%s", out);
    int exported = 0;
    cr_assert_eq(sscanf(out, "exported %d", &exported), 1, "%s", out);
    cr_assert(exported >= 2);
    cr_assert_eq(tune("--clear", out, sizeof out), 0, "%s", out);
    cr_assert_eq(tune("--list", out, sizeof out), 0);
    cr_assert(strstr(out, "\n0 decisions for"), "%s", out);
    snprintf(args, sizeof args, "--import '%s'", file);
    cr_assert_eq(tune(args, out, sizeof out), 0, "%s", out);
    int imported = 0;
    cr_assert_eq(sscanf(out, "imported %d", &imported), 1, "%s", out);
    cr_assert_eq(imported, exported);
    /* the same file claiming other hardware: refused, then taken with --force */
    snprintf(args, sizeof args, "sed '1s/\\t.*/\\tsome other machine/' '%s' > '%s'", file, foreign);
    cr_assert_eq(system(args), 0);
    snprintf(args, sizeof args, "--import '%s'", foreign);
    cr_assert_eq(tune(args, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "some other machine"), "%s", out);
    snprintf(args, sizeof args, "--import '%s' --force", foreign);
    cr_assert_eq(tune(args, out, sizeof out), 0, "%s", out);
    cleanup();
}
