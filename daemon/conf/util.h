/*
 * util.h - small parsers for the command line.
 */
#ifndef GPB_UTIL_H
#define GPB_UTIL_H

#include <stdint.h>

/* "1048576", "64M", "64MiB", "16GiB", "1.5G" (binary units: K, M, G, T with
 * optional "i" and "B"; a bare "B" is bytes). 0 or -EINVAL / -ERANGE. */
int util_parse_size(const char *s, uint64_t *out);
/* A decimal integer in [min, max]. 0, -EINVAL or -ERANGE. */
int util_parse_uint(const char *s, unsigned long min, unsigned long max, unsigned long *out);

#endif
