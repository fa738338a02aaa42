/*
 * log.h - leveled logging to stderr.
 *
 * Under systemd (JOURNAL_STREAM set) lines carry the sd-daemon(3) "<N>"
 * priority prefix so journald files them at the right level; otherwise they
 * carry the level as a word.
 */
#ifndef GPB_LOG_H
#define GPB_LOG_H

enum log_level { LOG_LEVEL_ERROR = 3, LOG_LEVEL_WARN = 4, LOG_LEVEL_INFO = 6, LOG_LEVEL_DEBUG = 7 };

void log_init(enum log_level level);
/* Parses "error", "warn", "info", "debug". Returns the level or -EINVAL. */
int log_level_parse(const char *name);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
