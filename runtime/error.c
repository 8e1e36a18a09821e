/* The thread's last error, status names, and log lines. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burnc_config.h"
#include "rt.h"

static _Thread_local burnc_status_t last_code;
static _Thread_local char last_msg[512];

burnc_status_t rt_fail(burnc_status_t code, const char *fmt, ...)
{
    /* formatted aside first: an argument may be the last message itself (a wrapper adding
     * context to burnc_error_message()) */
    char msg[sizeof last_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_msg, msg, sizeof last_msg);
    last_code = code;
    return code;
}

void rt_error_save(rt_error_state *s)
{
    s->code = last_code;
    memcpy(s->msg, last_msg, sizeof s->msg);
}

void rt_error_restore(const rt_error_state *s)
{
    last_code = s->code;
    memcpy(last_msg, s->msg, sizeof last_msg);
}

const char *rt_shape_str(char *buf, size_t cap, int rank, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ",%lld" : "%lld", (long long)shape[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

burnc_status_t burnc_error_code(void) { return last_code; }
const char *burnc_error_message(void) { return last_msg; }
void burnc_error_clear(void)
{
    last_code = BURNC_OK;
    last_msg[0] = '\0';
}
const char *burnc_version(void) { return BURNC_VERSION; }

const char *burnc_status_name(burnc_status_t status)
{
    static const char *const names[] = {
        [BURNC_OK] = "BURNC_OK",
        [BURNC_ERR_INVALID_ARGUMENT] = "BURNC_ERR_INVALID_ARGUMENT",
        [BURNC_ERR_SHAPE] = "BURNC_ERR_SHAPE",
        [BURNC_ERR_AXIS] = "BURNC_ERR_AXIS",
        [BURNC_ERR_OVERFLOW] = "BURNC_ERR_OVERFLOW",
        [BURNC_ERR_UNSUPPORTED_DTYPE] = "BURNC_ERR_UNSUPPORTED_DTYPE",
        [BURNC_ERR_DEVICE_MISMATCH] = "BURNC_ERR_DEVICE_MISMATCH",
        [BURNC_ERR_UNKNOWN_DEVICE] = "BURNC_ERR_UNKNOWN_DEVICE",
        [BURNC_ERR_UNAVAILABLE] = "BURNC_ERR_UNAVAILABLE",
        [BURNC_ERR_ALREADY_INITIALIZED] = "BURNC_ERR_ALREADY_INITIALIZED",
        [BURNC_ERR_OUT_OF_MEMORY] = "BURNC_ERR_OUT_OF_MEMORY",
        [BURNC_ERR_BUFFER_TOO_SMALL] = "BURNC_ERR_BUFFER_TOO_SMALL",
        [BURNC_ERR_INDEX] = "BURNC_ERR_INDEX",
        [BURNC_ERR_COMPILE] = "BURNC_ERR_COMPILE",
        [BURNC_ERR_EXECUTION] = "BURNC_ERR_EXECUTION",
        [BURNC_ERR_DEVICE_LOST] = "BURNC_ERR_DEVICE_LOST",
        [BURNC_ERR_INTERNAL] = "BURNC_ERR_INTERNAL",
    };
    if ((unsigned)status < sizeof names / sizeof names[0] && names[status])
        return names[status];
    return "BURNC_ERR_UNKNOWN_STATUS";
}

/* ---- Logging ---- */
static burnc_log_fn log_fn;
static void *log_user;
static mtx_t log_lock;
static once_flag log_once = ONCE_FLAG_INIT;

static void log_init(void) { mtx_init(&log_lock, mtx_plain); }

void burnc_log_set_callback(burnc_log_fn fn, void *user)
{
    call_once(&log_once, log_init);
    mtx_lock(&log_lock);
    log_fn = fn;
    log_user = user;
    mtx_unlock(&log_lock);
}

bool rt_log_enabled(const char *topic)
{
    if (log_fn)
        return true;
    const char *env = getenv("BURNC_LOG");
    if (!env || !*env)
        return false;
    if (strcmp(env, "all") == 0)
        return true;
    size_t len = strlen(topic);
    for (const char *p = env; (p = strstr(p, topic)); p += len)
        if ((p == env || p[-1] == ',') && (p[len] == ',' || p[len] == '\0'))
            return true;
    return false;
}

void rt_log(const char *topic, const char *fmt, ...)
{
    if (!rt_log_enabled(topic))
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    call_once(&log_once, log_init);
    mtx_lock(&log_lock);
    if (log_fn)
        log_fn(log_user, topic, msg);
    else
        fprintf(stderr, "burnc[%s] %s\n", topic, msg);
    mtx_unlock(&log_lock);
}
