/*
 * error.c - error names and the thread-local last-error message.
 */
#include "error.h"
#include "export.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Long enough for the daemon's messages (proto_error caps them at 160 bytes)
 * plus the code and name we prepend. */
static __thread char last_error[320];

GPB_EXPORT const char *gpb_strerror(int err)
{
	switch (err) {
	case GPB_OK:
		return "success";
	case GPB_E_INVALID:
		return "invalid argument";
	case GPB_E_NOMEM:
		return "out of host memory";
	case GPB_E_CONNECT:
		return "cannot connect to the daemon";
	case GPB_E_DAEMON_GONE:
		return "the daemon closed the connection";
	case GPB_E_PROTOCOL:
		return "protocol error";
	case GPB_E_VERSION:
		return "no common protocol version";
	case GPB_E_OUT_OF_MEMORY:
		return "out of device memory";
	case GPB_E_QUOTA:
		return "quota exceeded";
	case GPB_E_NOT_FOUND:
		return "not found";
	case GPB_E_PERMISSION:
		return "permission denied";
	case GPB_E_LIMIT:
		return "limit reached";
	case GPB_E_TIMEOUT:
		return "timed out";
	case GPB_E_NOT_SUPPORTED:
		return "not supported";
	case GPB_E_BACKEND:
		return "backend error";
	case GPB_E_SHUTTING_DOWN:
		return "the daemon is shutting down";
	case GPB_E_SYSTEM:
		return "system error";
	case GPB_E_LAYOUT_NAME:
		return "bad layout name";
	case GPB_E_LAYOUT_DUPLICATE:
		return "layout name already used";
	case GPB_E_LAYOUT_ZERO_SIZE:
		return "buffer of zero elements";
	case GPB_E_LAYOUT_OVERFLOW:
		return "layout size overflow";
	case GPB_E_LAYOUT_ALIAS_UNKNOWN:
		return "alias to an unknown buffer";
	case GPB_E_LAYOUT_ALIAS_PERSISTENT:
		return "alias involving a persistent buffer";
	case GPB_E_LAYOUT_ALIAS_CYCLE:
		return "alias cycle";
	case GPB_E_LAYOUT_ALIAS_LOCATION:
		return "alias between shared and local memory";
	case GPB_E_LAYOUT_NO_FIT:
		return "not even one warp fits the shared memory budget";
	case GPB_E_CONTEXT_RESET:
		return "the CUDA context of this memory was reset or destroyed";
	case GPB_E_EXISTS:
		return "the name is taken";
	default:
		return "unknown error";
	}
}

GPB_EXPORT const char *gpb_last_error(void)
{
	return last_error;
}

const char *error_message(void)
{
	return last_error;
}

void error_clear(void)
{
	last_error[0] = '\0';
}

int error_set(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return err;
}

int error_set_errno(int err, int errnum, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	n = strlen(last_error);
	snprintf(last_error + n, sizeof(last_error) - n, ": %s", strerror(errnum));
	return err;
}
