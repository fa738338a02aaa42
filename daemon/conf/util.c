/*
 * util.c - small parsers for the command line.
 */
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int util_parse_size(const char *s, uint64_t *out)
{
	char *end;
	if (!*s || *s == '-' || *s == '+' || *s == ' ')
		return -EINVAL;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || !(v >= 0))
		return -EINVAL;
	int shift = 0;
	switch (*end) {
	case 'K':
	case 'k':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case 'T':
		shift = 40;
		break;
	default:
		break;
	}
	if (shift) {
		end++;
		if (*end == 'i')
			end++;
	}
	if (*end == 'B')
		end++;
	if (*end)
		return -EINVAL;
	double bytes = ldexp(v, shift);
	if (bytes >= 18446744073709551616.0)
		return -ERANGE;
	if (bytes != floor(bytes))
		return -EINVAL;
	*out = (uint64_t)bytes;
	return 0;
}

int util_parse_uint(const char *s, unsigned long min, unsigned long max, unsigned long *out)
{
	char *end;
	if (!*s || *s == '-' || *s == '+' || *s == ' ')
		return -EINVAL;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}
