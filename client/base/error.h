/*
 * error.h - the thread's last error behind gpb_last_error(), which every
 * layer of libgpubroker sets (base/ is the bottom of the library: it
 * calls nothing of it).
 */
#ifndef GPB_CLIENT_ERROR_H
#define GPB_CLIENT_ERROR_H

#include "gpubroker.h"

/*
 * Thread-local error message behind gpb_last_error(). Every helper returns
 * @err so that failure paths read `return error_set(GPB_E_..., "...")`.
 */
int error_set(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like error_set, with ": strerror(errnum)" appended. */
int error_set_errno(int err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void error_clear(void);
/* The current message; used to prefix context without losing it. */
const char *error_message(void);

#endif
