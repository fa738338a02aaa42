/*
 * log.c - leveled logging to stderr.
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum log_level log_max = LOG_LEVEL_INFO;
static bool log_journal;

void log_init(enum log_level level)
{
	log_max = level;
	log_journal = getenv("JOURNAL_STREAM") != NULL;
}

int log_level_parse(const char *name)
{
	static const struct {
		const char *name;
		enum log_level level;
	} names[] = {{"error", LOG_LEVEL_ERROR},
	             {"warn", LOG_LEVEL_WARN},
	             {"info", LOG_LEVEL_INFO},
	             {"debug", LOG_LEVEL_DEBUG}};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(name, names[i].name) == 0)
			return (int)names[i].level;
	}
	return -EINVAL;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	if (level > log_max)
		return;
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (log_journal) {
		fprintf(stderr, "<%d>%s\n", (int)level, line);
	} else {
		const char *word = level <= LOG_LEVEL_ERROR  ? "error"
		                   : level == LOG_LEVEL_WARN ? "warning"
		                   : level == LOG_LEVEL_INFO ? "info"
		                                             : "debug";
		fprintf(stderr, "gpubrokerd: %s: %s\n", word, line);
	}
}
