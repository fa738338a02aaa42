/*
 * internal.h - private declarations shared by the modules of libgpubroker.
 *
 * The library is built with -fvisibility=hidden and a version script; only
 * definitions marked GPB_EXPORT (the gpb_* API) leave the shared object.
 */
#ifndef GPB_CLIENT_INTERNAL_H
#define GPB_CLIENT_INTERNAL_H

#include "gpubroker.h"

#define GPB_EXPORT __attribute__((visibility("default")))

/*
 * Thread-local error message behind gpb_last_error(). Every helper returns
 * @err so that failure paths read `return error_set(GPB_E_..., "...")`.
 */
int error_set(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like error_set, with ": strerror(errnum)" appended. */
int error_set_errno(int err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void error_clear(void);
/* Maps a daemon error reply (-32xxx) to GPB_E_* and records
 * "code name: message" as the last error. */
int error_from_daemon(int code, const char *message);
/* The current message; used to prefix context without losing it. */
const char *error_message(void);

#endif
