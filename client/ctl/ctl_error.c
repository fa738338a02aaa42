/*
 * ctl_error.c - gpubrokerctl's error messages and exit codes.
 */
#include "ctl_error.h"

#include <stdarg.h>
#include <stdio.h>

#include "gpubroker.h"

int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("gpubrokerctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'gpubrokerctl --help' for more information.\n", stderr);
	return EXIT_USAGE;
}

/* The exit code for a library error, after printing its message. */
int ctl_fail(int err)
{
	const char *msg = gpb_last_error();

	fprintf(stderr, "gpubrokerctl: %s\n", *msg ? msg : gpb_strerror(err));
	switch (err) {
	case GPB_E_CONNECT:
	case GPB_E_DAEMON_GONE:
		return EXIT_UNREACHABLE;
	case GPB_E_PERMISSION:
		return EXIT_PERMISSION;
	default:
		return EXIT_ERROR;
	}
}

int ctl_oom(void)
{
	fputs("gpubrokerctl: out of memory\n", stderr);
	return EXIT_ERROR;
}

int ctl_bad_reply(const char *what)
{
	fprintf(stderr, "gpubrokerctl: unexpected reply from the daemon: %s\n", what);
	return EXIT_ERROR;
}
