/*
 * ctl_error.h - gpubrokerctl's exit codes and the messages that go with
 * them. The bottom of the CLI: every other file of it reports through here.
 */
#ifndef GPB_CTL_ERROR_H
#define GPB_CTL_ERROR_H

/* Exit codes (documented in --help). */
enum {
	EXIT_OK = 0,
	EXIT_ERROR = 1,
	EXIT_USAGE = 2,
	EXIT_UNREACHABLE = 3,
	EXIT_PERMISSION = 4,
};

/* Print why and return the exit code to use. */
__attribute__((format(printf, 1, 2))) int usage_error(const char *fmt, ...);
/* A libgpubroker error: its message, and the exit code it maps to. */
int ctl_fail(int err);
int ctl_oom(void);
int ctl_bad_reply(const char *what);

#endif
