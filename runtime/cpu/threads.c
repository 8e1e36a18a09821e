/* The cpu device's thread pool. The queue's worker drives it: it publishes a batch of tasks,
 * takes tasks itself like every helper, and returns when all are done. Tasks are claimed from
 * one atomic counter, so a slow thread never holds up the others' share. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "cpu.h"

struct cpu_threads {
    int n; /* threads in all, the caller included */
    thrd_t *helpers;
    mtx_t lock;
    cnd_t start, done;
    uint64_t generation; /* bumped for every batch; helpers wait for a new one */
    bool stop;
    int busy; /* helpers still inside the current batch */
    cpu_task_fn task;
    void *ctx;
    int64_t n_tasks;
    atomic_llong next;
};

void cpu_keep_denormals(void)
{
#if defined(__x86_64__) || defined(__i386__)
    enum { MXCSR_DAZ = 1 << 6, MXCSR_FTZ = 1 << 15 };
    _mm_setcsr(_mm_getcsr() & ~(unsigned)(MXCSR_DAZ | MXCSR_FTZ));
#endif
}

int cpu_thread_count_default(void)
{
    const char *env = getenv("BURNC_NUM_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (!*end && n > 0)
            return n > 1024 ? 1024 : (int)n;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void take_tasks(cpu_threads *t, cpu_task_fn task, void *ctx, int64_t n)
{
    for (int64_t i; (i = atomic_fetch_add(&t->next, 1)) < n;)
        task(ctx, i);
}

static int helper_main(void *arg)
{
    cpu_threads *t = arg;
    cpu_keep_denormals();
    uint64_t seen = 0;
    mtx_lock(&t->lock);
    for (;;) {
        while (!t->stop && t->generation == seen)
            cnd_wait(&t->start, &t->lock);
        if (t->stop)
            break;
        seen = t->generation;
        cpu_task_fn task = t->task;
        void *ctx = t->ctx;
        int64_t n = t->n_tasks;
        mtx_unlock(&t->lock);
        take_tasks(t, task, ctx, n);
        mtx_lock(&t->lock);
        if (--t->busy == 0)
            cnd_signal(&t->done);
    }
    mtx_unlock(&t->lock);
    return 0;
}

static void stop_helpers(cpu_threads *t, int started)
{
    mtx_lock(&t->lock);
    t->stop = true;
    cnd_broadcast(&t->start);
    mtx_unlock(&t->lock);
    for (int i = 0; i < started; i++)
        thrd_join(t->helpers[i], NULL);
}

burnc_status_t cpu_threads_new(int n, cpu_threads **out)
{
    cpu_threads *t = calloc(1, sizeof *t);
    thrd_t *helpers = n > 1 ? calloc((size_t)n - 1, sizeof *helpers) : NULL;
    if (!t || (n > 1 && !helpers)) {
        free(t);
        free(helpers);
        return rt_fail(BURNC_ERR_OUT_OF_MEMORY, "burnc_device_open: cpu: out of memory for %d threads", n);
    }
    t->n = n;
    t->helpers = helpers;
    mtx_init(&t->lock, mtx_plain);
    cnd_init(&t->start);
    cnd_init(&t->done);
    atomic_init(&t->next, 0);
    for (int i = 0; i < n - 1; i++) {
        if (thrd_create(&t->helpers[i], helper_main, t) != thrd_success) {
            stop_helpers(t, i);
            t->n = 0;
            cpu_threads_free(t);
            return rt_fail(BURNC_ERR_UNAVAILABLE, "burnc_device_open: cpu: cannot start thread %d of %d", i + 1, n);
        }
    }
    *out = t;
    return BURNC_OK;
}

void cpu_threads_free(cpu_threads *t)
{
    if (!t)
        return;
    if (t->n > 1)
        stop_helpers(t, t->n - 1);
    mtx_destroy(&t->lock);
    cnd_destroy(&t->start);
    cnd_destroy(&t->done);
    free(t->helpers);
    free(t);
}

int cpu_threads_count(const cpu_threads *t) { return t->n; }

void cpu_threads_run(cpu_threads *t, int64_t n, cpu_task_fn task, void *ctx)
{
    if (n <= 0)
        return;
    if (t->n == 1 || n == 1) {
        for (int64_t i = 0; i < n; i++)
            task(ctx, i);
        return;
    }
    mtx_lock(&t->lock);
    t->task = task;
    t->ctx = ctx;
    t->n_tasks = n;
    atomic_store(&t->next, 0);
    t->busy = t->n - 1;
    t->generation++;
    cnd_broadcast(&t->start);
    mtx_unlock(&t->lock);
    take_tasks(t, task, ctx, n);
    mtx_lock(&t->lock);
    while (t->busy > 0)
        cnd_wait(&t->done, &t->lock);
    mtx_unlock(&t->lock);
}
