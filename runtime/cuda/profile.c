/* BURNC_CUDA_PROFILE=1: every kernel launch of the device timed on its own (an event before
 * and after, then a wait), summed per kernel name and shape, and printed as a table on stderr
 * when the device closes. Launches are serialized while it is on, so it shows where a program's
 * GPU time goes, not how fast the program runs. Every launch goes through cuda_launch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cu.h"

enum { PROF_ROWS = 512 };

typedef struct prof_row {
    char name[160];
    long calls;
    double ms;
} prof_row;

struct cuda_profile {
    CUevent start, end;
    int n;
    long dropped; /* launches of names past PROF_ROWS */
    prof_row rows[PROF_ROWS];
};

void cuda_profile_init(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    const char *env = getenv("BURNC_CUDA_PROFILE");
    if (!env || strcmp(env, "1") != 0)
        return;
    cuda_profile *p = calloc(1, sizeof *p);
    if (!p)
        return;
    if (cd->cu->EventCreate(&p->start, 0) != CUDA_SUCCESS || cd->cu->EventCreate(&p->end, 0) != CUDA_SUCCESS) {
        if (p->start)
            cd->cu->EventDestroy(p->start);
        free(p);
        return;
    }
    cd->profile = p;
}

static int by_time(const void *x, const void *y)
{
    double a = ((const prof_row *)x)->ms, b = ((const prof_row *)y)->ms;
    return a < b ? 1 : a > b ? -1 : 0;
}

void cuda_profile_report(rt_device *dev)
{
    cuda_device *cd = cuda_dev(dev);
    cuda_profile *p = cd->profile;
    if (!p)
        return;
    double total = 0;
    long calls = 0;
    for (int i = 0; i < p->n; i++)
        total += p->rows[i].ms, calls += p->rows[i].calls;
    qsort(p->rows, (size_t)p->n, sizeof *p->rows, by_time);
    fprintf(stderr, "burnc[profile] %s: %ld launches, %.3f ms of kernels%s\n", dev->spec, calls, total,
            p->dropped ? " (some names past the table's size not counted)" : "");
    fprintf(stderr, "burnc[profile] %9s %7s %6s %9s  %s\n", "ms", "calls", "share", "us/call", "kernel");
    for (int i = 0; i < p->n; i++) {
        const prof_row *r = &p->rows[i];
        fprintf(stderr, "burnc[profile] %9.3f %7ld %5.1f%% %9.1f  %s\n", r->ms, r->calls,
                total > 0 ? 100 * r->ms / total : 0, 1e3 * r->ms / (double)r->calls, r->name);
    }
    cd->cu->EventDestroy(p->start);
    cd->cu->EventDestroy(p->end);
    free(p);
    cd->profile = NULL;
}

static void note(cuda_profile *p, const char *name, double ms)
{
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->rows[i].name, name) == 0) {
            p->rows[i].calls++;
            p->rows[i].ms += ms;
            return;
        }
    if (p->n == PROF_ROWS) {
        p->dropped++;
        return;
    }
    prof_row *r = &p->rows[p->n++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->calls = 1;
    r->ms = ms;
}

burnc_status_t cuda_launch_fn(rt_device *dev, CUfunction fn, const uint32_t grid[3], const uint32_t block[3],
                              uint32_t shared, void **params, void **extra, const char *what, const char *name)
{
    cuda_device *cd = cuda_dev(dev);
    cuda_profile *p = cd->profile;
    RT_TRY(cuda_timer_first_launch(dev));
    if (p)
        cd->cu->EventRecord(p->start, cd->stream);
    CUresult r;
    if (cd->pdl) {
        CUlaunchAttribute at = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                                .value.programmatic_stream_serialization_allowed = 1};
        CUlaunchConfig c = {grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, cd->stream, &at, 1};
        r = cd->cu->LaunchKernelEx(&c, fn, params, extra);
    } else {
        r = cd->cu->LaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, cd->stream,
                                 params, extra);
    }
    burnc_status_t s = cuda_check(dev, r, what);
    if (s == BURNC_OK && p) {
        float ms = 0;
        if (cd->cu->EventRecord(p->end, cd->stream) == CUDA_SUCCESS &&
            cd->cu->EventSynchronize(p->end) == CUDA_SUCCESS &&
            cd->cu->EventElapsedTime(&ms, p->start, p->end) == CUDA_SUCCESS)
            note(p, name, ms);
    }
    return s;
}
